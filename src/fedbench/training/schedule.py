"""Client learning-rate schedules (``client.lr_schedule``): lr_t for round t of a run of T rounds."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, List

from fedbench.errors import require
from fedbench.options import option

KEY = "client.lr_schedule"


class ScheduleKind(Enum):
    constant = "constant"  # lr_t = lr
    exponential = "exponential"  # lr_t = max(lr * decay^floor(t / every), floor)  (MimiC: 0.01 * 0.95^t, 1e-5)
    step = "step"  # lr_t = lr * gamma^(number of milestones m with t >= m * rounds)


@dataclass
class LRScheduleConfig:
    """The client learning rate of round t (``RoundContext.lr``), used by every algorithm."""

    kind: ScheduleKind = ScheduleKind.constant
    decay: float = option(0.95, gt=0, le=1)
    every: int = option(1, ge=1)
    floor: float = 0.0
    milestones: List[float] = field(default_factory=lambda: [0.5, 0.75])  # fractions of the run's rounds
    gamma: float = option(0.1, gt=0, le=1)


def validate_schedule(cfg: Any) -> None:
    kind = ScheduleKind(cfg.kind)
    if kind == ScheduleKind.exponential:
        require(0 < cfg.decay <= 1, f"{KEY}.decay", f"{cfg.decay} is not in (0, 1].", "use e.g. decay=0.95.")
        require(cfg.every >= 1, f"{KEY}.every", f"{cfg.every}.", "decay every >= 1 rounds.")
        require(cfg.floor >= 0, f"{KEY}.floor", f"{cfg.floor} is negative.", "use floor >= 0.")
    if kind == ScheduleKind.step:
        require(all(0 < m < 1 for m in cfg.milestones), f"{KEY}.milestones",
                f"{list(cfg.milestones)} are not fractions of the run in (0, 1).", "use e.g. [0.5, 0.75].")
        require(cfg.gamma > 0, f"{KEY}.gamma", f"{cfg.gamma} is not positive.", "use e.g. gamma=0.1.")


def lr_at(cfg: Any, lr: float, t: int, rounds: int) -> float:
    """exponential: max(lr * decay^floor(t/every), floor); step: lr * gamma^#{m : t >= ceil(m * rounds)}."""
    kind = ScheduleKind(cfg.kind)
    if kind == ScheduleKind.exponential:
        return max(lr * cfg.decay ** (t // cfg.every), cfg.floor)
    if kind == ScheduleKind.step:
        return lr * cfg.gamma ** sum(t >= math.ceil(m * rounds) for m in cfg.milestones)
    return lr
