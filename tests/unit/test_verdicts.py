"""Verdict-aware stopping (sweep/verdicts.py, training's Stopper): a member stops once it passed `streak` evaluations
in a row, a candidate's other seeds once its m-of-n verdict is decided, and what stopped early is what the full run
measured at that step."""
from pathlib import Path

import pytest

from sweep import space
from sweep.verdicts import Rule, StopConfig, Verdicts, rule_per_point, stopper_of
from trainables import config
from trainables import train as train_module
from trainables.io import SUCCEEDED, VERDICT_KNOWN, read_json
from trainables.logger import Logger
from trainables.population import Stack
from trainables.train import train, train_members

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def debug(*overrides: str):
    return config.load(CONFIGS / "debug.yaml", list(overrides))


def rule(threshold: float = 0.9, streak: int = 2, group: str = "a", needed: int = 1, size: int = 1) -> Rule:
    return Rule("id/acc", threshold, True, streak, group, needed, size)


def test_a_streak_counts_evaluations_in_a_row_from_the_latest():
    verdicts = Verdicts({0: rule(streak=2)})
    history = lambda *accs: [{"step": 50 * (i + 1), "id/acc": a} for i, a in enumerate(accs)]
    assert verdicts.passed(0, history(0.95)) is None  # one is not two
    assert verdicts.passed(0, history(0.95, 0.5, 0.95)) is None  # not in a row
    assert verdicts.passed(0, history(0.5, 0.95, 0.91)) == "id/acc >= 0.9 at 2 evaluations in a row (steps 100-150)"
    assert verdicts.passed(0, history(0.95, float("nan"))) is None
    assert Verdicts({0: rule(streak=0)}).passed(0, history(1.0, 1.0, 1.0)) is None  # streak 0: never
    below = Verdicts({0: Rule("ood/loss", 0.1, False, 1, "a")})
    assert below.passed(0, [{"step": 1, "ood/loss": 0.05}]) and not below.passed(0, [{"step": 1, "ood/loss": 0.2}])



def test_one_rule_writes_a_grids_and_a_searchs_points():
    """A grid's rule (sweep/space.py): the task's success metric at the point's eval.threshold, a group per point;
    with no streak and groups of one seed nothing could stop, so no member carries a rule."""
    base = debug()
    grid = space.verdict_rule(base, space.SweepConfig(stop=StopConfig(streak=3)))
    point = {"eval.threshold": 0.5, "seed": 1}
    assert grid(point) == {"metric": "ood/acc", "threshold": 0.5, "above": True, "streak": 3,
                           "group": space.point_id(point), "needed": 1, "size": 1}
    assert grid({"seed": 0})["threshold"] == base.eval.threshold
    assert space.verdict_rule(base, space.SweepConfig())({"seed": 0}) is None
    pair = rule_per_point("ood/acc", True, 0, threshold=lambda p: 0.9, group=lambda p: "g", needed=2, size=2)
    assert pair({"seed": 0})["size"] == 2  # a group of two decides without a streak


def test_a_trials_stopper_holds_the_rules_its_members_carry():
    members = [{"point": {"seed": 0}, "verdict": rule(group="g").to_dict()}, {"point": {"seed": 1}}]
    stopper = stopper_of(members)
    assert stopper.rules == {0: rule(group="g")}
    assert stopper.passed(1, [{"step": 1, "id/acc": 1.0}] * 3) is None  # a member without a rule never stops

@pytest.mark.parametrize("outcomes, needed, decided", [
    ([True], 2, None), ([True, True], 2, "succeeded"), ([False], 2, None),  # 2 of 3: one failure leaves 2
    ([False, False], 2, "failed"), ([True, False], 2, None), ([True], 1, "succeeded"), ([False, False], 1, None)])
def test_a_group_is_decided_once_m_succeeded_or_m_cannot_be_reached(outcomes, needed, decided):
    rules = {i: rule(group="g", needed=needed, size=3) for i in range(3)}
    verdicts = Verdicts(rules)
    for i, passed in enumerate(outcomes):
        verdicts.settle(i, {"status": "completed", "id/acc": 1.0 if passed else 0.0})
    reason = verdicts.decided(len(outcomes) if len(outcomes) < 3 else 0)
    assert (reason is None) if decided is None else reason.startswith(f"its candidate {decided}")


def test_diverged_or_undecided_seeds_settle_as_they_should():
    verdicts = Verdicts({i: rule(group="g", needed=1, size=3) for i in range(3)})
    verdicts.settle(0, {"status": "diverged", "id/acc": 1.0})  # its last finite evaluation passed: still a failure
    verdicts.settle(1, {"status": VERDICT_KNOWN, "id/acc": 1.0})  # no verdict of its own: not counted
    assert verdicts.outcomes == {"g": [False]} and verdicts.decided(2) is None
    assert Verdicts({0: rule(size=1)}).decided(0) is None  # a group of one is never decided by others


