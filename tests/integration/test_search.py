"""`headsweep search` on a real local Ray and a real Optuna journal: answers, agreement with the grid, SIGKILL."""
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest
import yaml

from sweep.search.bisection import Evidence, minimal_value
from tests.conftest import CONFIGS
from tests.integration.conftest import HEADSWEEP, UNGUIDED_SEARCH, headsweep

KEY = "task.lengths.width"


def result_files(out: Path) -> dict[str, int]:
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "trials").glob("*/result.json")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted threshold search of the debug config."""
    out = tmp_path_factory.mktemp("search") / "reference"
    proc = headsweep("search", CONFIGS / "debug_search.yaml", "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_search_writes_its_outputs(reference):
    out, proc = reference
    assert {"study.journal", "trials.csv", "min_diversity.csv", "success_curve.csv", "report.html",
            "config.yaml"} <= {p.name for p in out.iterdir()}
    minimal = pd.read_csv(out / "min_diversity.csv")
    assert list(minimal["task.lengths.low"]) == [2, 4] and minimal["diversity_star"].notna().all()
    high = minimal["diversity_star_high"].fillna(float("inf"))  # blank: the interval reaches past the widest width
    assert ((minimal["diversity_star_low"] <= minimal["diversity_star"]) & (minimal["diversity_star"] <= high)).all()
    assert minimal["finished"].all() and (minimal["seeds"] <= 16).all()  # debug_search's budget.trainings
    curve = pd.read_csv(out / "success_curve.csv")
    assert curve.groupby("study")["trained"].sum().tolist() == minimal["seeds"].tolist()
    assert ((curve["p_low"] <= curve["p"]) & (curve["p"] <= curve["p_high"])).all()
    assert "K*_q [interval]" in proc.stdout and "report.html" in proc.stdout
    assert "Last result" not in proc.stdout  # the progress view and the table only, no line per Tune trial
    trials = pd.read_csv(out / "trials.csv")
    assert {"study", "task.lengths.low", "candidate", "seed", "state", "ood/acc"} <= set(trials.columns)
    # the studies live in the journal under names made of the config name and the slice, never Optuna's default
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(out / "study.journal")))
    assert sorted(s.study_name for s in optuna.get_all_study_summaries(storage)) == [
        "debug_search.low=2", "debug_search.low=4"]
    assert "data:image/png;base64," in (out / "report.html").read_text()


def test_search_and_grid_agree_on_the_minimal_width(reference, tmp_path):
    """The grid over the same slices and widths, 4 seeds at every width: the width from which at least half of its
    seeds pass lies in the search's interval."""
    out, _ = reference
    grid_config = yaml.safe_load((CONFIGS / "debug_search.yaml").read_text())
    search = grid_config.pop("search")
    grid_config["sweep"] = {"axes": [{"key": "task.lengths.low", "values": [2, 4]},
                                     {"key": KEY, "range": [search["knob"]["low"], search["knob"]["high"]]}],
                            "constraints": search["constraints"], "seeds": [0, 1, 2, 3]}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid_config))
    proc = headsweep("grid", tmp_path / "grid.yaml", "--out", tmp_path / "grid")
    assert proc.returncode == 0, proc.stderr[-3000:]
    grid = pd.read_csv(tmp_path / "grid" / "results.csv")
    minimal = pd.read_csv(out / "min_diversity.csv")
    for low, rows in grid.groupby("task.lengths.low"):
        pooled = {w: Evidence(successes=int((r["ood/acc"] >= 0.9).sum()), seeds=len(r), evaluations=1)
                  for w, r in rows.groupby(KEY)}
        star = minimal_value(sorted(pooled), pooled, min_rate=0.5)
        answer = minimal[minimal["task.lengths.low"] == low].iloc[0]
        high = answer["diversity_star_high"] if pd.notna(answer["diversity_star_high"]) else float("inf")
        assert star is not None and answer["diversity_star_low"] <= star <= high


