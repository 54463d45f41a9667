"""examples/slurm/headsweep.sbatch submitted to a real Slurm: Debian's slurm-wlm and munge, one controller and one node
on 127.0.0.1, started by the module fixture from a private slurm.conf and munge key, each daemon in its own session.

The script runs as it would on a cluster (sbatch copies it to the node's spool; srun starts the Ray head step), except
HEADSWEEP_HEAD_IP=127.0.0.1: a single-node Ray that listens on loopback only. Every test checks that nothing of the
job's Ray is left once the job has ended: no process naming the job's private dir or carrying its SLURM_JOB_ID.

Why not `sbatch --wait`: it polls the job after 2, 8, then every 32 s (a 12 s job returned after 42 s), so the tests
poll `scontrol show job` themselves. ProctrackType=proctrack/pgid: Slurm then kills only each task's process group
when a step ends, and Ray's workers sit in groups of their own, so a leftover here is one the script and Ray missed
(clusters track with cgroups, which would hide it).
"""
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import psutil
import pytest

from tests.e2e.conftest import alive, free_ports, log_tail, mentioning

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "slurm" / "headsweep.sbatch"
DAEMONS = {"munged": "/usr/sbin/munged", "slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd",
           "sbatch": "/usr/bin/sbatch", "scontrol": "/usr/bin/scontrol", "scancel": "/usr/bin/scancel"}
NODE = "localhost"
NODE_CPUS = 2  # a job asks for all of them (2 trials at a time) or for 1, leaving room for a second job
START_TIMEOUT_S = 60
JOB_TIMEOUT_S = 300
TERMINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
                   "PREEMPTED"}


@dataclass
class Slurm:
    """A running controller + node. `env` is a client's environment (sbatch, scontrol), also what a job gets."""
    base: Path
    cluster: str
    env: dict
    daemons: dict  # name -> Popen, each the leader of its own session

    def run(self, *args, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(map(str, args)), env=self.env, capture_output=True, text=True, timeout=timeout)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{log_tail(p, 30)}" for p in sorted(self.base.glob("*.log")))


