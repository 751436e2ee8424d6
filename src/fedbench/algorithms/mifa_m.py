"""MIFA with server momentum: m_{t+1} = beta m_t + sum_i p_i G^i (delta units), x_{t+1} = x_t + eta_s m_{t+1}."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import ALGORITHMS
from fedbench.algorithms.mifa import Mifa


@ALGORITHMS.register("mifa_m")
class MifaM(Mifa):
    @dataclass
    class Config(Mifa.Config):
        name: str = "mifa_m"
        server_momentum: float = 0.9

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.momentum = self.declare("momentum", torch.zeros(ctx.dim, device=ctx.device))

    def server_update(self, rc, x):
        self.momentum.mul_(self.cfg.server_momentum).add_(self.direction(rc))
        x.add_(self.momentum, alpha=self.cfg.server_lr)
