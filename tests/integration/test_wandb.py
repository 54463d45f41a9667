"""W&B offline, for real: runs on disk from a debug grid and a train, the mode rules (never prompt, never hang),
`logging.wandb=false` importing nothing, no secret in any file, the dashboard specs and the local report verbs.

wandb 0.31 ships no reader for offline runs, so `wandb_records` parses the run file itself: a LevelDB-style log
(7-byte header, 32 KiB blocks of checksummed chunks) of `wandb_internal_pb2.Record` protobufs.
"""
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import CONFIGS
from tests.integration.conftest import headsweep
from trainables import config
from trainables.errors import ConfigError
from trainables.logger import resolve_wandb_mode, server_answers, member_logger


FAKE_KEY = "0123456789abcdef0123456789abcdef01234567"  # the shape of a W&B API key; must never reach a file
WANDB_ENV = ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_IDENTITY_TOKEN_FILE", "NETRC",
             "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_DIR")


def clean_env(**extra) -> dict:
    """This process's environment without any W&B setting the developer may have, plus `extra`."""
    return {k: v for k, v in os.environ.items() if k not in WANDB_ENV} | extra


def wandb_home(root: Path) -> dict:
    """W&B's own dirs (cache, config, artifact staging) under `root`, so the test can read every file W&B writes."""
    return {f"WANDB_{name}_DIR": str(root / name.lower()) for name in ("CACHE", "CONFIG", "DATA")}


def exit_codes(run_file: Path, within_s: float = 30) -> list[int]:
    """The exit codes recorded in a run file. wandb-core may append the exit record a moment after run.finish()
    returns (seen once in a full suite on a loaded machine: none yet), so wait up to `within_s` for one."""
    deadline = time.monotonic() + within_s
    while not (codes := [r.exit.exit_code for r in wandb_records(run_file) if r.WhichOneof("record_type") == "exit"]) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    return codes


def wandb_records(run_file: Path) -> list:
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", f"{run_file} is not a W&B run file"
    block, position, chunks, records = 32768, 7, [], []
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a chunk header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if position + 7 + length > len(data):  # wandb-core is still writing this chunk (exit_codes polls a live file)
            break
        chunk, position = data[position + 7:position + 7 + length], position + 7 + length
        if kind in (1, 2):  # FULL, FIRST
            chunks = [chunk]
        elif kind in (3, 4):  # MIDDLE, LAST
            chunks.append(chunk)
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(chunks))
            records.append(record)
    return records


