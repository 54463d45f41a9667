"""Packing is invisible but for speed: the same grid run with one member per Ray trial and with all of them packed in
one trial leaves the same results.csv (same seeds: same numbers), the same per-member files and one W&B run per
member (real local Ray, real offline W&B)."""
import json
import math
import os

import pandas as pd
import pytest

from tests.integration.conftest import headsweep

GRID = """
name: packing
task: {vocab_size: 12, max_len: 16, n_triggers: 1, n_pairs_per_cell: 1, lengths: {low: 2, high: 6}}
model: {name: transformer, n_layers: 2}
optim: {lr: 0.003, max_steps: 60}
eval: {every: 20, n_id: 128, n_ood: 128, patience: 0}
logging: {wandb: true}
sweep:
  axes: [{key: task.lengths.high, values: [4, 6]}]
  seeds: [0, 1]
"""


@pytest.fixture(scope="module")
def grids(tmp_path_factory):
    root = tmp_path_factory.mktemp("packing")
    (root / "grid.yaml").write_text(GRID)
    outs = {}
    for pack in (1, 4):
        outs[pack] = root / f"pack{pack}"
        proc = headsweep("grid", root / "grid.yaml", f"sweep.pack={pack}", "--out", outs[pack],
                         env=os.environ | {"WANDB_MODE": "offline"})
        assert proc.returncode == 0, proc.stderr[-3000:]
    return outs


def test_packed_results_are_the_unpacked_ones(grids):
    ray_trials = {pack: [p for p in (out / "ray" / "grid").iterdir() if p.is_dir()] for pack, out in grids.items()}
    assert (len(ray_trials[1]), len(ray_trials[4])) == (4, 1)  # one Ray trial per member, or all four in one
    alone, packed = (pd.read_csv(grids[p] / "results.csv").set_index("member").sort_index() for p in (1, 4))
    assert list(alone.columns) == list(packed.columns) and list(alone.index) == list(packed.index)
    for column in alone.columns:
        for trial in alone.index:
            a, b = alone.at[trial, column], packed.at[trial, column]
            if column == "seconds":
                continue
            if isinstance(a, float) and math.isfinite(a):
                assert b == pytest.approx(a, rel=1e-4, abs=1e-5), (trial, column)
            else:
                assert a == b or (pd.isna(a) and pd.isna(b)), (trial, column)


def test_every_member_keeps_its_own_files_and_wandb_run(grids):
    for trial in sorted((grids[1] / "trials").iterdir()):
        twin = grids[4] / "trials" / trial.name
        assert (trial / "config.yaml").read_text() == (twin / "config.yaml").read_text()
        steps = lambda d: [json.loads(line)["step"] for line in (d / "metrics.jsonl").read_text().splitlines()]
        assert steps(trial) == steps(twin) == [20, 40, 60]
        assert (twin / "attention.npz").exists() and (twin / "result.json").exists()
        runs = list((twin / "wandb").glob("offline-run-*"))
        assert len(runs) == 1, f"{twin.name}: {runs}"  # one W&B run per member, in its own directory
