"""load() and validate(): typed schema, overrides, and one clear error per kind of bad input."""
import shutil

import pytest
import yaml

from trainables import config
from trainables.errors import ConfigError
from trainables.models.one_step import OneStepConfig
from trainables.models.transformer import TransformerConfig
from tests.conftest import CONFIGS


def error_of(*overrides, path=CONFIGS / "debug.yaml") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config.load(path, list(overrides))
    return info.value


def test_defaults_load_without_a_file():
    cfg = config.load(None, [])
    assert isinstance(cfg.model, OneStepConfig) and cfg.task.name == "trigger_copy"


def test_overrides_beat_the_yaml_and_keep_types(load_config):
    cfg = load_config("paper_theory.yaml", "task.lengths.low=5", "task.n_triggers=8", "seed=3")
    assert (cfg.task.lengths.low, cfg.task.n_triggers, cfg.seed) == (5, 8, 3)
    assert cfg.task.lengths.high == 15 and cfg.model.eta_KQ == 1e4


def test_model_name_picks_the_schema(load_config):
    assert isinstance(load_config("debug.yaml").model, TransformerConfig)
    assert isinstance(config.load(None, ["model.name=transformer"]).model, TransformerConfig)
    # switching models on a file written for another keeps only the keys both have (the test below)
    assert isinstance(config.load(CONFIGS / "debug.yaml", ["model.name=one_step"]).model, OneStepConfig)


def test_unknown_key_names_the_closest_valid_key():
    e = error_of("task.lenghts.low=3")
    assert e.key == "task.lenghts" and "did you mean task.lengths" in e.reason
    e = error_of("task.lengths.hihg=3")
    assert e.key == "task.lengths.hihg" and "task.lengths.high" in e.reason


def test_a_transformer_key_is_unknown_to_the_one_step_model():
    e = error_of("model.n_layers=3", path=CONFIGS / "paper_theory.yaml")
    assert e.key == "model.n_layers" and "unknown key" in e.reason


def test_wrong_type_names_the_key():
    e = error_of("task.lengths.low=three")
    assert e.key == "task.lengths.low" and "three" in e.reason


@pytest.mark.parametrize(
    "override, key",
    [
        ("task.lengths.high=7", "task.lengths.high"),  # T = 17 > L - 1 = 15
        ("task.lengths.high=1", "task.lengths.high"),  # high < low: empty support
        ("task.lengths.low=0", "task.lengths.low"),
        ("task.lengths.family=zipf", "task.lengths.family"),
        ("optim.lr=0", "optim.lr"),
        ("optim.lr=-1e-3", "optim.lr"),
        ("optim.batch_size=0", "optim.batch_size"),
        ("optim.max_steps=0", "optim.max_steps"),
        ("optim.name=lion", "optim.name"),
        ("optim.compile=on", "optim.compile"),  # YAML's `on` is a boolean: the choices are auto, always, never
        ("task.vocab_size=1", "task.vocab_size"),
        ("task.n_triggers=0", "task.n_triggers"),
        ("task.ood_split=sideways", "task.ood_split"),
        ("model.n_heads=0", "model.n_heads"),
        ("model.positional=alibi", "model.positional"),
        ("model.name=mamba", "model.name"),
        ("eval.every=0", "eval.every"),
        ("eval.threshold=1.5", "eval.threshold"),
        ("device=tpu", "device"),
    ],
)
def test_impossible_values_are_rejected_with_their_key(override, key):
    assert error_of(override).key == key


def test_one_step_learning_rates_must_be_positive():
    assert error_of("model.eta_V=0", path=CONFIGS / "paper_theory.yaml").key == "model.eta_V"


def test_weights_that_are_too_long_for_max_len_name_the_weights_key():
    e = error_of("task.lengths.family=weights", "task.lengths.weights=[0,0,0,0,0,0,0,1]")
    assert e.key == "task.lengths.weights" and "T = 2l + 3 = 19" in e.reason


def test_cuda_is_rejected_where_there_is_none():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert "no GPU" in error_of("device=cuda").reason


