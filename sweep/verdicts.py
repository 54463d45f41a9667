"""The sweep's verdict rule: training stops once its verdict is known (`search.stop`, `sweep.stop`).

A threshold search needs each candidate's verdict, not its full training curve. Two things settle it early:
- a member whose success metric has passed the threshold at `streak` evaluations in a row stops as a success
  (status "succeeded"); its result is that last evaluation;
- the seeds of one candidate form a group that needs `needed` of its `size` seeds to succeed: once that many have
  succeeded, or too many have failed for it to be reachable, the group's other seeds stop (status "verdict_known")
  where they are, or before they start.
A seed stopped because its group was decided has no verdict of its own: the search counts it as not passing
(sweep/search/loop.py tell()), so each evaluation's verdict is the one its seeds decided.

The driver writes each member's Rule into its trial's plan (a member dict's "verdict", from rule_per_point); the
trial gets `stopper_of` (sweep/tuner.py binds it to trainables.trainable.run_trial) and builds one Verdicts from its
members' rules and from the results its members left in earlier attempts, so a retried trial decides as an
uninterrupted one would. Training knows a Verdicts only as its Stopper (trainables/stopper.py); the statuses it
leads to are trainables.io's, which the dashboards read without importing the sweep.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

from trainables.errors import require
from trainables.io import VERDICT_KNOWN
from trainables.tasks import margin


@dataclass
class StopConfig:
    """When a sweep stops training because the answer is known."""

    streak: int = 0  # stop a member as a success once its success metric passed the threshold at this many
    # evaluations in a row; 0: every member trains to its last step (or early stopping)
    decided: bool = False  # search only: stop a candidate's other seeds once its m-of-n verdict is decided

    def validate(self, section: str) -> None:
        require((f"{section}.stop.streak", self.streak >= 0, "must be >= 0 (0 trains every member to its end)"))


@dataclass(frozen=True)
class Rule:
    """How one member is judged, and the group (its candidate's seeds) whose verdict it shares."""

    metric: str
    threshold: float
    above: bool  # success is metric >= threshold (else <=)
    streak: int  # see StopConfig.streak; 0: never stops on success alone
    group: str  # members with the same group are one candidate's seeds
    needed: int = 1  # m: the group succeeds once this many of its seeds succeeded
    size: int = 1  # n: the group's seeds

    def passes(self, metrics: dict) -> bool:
        return margin(metrics.get(self.metric), self.threshold, self.above) >= 0

    def to_dict(self) -> dict:
        return asdict(self)


def rule_per_point(metric: str, above: bool, streak: int, threshold: Callable[[dict], float],
                   group: Callable[[dict], str], needed: int = 1, size: int = 1) -> Callable[[dict], dict | None]:
    """point -> the rule its member is judged and stopped by, as the dict its member carries: `metric` past
    `threshold(point)` at `streak` evaluations in a row, in the group `group(point)` whose verdict needs `needed` of
    its `size` seeds. None for every point when no rule could stop anything (streak 0, groups of one seed).
    A grid's (sweep/space.py) and a search's (sweep/search/loop.py) are this with their own parameters."""
    if not streak and size < 2:
        return lambda point: None
    return lambda point: Rule(metric, threshold(point), above, streak, group(point), needed, size).to_dict()


def stopper_of(members: list[dict]) -> Verdicts:
    """The Stopper of one trial's members (trainables/stopper.py): their rules, where they carry one."""
    return Verdicts({i: Rule(**m["verdict"]) for i, m in enumerate(members) if m.get("verdict")})


class Verdicts:
    """The members' success streaks and their groups' m-of-n verdicts, for the members of one trial (by index): the
    sweep's Stopper."""

    def __init__(self, rules: dict[int, Rule]):
        self.rules = rules
        self.outcomes: dict[str, list[bool]] = {}  # group -> the verdicts of its seeds that ended with one

    def of(self, indices: list[int]) -> Verdicts:
        """The same verdicts for a subset of the members, renumbered 0.. in the order of `indices` (what one
        train_members call sees); outcomes settled through it count here too."""
        view = Verdicts({k: self.rules[i] for k, i in enumerate(indices) if i in self.rules})
        view.outcomes = self.outcomes
        return view

    def passed(self, index: int, history: list[dict]) -> str | None:
        """Why the member stops as a success after its latest evaluation (`history`: every evaluation so far), or
        None: its success metric passed the threshold at its rule's streak of evaluations in a row."""
        rule = self.rules.get(index)
        if rule is None or not rule.streak or len(history) < rule.streak:
            return None
        recent = history[-rule.streak:]
        if not all(rule.passes(metrics) for metrics in recent):
            return None
        sign = ">=" if rule.above else "<="
        return (f"{rule.metric} {sign} {rule.threshold:g} at {rule.streak} evaluations in a row "
                f"(steps {recent[0]['step']}-{recent[-1]['step']})")

    def settle(self, index: int, result: dict) -> None:
        """Count a member's final result in its group: a success if it passes and did not diverge; a member stopped
        because the verdict was known has none of its own."""
        rule = self.rules.get(index)
        if rule is None or result.get("status") == VERDICT_KNOWN:
            return
        succeeded = result.get("status") != "diverged" and rule.passes(result)
        self.outcomes.setdefault(rule.group, []).append(succeeded)

    def decided(self, index: int) -> str | None:
        """Why the member's group needs none of its further training, or None while its verdict is open."""
        rule = self.rules.get(index)
        if rule is None or rule.size < 2:
            return None
        outcomes = self.outcomes.get(rule.group, [])
        successes, failures = sum(outcomes), len(outcomes) - sum(outcomes)
        if successes >= rule.needed:
            return f"its candidate succeeded: {successes} of {rule.size} seeds passed, {rule.needed} needed"
        if rule.size - failures < rule.needed:
            return f"its candidate failed: {failures} of {rule.size} seeds failed, {rule.needed} needed to pass"
        return None
