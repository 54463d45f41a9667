"""One word per idea (issue [house] item 4, docs/DESIGN.md "Words"): what was renamed keeps working under its old
name. A config value that moved (search.sampler=grid, now exhaustive) still runs, with a one-line notice, and an
output directory written under the old name resumes; results.csv keeps its `trial` column beside `member`, and a
report still builds from a results.csv written before `member` existed."""
import re
from pathlib import Path

import pandas as pd
import pytest

import sweep.search
from dashboards import report, search_wandb
from sweep import cluster, grid, packing, preflight, space
from sweep.search import studies
from sweep.search.config import load_search
from sweep.storage.out_dir import OutDir
from tests.conftest import CONFIGS
from trainables import config
from trainables.io import write_json

NOTICE = "headsweep: search.sampler=grid is deprecated; use search.sampler=exhaustive\n"


def test_the_exhaustive_sampler_runs_under_its_new_name_without_a_notice(capsys):
    _, search = load_search(CONFIGS / "debug_search.yaml", ["search.sampler=exhaustive"])
    assert search.sampler == "exhaustive" and capsys.readouterr().err == ""


@pytest.mark.parametrize("where", ["override", "file"])
def test_search_sampler_grid_still_works_with_a_one_line_deprecation_notice(tmp_path, capsys, where):
    path, overrides = CONFIGS / "debug_search.yaml", ["search.sampler=grid"]
    if where == "file":
        path = tmp_path / "old.yaml"
        path.write_text((CONFIGS / "debug_search.yaml").read_text().replace("sampler: threshold", "sampler: grid"))
        overrides = []
    base, search = load_search(path, overrides)
    assert search.sampler == "exhaustive" and capsys.readouterr().err == NOTICE
    renamed = load_search(CONFIGS / "debug_search.yaml", ["search.sampler=exhaustive"])[1]
    assert studies.fingerprint(base, search) == studies.fingerprint(base, renamed)  # one experiment


@pytest.fixture
def search_without_ray(monkeypatch, fake_width_tune):
    """sweep.search.run with the unit tier's fake executor in place of Ray Tune: no cluster, no bucket, no W&B."""
    monkeypatch.setattr(cluster, "connect", lambda address: None)
    monkeypatch.setattr(cluster, "check_resources", lambda resources, section="sweep": None)
    monkeypatch.setattr(cluster, "disconnect_while", lambda work: work())
    monkeypatch.setattr(preflight, "check_storage", lambda out: None)
    monkeypatch.setattr(search_wandb, "log_search", lambda out: None)
    def run(out, *overrides, extend=0) -> int:
        base, search = load_search(CONFIGS / "debug_search.yaml", ["search.budget.per_slice=2", *overrides])
        sweep.search.run(base, search, str(out), None, None, extend, None)
        return 0
    return run


def completed_per_study(out: Path) -> list[int]:
    trials = pd.read_csv(out / "trials.csv")
    return trials[trials["state"] == "COMPLETE"].groupby("study")["optuna_trial"].nunique().tolist()


def test_a_search_made_with_sampler_grid_resumes_under_exhaustive_and_under_grid(tmp_path, capsys, search_without_ray):
    """A search from before the rename: its config.yaml says `sampler: grid` (its studies record no sampler). Run
    with the new name it resumes, keeping every Optuna trial (--extend N asks N more), as it does with the old one."""
    out = tmp_path / "search"
    assert search_without_ray(out, "search.sampler=exhaustive") == 0
    assert completed_per_study(out) == [2, 2]
    written = (out / "config.yaml").read_text()
    assert "sampler: exhaustive" in written
    (out / "config.yaml").write_text(written.replace("sampler: exhaustive", "sampler: grid"))  # as it was written
    capsys.readouterr()

    assert search_without_ray(out, "search.sampler=exhaustive", extend=1) == 0
    assert completed_per_study(out) == [3, 3] and "sampler: exhaustive" in (out / "config.yaml").read_text()
    assert "deprecated" not in capsys.readouterr().err
    assert search_without_ray(out, "search.sampler=grid", extend=2) == 0
    assert completed_per_study(out) == [5, 5] and capsys.readouterr().err == NOTICE


# --- keys moved into their sampler's subsection: search.threshold.*, search.tpe.* (issue [lean] item 2) ---------------

# The flat keys as config.yaml held them before the move (text, not derived from the code under test), in their order.
FLAT_THRESHOLD = "  batch: 3\n  resolution: 1.0\n"
FLAT_TPE = "  sampler_seed: 0\n  params: []\n  minimize: ''\n"
NESTED_THRESHOLD = "  threshold:\n    batch: 3\n    resolution: 1.0\n"
NESTED_TPE = "  tpe:\n    seed: 0\n    params: []\n    minimize: ''\n"


