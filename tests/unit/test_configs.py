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
