"""MimiC (Sun et al., "Combating client dropouts in FL by mimicking central updates"), Alg. 1 (MimiC note §3).

For each active client i (t' = its previous active round), in model-delta units (the note's §8.1 resolution):
    v^i_t = Delta^i_t + eta_t c^i,                       (Alg. 1 line 6; c^i = 0 before i's first round)
    V_t   = sum_{i in S_t} w_i v^i_t,  w_i = p_i / sum_{S_t} p_j  (= 1/|S_t|, line 8)
    x_{t+1} = x_t + eta_s V_t,                            (line 9)
    c^i  <- (V_t - Delta^i_t) / eta_t   for i in S_t       (eq. 15, stored in gradient units)
With ``rescale_correction=true`` (paper semantics) the stored correction is multiplied by the current learning
rate; ``false`` applies the raw stale V_{t'} - Delta^i_{t'} (the official code, whose correction is not rescaled
when the learning rate decays). ``side=client`` keeps c^i on the client, which adds it to its upload, so the
server only sums uploads (secure-aggregation compatible); numerically identical to ``side=server``.
The official code's state-dict aliasing (the last client counted twice) is not reproduced.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Aggregation, Algorithm


class Side(Enum):
    server = "server"
    client = "client"


@ALGORITHMS.register("mimic")
class MimiC(Algorithm):
    @dataclass
    class Config(AlgoConfig):
        aggregation: Aggregation = Aggregation.normalized
        rescale_correction: bool = True
        side: Side = Side.server

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.corrections = self.declare_table("correction")
        self.on_client = Side(cfg.side) == Side.client

    def begin_round(self, rc, x):
        super().begin_round(rc, x)
        rc.scratch.scale = rc.lr if self.cfg.rescale_correction else 1.0
        rc.scratch.active = []
        # a client drawn twice (selection with replacement) uses its start-of-round correction both times
        rc.scratch.repeated = self.corrections.repeated_rows(rc.part.completed_ids)

    def _take_correction(self, rc, client: int, delta: torch.Tensor) -> torch.Tensor:
        """The correction eta_t c^i to add to this upload; the row becomes -Delta^i/eta_t until V_t is known."""
        c = rc.scratch.repeated.get(client)
        c = self.corrections.get(client) if c is None else c
        self.corrections.set(client, -delta / rc.scratch.scale)
        rc.scratch.active.append(client)
        return c * rc.scratch.scale

    def finish_update(self, trainer, rc, client, x, update):
        if self.on_client:  # the client uploads v^i = Delta^i + eta_t c^i
            update.delta = update.delta + self._take_correction(rc, client, update.delta)
        return update

    def accumulate(self, rc, client, update, weight):
        v = update.delta if self.on_client else update.delta + self._take_correction(rc, client, update.delta)
        rc.acc.add_(v, alpha=weight)

    def server_update(self, rc, x):
        super().server_update(rc, x)
        for client in set(rc.scratch.active):  # eq. 15: c^i = (V_t - Delta^i_t)/eta_t (client side: broadcast)
            self.corrections.set(client, self.corrections.get(client) + rc.acc / rc.scratch.scale)
