"""The search's rounds: every unfinished study asks its candidates, Ray Tune trains each (slice, candidate, seed)
as a member of the grid's trainable, and the results are told back to Optuna (studies.py opens the studies). The
rounds are a generator that one long Tune run drives (tuner.run_rounds), so no round pays Tune's start-up.

A driver killed at any point loses nothing: finished Tune trials keep their result.json and are never re-run;
Optuna trials left RUNNING are failed (and marked zombie) once their driver is seen gone, and their candidates are
asked again. Several drivers may run the same search at once (owners.py): each leaves the studies another live driver
is training to it, gives way when it asked at the same moment as another, and waits for the others' results before it
ends, so every driver ends with the whole answer.
"""
from __future__ import annotations

import itertools
import math
import time
from pathlib import Path
from typing import Iterator

import optuna
from optuna.trial import TrialState

from sweep import tuner
from sweep.storage.out_dir import OutDir
from sweep.search import bisection, guide, owners, samplers
from sweep.search.config import SearchConfig
from sweep.search.studies import Slice, holds
from sweep.space import point_id, read_error, read_result
from sweep.verdicts import rule_per_point
from trainables import config
from trainables.errors import ConfigError
from trainables.io import VERDICT_KNOWN, read_json, write_json


POLL_S = 2.0  # while other drivers train what is left, look at the studies again this often


def verdict_rule(search: SearchConfig, first: int = 0):
    """point -> the rule its member is judged and stopped by (sweep/verdicts.py, search.stop): the search's
    success, and with stop.decided (bisection, exhaustive, tpe) its candidate's seeds as one group (the point without
    its seed, and which block of Sampler.seeds it is: a re-evaluation is a group of its own). None for every point when
    nothing could stop (no streak, no group of several seeds)."""
    success, stop = search.success, search.stop
    decided = stop.decided and samplers.kind(search).judged_by_candidate
    lowest, stride = first + min(success.seeds), max(success.seeds) + 1

    def group(point: dict) -> str:
        candidate = point_id({k: v for k, v in point.items() if k != "seed"})
        return f"{candidate}@{(point['seed'] - lowest) // stride}"
    return rule_per_point(success.metric, success.direction == ">=", stop.streak,
                          threshold=lambda point: success.threshold, group=group,
                          needed=success.min_seeds if decided else 1, size=len(success.seeds) if decided else 1)


def reference_points(all_slices: list[Slice], search: SearchConfig, first: int = 0) -> list[dict]:
    """search.reference applied to each slice, with the success seeds; slices that agree on it share its trials."""
    if not search.reference:
        return []
    points = [sl.point | search.reference | {"seed": first + s} for sl in all_slices for s in search.success.seeds]
    return list({point_id(p): p for p in points}.values())


def run(base: config.Config, search: SearchConfig, all_slices: list[Slice], studies: dict[str, optuna.Study],
        out: OutDir, extend: int) -> None:
    """Rounds of ask -> train -> tell until every study is done or out of budget, all in one Ray Tune run."""
    progress = {}
    summary = lambda: (f"round {progress['round']}, {progress['answered']}/{len(all_slices)} slices finished"
                       if progress else "")
    heartbeat = owners.Heartbeat(owners.Roster(studies[all_slices[0].study_name]))
    try:
        asked = rounds(base, search, all_slices, studies, out.local, extend, progress, heartbeat)
        grouped = search.stop.decided and samplers.kind(search).judged_by_candidate
        tuner.run_rounds(base, search, asked, out, summary, verdict=verdict_rule(search, base.seed),
                         group_size=len(search.success.seeds) if grouped else 1)
    except BaseException:  # stopped (Ctrl-C, SIGTERM, a requeue) or crashed: nobody will tell its trials
        heartbeat.fail_all()
        raise
    finally:
        heartbeat.stop()