def test_compiling_without_a_compiler_is_refused_and_auto_runs_eagerly(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler")
    assert "needs a C++ compiler" in error_of("optim.compile=always").reason
    cfg = config.load(CONFIGS / "debug.yaml", ["optim.max_steps=100000"])
    assert cfg.optim.compile == "auto" and cfg.optim.compile_mode() is None
    monkeypatch.delenv("CXX")
    assert cfg.optim.compile_mode() == ("default" if shutil.which("g++") else None)
    assert config.load(CONFIGS / "debug.yaml", ["optim.max_steps=100"]).optim.compile_mode() is None  # too short


def test_cuda_graphs_are_refused_off_a_gpu():
    assert error_of("optim.compile=reduce-overhead").reason.startswith(
        "reduce-overhead replays the step as CUDA graphs")


def test_rotary_needs_an_even_key_width():
    # one-hot embedding with N = 12, L = 16 and a previous-token feature: D = 40, tied W_KQ keys are 40 wide (even);
    # separate keys with d_head = 3 are odd.
    assert error_of("model.positional=rotary", "model.tied_kq=false", "model.d_head=3").key == "model.positional"


def test_onehot_position_needs_onehot_embedding():
    assert error_of("model.embedding=learned").key == "model.positional"


def test_malformed_override_and_missing_file():
    assert error_of("seed").key == "seed"
    assert error_of(path=CONFIGS / "no_such.yaml").key == "CONFIG"


def test_a_config_file_is_read_as_omegaconf_reads_yaml(tmp_path):
    """OmegaConf's YAML loader without its DictConfig: 1e-3 is a float (plain YAML 1.1 reads a string), a key given
    twice is refused, an empty file is the defaults, a list is no config."""
    path = tmp_path / "config.yaml"
    path.write_text("optim:\n  lr: 1e-3\n")
    assert config.load(path, []).optim.lr == 0.001
    path.write_text("seed: 1\nseed: 2\n")
    assert error_of(path=path).key == "CONFIG" and "\n" not in error_of(path=path).reason
    path.write_text("")
    assert config.load(path, []) == config.load(None, [])
    path.write_text("- seed\n")
    assert "must be a mapping" in error_of(path=path).reason


def test_each_caller_gets_a_config_of_its_own():
    """What layers merge to is kept per process (config._merged): a copy is handed out, so what one caller changes
    is not in the next one's, and a refused config is refused every time."""
    first = config.load(CONFIGS / "debug.yaml", ["seed=5"])
    low = first.task.lengths.low
    first.task.lengths.low = low + 1
    assert config.load(CONFIGS / "debug.yaml", ["seed=5"]).task.lengths.low == low
    base = config.to_dict(first)
    point = config.with_point(base, {"seed": 1})
    point.task.lengths.low = low + 2
    assert config.with_point(base, {"seed": 1}).task.lengths.low == low + 1
    assert error_of("task.lengths.low=0").key == error_of("task.lengths.low=0").key == "task.lengths.low"


def test_to_yaml_round_trips(tmp_path, load_config):
    cfg = load_config("debug.yaml", "seed=7")
    (tmp_path / "c.yaml").write_text(config.to_yaml(cfg))
    assert config.load(tmp_path / "c.yaml", []) == cfg


# --- with_point: the base set once per process, each point's keys set on a copy as overrides are -----------------

def as_overrides(point: dict) -> list[str]:
    return [f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"
            for key, value in point.items()]


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml") if "\nsweep:" in p.read_text()))
def test_every_sweep_point_is_the_config_its_overrides_give(name):
    """A point applied to the resolved base dict (once per process, then copied) is the file with the point's keys
    as overrides: the copy is never shared between points, nor changed by one."""
    from sweep.space import load_sweep

    base, _, points = load_sweep(CONFIGS / name, [])
    base_dict = config.to_dict(base)
    members = [config.to_yaml(config.with_point(base_dict, p, check_device=False)) for p in points]
    assert members == [config.to_yaml(config.load(CONFIGS / name, as_overrides(p), check_device=False))
                       for p in points]
    assert config.to_yaml(config.with_point(base_dict, {}, check_device=False)) == config.to_yaml(base)


@pytest.mark.parametrize("point, expected", [
    ({"model.eta_V": 3}, {"model.eta_V": 3.0}),  # an int for a float field: 3.0
    ({"task.lengths.low": "4"}, {"task.lengths.low": 4}),  # a string for an int: OmegaConf converts it
    ({"task.lengths.weights": [1, 2]}, {"task.lengths.weights": [1.0, 2.0]}),  # a list: OmegaConf types its items
    ({"model.name": "one_step", "optim.lr": 1}, {"optim.lr": 1.0}),  # a section's name (it picks the schema)
    ({"seed": 3, "task.lengths.width": 4}, {"seed": 3, "task.lengths.high": 6}),  # width resolves high
])
def test_a_point_is_converted_to_its_fields_types(point, expected):
    base = config.to_dict(config.load(CONFIGS / "paper_theory.yaml"))
    cfg = config.with_point(base, point, check_device=False)
    for key, value in expected.items():
        assert repr(config.select(cfg, key)) == repr(value), key  # 3.0, not 3
    assert config.to_yaml(config.with_point(base, {}, check_device=False)) != config.to_yaml(cfg)


@pytest.mark.parametrize("point, key", [
    ({"task.lengths.lo": 4}, "task.lengths.lo"),  # unknown key
    ({"task.lengths.low": "four"}, "task.lengths.low"),  # not a number
    ({"task.lengths.low": True}, "task.lengths.low"),  # a bool for an int
    ({"task.lengths.low": 0}, "task.lengths.low"),  # valid type, impossible value
])
def test_a_bad_point_is_refused_as_its_override_is(point, key):
    base = config.to_dict(config.load(CONFIGS / "paper_theory.yaml"))
    with pytest.raises(ConfigError) as member:
        config.with_point(base, point, check_device=False)
    with pytest.raises(ConfigError) as override:
        config.load(CONFIGS / "paper_theory.yaml", as_overrides(point))
    assert member.value.key == override.value.key == key and member.value.reason == override.value.reason


def test_switching_the_model_keeps_the_keys_both_share_and_drops_the_others():
    """`model.name=...` on a config written for another model (an override, a sweep point): one grid can compare
    models. Keys the new model shares (d_model, n_layers) carry over; the old model's own (n_heads) are dropped."""
    base = config.to_dict(config.load(CONFIGS / "debug.yaml", ["model.embedding=learned", "model.d_model=24",
                                                                      "model.positional=relative"]))
    mixer = config.with_point(base, {"model.name": "tests.plugins.mean_mixer:SPEC"})
    assert mixer.model.name == "tests.plugins.mean_mixer:SPEC" and mixer.model.d_model == 24
    section = config.with_point(base, {"model": {"name": "one_step"}})
    assert section.model.name == "one_step" and not hasattr(section.model, "n_heads")
    overridden = config.load(CONFIGS / "debug.yaml", ["model.name=one_step"])
    assert type(overridden.model).__name__ == "OneStepConfig"
    with pytest.raises(ConfigError, match=r"model\.n_heads: unknown key"):  # a key set after the switch still counts
        config.load(CONFIGS / "debug.yaml", ["model.name=one_step", "model.n_heads=2"])


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_to_dict_is_omegaconfs_container_of_the_structured_config(name):
    """to_dict reads the dataclasses directly (building a DictConfig cost 10-40 ms a config); it gives what OmegaConf
    gives, types included (3.0 stays a float, a tuple comes back a list), for every shipped config and a few points."""
    from omegaconf import OmegaConf

    from sweep.space import load_sweep

    cfgs = [config.load(CONFIGS / name, [], check_device=False)]
    if "\nsweep:" in (CONFIGS / name).read_text():
        base, _, points = load_sweep(CONFIGS / name, [])
        cfgs += [config.with_point(config.to_dict(base), point, check_device=False) for point in points[:5]]
    for cfg in cfgs:
        assert repr(config.to_dict(cfg)) == repr(OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True))
