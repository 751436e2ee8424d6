"""FedAvgM (Hsu et al., 2019): FedAvg with server momentum.

m_{t+1} = beta m_t + Delta_t,  x_{t+1} = x_t + eta_s m_{t+1}, where Delta_t is FedAvg's aggregate update.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm
from fedbench.algorithms.fedavg import FedAvg


class ServerMomentum:
    """Mixin: the declared server momentum m and the step m <- beta m + direction, x <- x + eta_s m."""

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.momentum = self.declare("momentum", torch.zeros(ctx.dim, device=ctx.device))

    def momentum_step(self, x: torch.Tensor, direction: torch.Tensor) -> None:
        self.momentum.mul_(self.cfg.server_momentum).add_(direction)
        x.add_(self.momentum, alpha=self.cfg.server_lr)


@ALGORITHMS.register("fedavgm")
class FedAvgM(ServerMomentum, Algorithm):
    @dataclass
    class Config(FedAvg.Config):
        name: str = "fedavgm"
        server_momentum: float = 0.9

    def server_update(self, rc, x):
        self.momentum_step(x, rc.acc)
