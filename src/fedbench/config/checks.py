"""Range checks of every numeric option, run on the composed config before anything is built.

Rules, in order: a number must be finite (no nan / inf anywhere); it must be >= 0 unless its key is in ``SIGNED``;
keys named in ``RANGES`` (exact dotted keys, or ``*.name`` for that leaf name in any group) must lie in their
interval. Seeds must lie in [0, 2^32) (rejected, never wrapped). Option-specific relations (e.g. S <= N, a Markov
chain's feasible mixing rate) are checked by the component that owns them, when the run is built.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, Iterator, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from fedbench.errors import ConfigError, require

SIGNED = {"participation.availability.mixing", "dataset.size_lognormal_mean"}

# (low, high, low inclusive, high inclusive); None = unbounded
_GE1 = (1, None, True, False)
_POS = (0, None, False, False)
_UNIT = (0, 1, True, True)
_UNIT_OPEN = (0, 1, True, False)
RANGES: Dict[str, Tuple[Optional[float], Optional[float], bool, bool]] = {
    "seed": (0, 2**32, True, False),  # rejected, never wrapped
    "data.seed": (0, 2**32, True, False),
    "rounds": _GE1, "eval_every": _GE1, "checkpoint_keep": _GE1,
    "client.local_steps": _GE1, "client.batch_size": _GE1, "client.lr": _POS,
    "client.momentum": _UNIT_OPEN, "client.lr_schedule.every": _GE1, "client.lr_schedule.decay": (0, 1, False, True),
    "client.lr_schedule.gamma": (0, 1, False, True),
    "engine.cohort_size": _GE1,
    "partition.num_clients": (0, None, True, False), "partition.alpha": _POS, "partition.max_tries": _GE1,
    "partition.shards_per_client": _GE1, "partition.classes_per_client": _GE1, "partition.similarity": _UNIT,
    "partition.sigma": _POS,
    "dataset.dim": _GE1, "dataset.num_classes": (2, None, True, False), "dataset.num_users": _GE1,
    "dataset.test_fraction": (0, 1, False, False), "dataset.min_samples": _GE1,
    "model.groups": _GE1, "model.dropout": _UNIT_OPEN, "model.hidden_dropout": _UNIT_OPEN,
    "participation.inclusion_samples": (100, None, True, False), "participation.probabilities_every": _GE1,
    "participation.selection.clients_per_round": _GE1,
    "participation.availability.prob": _UNIT, "participation.availability.stationary": _UNIT,
    "participation.availability.p_on": _UNIT, "participation.availability.p_off": _UNIT,
    "participation.availability.fraction": _UNIT, "participation.availability.mean": _UNIT,
    "participation.availability.amplitude": _UNIT, "participation.availability.period": _GE1,
    "participation.availability.num_groups": _GE1, "participation.availability.levels": (2, None, True, False),
    "participation.availability.tau_max": _GE1,
    "participation.selection.floor_mix": _UNIT, "participation.selection.beta": _UNIT,
    "participation.selection.smoothness": _POS,
    "participation.dropout.prob": _UNIT, "participation.dropout.min_steps": _GE1,
    "divergence_factor": (1, None, False, False),
    "algo.server_lr": _POS, "algo.eta": _POS, "algo.period": _GE1,
    "algo.server_momentum": _UNIT_OPEN, "algo.beta": _UNIT_OPEN, "algo.beta1": _UNIT, "algo.beta2": _UNIT,
    "algo.p_page": _UNIT, "algo.temperature": _POS, "algo.tau": _GE1, "algo.warmup_lr": _POS,
}
_DEVICE = re.compile(r"^(cpu|auto|mps|cuda(:\d+)?)$")
CHOICES = {"engine.precision": ("fp32", "tf32", "bf16-mixed")}  # string options with a fixed set of values


def _leaves(node: Any, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, node


def _interval(rule) -> str:
    lo, hi, lo_in, hi_in = rule
    if hi is None:
        return f">= {lo}" if lo_in else f"> {lo}"
    return f"in {'[' if lo_in else '('}{lo}, {hi}{']' if hi_in else ')'}"


def check_values(cfg: DictConfig) -> None:
    """Raise ``ConfigError`` naming the first out-of-range number (see the module docstring)."""
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    for key, value in _leaves(plain):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        base = key.split("[")[0]
        if not math.isfinite(value):
            raise ConfigError(key, f"{value} is not a finite number.", "give a finite value.")
        rule = RANGES.get(base)
        if rule is None and value < 0 and base not in SIGNED:
            raise ConfigError(key, f"{value} is negative.", "use a value >= 0.")
        if rule is not None:
            lo, hi, lo_in, hi_in = rule
            ok = (value >= lo if lo_in else value > lo) and (hi is None or (value <= hi if hi_in else value < hi))
            if not ok:
                raise ConfigError(key, f"{value} is out of range.", f"use a value {_interval(rule)}.")
    for key, allowed in CHOICES.items():
        value = OmegaConf.select(cfg, key)
        if value not in allowed:
            raise ConfigError(key, f"'{value}' is not an option.", f"use one of {', '.join(allowed)}.")
    device = str(OmegaConf.select(cfg, "engine.device"))
    if not _DEVICE.match(device):
        raise ConfigError("engine.device", f"'{device}' is not a device.", "use cpu, cuda, cuda:N, mps or auto.")


def validate(cfg: DictConfig) -> None:
    """Every check that needs only the config: number ranges, then relations between keys."""
    from fedbench.training.schedule import validate_schedule

    check_values(cfg)
    validate_schedule(cfg.client.lr_schedule)
    require(cfg.partition.num_clients >= 1 or cfg.partition.name == "natural", "partition.num_clients",
            f"{cfg.partition.num_clients} clients.", "use >= 1 (0 means the dataset's own users: partition=natural).")
    for t in cfg.targets:
        require(0 < t <= 1, "targets", f"accuracy target {t} is not in (0, 1].", "give accuracies such as [0.7, 0.8].")
    for t in cfg.loss_targets:
        require(t > 0, "loss_targets", f"training-loss target {t} is not positive.", "give losses such as [0.5].")
    require(not cfg.loss_targets or cfg.engine.eval_train, "loss_targets",
            "training-loss targets are read from the global model's loss on the training set.",
            "set engine.eval_train=true.")
