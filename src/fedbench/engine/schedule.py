"""Client learning-rate schedules (``client.lr_schedule``): lr_t for round t of a run of T rounds."""

from __future__ import annotations

import math
from typing import Any

from fedbench.config.schema import ScheduleKind
from fedbench.errors import require

KEY = "client.lr_schedule"


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