@dataclass
class Job:
    id: str
    output: Path
    tmp: str  # the script's private dir on the node: its token and Ray's temp dir

    def text(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""


def slurm_conf(base: Path, cluster: str, ctld_port: int, slurmd_port: int, munge_socket: Path) -> str:
    # JobRequeue=0, as at many sites: a job is requeueable only by the script's own `#SBATCH --requeue`.
    first_job_id = secrets.randbelow(50_000_000) + 1_000_000  # /tmp/headsweep-<id> must not collide with another run
    return f"""\
ClusterName={cluster}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd.pid
SlurmctldLogFile={base}/slurmctld.log
SlurmdLogFile={base}/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
JobRequeue=0
FirstJobId={first_job_id}
SlurmdParameters=config_overrides
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def start_daemon(base: Path, name: str, cmd: list[str], env: dict) -> subprocess.Popen:
    with open(base / f"{name}.log", "ab") as log:  # its stderr; slurmd/slurmctld also write their LogFile beside it
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=base)


def wait_until(ready, what: str, slurm: Slurm) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        dead = [name for name, p in slurm.daemons.items() if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            pytest.fail(f"{what}: not ready within {START_TIMEOUT_S} s (exited: {dead})\n{slurm.logs()}")
        time.sleep(0.25)


@pytest.fixture(scope="module")
def slurm():
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("Slurm's daemons run as root here (SlurmUser=root): run the tests as root")
    missing = [path for path in DAEMONS.values() if not os.access(path, os.X_OK)]
    if missing:
        pytest.skip(f"no {', '.join(missing)}: `bash tests/install_debian_packages.sh` (what `make test` runs) "
                    "installs slurm-wlm and munge")
    if (os.cpu_count() or 1) < NODE_CPUS:
        pytest.skip(f"the test node has {NODE_CPUS} CPUs and this machine fewer")
    base = Path(tempfile.mkdtemp(prefix="hsslurm-", dir="/tmp"))
    base.chmod(0o755)  # munged wants its socket's directory searchable by all
    for sub in ("state", "spool", "runs"):
        (base / sub).mkdir()
    key = base / "munge.key"
    key.touch(mode=0o600)
    key.write_bytes(secrets.token_bytes(1024))
    socket_path = base / "munge.socket"
    cluster = f"hstest{secrets.token_hex(3)}"
    ctld_port, slurmd_port = free_ports(2)
    conf = base / "slurm.conf"
    conf.write_text(slurm_conf(base, cluster, ctld_port, slurmd_port, socket_path))
    # The marker in every daemon's environment (slurmstepd inherits slurmd's) and every job's (sbatch passes the
    # submitter's on): whatever this fixture started carries it, wherever it ended up.
    marker = {"HEADSWEEP_TEST_SLURM": str(base)}
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "RAY_"))}
    daemon_env = {**clean, **marker, "SLURM_CONF": str(conf)}
    slurm = Slurm(base=base, cluster=cluster, daemons={}, env={
        **daemon_env, "HEADSWEEP_VENV": sys.prefix, "HEADSWEEP_HEAD_IP": "127.0.0.1", "OMP_NUM_THREADS": "1",
        "WANDB_MODE": "offline"})
    try:
        slurm.daemons["munged"] = start_daemon(base, "munged", [
            DAEMONS["munged"], "--foreground", f"--socket={socket_path}", f"--key-file={key}",
            f"--pid-file={base}/munged.pid", f"--seed-file={base}/munged.seed"], daemon_env)
        wait_until(lambda: subprocess.run(["munge", "-n", "-S", str(socket_path)], capture_output=True).returncode == 0,
                   "munged", slurm)
        slurm.daemons["slurmctld"] = start_daemon(base, "slurmctld", [DAEMONS["slurmctld"], "-D", "-f", str(conf)],
                                                  daemon_env)
        wait_until(lambda: "is UP" in slurm.run("scontrol", "ping").stdout, "slurmctld", slurm)
        slurm.daemons["slurmd"] = start_daemon(base, "slurmd", [DAEMONS["slurmd"], "-D", "-N", NODE, "-f", str(conf)],
                                               daemon_env)
        wait_until(lambda: slurm.run("sinfo", "-h", "-n", NODE, "-o", "%T").stdout.strip() == "idle", "slurmd", slurm)
        yield slurm
    finally:
        survivors = stop_slurm(slurm)
        assert not survivors, f"processes of the test's Slurm outlived its daemons: {survivors}"


def stop_slurm(slurm: Slurm) -> list[str]:
    """Cancel what still runs, stop the daemons by their own process groups (slurmd, slurmctld, munged), then SIGKILL
    anything left that carries the fixture's marker or names its dir. Returns what was left (expected: none)."""
    if "slurmd" in slurm.daemons and slurm.daemons["slurmd"].poll() is None:
        for job_id in slurm.run("squeue", "-h", "-o", "%i").stdout.split():
            slurm.run("scancel", job_id)
        deadline = time.monotonic() + 60
        while slurm.run("squeue", "-h", "-o", "%i").stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.5)
    for name in ("slurmd", "slurmctld", "munged"):
        process = slurm.daemons.get(name)
        if process is None:
            continue
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=20)
    # Expected: nothing (slurmstepd and the jobs' processes ended with the jobs). Whatever is there is killed, and
    # named.
    left = alive(psutil.wait_procs(marked(str(slurm.base)) + mentioning(str(slurm.base)), timeout=10)[1])
    survivors = [describe(p) for p in left]
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=10)
    shutil.rmtree(slurm.base, ignore_errors=True)
    return survivors


def marked(base: str) -> list[psutil.Process]:
    """Live processes whose environment carries the fixture's marker."""
    return [p for p in live_processes() if environ(p).get("HEADSWEEP_TEST_SLURM") == base]


def live_processes() -> list[psutil.Process]:
    result = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.pid != os.getpid():
                result.append(p)
        except psutil.Error:
            pass
    return result


def environ(p: psutil.Process) -> dict:
    try:
        return p.environ()
    except psutil.Error:
        return {}


def describe(p: psutil.Process) -> str:
    try:
        return f"{p.pid} {' '.join(p.cmdline())[:160]}"
    except psutil.Error:
        return f"{p.pid} (gone)"


