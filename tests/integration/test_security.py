"""What a run writes never carries a secret or runs what it reads: the W&B API key stays out of every output and
W&B file, config strings are escaped in report.html, and a checkpoint that would run code when loaded is refused.
(Storage URL passwords: tests/integration/test_concurrent_search.py and test_postgres_storage.py; Ray's binding
and token: tests/integration/test_local_ray.py.)"""
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from sweep.storage.copies import load_state
from tests.conftest import CONFIGS
from tests.integration.conftest import headsweep

SECRET = "hs-test-secret-0123456789abcdef0123456789abcdef"
AWS_SECRET = "hs-test-aws-secret-0123456789abcdef0123456789"
HOSTILE_NAME = '<img src=x onerror="alert(1)">'


def every_file(root: Path):
    return [p for p in root.rglob("*") if p.is_file()]


def test_a_run_keeps_the_wandb_key_out_of_its_files_and_escapes_config_strings(tmp_path):
    out, wandb_dir = tmp_path / "out", tmp_path / "wandb"
    env = os.environ | {"WANDB_API_KEY": SECRET, "WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir)}
    proc = headsweep("train", CONFIGS / "debug.yaml", f"name={HOSTILE_NAME}", "logging.wandb=true",
                     "optim.max_steps=100", "--out", out, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = every_file(out) + every_file(wandb_dir)
    assert any(p.suffix == ".wandb" for p in written)  # the offline run was really written
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in proc.stdout + proc.stderr
    report = (out / "report.html").read_text()
    assert HOSTILE_NAME not in report and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in report


def test_a_grid_keeps_the_wandb_and_aws_keys_out_of_its_files_and_ray_logs_and_escapes_config_strings(tmp_path):
    """Through Ray: the driver's environment reaches the trials' workers; the keys must reach no trial file, W&B run,
    Ray log or report. (Tune copies the driver's AWS variables into every trial actor's runtime environment, which
    Ray's runtime_env_agent.log prints on every node: sweep/tuner.py stops that.)"""
    out = tmp_path / "out"
    ray_tmp = Path(tempfile.mkdtemp(prefix="hs-ray-"))  # a short path: Ray's sockets live under it
    try:
        env = os.environ | {"WANDB_API_KEY": SECRET, "WANDB_MODE": "offline", "RAY_TMPDIR": str(ray_tmp),
                            "AWS_ACCESS_KEY_ID": "AKIAHEADSWEEPTESTS00", "AWS_SECRET_ACCESS_KEY": AWS_SECRET}
        proc = headsweep("grid", CONFIGS / "debug_grid.yaml", f"name={HOSTILE_NAME}", "logging.wandb=true",
                         "sweep.seeds=[0]", "sweep.axes=[{key: task.lengths.high, values: [6]}]", "--out", out,
                         env=env, own_ray=True)  # a Ray of its own, whose files are under ray_tmp
        assert proc.returncode == 0, proc.stderr[-3000:]
        written = every_file(out) + every_file(ray_tmp)
        assert any(p.suffix == ".wandb" for p in written) and any("session" in str(p) for p in written)
        assert not [p for p in written if SECRET.encode() in p.read_bytes() or AWS_SECRET.encode() in p.read_bytes()]
        assert SECRET not in proc.stdout + proc.stderr and AWS_SECRET not in proc.stdout + proc.stderr
        report = (out / "report.html").read_text()
        assert HOSTILE_NAME not in report and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in report
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


class RunsCode:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.save({"members": {0: {"step": 1, "payload": RunsCode()}}}, tmp_path / "state.pt")
    with pytest.raises(pickle.UnpicklingError):
        load_state(tmp_path / "state.pt")
    assert not (tmp_path / "pwned").exists()
