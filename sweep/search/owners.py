"""Several drivers (`headsweep search` processes, on one machine or many) may work on the same studies at once: the
same --out with its journal, or one --storage database. ("Trial" here is an Optuna trial throughout: one candidate's
evaluation.) Every trial records the driver that asked it (user attrs, written just after study.ask creates it), and
the rules below read that record the same way from every driver's side.
Only Optuna's public API is used, so resumable studies do not rest on its internals.

- A driver is its host, boot, pid and the process's start time (a reused pid is another driver). While it trains,
  it refreshes a heartbeat on its running trials every HEARTBEAT_S (Heartbeat).
- A RUNNING trial is live while its driver is: on this host (same boot), while that very process exists; on another
  host, while its heartbeat is younger than STALE_S. A RUNNING trial with no driver recorded is live for GRACE_S
  after it started: study.ask creates the trial and runs the sampler before its driver can be written. Any other
  RUNNING trial is a zombie (a killed driver's leftover, or a trial from before drivers were recorded): fail_zombies
  fails it and marks it on the study (zombies(): Optuna sets a trial's user attrs only through its own driver's
  Trial), and its candidate is asked again.
- STALE_S and GRACE_S compare this host's clock with another's (a heartbeat; a trial's start, which a database
  stores in its writer's local time): clocks must agree to well within them, and hosts sharing a database must
  share a time zone (a journal stores UTC).
- A study with a live trial of another driver is taken: one driver works on a study at a time, so drivers share a
  search slice by slice, and the others wait for its result. Drivers announce themselves in a Roster, and each asks
  in at most an even share of the free studies per round (its own slices first), leaving the rest to the others.
- Two drivers may still ask in one study at once, each having seen it free. Once study.ask has returned, ask() reads
  the earlier trials (by number) still running: each was asked before this one and is not finished, so the sampler
  chose this candidate without its result (a threshold sampler would choose the very same one). The new trial loses
  to any of them that a live other driver holds, one with no driver yet included (lost_to), is failed with `lost_to`
  and never trained. The earliest of a group of simultaneous asks sees none of the others as earlier, so one of them
  always goes ahead; the rule needs no lock. An earlier trial that finished between the sampler's read and ask()'s is
  missed: at worst its candidate is evaluated twice (a re-evaluation, with fresh seeds), never a wrong answer.
"""
from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import warnings
from functools import cache

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweep.storage.scratch import process_alive

DRIVER = "driver"  # user attr: {host, boot, pid, started} of the driver that asked the trial
HEARTBEAT = "heartbeat"  # user attr: when (epoch seconds) the driver last said it is alive
LOST_TO = "lost_to"  # user attr of a failed trial: the number of the earlier trial that went ahead instead
ZOMBIE = "zombie"  # study user attr "zombie <number>": that trial's driver died while it ran
HEARTBEAT_S = 30.0  # a driver refreshes its running trials' heartbeat this often
STALE_S = 600.0  # a trial of another host is a zombie once its heartbeat is this old (clocks must agree to ~minutes)
# A trial goes without a driver only while study.ask samples it (milliseconds; a TPE with many trials, a second):
# two minutes leave room for a loaded machine and for clocks a minute apart, and a dead driver's leftover that is
# driverless (killed in that moment) keeps its study waiting no longer than that.
GRACE_S = 120.0


@cache
def _boot_id() -> str:
    """The kernel's id of this boot: after a reboot, the pids recorded before it name nothing."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None if there is no such process. Without /proc (not
    Linux), 0 for any process that exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])  # field 22; the name before ')' may hold spaces
    except FileNotFoundError:
        return None
    except OSError:  # no /proc
        return 0 if process_alive(pid) else None


def driver(pid: int | None = None) -> dict:
    """The identity of this process (or of the process `pid` on this host), as trials record it."""
    pid = pid or os.getpid()
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": pid, "started": _start_ticks(pid)}


def alive(trial: FrozenTrial, now: float | None = None) -> bool:
    """Whether the driver of a RUNNING trial is still there (see the module docstring)."""
    now = now or time.time()
    if DRIVER not in trial.user_attrs:
        return now - trial.datetime_start.timestamp() < GRACE_S  # datetime_start: naive, in this host's local time
    return _alive(trial.user_attrs[DRIVER], trial.user_attrs.get(HEARTBEAT, 0.0), now)


def _alive(owner: dict, heartbeat: float, now: float | None = None) -> bool:
    here = driver()
    if (owner["host"], owner["boot"]) == (here["host"], here["boot"]):
        started = _start_ticks(owner["pid"])
        return started is not None and started == owner["started"]
    return (now or time.time()) - heartbeat < STALE_S


def mine(trial: FrozenTrial, me: dict | None = None) -> bool:
    return trial.user_attrs.get(DRIVER) == (me or driver())


def fail_zombies(study: optuna.Study, mine_too: bool = False) -> list[int]:
    """Fail the RUNNING trials whose driver is gone, and with mine_too this process's own (their candidates are
    asked again); returns their numbers."""
    failed, me = [], driver()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if alive(trial) and not (mine_too and mine(trial, me)):
            continue
        fail_as_zombie(study, trial.number)
        failed.append(trial.number)
    return failed


def fail_as_zombie(study: optuna.Study, number: int) -> None:
    """Fail a RUNNING trial so that its candidate is asked again with the same seeds (zombies())."""
    # Marked before it is failed: a driver killed in between leaves a marked RUNNING trial, a zombie still.
    study.set_user_attr(f"{ZOMBIE} {number}", True)
    try:  # skip_if_finished: another driver failed it first
        study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
    except optuna.exceptions.UpdateFinishedTrialError:  # another driver failed it between tell's read and write
        pass


def zombies(study: optuna.Study) -> set[int]:
    """The numbers of the study's trials that fail_zombies failed."""
    return {int(key.split()[1]) for key in study.user_attrs if key.startswith(f"{ZOMBIE} ")}


