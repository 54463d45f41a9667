"""Every shipped config loads and validates as the verb its first line names would load it (no training)."""
import pytest
import yaml

from sweep import space
from sweep.search import studies as search_studies
from sweep.search.config import load_search
from tests.conftest import CONFIGS
from trainables import config

ALL = sorted(CONFIGS.glob("*.yaml"))


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_config_loads_and_its_first_line_is_its_command(path):
    verb = path.read_text().splitlines()[0].split()[2]  # "# headsweep <verb> configs/<name>.yaml --out ..."
    assert path.read_text().startswith(f"# headsweep {verb} configs/{path.name} ")
    sections = yaml.safe_load(path.read_text())
    if verb == "search":
        base, search = load_search(path, [])
        assert search_studies.slices(base, search, base.name)
    elif verb == "grid":
        assert space.load_sweep(path, [])[2]
    else:
        assert verb == "train" and not {"search", "sweep"} & set(sections)
        config.load(path, [], check_device=False)


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_config_yaml_is_omegaconfs_text(path):
    """config.to_yaml dumps the dataclasses directly (fast); its text must stay OmegaConf.to_yaml's, since re-running a
    verb on an output directory compares it with the config.yaml written there."""
    from omegaconf import OmegaConf

    verb = path.read_text().splitlines()[0].split()[2]
    if verb == "search":
        base, section = load_search(path, [])
        sections = {"search": section}
    elif verb == "grid":
        base, section, _ = space.load_sweep(path, [])
        sections = {"sweep": section}
    else:
        base, sections = config.load(path, [], check_device=False), {}
    expected = OmegaConf.to_yaml(OmegaConf.structured(base)) + "".join(
        OmegaConf.to_yaml({name: OmegaConf.structured(section)}) for name, section in sections.items())
    assert config.to_yaml(base, **sections) == expected


def test_the_transformer_quickstart_is_the_transformer_search_cut_to_two_slices_and_4000_steps():
    """Its header promises the model, task and success of configs/transformer_search.yaml and compares their
    verdicts: only the name, the step cap, the slices (l0 in {2, 4}, one trigger) and the knob's range may differ."""
    (quick, quick_search), (full, full_search) = (load_search(CONFIGS / name, []) for name in
                                                  ("transformer_quickstart.yaml", "transformer_search.yaml"))
    quick, full = config.to_dict(quick), config.to_dict(full)
    assert quick["optim"].pop("max_steps") == 4000 and full["optim"].pop("max_steps") == 15000
    for cfg in (quick, full):
        del cfg["name"], cfg["task"]["lengths"], cfg["task"]["n_triggers"]
    assert quick == full
    assert quick_search.success == full_search.success and quick_search.stop == full_search.stop
    assert quick_search.knob.key == full_search.knob.key and quick_search.budget == full_search.budget
    assert [(s.key, s.values) for s in quick_search.slices] == [("task.lengths.low", [2, 4])]
