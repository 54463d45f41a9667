"""The character corpus the task ships (kjv.txt beside this file), and how it was made from its public source.

kjv.txt is the first nine books (Genesis through 1 Samuel, 1.16 MB, the fewest whole books from Genesis that reach
TARGET_CHARS; the papers' tiny Shakespeare has 1.12 MB) of the King James Version of the Bible, one verse per line and
a blank line between chapters, verse numbers and chapter headings removed.

Why it is public domain: the King James Version was translated in 1611 and its copyright expired centuries ago (the
Debian package's copyright file says so; Debian ships it in `main`). In the United Kingdom alone the Crown still
controls its printing by letters patent, which is not copyright.

Where it comes from: Debian's packages `bible-kjv-text` (the text in the compressed format of Chip Chapin's Bible
Retrieval System) and `bible-kjv` (its reader), version 4.38. Rebuild it with

    apt-get download bible-kjv bible-kjv-text
    dpkg -x bible-kjv-text_*.deb x && dpkg -x bible-kjv_*.deb x
    x/usr/bin/bible -p x/usr/lib "Gen1:1-Rev22:21" > kjv_raw.txt
    python -m trainables.tasks.bigram_trigger.corpus kjv_raw.txt trainables/tasks/bigram_trigger/kjv.txt

The vocabulary is every character of kjv.txt: with verse numbers gone the text has no digits left and 62 characters,
close to tiny Shakespeare's 65, so no character is mapped away. The rarest ('V' and '-', 4 times each) have bigram rows
estimated from few counts; that is harmless here, since the estimated pi_b is itself the generative model, not an
estimate of one.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

PATH = Path(__file__).with_name("kjv.txt")
TARGET_CHARS = 1_100_000  # about tiny Shakespeare's size (1,115,394 characters)

_CHAPTER = re.compile(r"^(\S.*) (\d+)$")  # "Genesis 1", "1 Samuel 3"
_VERSE = re.compile(r"^\s+\d+ (.*)$")  # "  12 And God said, ..." (continuation lines carry no number)


def parse(raw: str) -> list[tuple[str, list[list[str]]]]:
    """A BRS dump -> [(book, [chapter: [verse text]])], wrapped verse lines joined with a space."""
    books: list[tuple[str, list[list[str]]]] = []
    for line in raw.splitlines():
        if chapter := _CHAPTER.match(line):
            if not books or books[-1][0] != chapter.group(1):
                books.append((chapter.group(1), []))
            books[-1][1].append([])
        elif verse := _VERSE.match(line):
            books[-1][1][-1].append(verse.group(1).strip())
        elif line.strip():
            books[-1][1][-1][-1] += " " + line.strip()
    return books


def clean(raw: str, target_chars: int = TARGET_CHARS) -> str:
    """The corpus text: whole books from the first on until `target_chars` is reached."""
    parts, size = [], 0
    for _, chapters in parse(raw):
        book = "\n\n".join("\n".join(verses) for verses in chapters)
        parts.append(book)
        size += len(book)
        if size >= target_chars:
            break
    return "\n\n".join(parts) + "\n"


def read() -> str:
    return PATH.read_text(encoding="utf-8")


if __name__ == "__main__":
    source, target = sys.argv[1:3]
    Path(target).write_text(clean(Path(source).read_text(encoding="latin-1")), encoding="utf-8")
