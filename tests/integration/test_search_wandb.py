"""A threshold search's own W&B run (dashboards/search_wandb.py), offline for real: its tables, figures and summary
on disk, ready for `wandb sync`, a second call continuing the same run, and nothing at all with logging.wandb=false.
The run file is decoded as tests/integration/test_wandb.py does (wandb 0.31 has no reader for offline runs)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dashboards.search_wandb import log_search
from sweep.search.config import load_search
from tests.conftest import CONFIGS
from tests.integration.test_wandb import (assert_not_flat, clean_env, exit_codes, offline_run, wandb_home,
                                          wandb_records)
from trainables import config


KNOB, LOW = "task.lengths.width", "task.lengths.low"


def search_dir(out: Path, wandb: bool) -> Path:
    """A finished debug search's output files: l_min = 2 settled at K* = 3 [3, 4]; l_min = 4 not finished, its K*
    past the widest width tried (5), its interval from 5 on (blank cells: NaN)."""
    base, search = load_search(CONFIGS / "debug_search.yaml", [f"logging.wandb={str(wandb).lower()}"])
    out.mkdir()
    (out / "config.yaml").write_text(config.to_yaml(base, search=search))
    r = lambda low, width: (1 / low) / sum(1 / l for l in range(low, low + width))  # R of Unif{low..low+width-1}
    pd.DataFrame([
        {LOW: 2, "diversity_star": 3, "diversity_star_low": 3, "diversity_star_high": 4, "data/max_sum_ratio": r(2, 3),
         "data/max_sum_ratio_low": r(2, 4), "data/max_sum_ratio_high": r(2, 3), "widest_tried": 5,
         "p_at_widest": 0.8, "p_at_widest_low": 0.5, "p_at_widest_high": 0.99, "seeds": 8, "finished": True,
         "study": "debug_search.low=2"},
        {LOW: 4, "diversity_star": np.nan, "diversity_star_low": 5, "diversity_star_high": np.nan,
         "data/max_sum_ratio": np.nan, "data/max_sum_ratio_low": np.nan, "data/max_sum_ratio_high": r(4, 5),
         "widest_tried": 5, "p_at_widest": 0.2, "p_at_widest_low": 0.01, "p_at_widest_high": 0.5, "seeds": 6,
         "finished": False, "study": "debug_search.low=4"},
    ]).to_csv(out / "min_diversity.csv", index=False)
    pd.DataFrame([{"study": f"debug_search.low={low}", LOW: low, KNOB: width, "data/max_sum_ratio": r(low, width),
                   "trained": 2 * (width % 2), "passed": 2 * (width % 2) * (low == 2 and width >= 3),
                   "p": 0.5, "p_low": 0.1, "p_high": 0.9} for low in (2, 4) for width in range(1, 6)]
                 ).to_csv(out / "success_curve.csv", index=False)
    return out


@pytest.fixture
def offline(monkeypatch, tmp_path):
    for key, value in clean_env(WANDB_MODE="offline", **wandb_home(tmp_path)).items():
        monkeypatch.setenv(key, value)


def table(run_dir: Path, key: str) -> pd.DataFrame:
    [path] = run_dir.glob(f"files/media/table/{key}_*.table.json")
    data = json.loads(path.read_text())
    return pd.DataFrame(data["data"], columns=data["columns"])


def test_a_search_run_holds_both_tables_both_figures_and_each_slice_answer_with_its_interval(tmp_path, offline):
    out = search_dir(tmp_path / "search", wandb=True)
    run_dir = log_search(out)
    assert run_dir.parent == out / "wandb" and run_dir.name.startswith("offline-run-")
    [run_file] = run_dir.glob("run-*.wandb")
    assert exit_codes(run_file) == [0]  # wandb-core may finish writing a moment later
    torn = tmp_path / "torn.wandb"  # what exit_codes may read while wandb-core writes: the last chunk cut short
    torn.write_bytes(run_file.read_bytes()[:-3])
    assert len(wandb_records(torn)) == len(wandb_records(run_file)) - 1
    run = offline_run(out)
    assert run["job_type"] == "search" and run["group"] == "debug_search" and "search" in run["tags"]
    assert run["config"]["search.success.rate"] == 0.5 and run["config"]["search.knob.key"] == KNOB
    summary = run["summary"]
    assert (summary["star/low=2"], summary["star_low/low=2"], summary["star_high/low=2"]) == (3, 3, 4)
    assert (summary["star/low=4"], summary["star_low/low=4"], summary["star_high/low=4"]) == (None, 5, None)
    assert summary["finished/low=4"] is False and summary["seeds/low=2"] == 8
    minimal = table(run_dir, "min_diversity")
    written = pd.read_csv(out / "min_diversity.csv")
    assert list(minimal.columns) == list(written.columns) and len(minimal) == 2
    assert minimal["diversity_star_low"].tolist() == [3, 5] and minimal["finished"].tolist() == [True, False]
    curve = table(run_dir, "success_curve")
    assert len(curve) == 10 and {"trained", "passed", "p", "p_low", "p_high", KNOB} <= set(curve.columns)
    for key in ("success_curves", "threshold"):
        [png] = run_dir.glob(f"files/media/images/{key}_*.png")
        assert_not_flat(png)

    wandb_cli = str(Path(sys.executable).parent / "wandb")
    proc = subprocess.run([wandb_cli, "sync", "--dry-run", str(run_dir)], capture_output=True, text=True,
                          timeout=120, env=clean_env(**wandb_home(tmp_path)), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "Would sync 1 run(s)" in proc.stdout + proc.stderr, proc.stderr

    # a search extended later logs again into the same run (its id), as a retried trial continues its own
    second = log_search(out)
    [again] = second.glob("run-*.wandb")
    assert second != run_dir and again.name == next(run_dir.glob("run-*.wandb")).name
    assert exit_codes(again) == [0]
    assert any(r.WhichOneof("record_type") == "history" for r in wandb_records(again))


def test_logging_wandb_false_logs_nothing(tmp_path, offline):
    out = search_dir(tmp_path / "search", wandb=False)
    assert log_search(out) is None and not (out / "wandb").exists()
