"""Availability processes: which clients can participate in round t."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedbench.participation.base import AVAILABILITY, Availability


@AVAILABILITY.register("always")
class Always(Availability):
    """Every client is available in every round."""

    @dataclass
    class Config:
        kind: str = "always"

    def mask(self, t, rng):
        return np.ones(self.num_clients, dtype=bool)

    def prob(self, t):
        return np.ones(self.num_clients)
