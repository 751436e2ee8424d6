"""Nested plain containers (the resolved config as dicts and lists; records written as strict JSON)."""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable


def flatten(node: Any, prefix: str = "") -> Dict[str, Any]:
    """{dotted key: value} of the leaves of nested dicts (an empty dict is a leaf; lists are values)."""
    if not isinstance(node, dict) or not node:
        return {prefix: node}
    out: Dict[str, Any] = {}
    for k, v in node.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def under(key: str, prefixes: Iterable[str]) -> bool:
    """Whether the dotted ``key`` is one of ``prefixes`` or below one (``logger.wandb.mode`` is under ``logger``)."""
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def strict_json(value: Any) -> Any:
    """``value`` as strict JSON can hold it: NaN and infinities become None (strict JSON has no such numbers), and
    numpy scalars and arrays their plain numbers and lists (``tolist``)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value
