"""`ray job submit` against a real head with token auth: blocking, --no-wait + polling, refusal without the
token, and a head that lost a process named in its diagnosis and replaced."""
import json
import subprocess
import sys
import time
import uuid

import pytest

from tests.e2e import conftest
from tests.e2e.conftest import RAY_HEAD_CPUS, STOP_TIMEOUT_S, head_processes

PROBE = ("import os, ray; ray.init(); "
         "print('probe', os.environ['HEADSWEEP_PROBE'], ray.cluster_resources()['CPU'])")
RUNTIME_ENV = json.dumps({"env_vars": {"HEADSWEEP_PROBE": "1"}})
JOB_TIMEOUT_S = 50


def test_blocking_submit_streams_the_job_output(ray_head):
    # RAY_API_SERVER_ADDRESS and RAY_ADDRESS override --address in the jobs CLI: leave them out to test the flag.
    env = {k: v for k, v in ray_head.client_env().items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    proc = ray_head.ray("job", "submit", "--address", ray_head.dashboard_url, "--runtime-env-json", RUNTIME_ENV,
                        "--", sys.executable, "-c", PROBE, env=env, timeout=JOB_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout
    assert f"probe 1 {float(RAY_HEAD_CPUS)}" in proc.stdout, proc.stdout  # the runtime env's variable; the head's CPUs
    assert "succeeded" in proc.stdout


def test_no_wait_submit_then_status_and_logs(ray_head, monkeypatch):
    from ray.job_submission import JobStatus, JobSubmissionClient

    job_id = f"headsweep-probe-{uuid.uuid4().hex[:8]}"
    proc = ray_head.ray("job", "submit", "--no-wait", "--submission-id", job_id, "--runtime-env-json", RUNTIME_ENV,
                        "--", sys.executable, "-c", PROBE)
    assert proc.returncode == 0, proc.stdout
    assert f"Job '{job_id}' submitted successfully" in proc.stdout, proc.stdout

    # The Python client in this process: no RAY_AUTH_MODE here, so pass the token as a header (it is sent as is).
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):  # they would override the address argument
        monkeypatch.delenv(var, raising=False)
    client = JobSubmissionClient(ray_head.dashboard_url, headers={"Authorization": f"Bearer {ray_head.token}"})
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while (status := client.get_job_status(job_id)) not in (JobStatus.SUCCEEDED, JobStatus.FAILED,
                                                            JobStatus.STOPPED):
        assert time.monotonic() < deadline, f"job still {status} after {JOB_TIMEOUT_S} s"
        time.sleep(0.5)
    assert status == JobStatus.SUCCEEDED, client.get_job_logs(job_id)

    status_cli = ray_head.ray("job", "status", job_id)
    assert status_cli.returncode == 0 and f"Job '{job_id}' succeeded" in status_cli.stdout, status_cli.stdout
    logs = ray_head.ray("job", "logs", job_id)
    assert logs.returncode == 0 and f"probe 1 {float(RAY_HEAD_CPUS)}" in logs.stdout, logs.stdout


def test_a_driver_outside_the_cluster_connects_with_the_fixture_env(ray_head):
    # What `headsweep grid` run directly on the head machine (not as a job) would do: ray.init() via RAY_ADDRESS.
    code = ("import ray; ray.init(); "
            "print('tasks', ray.get(ray.remote(lambda: 7).remote()), ray.cluster_resources()['CPU'])")
    proc = subprocess.run([sys.executable, "-c", code], env=ray_head.client_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=JOB_TIMEOUT_S)
    assert proc.returncode == 0 and f"tasks 7 {float(RAY_HEAD_CPUS)}" in proc.stdout, proc.stdout


def test_clients_without_the_token_are_refused(ray_head, tmp_path):
    assert ray_head.get("/api/jobs/") == 401  # no token
    assert ray_head.get("/api/jobs/", token="0" * 64) == 403  # wrong token
    assert ray_head.get("/api/jobs/", token=ray_head.token) == 200

    # HOME without ~/.ray/auth_token, so nothing is picked up from the machine's default token file.
    no_token = {**ray_head.client_env(HOME=str(tmp_path)), "RAY_AUTH_MODE": "token"}
    del no_token["RAY_AUTH_TOKEN_PATH"]
    token_without_mode = {**ray_head.client_env(HOME=str(tmp_path))}
    del token_without_mode["RAY_AUTH_MODE"]  # Ray 2.60 then sends no token at all, even though it could read one
    for env, expected in ((no_token, "couldn't find an authentication token"),  # the client gives up by itself
                          (token_without_mode, "Missing authentication token")):  # the server says 401
        proc = ray_head.ray("job", "list", env=env)
        assert proc.returncode != 0 and "AuthenticationError" in proc.stdout and expected in proc.stdout, proc.stdout


def test_a_head_that_loses_a_process_is_diagnosed_and_replaced(ray_head, request):
    # Last in this file: it ends the shared head. `ray start --block` takes the whole head down when one of its
    # processes dies (CI, 2026-12-02: five tests failed on one head, their reports silent on why).
    dashboard = next(p for p in head_processes(ray_head) if "dashboard/dashboard.py" in " ".join(p.cmdline()))
    dashboard.kill()
    ray_head.process.wait(timeout=STOP_TIMEOUT_S)
    diagnosis = ray_head.diagnosis()
    assert "Some Ray subprocesses exited unexpectedly" in diagnosis and "dashboard [exit code=-9" in diagnosis, \
        diagnosis

    # The conftest pytest loaded holds the shared head, not the copy `from tests.e2e.conftest import` gives a test.
    loaded = next(m for m in request.config.pluginmanager.get_plugins()
                  if getattr(m, "__file__", None) == conftest.__file__)
    with pytest.warns(UserWarning, match="shared ray head had died"):
        replacement = loaded.shared_head()
    assert replacement is not ray_head and replacement.get("/api/jobs/", replacement.token) == 200
