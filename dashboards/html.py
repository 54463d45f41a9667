"""HTML of the local report: one self-contained file (inline CSS, images as data URIs, no scripts, no URLs).

It must open from a laptop's disk or a cluster's shared filesystem with no network, so nothing is linked; and it
shows config text and error messages from members, so every piece of text is escaped unless a Section says it is HTML.
"""
from __future__ import annotations

import base64
import html
import math
import numbers
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from trainables.io import atomic_write

MISSING = "\u2013"  # en dash for NaN / None: reads as "no value", unlike "nan" or an empty cell
DECIMALS = 3

CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 80rem; padding: 0 1rem; color: #222; }
header { border-bottom: 1px solid #ccc; margin-bottom: 1.5rem; }
header p { color: #666; margin-top: 0; }
section { margin-bottom: 2rem; }
img { max-width: 100%; height: auto; }
pre { background: #f6f6f6; padding: 0.75rem; overflow-x: auto; }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.85rem; }
th, td { border: 1px solid #ddd; padding: 0.2rem 0.5rem; }
th { background: #f0f0f0; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.gallery { display: flex; flex-wrap: wrap; gap: 1rem; align-items: flex-start; }
figure { margin: 0; max-width: min(100%, 40rem); }
figcaption { font-size: 0.85rem; color: #555; }
h3 { margin-bottom: 0.5rem; }
"""


@dataclass
class Section:
    """One heading and exactly one body: `html` (trusted, inserted as is), `image_png` (+ `alt`), `table`, `text`."""

    heading: str
    html: str | None = None
    image_png: bytes | None = None
    alt: str = ""
    table: pd.DataFrame | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if sum(body is not None for body in (self.html, self.image_png, self.table, self.text)) != 1:
            raise ValueError(f"section {self.heading!r} needs exactly one of html, image_png, table, text")


def write_report(path: str | os.PathLike, title: str, sections: list[Section]) -> Path:
    """Render `sections` in order under a header with `title` and the generation time; write atomically."""
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    document = "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{CSS}</style></head>",
        "<body>",
        f"<header><h1>{html.escape(title)}</h1><p>Generated {generated}</p></header>",
        *(render_section(s) for s in sections),
        "</body></html>",
        "",
    ])
    return atomic_write(path, document)  # readers (a browser, a test) never see half a report


def render_section(section: Section) -> str:
    if section.html is not None:
        body = section.html
    elif section.image_png is not None:
        body = image_tag(section.image_png, section.alt)
    elif section.table is not None:
        body = render_table(section.table)
    else:
        body = f"<pre>{html.escape(section.text)}</pre>"
    return f"<section><h2>{html.escape(section.heading)}</h2>\n{body}\n</section>"


def image_tag(png: bytes, alt: str) -> str:
    """An <img> with the PNG inlined as a data URI (the report links nothing)."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def gallery(figures: list[tuple[bytes, str]], heading: str | None = None) -> str:
    """Trusted HTML for a Section: PNG figures side by side, each with its (escaped) caption, under an optional
    <h3> heading."""
    items = "".join(f"<figure>{image_tag(png, caption)}<figcaption>{html.escape(caption)}</figcaption></figure>"
                    for png, caption in figures)
    title = f"<h3>{html.escape(heading)}</h3>" if heading else ""
    return f'{title}<div class="gallery">{items}</div>'


def render_table(frame: pd.DataFrame) -> str:
    """Escaped HTML table; numbers to 3 decimals except whole-number key columns (axis values, seeds); NaN as an en
    dash."""
    if not isinstance(frame.index, pd.RangeIndex):
        frame = frame.reset_index()  # a meaningful index (e.g. after groupby) becomes visible columns
    whole = {c for c in frame.columns if _all_whole(c, frame[c])}
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = ["<tr>" + "".join(_cell(v, c in whole) for c, v in zip(frame.columns, record)) + "</tr>"
            for record in frame.itertuples(index=False)]
    return (f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n" + "\n".join(rows) + "\n</tbody></table></div>")


def _cell(value, whole: bool) -> str:
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if value is None or value is pd.NA or value is pd.NaT or (number and math.isnan(value)):
        return f'<td class="num">{MISSING}</td>'
    if number:
        text = str(int(value)) if whole else f"{float(value):.{DECIMALS}f}"
        return f'<td class="num">{text}</td>'
    return f"<td>{html.escape(str(value))}</td>"


def _all_whole(name, column: pd.Series) -> bool:
    """Integer columns, and float columns of whole numbers that are not `split/name` metrics: CSV turns an int column
    with a NaN into floats, and "low = 3.000" reads worse than "3"; a metric column stays at 3 decimals (1.000)."""
    if pd.api.types.is_bool_dtype(column) or not pd.api.types.is_numeric_dtype(column):
        return False
    if pd.api.types.is_integer_dtype(column):
        return True
    values = column.dropna()
    return "/" not in str(name) and len(values) > 0 and bool((values == values.round()).all())
