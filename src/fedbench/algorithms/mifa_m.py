"""MIFA with server momentum: m_{t+1} = beta m_t + sum_i p_i G^i (delta units), x_{t+1} = x_t + eta_s m_{t+1}."""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.algorithms.base import ALGORITHMS
from fedbench.algorithms.fedavgm import ServerMomentum
from fedbench.algorithms.mifa import Mifa


@ALGORITHMS.register("mifa_m")
class MifaM(ServerMomentum, Mifa):
    @dataclass
    class Config(Mifa.Config):
        name: str = "mifa_m"
        server_momentum: float = 0.9

    def server_update(self, rc, x):
        self.momentum_step(x, self.direction(rc))
