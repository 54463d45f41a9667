"""bench/gpu.py, the GPU benchmark of issue [gpu], in its tiny mode on the CPU (P = 1, 2, a few steps), so that it
cannot rot between the runs a GPU gets; and its table going on past a row that fails."""
import json

import pytest
import torch

from bench import gpu


def test_the_tiny_mode_measures_every_model_at_every_member_count(tmp_path, capsys):
    rows = gpu.main(["--tiny", "--out", str(tmp_path)])
    eager = {(row["model"], row["P"]): row for row in rows if row["mode"] == "eager"}
    assert set(eager) == {(model, P) for model in gpu.BENCHED for P in (1, 2)}
    for row in eager.values():
        assert row.get("status", "ok") == "ok", row
        assert row["steps/s"] > 0 and row["member-steps/s"] == row["steps/s"] * row["P"] and row["x alone"] > 0
        assert row["trainings/h"] > 0 and row["estimate MiB"] > 0 and "peak MiB" not in row  # measured on cuda only
        assert row["ops/step"] > 0 and row["syncs/step"] == 0
    assert {row["status"] for row in rows if row["mode"] == "cuda graphs"} == {"n/a (cpu)"}
    assert json.loads((tmp_path / "gpu.json").read_text())["rows"] == rows
    table = (tmp_path / "gpu.md").read_text()
    assert all(f"| {model} | 2 | eager |" in table for model in gpu.BENCHED)
    assert "| regression transformer | 2 | eager |" in capsys.readouterr().out  # printed as measured too


def test_a_row_out_of_memory_skips_larger_packs_and_an_error_ends_only_its_row(tmp_path, monkeypatch):
    def measure(cfgs, *args, **kwargs):  # cfgs: the config's name, once per member (members below)
        if cfgs[0] == "quickstart.yaml" and len(cfgs) > 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if len(cfgs) > 1:
            raise RuntimeError("an error\nits second line")
        return {"steps/s": 10.0, "training_steps": 2, "estimate MiB": 1.0}

    monkeypatch.setattr(gpu, "members", lambda name, overrides, count, device, mode: [name] * count)
    monkeypatch.setattr(gpu, "measure", measure)
    rows = gpu.main(["--tiny", "--members", "1", "2", "3", "--out", str(tmp_path)])
    status = {(row["model"], row["P"]): row.get("status", "ok") for row in rows if row["mode"] == "eager"}
    assert [status["one-step", P] for P in (1, 2, 3)] == ["ok", "OOM", "skipped (OOM at P=2)"]
    assert status["trigger-copy transformer", 3] == "RuntimeError: an error"
    assert "OutOfMemoryError" in (tmp_path / "errors.txt").read_text()


def test_the_schedule_check_runs_on_the_cpu_and_packed_members_end_as_alone():
    """bench/schedule_on_gpu.py, small, on the CPU (so it cannot rot before the next GPU run)."""
    from bench import schedule_on_gpu

    measured = schedule_on_gpu.main(["--device", "cpu", "--steps", "24"])
    assert measured["lr"] == measured["lr_expected"] > 0
    for rows in measured["rows"].values():
        assert rows["packed"] == pytest.approx(rows["alone"], abs=1e-4) == rows["alone on cpu"]
