"""The option reference (``docs/reference/options.md``), generated from the Config dataclasses: each field's key,
type, default and one-line doc (the comment on its declaration, or the ``doc`` of its field metadata), so the
tables cannot drift from the code. ``python scripts/gen_options.py`` rewrites the page; a test checks it is current.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from enum import Enum
from typing import Dict, Iterable, List, Tuple

_COMMENT = re.compile(r"^\s+(\w+)\s*:[^#]*#\s*(.*)$")


def field_docs(cls: type) -> Dict[str, str]:
    """{field: its one-line doc} of a dataclass, from field metadata or the comment on its declaration line."""
    docs: Dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        for line in lines:
            m = _COMMENT.match(line)
            if m:
                docs[m.group(1)] = m.group(2).strip()
    for f in dataclasses.fields(cls):
        if f.metadata.get("doc"):
            docs[f.name] = f.metadata["doc"]
    return docs


def _value(v) -> str:
    if isinstance(v, Enum):
        v = v.value
    if v is dataclasses.MISSING or repr(v) == "'???'":
        return "(required)"
    return f"`{v!r}`" if not isinstance(v, str) else (f"`{v}`" if v else '`""`')


def _type(f) -> str:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return t[len("Optional["):-1] + " or null" if t.startswith("Optional[") else t


def _allowed(f) -> str:
    from fedbench.options import rule_of

    rule = rule_of(f)
    if rule.choices:
        return " \\| ".join(rule.choices)
    if rule.describe or rule.interval():
        return rule.describe or rule.interval()
    numeric = re.search(r"\b(int|float)\b", str(f.type))
    return ("any" if rule.signed else ">= 0") if numeric else ""


def _default(config, f):
    if not isinstance(config, type):
        return getattr(config, f.name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def table(config, prefix: str, skip: Iterable[str] = ()) -> List[str]:
    """The rows of a Config class (its defaults) or instance (a registered option's values)."""
    docs = field_docs(config if isinstance(config, type) else type(config))
    rows = ["| key | type | default | allowed | |", "|---|---|---|---|---|"]
    for f in dataclasses.fields(config):
        default = _default(config, f)
        if f.name in skip or dataclasses.is_dataclass(default) or f.type == "Any":
            continue  # a nested Config or a config group: they have tables of their own
        kind = " \\| ".join(str(e.value) for e in type(default)) if isinstance(default, Enum) else _type(f)
        rows.append(f"| `{prefix}{f.name}` | {kind} | {_value(default)} | {_allowed(f)} | {docs.get(f.name, '')} |")
    return rows


def _differing(config, base: type) -> Tuple[str, ...]:
    """The keys of ``base`` whose value in ``config`` is base's default: a component's table leaves them out."""
    own = {f.name: _default(config, f) for f in dataclasses.fields(config)}
    return tuple(f.name for f in dataclasses.fields(base) if own.get(f.name) == _default(base, f) or f.name == "name")


def sections() -> List[Tuple[str, object, str, Tuple[str, ...]]]:
    """(title, Config class or instance, key prefix, keys left out) of every component, in page order."""
    from fedbench.algorithms import ALGORITHMS
    from fedbench.algorithms.base import AlgoConfig
    from fedbench.config import schema
    from fedbench.data.partition import PARTITIONERS, PartitionConfig
    from fedbench.data.sources import DATASETS, DatasetConfig
    from fedbench.models import MODELS
    from fedbench.models.base import ModelConfig
    from fedbench.participation import LAYERS
    from fedbench.training.schedule import LRScheduleConfig

    out = [("Run (top level)", schema.RootConfig, "", ()), ("client", schema.ClientConfig, "client.", ()),
           ("client.lr_schedule", LRScheduleConfig, "client.lr_schedule.", ()), ("data", schema.DataConfig, "data.", ()),
           ("engine", schema.EngineConfig, "engine.", ()), ("logger", schema.LoggerConfig, "logger.", ()),
           ("participation", schema.ParticipationConfig, "participation.", ("availability", "selection", "dropout"))]
    for group, registry, base in (("dataset", DATASETS, DatasetConfig), ("partition", PARTITIONERS, PartitionConfig),
                                  ("model", MODELS, ModelConfig), ("algo", ALGORITHMS, AlgoConfig)):
        out.append((f"{group}: keys of every {registry.what}", base, f"{group}.", ("name",)))
        for name in sorted(registry):
            config = registry.config(name)
            out.append((f"{group}={name}", config, f"{group}.", _differing(config, base)))
    for layer, registry in LAYERS.items():
        for name, cls in sorted(registry.items()):
            out.append((f"participation/{layer}={name}", cls.Config, f"participation.{layer}.", ("kind",)))
    return out


def options_markdown() -> str:
    lines = ["# Options", "",
             "Every option of every component, generated from its Config dataclass by `scripts/gen_options.py`",
             "(a test fails when this page is out of date). Set any of them on the command line",
             "(`algo.server_lr=0.5`); presets under `conf/` set only what differs from these defaults.",
             "The *allowed* column is the rule a run checks before it starts (every number must also be finite).", ""]
    for title, config, prefix, skip in sections():
        rows = table(config, prefix, skip)
        lines += [f"## {title}", ""]
        cls = config if isinstance(config, type) else type(config)
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        if doc and not doc.startswith(cls.__name__ + "("):
            lines += [doc, ""]
        lines += (rows if len(rows) > 2 else ["No options besides the common ones."]) + [""]
    return "\n".join(lines)
