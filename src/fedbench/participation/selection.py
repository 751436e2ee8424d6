"""Selection rules among the available clients."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedbench.errors import require
from fedbench.participation.base import SELECTION, Selection


@SELECTION.register("all")
class All(Selection):
    """Every available client is selected (full participation when all are available)."""

    @dataclass
    class Config:
        kind: str = "all"

    def select(self, t, available, rng):
        ids = np.flatnonzero(available)
        return ids, available.astype(float)


@SELECTION.register("uniform")
class Uniform(Selection):
    """S clients uniformly without replacement among the available ones: P(i) = min(S, |A|)/|A| on A."""

    @dataclass
    class Config:
        kind: str = "uniform"
        clients_per_round: int = 10

    def __init__(self, cfg, num_clients, attrs):
        super().__init__(cfg, num_clients, attrs)
        s = cfg.clients_per_round
        require(
            1 <= s <= num_clients,
            "participation.selection.clients_per_round",
            f"{s} is not between 1 and the number of clients ({num_clients}).",
            f"set participation.selection.clients_per_round to at most {num_clients}, "
            "or raise partition.num_clients.",
        )

    def select(self, t, available, rng):
        ids = np.flatnonzero(available)
        k = min(self.cfg.clients_per_round, ids.size)
        chosen = np.sort(rng.choice(ids, size=k, replace=False)) if k else ids[:0]
        cond = np.zeros(self.num_clients)
        if ids.size:
            cond[ids] = k / ids.size
        return chosen, cond
