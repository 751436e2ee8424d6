"""Each option is declared once: its component's Config dataclass is the only place its default is written."""

import dataclasses

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from conftest import ROOT
from fedbench.algorithms import ALGORITHMS
from fedbench.config import CONF_DIR, group_options, groups, register_configs
from fedbench.config import schema
from fedbench.participation import LAYERS

register_configs()
STORE = ConfigStore.instance()
OPTION_FILES = sorted(p for p in CONF_DIR.rglob("*.yaml")
                      if p.relative_to(CONF_DIR).parts[0] not in ("hydra", "experiment") and p.name != "config.yaml")


def _stored(path: str):
    """A ConfigStore entry as plain values (enums as strings), or None."""
    try:
        node = STORE.load(path.strip("/") + ".yaml").node
    except Exception:
        return None
    return OmegaConf.to_container(node, enum_to_str=True, throw_on_missing=False)


def _bases(path, body_defaults):
    """{key prefix: the values the file starts from} for its defaults list: a schema (``/schema/...@_here_``), an
    option of its own group (``- fedsrc_d``) or a nested group (``- availability: markov``)."""
    group = str(path.parent.relative_to(CONF_DIR))
    out = {}
    for entry in body_defaults:
        entry = OmegaConf.to_container(entry) if not isinstance(entry, str) else entry
        if isinstance(entry, str):
            if entry == "_self_":
                continue
            target = entry.split("@")[0]
            found = _stored(target) if target.startswith("/") else (_stored(f"{group}/{target}")
                                                                     or _option_file(group, target))
            assert found is not None, f"{path}: cannot resolve defaults entry {entry}"
            out[""] = {**out.get("", {}), **found}
        else:
            (sub, option), = entry.items()
            found = _stored(f"{group}/{sub}/{option}") or _option_file(f"{group}/{sub}", option)
            out[sub] = found or {}
    return out


def _option_file(group, option):
    f = CONF_DIR / group / f"{option}.yaml"
    if not f.is_file():
        return None
    y = OmegaConf.load(f)
    base = _bases(f, y.get("defaults", [])).get("", {})
    return {**base, **{k: v for k, v in OmegaConf.to_container(y, enum_to_str=True).items() if k != "defaults"}}


@pytest.mark.parametrize("path", OPTION_FILES, ids=lambda p: str(p.relative_to(CONF_DIR)))
def test_a_yaml_option_sets_only_what_differs_from_the_dataclass_default(path):
    y = OmegaConf.load(path)
    bases = _bases(path, y.get("defaults", []))
    body = {k: v for k, v in OmegaConf.to_container(y, enum_to_str=True).items() if k != "defaults"}
    for key, value in body.items():
        if isinstance(value, dict) and key in bases:
            for sub, v in value.items():
                assert bases[key].get(sub, object()) != v, f"{path}: {key}.{sub}: {v} repeats its default"
        else:
            assert bases.get("", {}).get(key, object()) != value, f"{path}: {key}: {value} repeats its default"


def test_no_yaml_file_shadows_a_registered_option():
    for path in OPTION_FILES:
        group = str(path.parent.relative_to(CONF_DIR))
        assert _stored(f"{group}/{path.stem}") is None, f"{path} repeats the ConfigStore option {group}/{path.stem}"


def test_the_root_yaml_only_composes():
    y = OmegaConf.load(CONF_DIR / "config.yaml")
    assert set(y) == {"defaults", "hydra"}, "root options are declared in fedbench.config.schema.RootConfig"


def _configs():
    yield from (cls.Config for _, cls in ALGORITHMS.items())
    yield from (cls.Config for registry in LAYERS.values() for _, cls in registry.items())
    yield from (v for v in vars(schema).values() if isinstance(v, type) and dataclasses.is_dataclass(v))


def _default(f):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


@pytest.mark.parametrize("config", sorted(set(_configs()), key=lambda c: c.__qualname__), ids=lambda c: c.__qualname__)
def test_a_config_class_does_not_repeat_an_inherited_default(config):
    """A field declared again changes its default or its declaration (rule, search space), never neither."""
    for parent in config.__mro__[1:]:
        if not dataclasses.is_dataclass(parent):
            continue
        inherited = {f.name: (_default(f), dict(f.metadata)) for f in dataclasses.fields(parent)}
        own = {f.name: f for f in dataclasses.fields(config) if f.name in vars(config).get("__annotations__", {})}
        for name, f in own.items():
            assert name not in inherited or inherited[name] != (_default(f), dict(f.metadata)), \
                f"{config.__qualname__}.{name} repeats {parent.__qualname__}'s default {inherited[name]!r}"


def test_every_group_lists_its_registered_and_preset_options():
    assert {"fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "wait_full"} <= set(group_options("algo"))
    assert {"markov", "bernoulli"} <= set(group_options("participation/availability"))
    assert {"fedsrc_d", "fedsrc_d_oracle", "fedsrc_d_code"} <= set(group_options("participation/selection"))
    assert {"algo", "participation/selection", "dataset", "experiment"} <= set(groups())
    assert not any(g.startswith("schema") for g in groups())


def test_the_option_reference_page_is_generated_from_the_dataclasses():
    from fedbench.config.reference import options_markdown

    page = ROOT / "docs" / "reference" / "options.md"
    if not page.is_file():
        pytest.skip("an installed package without the docs")
    assert page.read_text() == options_markdown(), "run: python scripts/gen_options.py"


def _typed_equal(node, obj, path):
    """Every key of the composed ``node`` reads the same value, of the same type, from ``typed(node)``."""
    for key in node:
        a, b = node[key], getattr(obj, key)
        if OmegaConf.is_config(a):
            a = OmegaConf.to_container(a) if OmegaConf.is_list(a) else a
            if not isinstance(a, list):
                _typed_equal(a, b, f"{path}.{key}")
                continue
        assert type(a) is type(b) and a == b, (f"{path}.{key}", a, b)


@pytest.mark.parametrize("group", ["algo", "participation"])
def test_components_read_their_options_from_typed_configs_with_the_same_values(group):
    """Algorithms and participation layers keep ``typed(cfg)`` (their Config instance: attribute reads in the
    round loop cost ns, not the DictConfig's us); for every option of the group it holds the composed values."""
    from conftest import compose
    from fedbench.options import typed

    for name in group_options(group):
        node = compose(f"{group}={name}")[group]
        obj = typed(node)
        assert dataclasses.is_dataclass(obj) and type(obj) is OmegaConf.get_type(node), name
        _typed_equal(node, obj, f"{group}={name}")
        if group == "algo":
            assert isinstance(obj, ALGORITHMS.get_class(node.kind).Config)
        else:
            for layer in LAYERS:
                assert isinstance(getattr(obj, layer), LAYERS[layer].get_class(node[layer].kind).Config)


def test_typed_leaves_what_no_dataclass_composed_as_it_is():
    from fedbench.options import typed

    node = OmegaConf.create({"server_lr": 1.0})
    assert typed(node) is node and typed(None) is None


def test_a_simulation_hands_its_components_typed_configs(tiny_cfg, tmp_path):
    from conftest import make_sim

    sim = make_sim(tiny_cfg("participation=markov"), tmp_path)
    process = sim.participation
    for cfg in (sim.algo.cfg, sim.client, process.cfg, process.availability.cfg, process.selection.cfg,
                process.dropout.cfg):
        assert dataclasses.is_dataclass(cfg) and not OmegaConf.is_config(cfg)