def test_a_member_that_passes_stops_where_the_full_run_first_passed_with_the_full_runs_evaluation():
    cfg, saved = debug(), {}
    full = train(cfg, on_checkpoint=lambda state: saved.update({state["step"]: state["metrics"]}))
    passing = [step for step in sorted(saved) if saved[step]["id/acc"] >= 0.9]
    assert passing, "the debug transformer fits its training data within its 300 steps"
    first = next(s for s in passing if s + 50 in passing)  # two evaluations in a row
    [stopped] = train_members([cfg], [Logger()], [None], stopper=Verdicts({0: rule(streak=2)}))
    assert stopped.metrics["status"] == SUCCEEDED and stopped.metrics["steps"] == first + 50 < 300
    assert stopped.metrics["stopped_because"].startswith("id/acc >= 0.9 at 2 evaluations in a row")
    assert stopped.metrics["id/acc"] == saved[first + 50]["id/acc"]  # the full run's evaluation at that step
    assert stopped.metrics["ood/acc"] == saved[first + 50]["ood/acc"]
    assert full.metrics["status"] == "completed" and full.metrics["steps"] == 300


def test_packed_seeds_stop_together_once_their_candidate_is_decided():
    """Seed 0 passes at once (any id/acc counts), seed 1 never could: with 1 of 2 needed, seed 1 stops at seed 0's
    first evaluation; each keeps its own evaluation at that step."""
    cfgs = [debug("seed=0"), debug("seed=1")]
    verdicts = Verdicts({0: rule(threshold=0.0, streak=1, group="g", size=2),
                         1: rule(threshold=2.0, streak=1, group="g", size=2)})
    first, second = train_members(cfgs, [Logger(), Logger()], [None, None], stopper=verdicts)
    assert first.metrics["status"] == SUCCEEDED and first.metrics["steps"] == 50
    assert second.metrics["status"] == VERDICT_KNOWN and second.metrics["steps"] == 50
    assert second.metrics["stopped_because"] == "its candidate succeeded: 1 of 2 seeds passed, 1 needed"
    assert "ood/acc" in second.metrics and second.arrays  # trained for 50 steps: its last evaluation was measured


def test_a_seed_whose_candidate_already_failed_is_not_trained_and_measures_nothing(tmp_path):
    """As a trial trains a model that does not vectorize, one seed after another: the first fails (2 of 2 needed),
    so the second ends at step 0 without training. Its untrained model is not measured: its result holds no metric
    (a 0.0 would read as a trained seed that failed) and no readout, only why it stopped and the data/* measures its
    config fixes."""
    verdicts = Verdicts({0: rule(threshold=2.0, streak=1, group="g", needed=2, size=2),
                         1: rule(threshold=2.0, streak=1, group="g", needed=2, size=2)})
    cfg = debug("optim.max_steps=50")
    [failed] = train_members([cfg], [Logger()], [None], stopper=verdicts.of([0]))
    [skipped] = train_members([debug("seed=1", "optim.max_steps=50")], [Logger()], [None], stopper=verdicts.of([1]))
    assert failed.metrics["status"] == "completed" and failed.metrics["steps"] == 50
    assert skipped.metrics["status"] == VERDICT_KNOWN and skipped.metrics["steps"] == 0
    assert skipped.metrics["stopped_because"] == "its candidate failed: 1 of 2 seeds failed, 2 needed to pass"
    data = {k: v for k, v in failed.metrics.items() if k.startswith("data/")}
    assert data and set(skipped.metrics) == {"status", "steps", "seconds", "stopped_because", *data}
    assert {k: skipped.metrics[k] for k in data} == data and skipped.arrays == {}
    train_module.save(skipped, tmp_path)
    assert "ood/acc" not in read_json(tmp_path / "result.json") and not (tmp_path / "attention.npz").exists()


def test_a_member_left_alone_when_its_pack_stopped_trains_as_it_would_alone(monkeypatch):
    """Seed 0 stops at step 50; seed 1 goes on in a stack of its own (population.Stack rebuilt without the stopped
    slot, which would otherwise still be computed) and ends with the result of training it alone. What that promises
    across machines: the same steps on the same data, so the same numbers up to float32 rounding (relative 1e-6). Not
    the last digit: a matmul's reduction order may depend on its batch shape and the machine's kernels (seen on one
    machine: mech/induction_score 0.5993621945 against 0.5993622541)."""
    cfgs = [debug("seed=0"), debug("seed=1")]
    verdicts = Verdicts({0: rule(threshold=0.0, streak=1, group="0"), 1: rule(threshold=2.0, streak=1, group="1")})
    sizes = []
    monkeypatch.setattr(train_module, "Stack", lambda states, compiled=None: sizes.append(len(states))
                        or Stack(states, compiled))
    stopped, went_on = train_members(cfgs, [Logger(), Logger()], [None, None], stopper=verdicts)
    assert sizes == [2, 1]
    alone = train(cfgs[1])
    assert stopped.metrics["steps"] == 50 and went_on.metrics["steps"] == 300
    numbers = lambda metrics: {k: v for k, v in metrics.items() if isinstance(v, float) and k != "seconds"}
    assert numbers(went_on.metrics) == pytest.approx(numbers(alone.metrics), rel=1e-6, abs=1e-7)