@pytest.mark.parametrize("where", ["override", "file"])
def test_a_samplers_flat_keys_still_set_its_subsection_with_one_notice_each(tmp_path, capsys, where):
    params = "[{key: task.lengths.exponent, low: 0.5, high: 2.0}]"
    old = ["search.batch=4", "search.resolution=2", "search.sampler_seed=7", "search.minimize=data/cost",
           f"search.params={params}"]
    new = ["search.threshold.batch=4", "search.threshold.resolution=2", "search.tpe.seed=7",
           "search.tpe.minimize=data/cost", f"search.tpe.params={params}"]
    path, overrides = CONFIGS / "debug_search.yaml", old
    if where == "file":
        path, overrides = tmp_path / "old.yaml", []
        path.write_text((CONFIGS / "debug_search.yaml").read_text() + "".join(
            f"  {o.split('=')[0].split('.')[1]}: {o.split('=', 1)[1]}\n" for o in old))
    _, search = load_search(path, [*overrides, "search.sampler=tpe"])
    notices = capsys.readouterr().err.splitlines()
    _, expected = load_search(CONFIGS / "debug_search.yaml", [*new, "search.sampler=tpe"])
    assert search == expected and (search.threshold.batch, search.tpe.seed, search.tpe.minimize) == (4, 7, "data/cost")
    assert notices == [f"headsweep: search.{key} is deprecated; use search.{moved}"
                       for key, moved in [("batch", "threshold.batch"), ("resolution", "threshold.resolution"),
                                          ("sampler_seed", "tpe.seed"), ("minimize", "tpe.minimize"),
                                          ("params", "tpe.params")]]


def test_an_override_inside_a_moved_list_reaches_the_subsection(capsys):
    _, search = load_search(CONFIGS / "debug_optimal_distribution.yaml", ["search.params.0.high=3"])
    assert search.tpe.params[0].high == 3 and capsys.readouterr().err.count("deprecated") == 1


# The studies' fingerprints as the version before the move computed them (0222888).
FINGERPRINTS_FLAT = {"quickstart.yaml": "bbefd2e3f154687a", "debug_optimal_distribution.yaml": "6ee48284036773f7"}


@pytest.mark.parametrize("name", FINGERPRINTS_FLAT)
def test_an_output_directory_written_with_the_flat_keys_resumes_and_its_studies_too(tmp_path, name):
    """config.yaml as written before the move (each subsection's block replaced by the flat lines it was) is
    claimed, and the studies' fingerprint is the one computed before it."""
    from trainables.io import claim_out

    base, search = load_search(CONFIGS / name, [])
    assert studies.fingerprint(base, search) == FINGERPRINTS_FLAT[name]
    resolved = config.to_yaml(base, search=search)
    flat = resolved.replace(NESTED_THRESHOLD, FLAT_THRESHOLD)
    if name == "quickstart.yaml":
        flat = flat.replace(NESTED_TPE, FLAT_TPE)
    else:  # tpe's block one level out, its seed renamed
        block = resolved[resolved.index("  tpe:\n"):resolved.index("  reference:")]
        dedented = "".join(line[2:] for line in block.splitlines(keepends=True)[1:])
        flat = flat.replace(block, dedented.replace("  seed:", "  sampler_seed:", 1))
    assert "\n  threshold:\n" not in flat and "\n  tpe:\n" not in flat
    (tmp_path / "config.yaml").write_text(flat)
    claim_out(tmp_path, resolved, *sweep.search._as_written_before(base, search))
    other = load_search(CONFIGS / name, ["search.success.threshold=0.5"])[1]
    with pytest.raises(config.ConfigError, match="holds the results of a different config"):
        claim_out(tmp_path, config.to_yaml(base, search=other), *sweep.search._as_written_before(base, other))


def grid_members(out: Path) -> list[dict]:
    """The debug grid's members, each with a result.json as a finished member leaves it."""
    _, _, points = space.load_sweep(CONFIGS / "debug_grid.yaml", [])
    members = packing.members(points, OutDir(out))
    for member in members:
        write_json(Path(member["dir"]) / "result.json", {"ood/acc": 1.0, "data/max_sum_ratio": 0.3,
                                                         "status": "completed", "seconds": 1.0})
    return members


