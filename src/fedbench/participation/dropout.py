"""Dropout after selection: a selected client may fail to return its update."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedbench.errors import require
from fedbench.participation.base import DROPOUT, Dropout


@DROPOUT.register("none")
class NoDropout(Dropout):
    """Every selected client completes all its local steps."""

    @dataclass
    class Config:
        kind: str = "none"

    def apply(self, t, selected, steps, rng):
        k = selected.size
        return np.ones(k, dtype=bool), np.full(k, steps, dtype=np.int64), np.ones(self.num_clients)


@DROPOUT.register("bernoulli")
class BernoulliDropout(Dropout):
    """Each selected client independently fails to return its update with probability q."""

    @dataclass
    class Config:
        kind: str = "bernoulli"
        prob: float = 0.1

    def __init__(self, cfg, num_clients, attrs):
        super().__init__(cfg, num_clients, attrs)
        require(
            0.0 <= cfg.prob <= 1.0,
            "participation.dropout.prob",
            f"{cfg.prob} is not a probability.",
            "use a value in [0, 1].",
        )

    def apply(self, t, selected, steps, rng):
        k = selected.size
        completed = rng.random(k) >= self.cfg.prob
        return completed, np.full(k, steps, dtype=np.int64), np.full(self.num_clients, 1.0 - self.cfg.prob)
