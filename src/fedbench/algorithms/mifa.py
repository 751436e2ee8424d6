"""MIFA (Gu et al., 2021): the server remembers every client's latest update and averages over all N clients.

G^i <- (y^i_{t,K} - x_t) / eta_t for each client i that completes round t (others keep G^i; initially 0);
x_{t+1} = x_t + eta_s eta_t sum_i p_i G^i  (MimiC note §4.4; p_i = 1/N).
Stale updates are thus rescaled by the current learning rate (Gu et al.); ``rescale_stale=false`` stores raw
deltas and applies sum_i p_i Delta^i (the MimiC code's baseline). sum_i p_i G^i is kept as a running sum
(float64), so a round costs O(d) per completed client, not O(N d).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm


@ALGORITHMS.register("mifa")
class Mifa(Algorithm):
    @dataclass
    class Config(AlgoConfig):
        """``aggregation`` is accepted for sweeps but has no effect: MIFA always averages over all N clients."""

        rescale_stale: bool = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.memory = self.declare_table("latest_update")
        self.total = self.declare("memory_sum", torch.zeros(ctx.dim, dtype=torch.float64, device=ctx.device))

    def entry_weights(self, rc):
        return self.p[rc.part.completed_ids]

    def accumulate(self, rc, client, update, weight):
        g = update.delta / rc.lr if self.cfg.rescale_stale else update.delta
        self.total.add_((g - self.memory.get(client)).double(), alpha=float(self.p[client]))
        self.memory.set(client, g)

    def direction(self, rc) -> torch.Tensor:
        """sum_i p_i G^i in model-delta units for this round."""
        avg = self.total.float()
        return avg * rc.lr if self.cfg.rescale_stale else avg

    def server_update(self, rc, x):
        self.server_step(x, self.direction(rc))
