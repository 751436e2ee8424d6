"""Options declared once: a Config field carries its default *and* its allowed values.

``lr: float = option(0.05, gt=0)`` declares the default and the range; ``check_values`` (run on the composed
config before anything is built, and by a component built on its own) reads them from the dataclass the node was
composed from, so no second table of ranges exists. The rules for every number: it is finite, it lies in its declared range,
and without one it is >= 0 unless declared ``signed``. Lists of numbers are checked element by element.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import MISSING, dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf

from fedbench.errors import ConfigError

META = "fedbench"  # the key of a field's metadata that holds its Rule
TUNE = "fedbench.tune"  # the key that holds its search space (``Search``)


@dataclass(frozen=True)
class Rule:
    """The allowed values of one option: an interval (``ge``/``gt``, ``le``/``lt``), a set of strings
    (``choices``), a regular expression (``pattern``, described by ``describe``), or ``signed`` (any finite
    number)."""

    ge: Optional[float] = None
    gt: Optional[float] = None
    le: Optional[float] = None
    lt: Optional[float] = None
    signed: bool = False
    choices: Tuple[str, ...] = ()
    pattern: Optional[str] = None
    describe: str = ""
    why: str = ""  # the reason for the bounds, said in the error

    @property
    def low(self) -> Optional[float]:
        return self.ge if self.ge is not None else self.gt

    @property
    def high(self) -> Optional[float]:
        return self.le if self.le is not None else self.lt

    def interval(self) -> str:
        """``>= 1``, ``> 0``, ``in [0, 1)``; empty without bounds."""
        lo, hi = self.low, self.high
        if lo is None and hi is None:
            return ""
        if hi is None:
            return f">= {lo}" if self.ge is not None else f"> {lo}"
        if lo is None:
            return f"<= {hi}" if self.le is not None else f"< {hi}"
        if lo == hi and self.ge is not None and self.le is not None:
            return f"equal to {lo}"
        return f"in {'[' if self.ge is not None else '('}{lo}, {hi}{']' if self.le is not None else ')'}"

    def contains(self, value: float) -> bool:
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))

    def check(self, key: str, value: Any) -> None:
        """Raise ``ConfigError`` naming ``key`` unless ``value`` is allowed (None, which only an Optional field
        can hold, always is)."""
        why = f" ({self.why})" if self.why else ""
        if value is None:
            return
        if self.choices:
            if value not in self.choices:
                raise ConfigError(key, f"'{value}' is not an option{why}.", f"use one of {', '.join(self.choices)}.")
            return
        if self.pattern is not None:
            if not re.fullmatch(self.pattern, str(value)):
                raise ConfigError(key, f"'{value}' is not {self.describe}{why}.", f"use {self.describe}.")
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        if not math.isfinite(value):
            raise ConfigError(key, f"{value} is not a finite number.", "give a finite value.")
        if self.low is None and self.high is None:
            if value < 0 and not self.signed:
                raise ConfigError(key, f"{value} is negative.", "use a value >= 0.")
        elif not self.contains(value):
            raise ConfigError(key, f"{value} is out of range{why}.", f"use a value {self.interval()}.")


DEFAULT_RULE = Rule()  # an undeclared number: finite and >= 0


@dataclass(frozen=True)
class Search:
    """The search space ``fedbench-tune`` gives an option by default: the grid points (``values``), which the
    ``tpe`` sampler reads as the interval [min, max] (log-uniform with ``log``)."""

    values: Tuple[Any, ...]
    log: bool = False


#: the default local step-size grid: half decades from 1e-3 to 1
LR_GRID = Search((1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001), log=True)




def option(default: Any = MISSING, *, factory: Optional[Callable[[], Any]] = None, ge: Optional[float] = None,
           gt: Optional[float] = None, le: Optional[float] = None, lt: Optional[float] = None, signed: bool = False,
           choices: Sequence[str] = (), pattern: Optional[str] = None, describe: str = "", why: str = "",
           tune: Optional[Search] = None) -> Any:
    """A dataclass field with its default (or ``factory``), its allowed values (see ``Rule``) and, with ``tune``,
    the search space ``fedbench-tune`` gives it by default."""
    metadata = {META: Rule(ge, gt, le, lt, signed, tuple(choices), pattern, describe, why)}
    if tune is not None:
        metadata[TUNE] = tune
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def rule_of(f: dataclasses.Field) -> Rule:
    return f.metadata.get(META, DEFAULT_RULE)


def declared_searches(cls: type) -> Iterator[Tuple[str, Search]]:
    """(field name, search space) of every field of ``cls`` declared with ``option(..., tune=...)``."""
    for f in dataclasses.fields(cls):
        if TUNE in f.metadata:
            yield f.name, f.metadata[TUNE]


def declared_rules(cls: type) -> Iterator[Tuple[str, Rule]]:
    """(field name, rule) of every field of ``cls`` declared with ``option(...)``."""
    for f in dataclasses.fields(cls):
        if META in f.metadata:
            yield f.name, f.metadata[META]


def typed(node: Any) -> Any:
    """A composed config node as the instance of the dataclass it was composed from (``OmegaConf.to_object``);
    anything else (an untyped DictConfig included) as it is. For the options a component reads every round: a
    DictConfig attribute costs about 20 us, a dataclass's tens of ns, and the values are the same (numbers,
    strings, Enum members, lists)."""
    if isinstance(node, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(node)):
        return OmegaConf.to_object(node)
    return node


def check_values(node: DictConfig, prefix: str = "", rules: Optional[Mapping[str, Rule]] = None) -> None:
    """Raise ``ConfigError`` naming the first value its field's rule refuses (lists element by element; keys of
    untyped nodes, such as ``algo_settings``, by the default rule: finite and >= 0). ``rules``: rules by dotted
    key for nodes whose dataclasses are not fedbench's (the launchers'), taking precedence."""
    cls = OmegaConf.get_type(node)
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    for key in node:
        if OmegaConf.is_missing(node, key):
            continue
        path = f"{prefix}.{key}" if prefix else str(key)
        rule = (rules or {}).get(path) or (rule_of(fields[key]) if key in fields else DEFAULT_RULE)
        value = node[key]
        if isinstance(value, DictConfig):
            check_values(value, path, rules)
        elif isinstance(value, ListConfig):
            for i, item in enumerate(value):
                if isinstance(item, DictConfig):
                    check_values(item, f"{path}[{i}]", rules)
                elif not isinstance(item, ListConfig):
                    rule.check(f"{path}[{i}]", item)
        else:
            rule.check(path, value)
