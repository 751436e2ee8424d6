"""FedVARP (Jhunjhunwala et al., 2022): SAGA-style server variance reduction with a stored update per client.

With y^i the latest update of client i (0 until it first completes) and ybar = sum_i p_i y^i,
v_t = ybar_t + sum_{i in C_t} w_i (G^i_t - y^i_t),   x_{t+1} = x_t + eta_s eta_t v_t,   y^i <- G^i_t (i in C_t),
where G^i_t = (y^i_{t,K} - x_t)/eta_t and w_i = p_i / E[m_i] (FedVARP's 1/|S| under uniform S-of-N sampling).
``rescale_stale=false`` stores raw deltas instead of learning-rate-normalised ones. ybar is a float64 running sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm


@ALGORITHMS.register("fedvarp")
class FedVarp(Algorithm):
    server_optimizers = False  # its server update is its own recursion
    @dataclass
    class Config(AlgoConfig):
        rescale_stale: bool = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.memory = self.declare_table("latest_update")
        self.ybar = self.declare("memory_mean", torch.zeros(ctx.dim, dtype=torch.float64, device=ctx.device))

    def begin_round(self, rc, x):
        super().begin_round(rc, x)
        rc.scratch.ybar_change = torch.zeros_like(self.ybar)
        rc.scratch.start_of_round = self.memory.repeated_rows(rc.part.completed_ids)

    def accumulate(self, rc, client, update, weight):
        g = update.delta / rc.lr if self.cfg.rescale_stale else update.delta
        current = self.memory.get(client)
        rc.acc.add_(g - rc.scratch.start_of_round.get(client, current), alpha=weight)
        rc.scratch.ybar_change.add_((g - current).double(), alpha=float(self.p[client]))
        self.memory.set(client, g)

    def server_update(self, rc, x):
        v = self.ybar.float() + rc.acc
        x.add_(v, alpha=self.cfg.server_lr * (rc.lr if self.cfg.rescale_stale else 1.0))
        self.ybar.add_(rc.scratch.ybar_change)
