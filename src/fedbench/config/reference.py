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


def table(cls: type, prefix: str, skip: Iterable[str] = ()) -> List[str]:
    docs = field_docs(cls)
    rows = ["| key | type | default | |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if f.name in skip or dataclasses.is_dataclass(default) or f.type == "Any":
            continue  # a nested Config or a config group: they have tables of their own
        kind = " \\| ".join(str(e.value) for e in type(default)) if isinstance(default, Enum) else _type(f)
        rows.append(f"| `{prefix}{f.name}` | {kind} | {_value(default)} | {docs.get(f.name, '')} |")
    return rows


def sections() -> List[Tuple[str, type, str, Tuple[str, ...]]]:
    """(title, Config class, key prefix, keys left out) of every component, in page order."""
    from fedbench.algorithms import ALGORITHMS
    from fedbench.algorithms.base import AlgoConfig
    from fedbench.config import schema
    from fedbench.participation import LAYERS
    from fedbench.training.schedule import LRScheduleConfig

    out = [("Run (top level)", schema.RootConfig, "", ()), ("client", schema.ClientConfig, "client.", ()),
           ("client.lr_schedule", LRScheduleConfig, "client.lr_schedule.", ()), ("data", schema.DataConfig, "data.", ()),
           ("engine", schema.EngineConfig, "engine.", ()), ("logger", schema.LoggerConfig, "logger.", ()),
           ("dataset: image datasets", schema.ImageDatasetConfig, "dataset.", ()),
           ("dataset=digits", schema.DigitsConfig, "dataset.", ()),
           ("dataset=synthetic", schema.SyntheticConfig, "dataset.", ()),
           ("partition", schema.PartitionConfig, "partition.", ()), ("model", schema.ModelConfig, "model.", ()),
           ("participation", schema.ParticipationConfig, "participation.", ("availability", "selection", "dropout")),
           ("algo: keys of every algorithm", AlgoConfig, "algo.", ())]
    common = {f.name for f in dataclasses.fields(AlgoConfig)}
    for name, cls in sorted(ALGORITHMS.items()):
        out.append((f"algo={name}", cls.Config, "algo.", tuple(common)))
    for layer, registry in LAYERS.items():
        for name, cls in sorted(registry.items()):
            out.append((f"participation/{layer}={name}", cls.Config, f"participation.{layer}.", ("kind",)))
    return out


def options_markdown() -> str:
    lines = ["# Options", "",
             "Every option of every component, generated from its Config dataclass by `scripts/gen_options.py`",
             "(a test fails when this page is out of date). Set any of them on the command line",
             "(`algo.server_lr=0.5`); presets under `conf/` set only what differs from these defaults.", ""]
    for title, cls, prefix, skip in sections():
        rows = table(cls, prefix, skip)
        lines += [f"## {title}", ""]
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        if doc and not doc.startswith(cls.__name__ + "("):
            lines += [doc, ""]
        lines += (rows if len(rows) > 2 else ["No options besides the common ones."]) + [""]
    return "\n".join(lines)
