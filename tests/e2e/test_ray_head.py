"""`ray job submit` against a real head with token auth: blocking, --no-wait + polling, and refusal without the
token."""
import json
import subprocess
import sys
import time
import uuid

from tests.e2e.conftest import RAY_HEAD_CPUS

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
