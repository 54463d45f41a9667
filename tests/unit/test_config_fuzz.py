"""Property: any config a user can write is either rejected by validation with one ConfigError naming a key, or it
trains to a finished result. Hypothesis draws overrides of every scalar key of each task's debug config (values
of the right type inside and outside their valid ranges, values of a wrong type, strings seen in the shipped configs
and a bogus one), sometimes with a misspelt key or one of the sweep verbs' sections;
anything else (an IndexError in a sampler, a shape error in a model) is a bug this test finds."""
import dataclasses
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import CONFIGS
from trainables import config
from trainables.errors import ConfigError
from trainables.io import FINISHED
from trainables.train import train

BASES = ("debug.yaml", "debug_bigram_trigger.yaml", "debug_markov_ngram.yaml", "debug_mixed_ngram.yaml",
         "paper_theory.yaml")
# Kept small and fixed so every drawn config trains in well under a second; their own checks are simple ranges.
FIXED = ["optim.max_steps=4", "eval.every=2", "eval.n_id=16", "eval.n_ood=16", "eval.n_examples=1",
         "model.n_samples_V=64", "model.n_samples_KQ=64"]
NOT_DRAWN = {"name", "task.name", "model.name", "device", "logging.wandb", "logging.project", "logging.entity",
             "logging.media_every", *(item.split("=")[0] for item in FIXED)}


def scalar_keys(node, prefix: str = "") -> dict[str, object]:
    """Every scalar key of a config (dotted) with its value, nested dataclasses included."""
    found = {}
    for f in dataclasses.fields(node):
        value, key = getattr(node, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            found |= scalar_keys(value, f"{key}.")
        elif isinstance(value, (bool, int, float, str)) and key not in NOT_DRAWN:
            found[key] = value
    return found


def strings_in_configs() -> dict[str, set[str]]:
    """Dotted key -> every string value it takes in configs/*.yaml: realistic choices for string keys."""
    seen: dict[str, set[str]] = {}

    def walk(node, prefix=""):
        for k, v in (node or {}).items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            elif isinstance(v, str):
                seen.setdefault(f"{prefix}{k}", set()).add(v)

    for path in sorted(Path(CONFIGS).glob("*.yaml")):
        walk(yaml.safe_load(path.read_text()))
    return seen


STRINGS = strings_in_configs()
SECTIONS = {f.name for f in dataclasses.fields(config.Config)}


WRONG_TYPES = ["abc", "1.5", "[1, 2]"]  # what a typo gives a number key


def value_for(key: str, current):
    if isinstance(current, bool):
        return st.booleans()
    if isinstance(current, int):
        return st.one_of(st.integers(-2, max(8, 2 * current + 4)), st.sampled_from(WRONG_TYPES))
    if isinstance(current, float):
        return st.one_of(st.floats(-1.0, 2 * abs(current) + 1.0), st.sampled_from([0.0, math.nan, math.inf]),
                         st.sampled_from(WRONG_TYPES))
    return st.sampled_from(sorted(STRINGS.get(key, set()) | {current, "bogus"}))


@st.composite
def configs_and_overrides(draw):
    """A base config and 1-3 overrides of its keys; sometimes also a misspelt key or one of a section that a single
    trial does not read (sweep.*, search.*: the sweep verbs' own)."""
    base = draw(st.sampled_from(BASES))
    keys = scalar_keys(config.load(CONFIGS / base, FIXED[:5] if base != "paper_theory.yaml" else FIXED))
    chosen = draw(st.lists(st.sampled_from(sorted(keys)), min_size=1, max_size=3, unique=True))
    overrides = [f"{key}={draw(value_for(key, keys[key]))}" for key in chosen]
    stray = draw(st.sampled_from([None] * 6 + ["misspelt", "sweep.pack=2", "search.success.threshold=0.5"]))
    if stray == "misspelt":
        overrides.append(f"{chosen[0]}x=1")
    elif stray:
        overrides.append(stray)
    return base, overrides, stray if stray != "misspelt" else None


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(configs_and_overrides())
def test_a_config_is_rejected_with_its_key_or_it_trains(drawn):
    base, overrides, stray_section = drawn
    fixed = FIXED if base == "paper_theory.yaml" else FIXED[:5]
    try:
        cfg = config.load(CONFIGS / base, overrides + fixed)
    except ConfigError as e:  # one line naming a key of the config (maybe one the drawn value made impossible)
        assert "\n" not in str(e) and e.reason, (str(e), overrides)
        # a section of the sweep verbs is refused before anything else; otherwise the key is the trial's own
        expected = {stray_section.split(".")[0]} if stray_section else SECTIONS
        assert e.key.split(".")[0] in expected, (str(e), overrides)
        event("rejected")
        return
    assert stray_section is None, overrides  # a single trial never accepts the sweep verbs' sections
    event("trained")
    result = train(cfg)
    assert result.metrics["status"] in FINISHED, (base, overrides, result.metrics)
    assert result.metrics["steps"] <= 4


@pytest.mark.parametrize("base", BASES)
def test_every_base_config_trains_under_the_fixed_small_settings(base):
    """The property above would be vacuous if FIXED itself were rejected: each base must train with it."""
    fixed = FIXED if base == "paper_theory.yaml" else FIXED[:5]
    assert train(config.load(CONFIGS / base, fixed)).metrics["status"] in FINISHED
