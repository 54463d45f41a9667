"""A report's figures to PNG: trainables.figures.png_bytes (one draw) against matplotlib's savefig (a layout pass,
then the draw), alternated in one process over the attention gallery of an output directory, with the bytes compared.

    python bench/report_png.py DIR [--rounds 5]

DIR: any train, grid or search output directory (e.g. `headsweep grid configs/debug_grid.yaml --out /tmp/dg`). CPU
seconds (time.process_time) to turn every gallery figure of up to four members into PNG bytes, building the figures
included, per round; the median of each and their ratio.
"""
from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboards import report  # noqa: E402
from trainables import readouts  # noqa: E402
from trainables.figures import png_bytes  # noqa: E402


def saved(figure) -> bytes:
    """What png_bytes did before: savefig, without the timestamped metadata."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    members = [m for m in ([args.out] + report.member_dirs(args.out)) if (m / "attention.npz").exists()][:4]
    if not members:
        parser.error(f"{args.out} holds no attention.npz (a train, grid or search output directory)")
    arrays = [(report.read_config(m / "config.yaml"), dict(np.load(m / "attention.npz"))) for m in members]

    def render(encode) -> tuple[float, list[bytes]]:
        start, pngs = time.process_time(), []
        for cfg, member_arrays in arrays:
            pngs += [encode(figure) for figure in readouts.trial_figures(cfg, member_arrays).values()]
        return time.process_time() - start, pngs

    render(png_bytes)  # fonts and caches warm
    seconds = {"png_bytes (one draw)": [], "savefig (layout pass + draw)": []}
    for _ in range(args.rounds):
        for times, encode in zip(seconds.values(), (png_bytes, saved)):
            times.append(render(encode)[0])
        assert render(png_bytes)[1] == render(saved)[1], "png_bytes and savefig gave different bytes"
    figures = len(render(png_bytes)[1])
    print(f"{args.out}: {figures} figures of {len(members)} members, {args.rounds} rounds alternated, bytes equal")
    for name, times in seconds.items():
        print(f"  {name:30s} median {statistics.median(times):.2f} s  ({', '.join(f'{t:.2f}' for t in times)})")
    one, two = (statistics.median(times) for times in seconds.values())
    print(f"  ratio {one / two:.2f}")


if __name__ == "__main__":
    main()