def submit(slurm: Slurm, *args: str, cpus: int = NODE_CPUS) -> Job:
    """sbatch the example script by its real path, on the one node (all its CPUs by default), from the checkout."""
    proc = slurm.run("sbatch", "--parsable", "--nodes=1", f"--cpus-per-task={cpus}", "--time=10",
                     f"--output={slurm.base}/job-%j.out", f"--chdir={ROOT}", SCRIPT, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr + slurm.logs()
    job_id = proc.stdout.strip().split(";")[0]
    return Job(id=job_id, output=slurm.base / f"job-{job_id}.out", tmp=f"/tmp/headsweep-{job_id}")


def job_fields(slurm: Slurm, job: Job) -> dict:
    proc = slurm.run("scontrol", "show", "job", "-o", job.id)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(field.split("=", 1) for field in proc.stdout.split() if "=" in field)


def wait_for_end(slurm: Slurm, job: Job) -> dict:
    """Poll scontrol until the job is over (COMPLETING counts as not over: its processes are still being killed)."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while (fields := job_fields(slurm, job))["JobState"] not in TERMINAL_STATES:
        if time.monotonic() > deadline:
            slurm.run("scancel", job.id)
            pytest.fail(f"job {job.id} still {fields['JobState']} after {JOB_TIMEOUT_S} s\n{job.text()[-4000:]}")
        time.sleep(0.5)
    return fields


def wait_for(condition, what: str, slurm: Slurm, job: Job) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not condition():
        state = job_fields(slurm, job)["JobState"]
        if state in TERMINAL_STATES or time.monotonic() > deadline:
            pytest.fail(f"job {job.id} ({state}): no {what}\n{job.text()[-4000:]}")
        time.sleep(0.25)


def leftovers(slurm: Slurm, job: Job) -> list[str]:
    """What is left of the job a few seconds after it ended: processes naming its private dir, carrying its id, or its
    slurmstepd; and the private dir itself."""
    def of_job(p: psutil.Process) -> bool:
        env = environ(p)
        try:
            cmdline = p.cmdline()
        except psutil.Error:
            return False
        return (any(f"{job.tmp}/" in f"{arg}/" for arg in cmdline)
                or (env.get("SLURM_JOB_ID") == job.id and env.get("SLURM_CLUSTER_NAME") == slurm.cluster)
                or bool(cmdline) and cmdline[0].startswith(f"slurmstepd: [{job.id}."))

    found = [p for p in live_processes() if of_job(p)]
    left = [describe(p) for p in alive(psutil.wait_procs(found, timeout=15)[1])]
    return left + ([job.tmp] if os.path.exists(job.tmp) else [])


def test_two_grids_submitted_with_sbatch_share_the_node_each_on_its_own_ray_and_leave_nothing(slurm):
    # 1 CPU each on the 2-CPU node: Slurm runs both jobs at once, so their Rays must not collide (ports, temp dirs).
    # One seed: 4 points each, and an override passed through the script to headsweep.
    outs = [slurm.base / "runs" / name for name in ("grid_a", "grid_b")]
    jobs = [submit(slurm, "grid", "configs/debug_grid.yaml", "sweep.seeds=[0]", "--out", str(out), cpus=1)
            for out in outs]
    fields = [wait_for_end(slurm, job) for job in jobs]

    for job, out, done in zip(jobs, outs, fields):
        text = job.text()
        assert (done["JobState"], done["ExitCode"]) == ("COMPLETED", "0:0"), text[-4000:]
        frame = pd.read_csv(out / "results.csv")
        assert len(frame) == 4 and set(frame["status"]) == {"completed"}, frame  # 2 x 2 points, 1 seed
        assert "4 members: 4 completed" in text
        # The head came up in an srun step of the job, on loopback, with token auth, and the driver joined it.
        assert re.search(rf"Ray head up on {NODE} at 127\.0\.0\.1:\d+ with token auth \(RAY_AUTH_MODE=token, token in "
                         rf"{NODE}:{job.tmp}/auth_token\)", text), text[-4000:]
        assert "Local node IP: 127.0.0.1" in re.sub(r"\x1b\[[0-9;]*m", "", text)  # Ray's own line, colours stripped
        assert f"1 CPUs each; running headsweep grid configs/debug_grid.yaml sweep.seeds=[0] --out {out}" in text
        assert "stopping this job's Ray" in text and "done, exit code 0" in text
        assert not leftovers(slurm, job)
    first, second = fields
    assert first["StartTime"] < second["EndTime"] and second["StartTime"] < first["EndTime"]  # they ran together


def test_a_driver_that_fails_still_stops_the_jobs_ray_and_fails_the_job(slurm):
    out = slurm.base / "runs" / "bad"
    job = submit(slurm, "grid", "configs/debug_grid.yaml", "no_such.key=1", "--out", str(out))
    fields = wait_for_end(slurm, job)
    text = job.text()

    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "2:0"), text[-4000:]
    assert "Ray head up on" in text  # Ray had started: the refusal came from the driver, on the cluster
    assert "headsweep: error: no_such: unknown key" in text
    assert "stopping this job's Ray" in text and "done, exit code 2" in text
    assert not out.exists()
    assert not leftovers(slurm, job)


def test_a_running_jobs_ray_answers_only_its_token_and_scancel_stops_it(slurm):
    out = slurm.base / "runs" / "cancelled"
    job = submit(slurm, "grid", "configs/debug_grid.yaml", "--out", str(out))
    dashboard = []

    def head_up() -> bool:
        found = re.search(r"Ray head up on .* then (http://127\.0\.0\.1:\d+)", job.text())
        dashboard[:] = [found.group(1)] if found else []
        return bool(found)

    wait_for(head_up, "'Ray head up' line", slurm, job)
    token_file = Path(job.tmp) / "auth_token"
    assert (token_file.stat().st_mode & 0o777, Path(job.tmp).stat().st_mode & 0o777) == (0o600, 0o700)
    token = token_file.read_text()
    wait_for(lambda: http_status(dashboard[0] + "/api/version", token) == 200, "dashboard answer", slurm, job)
    assert http_status(dashboard[0] + "/api/version", None) == 401  # no token: refused
    assert http_status(dashboard[0] + "/api/version", "0" * len(token)) in (401, 403)  # another token: refused

    wait_for(lambda: (out / "trials").exists(), "trial started", slurm, job)  # the driver is running its trials
    assert slurm.run("scancel", job.id).returncode == 0
    fields = wait_for_end(slurm, job)
    assert fields["JobState"] == "CANCELLED", job.text()[-4000:]
    assert "stopping this job's Ray" in job.text()
    assert not leftovers(slurm, job)


def test_a_requeued_job_resumes_its_grid_and_trains_no_finished_trial_again(slurm):
    # `scontrol requeue` does to a running job what preemption with PreemptMode=REQUEUE does: SIGCONT and SIGTERM to
    # all of it, back to PENDING, then the same script again, same job id, same arguments (the header's --requeue).
    # Four points (one seed), one member per trial and one trial at a time, each 1-2 s of training here (n_samples):
    # once the first has finished, the requeue's SIGTERM (well under a second later) finds three still to train, 3-6 s
    # of work.
    out = slurm.base / "runs" / "requeued"
    job = submit(slurm, "grid", "configs/debug_grid.yaml", "sweep.seeds=[0]", "sweep.max_concurrent=1", "sweep.pack=1",
                 "model.n_samples_V=131072", "model.n_samples_KQ=131072", "--out", str(out))
    wait_for(lambda: finished(out), "finished trial", slurm, job)
    requeue = slurm.run("scontrol", "requeue", job.id)
    assert requeue.returncode == 0, requeue.stdout + requeue.stderr + slurm.logs()
    # Slurm holds a requeued job back for 2 minutes (its begin time); once the first run is gone and the job pending,
    # what it finished is on disk for good, and the job may start again at once.
    wait_for(lambda: job_fields(slurm, job)["JobState"] == "PENDING" or "requeued, restart 1" in job.text(),
             "first run's end", slurm, job)
    before = finished(out)
    slurm.run("scontrol", "update", f"JobId={job.id}", "StartTime=now")  # fails harmlessly if it already started
    fields = wait_for_end(slurm, job)
    text = job.text()

    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("COMPLETED", "0:0", "1"), text[-4000:]
    # One output, appended to (--open-mode=append): the first run stopped by the requeue, then the second run.
    restart = "requeued, restart 1: the sweep resumes from its --out"
    assert text.count(restart) == 1, text[-4000:]
    first, second = text.split(restart)
    assert "headsweep: stopped (SIGTERM)" in first and "done, exit code 143" in first, first[-4000:]
    assert "Ray cluster up" in second and "done, exit code 0" in second
    # The second run found the first run's trials finished, trained the others, and never the first run's again.
    assert 1 <= len(before) < 4, before
    assert f"debug_grid  {len(before)}/4 trained" in second, second[-4000:]
    after = finished(out)
    assert len(after) == 4 and {name: after[name] for name in before} == before, (before, after)
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 4 and set(frame["status"]) == {"completed"}, frame
    assert "4 members: 4 completed" in second
    # Each run had its own private dir (a requeued run keeps the job id): neither, nor anything of either, is left.
    assert not leftovers(slurm, job) and not leftovers(slurm, replace(job, tmp=f"{job.tmp}-1"))


def http_status(url: str, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0  # not listening yet


def finished(out: Path) -> dict[str, int]:
    """Trial dir name -> its result.json's mtime (ns), for every finished trial of a grid's --out."""
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "trials").glob("*/result.json")}