def taken(study: optuna.Study, me: dict | None = None) -> bool:
    """A live driver other than this one has a trial running in the study: leave the study to it for now."""
    me = me or driver()
    return any(not mine(t, me) and alive(t) for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def ask(study: optuna.Study, distributions: dict, chosen: dict | None = None,
        me: dict | None = None) -> tuple[optuna.Trial, list[FrozenTrial]]:
    """study.ask(distributions), the `chosen` params fixed (a one-knob sampler chose its value before asking; Optuna's
    PartialFixedSampler, its documented way to fix some params), with this driver recorded on the trial, and the
    earlier trials still running once it was asked (what the candidate was chosen without; lost_to)."""
    sampler = study.sampler
    if chosen:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.sampler = optuna.samplers.PartialFixedSampler(chosen, sampler)
    try:
        trial = study.ask(distributions)
    finally:
        study.sampler = sampler
    trial.set_user_attr(HEARTBEAT, time.time())  # first: a driver without a heartbeat would look long gone
    trial.set_user_attr(DRIVER, me or driver())
    in_flight = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if t.number < trial.number]
    return trial, in_flight


def last_mine(study: optuna.Study, me: dict | None = None) -> bool:
    """The study's latest trial is this driver's (it keeps the slice it has been working on)."""
    trials = [t for t in study.get_trials(deepcopy=False) if DRIVER in t.user_attrs]
    return bool(trials) and mine(trials[-1], me)


def lost_to(in_flight: list[FrozenTrial], me: dict | None = None) -> FrozenTrial | None:
    """The earlier running trial of a live other driver that a new trial gives way to (see ask), or None."""
    me = me or driver()
    return next((t for t in in_flight if not mine(t, me) and alive(t)), None)


class Roster:
    """The drivers at work on a search: each announces itself (with a heartbeat) in a user attr of one of its studies
    (the first slice's), so each can take an even share of the free studies. Only a matter of balance: correctness
    never rests on the roster."""

    def __init__(self, study: optuna.Study, me: dict | None = None):
        self.study, self.me, self.announced = study, me or driver(), -STALE_S
        self.key = "driver {host} {pid} {started}".format(**self.me)

    def announce(self) -> None:
        """Say this driver is at work (at most every HEARTBEAT_S / 2; the journal keeps every write)."""
        if time.time() - self.announced >= HEARTBEAT_S / 2:
            self.announced = time.time()
            self.study.set_user_attr(self.key, {DRIVER: self.me, HEARTBEAT: self.announced})

    def live(self) -> int:
        """How many drivers are at work, this one included."""
        entries = [v for k, v in self.study.user_attrs.items() if k.startswith("driver ") and k != self.key]
        return 1 + sum(_alive(e[DRIVER], e[HEARTBEAT]) for e in entries)


class Heartbeat:
    """A daemon thread that refreshes the heartbeat of this driver's running trials every HEARTBEAT_S, so drivers on
    other hosts can tell a slow trial from a dead driver's. add() a trial when it is asked, discard() it before it is
    told."""

    def __init__(self, roster: Roster | None = None, interval: float = HEARTBEAT_S):
        self.trials: set[optuna.Trial] = set()  # the Trial objects themselves: numbers repeat across studies
        self.roster = roster
        self.lock, self.stopped, self.interval = threading.Lock(), threading.Event(), interval
        self.thread = threading.Thread(target=self._run, name="headsweep-heartbeat", daemon=True)
        self.thread.start()

    def add(self, trial: optuna.Trial) -> None:
        with self.lock:
            self.trials.add(trial)

    def discard(self, trial: optuna.Trial) -> None:
        with self.lock:
            self.trials.discard(trial)

    def stop(self) -> None:
        self.stopped.set()

    def fail_all(self) -> None:
        """Fail this driver's trials in training (it is being stopped): a driver on another host resumes them at once
        instead of waiting STALE_S for their heartbeat to age. Best effort: the storage may be what failed."""
        with self.lock:
            for trial in list(self.trials):
                with contextlib.suppress(Exception):
                    fail_as_zombie(trial.study, trial.number)
            self.trials.clear()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            if self.roster:
                self.roster.announce()
            with self.lock:
                for trial in list(self.trials):
                    try:
                        trial.set_user_attr(HEARTBEAT, time.time())
                    except optuna.exceptions.UpdateFinishedTrialError:  # failed by another driver meanwhile
                        self.trials.discard(trial)