def rounds(base: config.Config, search: SearchConfig, all_slices: list[Slice], studies: dict[str, optuna.Study],
           out: Path, extend: int, progress: dict | None = None,
           heartbeat: owners.Heartbeat | None = None) -> Iterator[list[dict]]:
    """The search's rounds as a generator: each round, every study that wants more asks its candidates; the points
    to train (one per candidate and seed) are yielded; once they are trained, the generator is resumed and tells
    the results to Optuna. `progress` (if given) is kept up to date: the round and the studies that need no more;
    `heartbeat` (if given) keeps the trials in training marked alive for drivers on other hosts, and its roster (if
    any) says how many drivers share the studies: each asks in its share of them. A round with nothing to train while
    other drivers train the rest yields [] (look again later).

    extend adds that many completed trials to each slice's budget (seed trainings for the threshold sampler) and to
    the total, beyond what is done already; a converged bisection or exhaustive study has nothing left to ask, so
    extending it changes nothing, and neither does extending a threshold study whose interval is already narrow enough
    (a smaller search.threshold.resolution asks for more). The reference points (if any) train in the first round. With
    a guide, verdicts flow between studies round by round, so a driver killed mid-round must not let a resumed search
    mix rounds: each round's studies are written down before they ask (ROUND_PLAN), and a resumed search first re-runs
    the interrupted round for those that were not told.
    """
    chooser = {sl.study_name: samplers.for_slice(search, sl.values, sl.params) for sl in all_slices}
    trials = lambda name: studies[name].get_trials(deepcopy=False)
    budgets = {name: sampler.budget(trials(name), extend) for name, sampler in chooser.items()}
    predicted: dict[str, dict] = {}  # study -> the verdicts the guide predicts for its knob values this round
    wants_more = lambda name: chooser[name].next(trials(name), budgets[name], predicted.get(name)) is not None
    checks, base_dict = search.constraint_checks(), config.to_dict(base)
    pending_references = [p for p in reference_points(all_slices, search, base.seed) if read_result(p, out) is None]
    round_index = latest_round(studies)
    interrupted = interrupted_round(out, studies) if guide.active(search) else None
    for iteration in itertools.count():
        for study in studies.values():  # a driver that died since the last round leaves its trials to the others
            owners.fail_zombies(study)
        taken = {name for name, study in studies.items() if owners.taken(study)}
        catching_up = iteration == 0 and interrupted is not None
        if catching_up:
            round_index, names = interrupted
            asking, waiting = [sl for sl in all_slices if sl.study_name in names], set()
        else:  # past every round another driver has asked, so verdicts steer by what is in the studies now
            round_index = max(round_index, latest_round(studies)) + 1
            asking, waiting = all_slices, waiting_for_pilots(all_slices, search, wants_more)
        predicted = steer(all_slices, studies, search, round_index, chooser[all_slices[0].study_name].min_rate)
        total_done = sum(t.state == TrialState.COMPLETE for s in studies.values() for t in s.get_trials(deepcopy=False))
        room = search.budget.total + extend * len(all_slices) - total_done if search.budget.total else math.inf
        askers = [sl for sl in asking if sl.study_name not in waiting | taken and wants_more(sl.study_name)]
        share = my_share(askers, studies, heartbeat.roster if heartbeat else None)
        left_to_others, askers = len(share) < len(askers), share
        if guide.active(search) and not catching_up:  # one candidate per study: the studies that will ask
            plan = [sl.study_name for sl in askers]
            write_json(out / ROUND_PLAN, {"round": round_index, "studies": plan[:max(0, room)] if room < math.inf
                                          else plan})
        batch = []
        for sl in askers:
            name = sl.study_name
            for _ in range(search.per_round):
                chosen = chooser[name].next(trials(name), budgets[name], predicted.get(name))
                if len(batch) >= room or chosen is None:
                    break
                asked = ask(studies[name], sl, chooser[name], chosen, budgets[name], search, checks, base_dict,
                            round_index)
                if asked is None:  # another driver asked here at the same moment and goes ahead
                    break
                batch += asked
        references = pending_references if iteration == 0 else []
        if not batch and not references:
            if catching_up or left_to_others:  # what this round left to other drivers is asked next round if not
                continue
            # The rest is another driver's: wait for it. `taken` as this round began counts too: a study another
            # driver was training then (so not asked here) may have been told since, and want more.
            if taken or any(owners.taken(study) for study in studies.values()):
                time.sleep(POLL_S)
                yield []
                continue
            if progress is not None:
                progress |= {"round": round_index, "answered": len(all_slices)}
            return
        if progress is not None:
            progress |= {"round": round_index, "answered": sum(not wants_more(sl.study_name) for sl in all_slices)}
        for _, trial, _ in batch if heartbeat else []:
            heartbeat.add(trial)
        yield [p for *_, pts in batch for p in pts] + references
        for study, trial, pts in batch:
            if heartbeat:
                heartbeat.discard(trial)
            tell(study, trial, pts, search, out)