def offline_run(trial: Path) -> dict:
    """The one offline W&B run in a trial dir, decoded: run attributes, config, history rows, summary, artifacts."""
    runs = sorted((trial / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, f"{trial}: expected one offline run, found {[r.name for r in runs]}"
    records = wandb_records(next(runs[0].glob("run-*.wandb")))
    kinds = [r.WhichOneof("record_type") for r in records]
    run = records[kinds.index("run")].run
    config_items = {u.key: json.loads(u.value_json) for u in run.config.update}
    for record in records:
        if record.WhichOneof("record_type") == "config":
            config_items |= {u.key: json.loads(u.value_json) for u in record.config.update}
    history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    summary = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            summary |= {u.key or "/".join(u.nested_key): json.loads(u.value_json) for u in record.summary.update}
    return {
        "dir": runs[0], "id": run.run_id, "project": run.project, "group": run.run_group, "job_type": run.job_type,
        "name": run.display_name, "tags": list(run.tags), "config": config_items, "history": history,
        "summary": summary,
        "artifacts": [(r.artifact.name, [c.path for c in r.artifact.manifest.contents])
                      for r in records if r.WhichOneof("record_type") == "artifact"],
        "exit_code": [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"],
    }


def assert_not_flat(png: Path) -> None:
    """A heatmap (trainables.figures.heatmap_image: a few colours, one per cell value and mark) that shows something:
    several colours with contrast, not a black or white square."""
    image = np.asarray(Image.open(png).convert("RGB"), dtype=np.int64)
    colours = np.unique(image[..., 0] << 16 | image[..., 1] << 8 | image[..., 2])
    assert len(colours) >= 3 and np.ptp(image.sum(-1)) > 150, f"{png} is (nearly) one flat colour"


def files_containing(secret: str, *roots: Path) -> list[Path]:
    needle = secret.encode()
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


# --- an offline debug grid: one W&B run per trial ----------------------------------------------------------------

@pytest.fixture(scope="module")
def wandb_grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("wandb_grid")
    out = root / "grid"
    env = clean_env(WANDB_API_KEY=FAKE_KEY, WANDB_MODE="offline", **wandb_home(root))
    proc = headsweep("grid", CONFIGS / "debug_grid.yaml", "logging.wandb=true", "--out", out, env=env)
    return root, out, proc


def test_offline_grid_leaves_one_run_per_trial_with_config_history_and_summary(wandb_grid):
    _, out, proc = wandb_grid
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = sorted((out / "trials").iterdir())
    assert len(trials) == 8
    ids = set()
    for trial in trials:
        run = offline_run(trial)
        point = {k.rsplit(".", 1)[-1]: int(v) for k, v in (part.split("=") for part in trial.name.split(","))}
        assert run["project"] == "headsweep" and run["group"] == "debug_grid" and run["job_type"] == "grid"
        assert run["name"] and {"trigger_copy", "one_step", "lengths:uniform", "ood:displaced"} <= set(run["tags"])
        cfg = run["config"]
        assert {"name", "seed", "task.n_triggers", "task.lengths.family", "model.name", "model.eta_KQ",
                "eval.threshold", "logging.wandb"} <= set(cfg)  # the whole resolved config, flattened
        assert (cfg["task.lengths.low"], cfg["task.lengths.high"], cfg["seed"]) == \
            (point["low"], point["high"], point["seed"])
        assert cfg["data/width"] == point["high"] - point["low"] + 1  # diversity measures, for grouping
        result = json.loads((trial / "result.json").read_text())
        assert any(row.get("_step") == result["steps"] and row["ood/acc"] == pytest.approx(result["ood/acc"])
                   for row in run["history"])
        assert run["summary"]["status"] == "completed"
        assert run["summary"]["ood/success"] == result["ood/success"]
        assert run["summary"]["data/max_sum_ratio"] == pytest.approx(result["data/max_sum_ratio"])
        assert run["artifacts"] == [(f"attention-{run['id']}", ["attention.npz"])]
        with np.load(run["dir"] / "attention.npz") as saved, np.load(trial / "attention.npz") as written:
            assert np.array_equal(saved["W_KQ"], written["W_KQ"])
        assert run["exit_code"] == [0]
        ids.add(run["id"])
    assert len(ids) == 8


def test_the_installed_packages_are_saved_by_one_run_per_process(wandb_grid):
    """requirements.txt lists every installed package, 0.19 s a run to build (as long as training a one-step trial):
    the first run of each worker process saves it, the process's later runs share that environment."""
    _, out, _ = wandb_grid
    saved, processes = 0, set()
    for trial in sorted((out / "trials").iterdir()):
        run_dir = offline_run(trial)["dir"]
        saved += (run_dir / "files" / "requirements.txt").exists()
        first_line = (run_dir / "logs" / "debug.log").read_text().splitlines()[0]
        processes.add(re.search(r":(\d+) \[", first_line)[1])  # "... INFO    Thread-3 (<lambda>):1234 [wandb_init..."
    assert saved == len(processes) >= 1


def test_every_trial_has_attention_images_that_are_not_one_flat_colour(wandb_grid):
    _, out, _ = wandb_grid
    for trial in sorted((out / "trials").iterdir()):
        images = offline_run(trial)["dir"] / "files" / "media" / "images"
        for pattern in ("attention/query_L0H0_*.png", "mech/W_KQ_*.png", "ood/acc_by_pair_*.png"):
            found = list(images.glob(pattern))
            assert len(found) == 1, f"{trial.name}: no {pattern}"
            assert_not_flat(found[0])


def test_no_secret_is_written_anywhere(wandb_grid):
    root, _, _ = wandb_grid
    assert files_containing(FAKE_KEY, root) == []  # the output dir and W&B's cache, config and staging dirs


def test_offline_runs_are_ready_for_wandb_sync(wandb_grid):
    root, out, _ = wandb_grid
    runs = sorted(out.glob("trials/*/wandb/offline-run-*"))
    wandb_cli = str(Path(sys.executable).parent / "wandb")
    proc = subprocess.run([wandb_cli, "sync", "--dry-run", *map(str, runs)], capture_output=True, text=True,
                          timeout=120, env=clean_env(WANDB_API_KEY=FAKE_KEY, **wandb_home(root)),
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert f"Would sync {len(runs)} run(s)" in proc.stdout + proc.stderr and len(runs) == 8


def test_report_rebuilds_the_grid_report_with_its_gallery(wandb_grid):
    root, out, _ = wandb_grid
    (out / "report.html").unlink()
    proc = headsweep("report", out, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    page = (out / "report.html").read_text()
    for heading in ("Phase diagram", "Attention gallery: 4 of 8 members", "Results (one row per member)"):
        assert heading in page
    assert page.count("data:image/png;base64,") >= 2 + 4 * 3  # diagram, curves, 3 figures per one-step trial
    assert "<script" not in page and "http" not in page.split("</style>")[1]  # self-contained


# --- train: no credentials, never a prompt; resumption; failures -------------------------------------------------

def test_train_without_credentials_logs_offline_and_never_prompts(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    out = tmp_path / "run"
    env = clean_env(HOME=str(home), **wandb_home(tmp_path))  # no key, no ~/.netrc, no WANDB_MODE
    proc = headsweep("train", CONFIGS / "debug_grid.yaml", "logging.wandb=true", "--out", out, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    notice = next(line for line in proc.stderr.splitlines() if line.startswith("W&B: offline run"))
    assert "(no W&B credentials; `wandb login` to log online); upload: wandb sync " in notice
    run = offline_run(out)
    assert run["job_type"] == "train" and run["group"] == "debug_grid" and run["name"] == "l2-7_t2_s0"


def test_a_scheduled_run_logs_its_learning_rate_at_every_evaluation(tmp_path):
    """optim.schedule, warm-up and clipping from the command line: the W&B run's history holds train/lr, the rate of
    the last step before each evaluation (rising through the warm-up, then decaying)."""
    out = tmp_path / "run"
    overrides = ["optim.max_steps=100", "eval.every=20", "optim.schedule=cosine", "optim.warmup_steps=40",
                 "optim.min_lr=0.001", "optim.clip_norm=1.0"]
    proc = headsweep("train", CONFIGS / "debug.yaml", "logging.wandb=true", *overrides, "--out", out,
                     env=clean_env(WANDB_MODE="offline", **wandb_home(tmp_path)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    cfg = config.load(CONFIGS / "debug.yaml", overrides)
    logged = {row["_step"]: row["train/lr"] for row in offline_run(out)["history"] if "train/lr" in row}
    assert logged == {step: pytest.approx(cfg.optim.lr_at(step - 1)) for step in (20, 40, 60, 80, 100)}
    assert logged[20] < logged[40] > logged[60] > logged[100] > 0


def test_wandb_false_imports_nothing_from_wandb(tmp_path):
    script = """
import sys
from pathlib import Path
from trainables import config
from trainables.logger import member_logger
from trainables.train import save, train
cfg = config.load(sys.argv[1], [f"logging.wandb={sys.argv[3]}"])
out = Path(sys.argv[2])
out.mkdir()
with member_logger(cfg, out) as logger:
    logger.summary(train(cfg, logger).metrics)
print(sorted(m for m in sys.modules if m == "wandb" or m.startswith(("wandb.", "wandb_"))))
"""
    env = clean_env(WANDB_MODE="offline", **wandb_home(tmp_path))
    for flag, out in (("false", tmp_path / "off"), ("true", tmp_path / "on")):
        proc = subprocess.run([sys.executable, "-c", script, str(CONFIGS / "debug_grid.yaml"), str(out), flag],
                              capture_output=True, text=True, timeout=120, env=env, cwd=CONFIGS.parent)
        assert proc.returncode == 0, proc.stderr
        imported = proc.stdout.strip().splitlines()[-1]
        if flag == "false":
            assert imported == "[]" and not (out / "wandb").exists()
        else:  # the control: the same script does import wandb when asked to log
            assert "'wandb'" in imported and len(list((out / "wandb").glob("offline-run-*"))) == 1


def test_a_retry_continues_the_same_run_and_a_fresh_start_begins_a_new_one(tmp_path, monkeypatch):
    for key, value in clean_env(WANDB_MODE="offline", **wandb_home(tmp_path)).items():
        monkeypatch.setenv(key, value)
    cfg = config.load(CONFIGS / "debug_grid.yaml", ["logging.wandb=true"])
    out = tmp_path / "trial"
    out.mkdir()
    with member_logger(cfg, out, job_type="grid", name="low=2,high=7,seed=0") as logger:
        logger.log({"train/loss": 1.0, "data/width": 6.0}, step=1)
    first = (out / "wandb" / "headsweep-run-id").read_text().strip()
    # A Tune retry keeps metrics.jsonl up to its checkpoint: the W&B run goes on under the same id.
    with member_logger(cfg, out, job_type="grid") as logger:
        logger.log({"train/loss": 0.5, "data/width": 6.0}, step=2)
    # The run id is the .wandb file's name: two runs started in one second share a folder name but for a "-1".
    runs = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert [r.stem.removeprefix("run-") for r in runs] == [first, first]
    # A restart from step 0 (the train verb deletes metrics.jsonl) is a new run.
    (out / "metrics.jsonl").unlink()
    with pytest.raises(RuntimeError):
        with member_logger(cfg, out) as logger:
            raise RuntimeError("the trial crashed")
    second = (out / "wandb" / "headsweep-run-id").read_text().strip()
    assert second != first
    crashed = next((out / "wandb").glob(f"offline-run-*/run-{second}.wandb"))
    assert exit_codes(crashed) == [1]


# --- the mode rules -------------------------------------------------------------------------------------------------

@pytest.fixture
def no_wandb_env(monkeypatch, tmp_path):
    for key in WANDB_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    return monkeypatch


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


@pytest.mark.parametrize("env_mode, expected",
                         [("offline", "offline"), ("dryrun", "offline"), ("disabled", "disabled")])
def test_wandb_mode_is_respected(no_wandb_env, env_mode, expected):
    no_wandb_env.setenv("WANDB_MODE", env_mode)
    no_wandb_env.setenv("WANDB_API_KEY", FAKE_KEY)
    assert resolve_wandb_mode("auto")[0] == expected
    assert resolve_wandb_mode("offline")[0] == "offline"  # an explicit logging.mode wins over WANDB_MODE


def test_no_credentials_means_offline_even_when_online_is_asked_for(no_wandb_env):
    assert resolve_wandb_mode("auto") == ("offline", resolve_wandb_mode("online")[1])
    assert "no W&B credentials" in resolve_wandb_mode("auto")[1]
    no_wandb_env.setenv("WANDB_MODE", "online")
    assert resolve_wandb_mode("auto")[0] == "offline"


def test_credentials_and_a_server_that_answers_mean_online(no_wandb_env, tmp_path):
    with socket.socket() as server:  # a local stand-in for the W&B server: the probe only opens a connection
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        no_wandb_env.setenv("WANDB_BASE_URL", url)
        (tmp_path / ".netrc").write_text(f"machine 127.0.0.1\n  login user\n  password {FAKE_KEY}\n")
        assert resolve_wandb_mode("auto") == ("online", "logged in")


def test_credentials_but_a_dead_server_fall_back_to_offline_quickly(no_wandb_env):
    url = f"http://127.0.0.1:{closed_port()}"
    no_wandb_env.setenv("WANDB_BASE_URL", url)
    no_wandb_env.setenv("WANDB_API_KEY", FAKE_KEY)
    mode, why = resolve_wandb_mode("auto")
    assert mode == "offline" and url in why
    assert server_answers.cache_info().currsize >= 1  # asked once per process, not once per trial


def test_an_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="logging.mode"):
        resolve_wandb_mode("sometimes")


# --- the dashboard verb ---------------------------------------------------------------------------------------------

def test_dashboard_builds_workspace_and_report_specs_offline(tmp_path):
    out = tmp_path / "dash"
    # Without --push nothing of W&B's is read (no credentials, no HOME): forked warm, where HOME= would start cold
    proc = headsweep("dashboard", "--entity", "team", "--project", "headsweep", "--group", "debug_grid",
                     "--out", out, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    spec = json.loads((out / "workspace.json").read_text())
    assert (spec["entity"], spec["project"]) == ("team", "headsweep")
    sections = spec["spec"]["section"]["panelBankConfig"]["sections"]
    assert [s["name"] for s in sections] == ["OOD generalization by diversity", "Mechanism", "Attention maps",
                                             "Training", "Learning rate"]
    panels = {s["name"]: [p["config"] for p in s["panels"]] for s in sections}
    curves = panels["OOD generalization by diversity"]
    assert {tuple(c.get("metrics", [])) for c in curves} >= {("ood/acc",), ("ood/loss",)}
    assert all(c["groupBy"] == "data/width.value" for c in curves[:2])  # grouped by diversity (support width K)
    assert any(c.get("xAxis") == "summary:data/max_sum_ratio" and c.get("yAxis") == "summary:ood/acc"
               for c in curves)
    media_keys = {k for c in panels["Attention maps"] for k in c.get("mediaKeys", [])}
    assert {"attention/query_L0H0", "mech/W_KQ", "ood/acc_by_pair"} <= media_keys
    assert [c.get("metrics") for c in panels["Learning rate"]] == [["train/lr"]]  # every task's runs trained by optim
    report = json.loads((out / "report.json").read_text())
    assert report["project"] == {"name": "headsweep", "entityName": "team"}
    assert sum(b["type"] == "panel-grid" for b in report["spec"]["blocks"]) == 5


@pytest.mark.parametrize("extra_env", [{}, {"WANDB_API_KEY": FAKE_KEY, "WANDB_BASE_URL": "dead"}],
                         ids=["no credentials", "server does not answer"])
def test_dashboard_push_offline_is_one_clear_line_and_writes_nothing(tmp_path, extra_env):
    if extra_env.get("WANDB_BASE_URL") == "dead":
        extra_env = extra_env | {"WANDB_BASE_URL": f"http://127.0.0.1:{closed_port()}"}
    out = tmp_path / "dash"
    proc = headsweep("dashboard", "--entity", "team", "--project", "p", "--push", "--out", out,
                     env=clean_env(HOME=str(tmp_path), **extra_env))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("headsweep: error: --push: cannot reach W&B")
    assert not out.exists()


@pytest.mark.parametrize("args, key", [(["--entity", "a/b", "--project", "p"], "--entity"),
                                       (["--entity", "e", "--project", "has space"], "--project")])
def test_dashboard_bad_names_fail_before_anything_is_written(tmp_path, args, key):
    out = tmp_path / "dash"
    proc = headsweep("dashboard", *args, "--out", out, env=clean_env())  # no --push: nothing of HOME read
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and key in proc.stderr
    assert not out.exists()


# --- the report verb on bad input (pages: test_report_rebuilds_the_grid_report..., tests/e2e) ----------------------

@pytest.mark.parametrize("make", [lambda p: p.mkdir(), lambda p: None], ids=["empty dir", "missing dir"])
def test_report_of_something_else_is_one_line_exit_2_and_writes_nothing(tmp_path, make):
    target = tmp_path / "nothing"
    make(target)
    proc = headsweep("report", target, env=clean_env())
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "DIR" in proc.stderr
    assert not (target / "report.html").exists()


@pytest.mark.parametrize("files, kind", [(["result.json"], "train"), (["metrics.jsonl"], "train"),
                                         (["results.csv", "trials/a/metrics.jsonl"], "grid"),
                                         (["trials/a/metrics.jsonl"], "grid"),  # a grid still running
                                         (["trials.csv", "min_diversity.csv"], "search"),
                                         (["study.journal"], "search")])
def test_report_tells_the_verb_from_the_files_it_finds(tmp_path, files, kind):
    from dashboards.report import detect

    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert detect(tmp_path) == kind