def test_a_sigkilled_search_resumes_to_the_same_answer_losing_and_repeating_nothing(unguided_search, tmp_path):
    """Packed (search.pack=2): rounds where both slices ask train their two members as one trial, a round with one
    slice left trains it alone. The answer is the uninterrupted, unpacked search's."""
    out, args = tmp_path / "killed", [*map(str, UNGUIDED_SEARCH), "search.pack=2"]
    driver = subprocess.Popen([HEADSWEEP, "search", *args, "--out", str(out)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    # Killed once the first round (one packed trial: each slice's first width) has finished: the rounds after it each
    # wait for the driver to tell Optuna and ask again, so the kill lands well before the last result. SIGSTOP first,
    # so that what is counted is what the kill left.
    deadline = time.time() + 600
    while time.time() < deadline and driver.poll() is None and len(result_files(out)) < 2:
        time.sleep(0.02)
    os.killpg(driver.pid, signal.SIGSTOP)
    before = result_files(out)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    assert 2 <= len(before) < len(result_files(unguided_search)), "the search should have been killed midway"

    proc = headsweep("search", *args, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = pd.read_csv(unguided_search / "min_diversity.csv").drop(columns=["study"])
    assert pd.read_csv(out / "min_diversity.csv").drop(columns=["study"]).equals(expected)
    tune_trials = {p.name for p in out.glob("ray/search-*/*") if p.is_dir()}
    # Packed (two members in a trial). Whether a round also trained one member alone depends on where the kill landed:
    # the resumed slices may run out of widths in the same round.
    assert any(t.endswith("+1") for t in tune_trials), tune_trials
    after = result_files(out)
    assert {k: after[k] for k in before} == before  # nothing that had finished was trained again
    assert set(after) == set(result_files(unguided_search))  # and nothing is missing
    trials = pd.read_csv(out / "trials.csv")
    complete = trials[trials["state"] == "COMPLETE"]
    # each evaluation of a width uses fresh seeds: no (slice, width, seed) counted twice
    assert not complete.duplicated(["study", "candidate", "seed"]).any()


def test_guided_search_and_the_exhaustive_sampler_agree_on_paper_theory_slices(tmp_path):
    """The paper's own model and settings (configs/paper_theory_search.yaml) on two of its slices, one seed: the
    bisection finds the exhaustive sampler's answer in fewer trainings."""
    overrides = ["search.slices=[{key: task.lengths.low, values: [8, 9]}, {key: task.n_triggers, values: [4]}]",
                 "search.success.seeds=[0]", "search.success.min_seeds=1"]
    config = CONFIGS / "paper_theory_search.yaml"
    answers, counts = {}, {}
    for sampler, per_round in (("bisection", 1), ("exhaustive", 12)):  # exhaustive: every width in one round
        proc = headsweep("search", config, *overrides, f"search.sampler={sampler}", f"search.per_round={per_round}",
                         "--out", tmp_path / sampler)
        assert proc.returncode == 0, proc.stderr[-3000:]
        minimal = pd.read_csv(tmp_path / sampler / "min_diversity.csv")
        if sampler == "bisection":
            answers[sampler] = list(minimal["diversity_star"])  # its own answer, with no interval
        else:  # the smallest width from which every width's seed passes, from every width's result
            trials = pd.read_csv(tmp_path / sampler / "trials.csv")
            answers[sampler] = [minimal_value(sorted(rows[KEY]), {w: Evidence(int(ok), 1, 1) for w, ok in zip(
                rows[KEY], rows["ood/acc"] >= 0.99)}, 1.0) for _, rows in trials.groupby("task.lengths.low")]
        counts[sampler] = minimal["seeds"].sum()
    assert answers["bisection"] == answers["exhaustive"] and not pd.isna(answers["exhaustive"]).any()
    assert counts["bisection"] < counts["exhaustive"]


def test_a_search_stopped_by_ctrl_c_shows_its_table_so_far_counting_every_finished_seed(unguided_search, tmp_path):
    """Ctrl-C once some seeds have finished: the table so far on stdout (unfinished slices marked, each counting the
    seeds trained before the stop, those of the round in flight included), never a failed seed that had finished;
    `headsweep show` prints it again without starting anything. The same command then resumes to the uninterrupted
    answer, and once more prints the finished table without starting Ray."""
    out = tmp_path / "stopped"
    driver = subprocess.Popen([HEADSWEEP, "search", *map(str, UNGUIDED_SEARCH), "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 300
        while time.time() < deadline and driver.poll() is None and len(result_files(out)) < 2:
            time.sleep(0.05)
        driver.send_signal(signal.SIGINT)
        stdout, stderr = driver.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)  # whatever of its local Ray is left
    assert driver.returncode == 130 and stderr.startswith("headsweep: stopped (Ctrl-C); "), stderr[-2000:]
    finished_seeds = len(result_files(out))
    assert 2 <= finished_seeds < len(result_files(unguided_search)), "the search should have been stopped midway"
    so_far = stdout[stdout.index("stopped: the table so far"):]
    assert "K*_q [interval]" in so_far and "no (open)" in so_far
    table = pd.read_csv(out / "min_diversity.csv")
    assert table["seeds"].sum() == finished_seeds and not table["finished"].all()
    answer = ["diversity_star", "diversity_star_low", "diversity_star_high"]
    assert table.loc[table["seeds"] == 0, answer].isna().all().all()
    trials = pd.read_csv(out / "trials.csv")
    assert not trials[trials["state"] == "FAIL"]["ood/acc"].notna().any()  # a seed that finished is never failed

    shown = headsweep("show", out, timeout=120)
    assert shown.returncode == 0 and shown.stdout.strip() in so_far, shown.stdout + shown.stderr

    proc = headsweep("search", *UNGUIDED_SEARCH, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = pd.read_csv(unguided_search / "min_diversity.csv").drop(columns=["study"])
    assert pd.read_csv(out / "min_diversity.csv").drop(columns=["study"]).equals(expected)
    experiments = sorted(out.glob("ray/search-*"))
    again = headsweep("search", *UNGUIDED_SEARCH, "--out", out)
    assert again.returncode == 0 and "K*_q [interval]" in again.stdout, again.stderr[-3000:]
    assert sorted(out.glob("ray/search-*")) == experiments  # no Tune run: Ray never started
    assert again.stdout.splitlines()[-4:] == proc.stdout.splitlines()[-4:]


def test_a_knob_range_no_slice_can_reach_is_said_once_the_search_starts(tmp_path):
    """One slice (low = 4) under the constraint low + width <= 9: widths 6 and 7 are searched nowhere, one line on
    stderr once the search starts (a refusal before it, tests/integration/test_concurrent_search.py, stays one line)."""
    proc = headsweep("search", CONFIGS / "debug_search.yaml", "search.slices=[{key: task.lengths.low, values: [4]}]",
                     "search.budget.trainings=6", "logging.wandb=false", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if line.startswith("headsweep: search.knob:")]
    assert said == ["headsweep: search.knob: task.lengths.width = 6, 7 breaks search.constraints in every slice: "
                    "not searched"], proc.stderr[-3000:]