def my_share(askers: list[Slice], studies: dict, roster: owners.Roster | None) -> list[Slice]:
    """With several drivers at work, an even share of the studies free to ask, those this driver asked in last
    first (so each keeps its slices); the others are left to the other drivers, who wait for free studies."""
    if roster is None:
        return askers
    roster.announce()
    drivers = roster.live()
    mine_first = sorted(askers, key=lambda sl: not owners.last_mine(studies[sl.study_name]))  # stable: slice order
    return mine_first[:math.ceil(len(askers) / drivers)] if drivers > 1 else askers


ROUND_PLAN = "search_round.json"  # a guided search's round in progress: its number and the studies asking in it


def latest_round(studies: dict) -> int:
    return max((t.user_attrs.get("round", 0) for s in studies.values() for t in s.get_trials(deepcopy=False)),
               default=0)


def interrupted_round(out: Path, studies: dict) -> tuple[int, list[str]] | None:
    """(round, studies to re-run) if the last planned round has studies whose trial of it was never told (still
    missing, a zombie, or one that gave way to another driver's); None if it finished. With several drivers the plan
    is the last one any of them wrote: a driver killed mid-round may be caught up in a later round instead, which
    changes where the search probes, never its answer."""
    if (plan := read_json(out / ROUND_PLAN)) is None:
        return None

    def told(study) -> bool:
        zombies = owners.zombies(study)
        return any(t.user_attrs.get("round") == plan["round"] and t.number not in zombies
                   and owners.LOST_TO not in t.user_attrs for t in study.get_trials(deepcopy=False))

    pending = [name for name in plan["studies"] if name in studies and not told(studies[name])]
    return (plan["round"], pending) if pending else None


def steer(all_slices: list[Slice], studies: dict, search: SearchConfig, round_index: int,
          min_rate: float) -> dict[str, dict]:
    """With a guide, the verdicts each slice's group's other slices imply for its knob values (study -> {value:
    verdict}; a value whose seeds passed at min_rate predicts success at least as diverse), from the trials of
    earlier rounds only (so the same round, re-run after a kill, is steered the same way); {} without one."""
    if not guide.active(search):
        return {}
    earlier = lambda study: [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("round", 0) < round_index]
    pooled = {sl.study_name: bisection.evidence(earlier(studies[sl.study_name]), search.knob.key) for sl in all_slices}
    predicted = {}
    for sl in all_slices:
        others = [(pooled[o.study_name], o.measures) for o in all_slices
                  if o is not sl and guide.group(o.point, search.guide) == guide.group(sl.point, search.guide)]
        predicted[sl.study_name] = guide.predictions(sl.values, sl.measures, others, min_rate)
    return predicted


def waiting_for_pilots(all_slices: list[Slice], search: SearchConfig, wants_more) -> set[str]:
    """With a guide, the first slice of each group (the pilot) searches alone until it is done; the others then
    start from its verdicts, and each other's, rather than all bisecting blind at once."""
    if not guide.active(search):
        return set()
    group = lambda sl: guide.group(sl.point, search.guide)
    pilots = {group(sl): sl for sl in reversed(all_slices)}  # each group's first slice
    busy = {key for key, pilot in pilots.items() if wants_more(pilot.study_name)}
    return {sl.study_name for sl in all_slices if group(sl) in busy and pilots[group(sl)] is not sl}


