"""Dropout after selection: a selected client may fail to return its update, or return it after fewer steps."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import List

import numpy as np

from fedbench.errors import require
from fedbench.participation.base import DROPOUT, Dropout, LayerConfig
from fedbench.options import option

KEY = "participation.dropout"


@DROPOUT.register("none")
class NoDropout(Dropout):
    """Every selected client completes all its local steps."""

    @dataclass
    class Config(LayerConfig):
        pass

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.p_complete = np.ones(ctx.num_clients)

    def apply(self, t, selected, steps, rng):
        k = selected.size
        return np.ones(k, dtype=bool), np.full(k, steps, dtype=np.int64)


class Correlation(Enum):
    none = "none"  # q_i = prob (or probs[i])
    availability = "availability"  # q_i = prob (1 - a_i) / mean_j (1 - a_j): rarely available clients drop more


@DROPOUT.register("bernoulli")
class BernoulliDropout(Dropout):
    """Each selected entry of client i independently fails to return its update with probability q_i.

    q_i is ``prob`` for all clients, ``probs[i]`` when that list is given, or, with
    ``correlation=availability``, prob (1 - a_i) / mean_j(1 - a_j) clipped to [0, 1], where a_i is client i's
    long-run availability, so clients that are often offline also fail more often once selected.
    """

    @dataclass
    class Config(LayerConfig):
        prob: float = option(0.1, ge=0, le=1)
        probs: List[float] = option(factory=list, ge=0, le=1)
        correlation: Correlation = Correlation.none

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        n = ctx.num_clients
        q = float(cfg.prob)
        if cfg.probs:
            require(len(cfg.probs) == n, f"{KEY}.probs", f"has {len(cfg.probs)} entries for {n} clients.",
                    f"give one probability per client ({n} values), or leave it empty.")
            qs = np.asarray(cfg.probs, dtype=np.float64)
        else:
            qs = np.full(n, q)
        if Correlation(cfg.correlation) == Correlation.availability:
            away = 1.0 - ctx.long_run_availability
            require(away.mean() > 0, f"{KEY}.correlation",
                    "every client is always available, so there is nothing to correlate with.",
                    "use correlation=none, or an availability process with unavailable rounds.")
            qs = np.clip(qs * away / away.mean(), 0.0, 1.0)
        self.q = qs
        self.p_complete = 1.0 - qs

    def apply(self, t, selected, steps, rng):
        completed = rng.random(selected.size) >= self.q[selected]
        return completed, np.full(selected.size, steps, dtype=np.int64)


@DROPOUT.register("straggler")
class Straggler(Dropout):
    """Each selected entry is a straggler with probability ``prob`` and then completes only a uniform random
    number of local steps in {min_steps, ..., I - 1}; its (partial) update is still returned."""

    @dataclass
    class Config(LayerConfig):
        prob: float = option(0.3, ge=0, le=1)
        min_steps: int = option(1, ge=1)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        require(1 <= cfg.min_steps <= ctx.local_steps, f"{KEY}.min_steps",
                f"{cfg.min_steps} is not between 1 and client.local_steps ({ctx.local_steps}).",
                f"use 1 <= min_steps <= {ctx.local_steps}.")
        self.p_complete = np.ones(ctx.num_clients)

    def apply(self, t, selected, steps, rng):
        k = selected.size
        slow = rng.random(k) < self.cfg.prob
        low = min(self.cfg.min_steps, steps)
        partial = rng.integers(low, max(steps, low + 1), size=k)
        return np.ones(k, dtype=bool), np.where(slow, partial, steps).astype(np.int64)
