"""The `search:` section of a config: the diversity knob, the slices, success, the sampler and its budget, read and
validated before anything runs."""
from __future__ import annotations

import math
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from sweep.search import guide, samplers
from sweep.search.estimate import seeds_to_decide
from sweep.search.guide import GuideConfig
from sweep.search.samplers import ThresholdConfig, TpeConfig
from sweep.space import AxisConfig, RunConfig, did_you_mean, parse_constraint
from sweep.verdicts import StopConfig
from trainables import config, dry_run
from trainables.io import VERDICT_KNOWN, flat
from trainables.errors import require
from trainables.tasks import margin, task_of, threshold_problem

RENAMED_SAMPLERS = {"grid": "exhaustive"}  # old name -> new: `grid` is the verb (issue [house] item 4); still read
# Keys that moved into their sampler's subsection (issue [lean]): still read, with a deprecation line, and an output
# directory whose config.yaml has them flat resumes.
MOVED_KEYS = {"search.batch": "search.threshold.batch", "search.resolution": "search.threshold.resolution",
              "search.sampler_seed": "search.tpe.seed", "search.params": "search.tpe.params",
              "search.minimize": "search.tpe.minimize"}
# search.stop.streak's default, in evaluations: replayed on the transformer search trained to the end
# (docs/PERFORMANCE.md, "Verdict-aware stopping"), seeds passed ood/acc >= 0.99 at up to 10 evaluations in a row and
# still ended below it; 12 was the shortest streak that changed no seed's verdict there.
STREAK = 12


@dataclass
class KnobConfig:
    """The diversity knob: a config key searched over the integers [low, high], or over `values` in the order given
    (floats too, e.g. an in-context share); values breaking a constraint are skipped."""

    key: str = ""  # the task's diversity key (dotted); "" only for a tpe search over params alone
    low: int = 1
    high: int = 13
    values: list[Any] = field(default_factory=list)  # explicit values, increasing diversity; replaces low..high


@dataclass
class SuccessConfig:
    """What the search answers. A seed passes when its metric >= threshold (or <=); p(K) is the probability that a
    seed trained at knob value K passes, and the answer is K*_q = the smallest K with p(K) >= rate, with an interval
    at `confidence` (sweep/search/estimate.py). The bisection, exhaustive and tpe samplers judge each candidate by a
    fixed seed list instead: it succeeds when at least min_seeds of `seeds` pass (min_seeds = len(seeds): all-pass)."""

    metric: str = ""  # "" = the task's success metric
    direction: str = ""  # >= | <= ; "" = the task's direction for its success metric, else >=
    threshold: float = 0.99
    rate: float = 0.5  # q: the answer is the smallest knob value whose seeds pass with probability >= q
    confidence: float = 0.95  # of the interval [low, high] around K*_q
    seeds: list[int] = field(default_factory=lambda: [0])  # bisection, exhaustive, tpe: the seeds of each evaluation
    min_seeds: int = 1  # bisection, exhaustive, tpe: m of n = len(seeds); re-checks pool their seeds
    # and need the same rate

    def margin(self, value) -> float:
        """How far a seed's value lies on the successful side of the threshold (>= 0: it succeeds; -inf: missing)."""
        return margin(value, self.threshold, self.direction == ">=")

    def seed_margins(self, results: list[dict]) -> list[float]:
        """How far each seed's result is past the threshold (>= 0: it passed)."""
        # A diverged seed does not generalize, whatever its last finite evaluation said.
        margins = [-math.inf if r.get("status") == "diverged" else self.margin(r.get(self.metric)) for r in results]
        # A seed stopped once the others decided the candidate's verdict has no verdict of its own: it counts as not
        # passing (ranked by its last evaluation for TPE's graded shortfall), so the candidate's verdict is the one
        # its seeds decided, and its success rate a lower bound of the one training every seed would give.
        return [min(m, -1e-9) if r.get("status") == VERDICT_KNOWN else m for m, r in zip(margins, results)]


@dataclass
class BudgetConfig:
    trainings: int = 40  # threshold sampler: seed trainings per slice
    per_slice: int = 20  # bisection, exhaustive, tpe: completed Optuna trials (candidate evaluations) per slice
    total: int = 0  # completed Optuna trials over all slices; 0 = no limit beyond the per-slice budget