def ask(study: optuna.Study, sl: Slice, sampler: samplers.Sampler, chosen: dict, budget: int, search: SearchConfig,
        checks: list, base_dict: dict, round_index: int) -> list[tuple] | None:
    """One candidate (the sampler's `chosen` params, the rest Optuna's) as [(study, trial, its points, one per
    seed)], or [] if it is invalid (told PRUNED with the reason: a value a constraint excludes, or a config that
    cannot exist such as all-zero weights) or another driver spent the slice's budget since, or None if another
    driver asked in this study at the same moment and goes ahead (told FAIL with lost_to; never trained)."""
    trial, in_flight = owners.ask(study, sl.distributions(search.knob.key), chosen)
    trial.set_user_attr("round", round_index)
    if (winner := owners.lost_to(in_flight)) is not None:
        trial.set_user_attr(owners.LOST_TO, winner.number)
        study.tell(trial, state=TrialState.FAIL)
        return None
    point = sl.point | sl.candidate(trial.params, search.knob.key)
    reason = None
    if search.knob.key and point[search.knob.key] not in sl.values:  # tpe draws from the whole interval
        reason = f"{search.knob.key}={point[search.knob.key]} breaks a constraint"
    elif not holds(checks, sl.point | trial.params):
        reason = "breaks a constraint"
    else:
        try:
            config.with_point(base_dict, point, check_device=False)
        except ConfigError as e:
            reason = str(e)
    if reason:
        trial.set_user_attr("pruned_because", reason)
        study.tell(trial, state=TrialState.PRUNED)
        return []
    seeds = sampler.seeds(study.get_trials(deepcopy=False), trial, base_dict["seed"], budget)
    if not seeds:  # another driver spent the slice's last trainings since this one looked
        trial.set_user_attr("failed_because", "the slice's budget of seed trainings is spent")
        study.tell(trial, state=TrialState.FAIL)
        return []
    trial.set_user_attr("seed_list", seeds)  # before training: a failed evaluation still lists its trials
    return [(study, trial, [point | {"seed": s} for s in seeds])]


def tell(study, trial, points: list[dict], search: SearchConfig, out: Path) -> None:
    """Read each seed's result.json and report the candidate: COMPLETE with its evidence, or FAIL if a seed errored.

    Success is a constraint Optuna's TPE understands: how far the min_seeds-th best seed falls short of the threshold
    (<= 0: at least min_seeds seeds succeed), graded so that near misses rank above clear failures."""
    results = [read_result(point, out) for point in points]
    if any(r is None for r in results):
        errors = [read_error(point, out) for point, r in zip(points, results) if r is None]
        trial.set_user_attr("failed_because", next(filter(None, errors), "a seed's trial ended without a result"))
        study.tell(trial, state=TrialState.FAIL)
        return
    success = search.success
    margins = success.seed_margins(results)
    trial.set_user_attr("successes", sum(m >= 0 for m in margins))
    trial.set_user_attr("seeds", len(results))
    trial.set_user_attr("judged", sum(r.get("status") != VERDICT_KNOWN for r in results))  # the curve's seeds
    shortfall = -sorted(margins, reverse=True)[success.min_seeds - 1]
    trial.set_constraint("success", min(shortfall, 1e6))  # finite: a NaN metric is a large shortfall
    if not search.tpe.minimize:
        study.tell(trial, float(trial.params[search.knob.key]))
        return
    objective = [r.get(search.tpe.minimize) for r in results]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in objective):
        trial.set_user_attr("failed_because", f"{search.tpe.minimize} is missing or not finite in a result")
        study.tell(trial, state=TrialState.FAIL)
        return
    study.tell(trial, sum(objective) / len(objective))
