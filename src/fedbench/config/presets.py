"""A preset's settings that depend on the run's choices, so that one preset composes with any sweep over them.

* ``algo_settings: {<algorithm>: {key: value}}``: applied to ``algo`` when that algorithm runs (a paper's tuned
  learning rates, its FedAvg with the normalized average);
* ``when: {"<key>=<value>": {<key>: value}}``: applied when the composed config has that value (e.g. the
  aggregation a selection rule's paper uses: ``participation.selection.kind=power_of_choice`` with
  ``algo.aggregation: normalized``);
* ``where_supported: {<group path>: {key: value}}``: applied where the composed group has the key (e.g.
  ``participation.selection.clients_per_round``, which ``selection=all`` does not take);
* ``tune_space: {"*" | <algorithm>: {key: [values]}}``: the paper's grid for ``fedbench-tune`` (``fedbench.tune.
  space``); its names and shape are checked here, its keys and values when the tuning resolves them.

Keys the user set on the command line win over all three. Every name and key is checked against the registered
schemas, so a typo is an error, never a silently ignored setting.
"""

from __future__ import annotations

import dataclasses
from typing import List, Set

from omegaconf import DictConfig, OmegaConf

from fedbench.config import CONF_DIR, group_options
from fedbench.tree import flatten
from fedbench.errors import ConfigError


#: the preset tables above: the root keys whose entries are names and keys of the user's choosing, so a command line
#: adds to them with '+' (``+algo_settings.fedamd.p=0.9``), checked here like a preset's own
TABLES = ("algo_settings", "when", "where_supported", "tune_space")


def _schema_fields(group: str) -> Set[str]:
    """Every key some registered option of ``group`` accepts (empty when the group has no registry)."""
    from fedbench.algorithms import ALGORITHMS
    from fedbench.data.partition import PARTITIONERS
    from fedbench.data.sources import DATASETS
    from fedbench.models import MODELS
    from fedbench.participation import LAYERS

    registries = {"algo": ALGORITHMS, "dataset": DATASETS, "partition": PARTITIONERS, "model": MODELS,
                  **{f"participation.{layer}": registry for layer, registry in LAYERS.items()}}
    if group not in registries:
        return set()
    return {f.name for component in registries[group].values() for f in dataclasses.fields(component.Config)}


def _apply_when(cfg: DictConfig, explicit: Set[str]) -> None:
    """The ``when`` settings whose condition ``key=value`` holds in ``cfg`` (compared as text; enums by value)."""
    for condition, values in OmegaConf.to_container(cfg.when, resolve=True).items():
        key, sep, expected = condition.partition("=")
        if not sep or OmegaConf.select(cfg, key, default=_ABSENT) is _ABSENT:
            raise ConfigError(f"when.{condition}", "a condition is 'key=value' with a key of the composed config.",
                              "write e.g. 'participation.selection.kind=power_of_choice'.")
        actual = OmegaConf.select(cfg, key)
        if str(getattr(actual, "value", actual)) != expected:
            continue
        for dotted, value in flatten(values or {}).items():
            if OmegaConf.select(cfg, dotted, default=_ABSENT) is _ABSENT:
                raise ConfigError(f"when.{condition}.{dotted}", f"'{dotted}' is not a key of the composed config.",
                                  "check the key's spelling against the options reference.")
            if dotted not in explicit:
                OmegaConf.update(cfg, dotted, value, merge=False)


_ABSENT = object()


def algo_kind(name: str) -> str:
    """The registered algorithm an ``algo`` option runs: itself, or the schema a preset's YAML starts from."""
    from fedbench.algorithms import ALGORITHMS

    if name in ALGORITHMS:
        return name
    defaults = OmegaConf.load(CONF_DIR / "algo" / f"{name}.yaml").get("defaults", [])
    return next(str(d).split("/")[-1].split("@")[0] for d in defaults if str(d).startswith("/schema/algo/"))


def user_keys(overrides: List[str]) -> Set[str]:
    """The dotted keys a command line sets (``key=value``, ``+key=value``, ``++key=value``)."""
    keys = set()
    for o in overrides:
        if "=" in o and not o.startswith("~"):
            keys.add(o.split("=", 1)[0].lstrip("+"))
    return keys


def apply_presets(cfg: DictConfig, explicit: Set[str]) -> DictConfig:
    """``cfg`` with its ``algo_settings``, ``when`` and ``where_supported`` applied (a copy); keys in ``explicit``
    kept."""
    from fedbench.algorithms import ALGORITHMS

    cfg = cfg.copy()
    settings = OmegaConf.to_container(cfg.algo_settings, resolve=True)
    names = group_options("algo")
    for name, values in settings.items():
        if name not in names:
            raise ConfigError(f"algo_settings.{name}", f"'{name}' is not an algorithm.",
                              f"use one of: {', '.join(names)}.")
        allowed = {f.name for f in dataclasses.fields(ALGORITHMS.get_class(algo_kind(name)).Config)} - {"name", "kind"}
        for key in (values or {}):
            if key not in allowed:
                raise ConfigError(f"algo_settings.{name}.{key}", f"algorithm {name} has no option '{key}'.",
                                  f"use one of: {', '.join(sorted(allowed))}.")
    for name, space in OmegaConf.to_container(cfg.tune_space, resolve=True).items():
        if name != "*" and name not in names:
            raise ConfigError(f"tune_space.{name}", f"'{name}' is not an algorithm.",
                              f"use \"*\" (every algorithm) or one of: {', '.join(names)}.")
        if not isinstance(space, dict) or not all(isinstance(v, list) and v for v in space.values()):
            raise ConfigError(f"tune_space.{name}", "an entry maps option keys to non-empty lists of values.",
                              'write e.g. tune_space: {"*": {client.lr: [0.1, 0.01]}}.')
    for key, value in (settings.get(cfg.algo.name) or {}).items():
        if f"algo.{key}" not in explicit:
            OmegaConf.update(cfg, f"algo.{key}", value, merge=False)
    _apply_when(cfg, explicit)
    for dotted, value in flatten(OmegaConf.to_container(cfg.where_supported, resolve=True)).items():
        if not dotted:
            continue
        group, _, leaf = dotted.rpartition(".")
        node = OmegaConf.select(cfg, group) if group else None
        if not isinstance(node, DictConfig):
            raise ConfigError(f"where_supported.{dotted}", f"'{group}' is not a config group.",
                              "name a group such as participation.selection or algo.")
        if leaf in node:
            if dotted not in explicit:
                OmegaConf.update(cfg, dotted, value, merge=False)
        elif leaf not in _schema_fields(group):
            raise ConfigError(f"where_supported.{dotted}", f"no option of '{group}' has the key '{leaf}'.",
                              "check the key's spelling against the group's options.")
    return cfg