@dataclass
class SearchConfig(RunConfig):
    knob: KnobConfig = field(default_factory=KnobConfig)
    slices: list[AxisConfig] = field(default_factory=list)  # one study per combination of these axes' values
    constraints: list[str] = field(default_factory=list)  # between knob and slice keys, e.g. low + width <= 16
    success: SuccessConfig = field(default_factory=SuccessConfig)
    sampler: str = "threshold"  # threshold (K*_q with an interval) | bisection (m of n seeds, the older protocol)
    # | tpe (params, a metric minimised) | exhaustive (every value once, the reference; `grid` before)
    threshold: ThresholdConfig = field(default_factory=ThresholdConfig)  # the threshold sampler's own settings
    tpe: TpeConfig = field(default_factory=TpeConfig)  # the tpe sampler's own settings
    reference: dict[str, Any] = field(default_factory=dict)  # config keys evaluated once per slice beside the search,
    # e.g. the theory's optimal distribution, with the success seeds; reported next to the best found
    per_round: int = 1  # candidates a study asks per round (tpe and exhaustive; threshold and
    # bisection ask one at a time)
    guide: GuideConfig = field(default_factory=GuideConfig)  # threshold, bisection: where to probe first, from other
    # slices' verdicts (sweep/search/guide.py)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    # Training stops once a verdict is known (sweep/verdicts.py): a seed after STREAK passing evaluations in a
    # row, and (bisection, exhaustive, tpe) a candidate's other seeds once its m-of-n verdict is decided: the threshold
    # sampler needs every seed's own verdict. Not part of the experiment (its fingerprint): it changes what training
    # costs, not what is asked.
    stop: StopConfig = field(default_factory=lambda: StopConfig(streak=STREAK, decided=True))
    # resources, pack, max_concurrent, max_failures: RunConfig's, as a grid's

    def swept_keys(self) -> list[str]:
        """The keys the search sets per slice and candidate: the names a constraint may use."""
        return [a.key for a in self.slices] + [self.knob.key] + [n for p in self.tpe.params for n in p.names()]

    def constraint_checks(self) -> list:
        """search.constraints as checks of a point (space.parse_constraint: a misspelt key is refused)."""
        return [parse_constraint(text, self.swept_keys(), f"search.constraints[{i}]")
                for i, text in enumerate(self.constraints)]

    def as_flat_keys(self) -> dict:
        """The section as a plain dict laid out as before each sampler had its subsection (MOVED_KEYS): how
        config.yaml was written then, in its order."""
        data = {}
        for key, value in asdict(self).items():
            moved = [(old.split(".")[1], new.split(".")[2]) for old, new in MOVED_KEYS.items()
                     if new.split(".")[1] == key]  # (search.batch, search.threshold.batch) -> (batch, batch)
            data |= {old: value[new] for old, new in moved} if moved else {key: value}
        return data


def load_search(path, overrides) -> tuple[config.Config, SearchConfig]:
    """The base training config and the validated search section (`search.*` overrides go to it)."""
    base, search = config.load_section(path, overrides, "search", SearchConfig, MOVED_KEYS)
    search.sampler = config.renamed_value("search.sampler", search.sampler, RENAMED_SAMPLERS)
    config.refuse_overrides_of(overrides, searched_keys(search))
    task, success = task_of(base), search.success  # resolved, so config.yaml says what counts as success
    success.metric = success.metric or task.success_metric
    task_direction = ">=" if task.success_above else "<="
    success.direction = success.direction or (task_direction if success.metric == task.success_metric else ">=")
    narrowing = _narrowed(base, search)
    _require_valid(base, search)
    search.constraint_checks()  # a key misspelt: refused here, with the key it meant
    for line in narrowing:  # once the search is known to be valid: an error is the one line
        note(line)
    return base, search


