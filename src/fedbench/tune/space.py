"""Search spaces: what ``fedbench-tune`` varies for each algorithm, and the trials it draws from them.

An algorithm's space is, by default, every ``client.*`` and ``algo.*`` option declared with
``option(..., tune=Search(...))`` (``client.lr`` for all, ``algo.mu`` for FedProx, ...). A preset replaces it with
its paper's grid through ``tune_space: {"*": {key: [values]}, <algorithm>: {key: [values]}}`` (the algorithm's
entries on top of ``"*"``), and ``fedbench-tune --space key=v1,v2`` replaces a key for every algorithm.

``grid`` tries every point of the product when it has at most ``--trials`` points, else ``--trials`` points drawn
without replacement from the stream (tune seed, "tune/grid/<method>"): every method gets the same number of
trials, min(trials, its grid size). ``tpe`` samples with Optuna's TPE: a declared space is read as the interval
[min, max] (log-uniform where declared ``log``), a preset's or ``--space`` list as a categorical choice.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from fedbench.errors import ConfigError
from fedbench.options import DEFAULT_RULE, declared_searches, rule_of
from fedbench.rng import numpy_rng

#: keys the tuning protocol sets itself, never searched
PROTOCOL_KEYS = ("seed", "algo", "algo.name", "algo.kind", "data.val_fraction", "resume")
#: the sections whose declared options form the default space
SECTIONS = ("client", "algo")


@dataclass
class Dimension:
    """One searched key: its grid ``values``; ``continuous``: ``tpe`` samples [min, max] (log-uniform with
    ``log``) instead of choosing among the values."""

    key: str
    values: List[Any]
    log: bool = False
    continuous: bool = False

    @property
    def step(self) -> bool:
        """A step size (``client.lr``, ``algo.server_lr``): validation ties go to its smaller value."""
        return self.key.rsplit(".", 1)[-1].endswith("lr")

    def distribution(self):
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if not self.continuous:
            return CategoricalDistribution(self.values)
        low, high = min(self.values), max(self.values)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in self.values):
            return IntDistribution(int(low), int(high), log=self.log)
        return FloatDistribution(float(low), float(high), log=self.log)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _field_rule(cfg: DictConfig, key: str):
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    cls = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
    fields = {f.name: f for f in dataclasses.fields(cls)} if cls is not None and dataclasses.is_dataclass(cls) else {}
    return rule_of(fields[leaf]) if leaf in fields else DEFAULT_RULE  # as check_values reads untyped keys


def declared(cfg: DictConfig) -> List[Dimension]:
    """The default space of the composed config ``cfg``: its ``client`` and ``algo`` options declared with
    ``tune=Search(...)``, in declaration order."""
    dims = []
    for section in SECTIONS:
        cls = OmegaConf.get_type(cfg[section])
        if cls is None or not dataclasses.is_dataclass(cls):
            continue
        for name, search in declared_searches(cls):
            dims.append(Dimension(f"{section}.{name}", list(search.values), search.log, continuous=True))
    return dims


def _listed(key: str, values: Any, where: str) -> Dimension:
    if not isinstance(values, (list, tuple)) or not values:
        raise ConfigError(where, f"the values of '{key}' must be a non-empty list, not {values!r}.",
                          f"write e.g. {key}: [0.1, 0.01].")
    if len({repr(v) for v in values}) != len(values):
        raise ConfigError(where, f"'{key}' lists a value twice ({list(values)}).", "list each value once.")
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    log = len(numbers) == len(values) and all(v > 0 for v in numbers)
    return Dimension(key, list(values), log=log, continuous=False)


def resolve(cfg: DictConfig, cli_space: Optional[Dict[str, List[Any]]] = None) -> List[Dimension]:
    """The space of the algorithm ``cfg`` runs: the preset's ``tune_space`` (``"*"`` then the algorithm's entries)
    if it names one, else the declared options; ``cli_space`` (``--space``) replaces keys on top. Every key must be
    an option of ``cfg`` and every value allowed by its declared rule."""
    name = str(cfg.algo.name)
    preset = OmegaConf.to_container(cfg.tune_space, resolve=True)  # its shape is checked by apply_presets
    if "*" in preset or name in preset:
        listed = {**(preset.get("*") or {}), **(preset.get(name) or {})}
        dims = [_listed(k, v, f"tune_space.{'*' if k in (preset.get('*') or {}) else name}.{k}")
                for k, v in listed.items()]
    else:
        dims = declared(cfg)
    for key, values in (cli_space or {}).items():
        dims = [d for d in dims if d.key != key] + [_listed(key, values, f"--space {key}")]
    for d in dims:
        if d.key in PROTOCOL_KEYS or d.key.split(".")[0] == "hydra":
            raise ConfigError(f"tune space key {d.key}", "fedbench-tune sets this key itself.",
                              "search options of the client or the algorithm (client.lr, algo.mu, ...).")
        if OmegaConf.select(cfg, d.key, default=_ABSENT) is _ABSENT:
            raise ConfigError(d.key, f"algorithm {name} has no option '{d.key}' to tune.",
                              "list only keys of the composed config (python run.py --cfg job algo=<name>).")
        rule = _field_rule(cfg, d.key)
        for v in d.values:
            rule.check(d.key, v)
    return dims


_ABSENT = object()


def grid_points(dims: Sequence[Dimension], trials: int, seed: int, method: str) -> List[Dict[str, Any]]:
    """The grid trials of ``dims``: every point when there are at most ``trials``, else ``trials`` of them drawn
    without replacement from the stream (seed, "tune/grid/<method>"), in grid order."""
    points = [dict(zip([d.key for d in dims], combo)) for combo in itertools.product(*(d.values for d in dims))]
    if len(points) <= trials:
        return points
    picked = numpy_rng(seed, f"tune/grid/{method}").choice(len(points), size=trials, replace=False)
    return [points[i] for i in sorted(picked)]


def grid_size(dims: Sequence[Dimension]) -> int:
    return math.prod(len(d.values) for d in dims)
