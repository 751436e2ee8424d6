"""Config registration and validation."""

from __future__ import annotations

import os
import secrets
from typing import Any, Dict

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from fedbench.config import schema

_registered = False
#: Makes output directories unique per process (two identical jobs started in the same second differ).
_UID = f"{os.getpid() % 100000:05d}{secrets.token_hex(2)}"


def flatten(node: Any, prefix: str = "") -> Dict[str, Any]:
    """{dotted key: value} of the leaves of nested dicts (an empty dict is a leaf; lists are values)."""
    if not isinstance(node, dict) or not node:
        return {prefix: node}
    out: Dict[str, Any] = {}
    for k, v in node.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def register_configs() -> None:
    """Register every schema in Hydra's ConfigStore (idempotent)."""
    global _registered
    if _registered:
        return
    from fedbench.algorithms import ALGORITHMS
    from fedbench.participation import LAYERS

    OmegaConf.register_new_resolver("uid", lambda: _UID, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="root_schema", node=schema.RootConfig)
    cs.store(group="schema/dataset", name="image", node=schema.ImageDatasetConfig)
    cs.store(group="schema/dataset", name="digits", node=schema.DigitsConfig)
    cs.store(group="schema/dataset", name="synthetic", node=schema.SyntheticConfig)
    cs.store(group="schema/partition", name="partition", node=schema.PartitionConfig)
    cs.store(group="schema/model", name="model", node=schema.ModelConfig)
    cs.store(group="schema/participation", name="participation", node=schema.ParticipationConfig)
    cs.store(group="schema/engine", name="engine", node=schema.EngineConfig)
    cs.store(group="schema/logger", name="logger", node=schema.LoggerConfig)
    for name, cls in ALGORITHMS.items():
        cs.store(group="schema/algo", name=name, node=cls.Config)
    for layer, registry in LAYERS.items():
        for name, cls in registry.items():
            cs.store(group=f"schema/participation/{layer}", name=name, node=cls.Config)
    _registered = True