def _narrowed(base: config.Config, search: SearchConfig) -> list[str]:
    """A search narrowed by one override (a slice key dropped from search.slices, its value then set as any key):
    the guide's `across` keys that are no longer slice keys are dropped (the guide goes off if none is left), and a
    constraint reads a key that is no longer swept at its value in the config; each change is one line (returned).
    A slice key, an `across` key or a constraint's key that is no key of the training config at all is refused,
    with the closest key."""
    keys, lines = set(flat(config.to_dict(base))), []
    for i, axis in enumerate(search.slices):
        require((f"search.slices[{i}].key", axis.key in keys,
                 f"{axis.key} is not a key of the training config{did_you_mean(axis.key, keys)}"))
    slice_keys = [axis.key for axis in search.slices]
    if search.guide.metric:
        for key in search.guide.across:
            require(("search.guide.across", key in slice_keys or key in keys,
                     f"{key} is not a key of the training config"
                     + (did_you_mean(key, slice_keys) or did_you_mean(key, keys))))
        gone = [key for key in search.guide.across if key not in slice_keys]
        if gone:
            search.guide.across = [key for key in search.guide.across if key in slice_keys]
            if not search.guide.across:
                search.guide.metric = ""
            lines.append(f"search.guide.across: {', '.join(gone)} is no longer a slice key; "
                         + (f"the guide carries verdicts across {', '.join(search.guide.across)}" if search.guide.across
                            else "the guide is off (each slice searched on its own)"))
    swept = set(search.swept_keys())
    for i, text in enumerate(search.constraints):
        fixed = {token: value for token in _IDENTIFIER.findall(text) if token not in swept and token in keys
                 and isinstance(value := config.select(base, token), (int, float)) and not isinstance(value, bool)}
        if fixed:
            search.constraints[i] = _IDENTIFIER.sub(lambda m: str(fixed.get(m.group(0), m.group(0))), text)
            lines.append(f"search.constraints[{i}]: "
                         f"{', '.join(f'{k} is not swept, read as {v}' for k, v in fixed.items())} "
                         f"({search.constraints[i]!r})")
    return lines


_IDENTIFIER = re.compile(r"[A-Za-z_][\w.]*")


def note(text: str) -> None:
    """One line on stderr saying what headsweep made of the config (it goes on)."""
    print(f"headsweep: {text}", file=sys.stderr)


def searched_keys(search: SearchConfig) -> dict[str, str]:
    """The keys the search sets at each trial (its slices', its knob's and its params'), each with what to override
    instead."""
    ignored = "so this override would be ignored"
    set_by = {axis.key: f"is set in each slice by search.slices[{i}], {ignored}; to search one value, override the "
                        f"slice: 'search.slices.{i}.values=[{{value}}]'" for i, axis in enumerate(search.slices)}
    set_by |= {param.key: f"is set at each candidate by search.tpe.params[{i}], {ignored}; to narrow it, override "
                          f"search.tpe.params.{i}.low and search.tpe.params.{i}.high"
               for i, param in enumerate(search.tpe.params)}
    if search.knob.key:
        set_by[search.knob.key] = (f"is set at each candidate by the search's knob, {ignored}; to search one value, "
                                   "override the knob: 'search.knob.values=[{value}]'")
    return set_by


