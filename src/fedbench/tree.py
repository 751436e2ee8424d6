"""Nested plain containers (the resolved config as dicts and lists)."""

from __future__ import annotations

from typing import Any, Dict


def flatten(node: Any, prefix: str = "") -> Dict[str, Any]:
    """{dotted key: value} of the leaves of nested dicts (an empty dict is a leaf; lists are values)."""
    if not isinstance(node, dict) or not node:
        return {prefix: node}
    out: Dict[str, Any] = {}
    for k, v in node.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out
