"""The config tree: ``CONF_DIR`` (the YAML presets), the schemas registered in Hydra's ConfigStore, and the options
of each config group.

Each option is declared once, in its component's ``Config`` dataclass: the registries' components (algorithms,
participation layers, datasets, partitions, models) are stored in the ConfigStore as config-group options of their
own (``algo=fedavg`` and ``model=lenet5`` need no YAML file), and YAML files under ``conf/`` hold only what a preset
changes (``conf/algo/fedavgm.yaml``: ``kind`` fedavg with ``server_optimizer: momentum``)."""

from __future__ import annotations

import os
import secrets

from pathlib import Path
from typing import Iterable, List

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from fedbench.config import schema

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # package data: found wherever fedbench is installed
_registered = False
#: Makes output directories unique per process (two identical jobs started in the same second differ).
_UID = f"{os.getpid() % 100000:05d}{secrets.token_hex(2)}"


def register_configs() -> None:
    """Register every schema in Hydra's ConfigStore (idempotent)."""
    global _registered
    if _registered:
        return
    from fedbench.algorithms import ALGORITHMS
    from fedbench.data.partition import PARTITIONERS
    from fedbench.data.sources import DATASETS
    from fedbench.models import MODELS
    from fedbench.participation import LAYERS

    OmegaConf.register_new_resolver("uid", lambda: _UID, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="root_schema", node=schema.RootConfig)
    cs.store(group="schema/participation", name="participation", node=schema.ParticipationConfig)
    cs.store(group="schema/engine", name="engine", node=schema.EngineConfig)
    cs.store(group="schema/logger", name="logger", node=schema.LoggerConfig)
    for group, registry in (("algo", ALGORITHMS), ("dataset", DATASETS), ("partition", PARTITIONERS),
                            ("model", MODELS)):
        for name in registry:
            node = registry.config(name)
            cs.store(group=f"schema/{group}", name=name, node=node)
            cs.store(group=group, name=name, node=node)
    for layer, registry in LAYERS.items():
        for name in registry:
            node = registry.config(name)
            cs.store(group=f"schema/participation/{layer}", name=name, node=node)
            cs.store(group=f"participation/{layer}", name=name, node=node)
    _registered = True


def group_options(group: str, user_dirs: Iterable[Path] = ()) -> List[str]:
    """The options of config group ``group`` (``algo``, ``participation/selection``): the YAML presets under
    ``CONF_DIR`` and the user's config folders (Hydra's search path), and the components registered in the
    ConfigStore."""
    register_configs()
    try:
        stored = ConfigStore.instance().list(group)
    except OSError:  # not a ConfigStore group: YAML files only
        stored = []
    files = [p.stem for d in (CONF_DIR, *user_dirs) for p in (Path(d) / group).glob("*.yaml")]
    return sorted({name.rsplit(".", 1)[0] for name in stored if name.endswith(".yaml")} | set(files))


def groups() -> List[str]:
    """Config groups a user chooses options of: the folders under ``CONF_DIR`` and the ConfigStore's groups
    (``participation/selection`` ...), without Hydra's own and the schemas."""
    register_configs()
    found = {str(d.relative_to(CONF_DIR)) for d in CONF_DIR.rglob("*") if d.is_dir()}

    def walk(node, prefix):
        for key, value in node.items():
            if isinstance(value, dict):
                found.add(prefix + key)
                walk(value, prefix + key + "/")

    walk(ConfigStore.instance().repo, "")
    return sorted(g for g in found if g.split("/")[0] not in ("hydra", "schema") and g != "root_schema")