def _require_valid(base: config.Config, search: SearchConfig) -> None:
    success, knob = search.success, search.knob
    require(("search.sampler", search.sampler in samplers.KINDS, f"must be one of {', '.join(samplers.KINDS)}"))
    sampler = samplers.kind(search)
    default = SuccessConfig()
    is_key = lambda key: config.select(base, key) is not config.MISSING
    slice_keys = [axis.key for axis in search.slices]
    threshold_issue = threshold_problem(success.metric, success.threshold, success.direction != "<=")
    checks = [
        ("search.knob.key", bool(knob.key) or (sampler.searches_params and bool(search.tpe.params)),
         "is required (only a tpe search with params can do without a knob)"),
        ("search.knob.key", not knob.key or is_key(knob.key), "is not a key of the training config"),
        ("search.knob.high", bool(knob.values) or knob.high >= knob.low, "must be >= search.knob.low"),
        ("search.knob.values", all(isinstance(v, (int, float)) for v in knob.values)
         and len(set(knob.values)) == len(knob.values), "must be numbers, each once"),
        ("search.tpe.params", sampler.searches_params or not search.tpe.params,
         "need search.sampler=tpe (the other samplers search one knob)"),
        ("search.tpe.minimize", sampler.searches_params or not search.tpe.minimize,
         "needs search.sampler=tpe (the other samplers minimise the knob)"),
        ("search.per_round", search.per_round >= 1 and (search.per_round == 1 or not sampler.one_at_a_time),
         "must be >= 1, and 1 for the threshold and bisection samplers (each asks where its last results point)"),
        ("search.success.rate", 0 < success.rate < 1, f"must be in (0, 1), got {success.rate}"),
        ("search.success.confidence", 0 < success.confidence < 1, f"must be in (0, 1), got {success.confidence}"),
        ("search.threshold.batch", search.threshold.batch >= 1, f"must be >= 1, got {search.threshold.batch}"),
        ("search.threshold.resolution", search.threshold.resolution > 0,
         f"must be > 0 (knob steps), got {search.threshold.resolution}"),
        ("search.budget.trainings", search.budget.trainings >= 1, f"must be >= 1, got {search.budget.trainings}"),
        ("search.success.seeds",
         sampler.judged_by_candidate or (success.seeds, success.min_seeds) == (default.seeds, default.min_seeds),
         "are for the bisection, exhaustive and tpe samplers; the threshold sampler draws seeds seed, seed + 1, ... "
         "(search.threshold.batch per evaluation): drop seeds and min_seeds, or set search.sampler=bisection"),
        ("search.success.direction", success.direction in (">=", "<="), "must be >= or <="),
        ("search.success.threshold", threshold_issue is None, threshold_issue),
        ("search.success.seeds", bool(success.seeds) and len(set(success.seeds)) == len(success.seeds)
         and min(success.seeds, default=0) >= 0, "needs at least one seed, each once, none negative"),
        ("search.success.min_seeds", 1 <= success.min_seeds <= len(success.seeds), "must be in 1..len(seeds)"),
        ("search.budget.per_slice", search.budget.per_slice >= 1, "must be >= 1"),
        ("search.budget.total", search.budget.total >= 0, "must be >= 0"),
        ("device", base.device != "cuda" or search.resources.gpu > 0,
         "cuda needs search.resources.gpu > 0: Ray hides the GPUs from trials that ask for none"),
    ]
    for i, param in enumerate(search.tpe.params):
        where = f"search.tpe.params[{i}]"
        checks += [
            (f"{where}.key", is_key(param.key), f"{param.key} is not a key of the training config"),
            (f"{where}.type", param.type in ("int", "float"), "must be int or float"),
            (f"{where}.high", param.high > param.low, "must be > low"),
            (f"{where}.low", not param.log or param.low > 0, "must be > 0 on a log scale"),
            (f"{where}.size", param.size >= 0, "must be >= 0"),
            (f"{where}.when", set(param.when) <= set(slice_keys),
             f"may only name slice keys ({', '.join(slice_keys)})"),
        ]
    checks += [(f"search.reference.{key}", is_key(key), "is not a key of the training config")
               for key in search.reference]
    require(*checks)
    if not sampler.judged_by_candidate:  # K*_q's tests; rate and confidence are valid here
        needed = seeds_to_decide(success.rate, success.confidence)
        require(("search.budget.trainings", search.budget.trainings >= needed,
                 f"{search.budget.trainings} cannot decide search.success.rate {success.rate:g} at confidence "
                 f"{success.confidence:g}: one value needs {needed} seeds, all passing or all failing, to be ruled "
                 f"in or out"))
    search.validate_run("search")
    # else a misspelt metric would fail every candidate, silently; train/lr only where asked (it costs 1.5 s)
    named = {success.metric, search.tpe.minimize}
    reported = dry_run.reported_metrics(base, learning_rate="train/lr" in named)
    require(*((f"search.{key}", not name or name in reported, f"{name} is not a metric of this task's trials (they "
               f"report {', '.join(sorted(m for m in reported if '/' in m))})")
              for key, name in (("success.metric", success.metric), ("tpe.minimize", search.tpe.minimize))))
    guide.check(search.guide, slice_keys, base)