def test_results_csv_names_each_member_once(tmp_path):
    """One column per idea: `member`, and no `trial` beside it holding the same ids (its name before)."""
    frame = grid.collect(grid_members(tmp_path), {})
    keys = ["task.lengths.low", "task.lengths.high", "seed"]
    assert list(frame.columns[:len(keys) + 2]) == keys + ["member", "status"] and "trial" not in frame.columns
    assert frame["member"].tolist() == [space.point_id(row) for row in frame[keys].to_dict("records")]


def test_the_report_reads_a_results_csv_from_before_the_member_column(tmp_path):
    base, sweep_section, _ = space.load_sweep(CONFIGS / "debug_grid.yaml", [])
    (tmp_path / "config.yaml").write_text(config.to_yaml(base, sweep=sweep_section))
    old = grid.collect(grid_members(tmp_path), {}).rename(columns={"member": "trial"})
    old.to_csv(tmp_path / "results.csv", index=False)
    page = report.build(tmp_path).read_text()
    results = page[page.index("<h2>Results (one row per member)</h2>"):]
    header = re.findall(r"<th>(.*?)</th>", results[:results.index("</thead>")])
    assert "member" in header and "trial" not in header
    assert all(member in results for member in old["trial"]) and "8 members: 8 completed" in page


# --- keys added since: model.n_ctx, then optim's schedule and clipping (config.ADDED_KEYS) ---------------------------

# Optuna studies' fingerprints as the version before model.n_ctx existed computed them (2cbc2ff): its studies resume.
FINGERPRINTS_BEFORE = {"transformer_search.yaml": "6c35eaabf65b2af3", "quickstart.yaml": "bbefd2e3f154687a",
                       "markov_pool_search.yaml": "3b6a4ace8a6714c1"}
# The lines each version added to config.yaml (newest last), at their defaults.
ADDED_LINES = [["  n_ctx: 0\n"],
               ["  schedule: constant\n", "  warmup_steps: 0\n", "  min_lr: 0.0\n", "  clip_norm: 0.0\n"]]


@pytest.mark.parametrize("name", FINGERPRINTS_BEFORE)
def test_a_study_from_before_an_added_key_is_the_same_experiment_unless_the_key_is_set(name):
    base, search = load_search(CONFIGS / name, [])
    assert studies.fingerprint(base, search) == FINGERPRINTS_BEFORE[name]
    if name != "quickstart.yaml":  # a transformer: setting a new key makes another experiment
        for key in ("model.n_ctx=64", "optim.schedule=cosine", "optim.warmup_steps=10", "optim.clip_norm=1"):
            assert studies.fingerprint(*load_search(CONFIGS / name, [key])) != FINGERPRINTS_BEFORE[name], key


def as_written_by(version: int, text: str) -> str:
    """config.yaml's text as the version before ADDED_LINES[version] wrote it."""
    for line in (line for added in ADDED_LINES[version:] for line in added):
        assert line in text, line
        text = text.replace(line, "")
    return text


def test_an_output_directory_written_before_an_added_key_resumes(tmp_path):
    """config.yaml as the versions before model.n_ctx and before optim's schedule keys wrote it (the same text
    without their lines) is claimed, by a train, a grid and a search alike; with a key set, it is another config's
    directory."""
    from trainables.io import claim_out

    base, sweep_section, _ = space.load_sweep(CONFIGS / "transformer_grid.yaml", [])
    for resolved, before in [(config.to_yaml(base, sweep=sweep_section),
                              config.to_yaml_as_written_before(base, sweep=sweep_section)),
                             (config.to_yaml(base), config.to_yaml_as_written_before(base))]:
        assert before == [as_written_by(1, resolved), as_written_by(0, resolved)]
        for text in before:
            (tmp_path / "config.yaml").write_text(text)
            claim_out(tmp_path, resolved, *before)
    quickstart = config.load(CONFIGS / "transformer_quickstart.yaml", [], check_device=False)
    (tmp_path / "config.yaml").write_text(as_written_by(0, config.to_yaml(quickstart)))
    claim_out(tmp_path, config.to_yaml(quickstart), *config.to_yaml_as_written_before(quickstart))
    for key in ("model.n_ctx=64", "optim.schedule=cosine"):
        set_key = config.load(CONFIGS / "transformer_quickstart.yaml", [key], check_device=False)
        with pytest.raises(config.ConfigError, match="holds the results of a different config"):
            claim_out(tmp_path, config.to_yaml(set_key), *config.to_yaml_as_written_before(set_key))
    search_base, search = load_search(CONFIGS / "transformer_search.yaml", [])
    for version in (0, 1):
        (tmp_path / "config.yaml").write_text(as_written_by(version, config.to_yaml(search_base, search=search)))
        claim_out(tmp_path, config.to_yaml(search_base, search=search),
                  *sweep.search._as_written_before(search_base, search))
