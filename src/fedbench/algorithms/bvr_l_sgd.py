"""BVR-L-SGD (Murata & Suzuki, ICML 2021), adapted to partial participation as in FedAMD's App. F.1 (FedAMD note
§2.4): the large-batch synchronisation is done by the sampled clients only.

Cycles of R rounds (``inner_rounds``; 0 = ceil(1 + n/(K b')), n the mean local data size, as in FedAMD's code).
  round 0 of a cycle: the participation's clients S compute grad f_i(x_t) on all their data, v = sum_i w_i grad f_i(x_t);
  rounds 1..R-1: the clients of S that are available refresh it with K minibatches B_k of b' (bias-variance
      reduction): v <- v + sum_i w_i (1/K) sum_k [grad f_i(x_t; B_k) - grad f_i(x_{t-1}; B_k)]
      (the server-side form of each client's own v_i recursion: the same mean while the set is fixed);
  every round, after that exchange (``after_clients``): one client j of them, drawn from the stream
      (seed, "bvr/local", t), runs K recursive steps (Eq. 2 of the FedAMD note) from x_t with g_0 = v and
      x_{t+1} = x_t + eta_s (y_K - x_t) (eta_s = ``server_lr`` = 1 in the paper and code).
w_i = p_i / sum_{j in S_t} p_j (the clients' mean). ``refresh=code`` reproduces FedAMD's code: differences against
the cycle's start x~ (never updated inside the cycle), accumulated every round of the cycle (a zero difference in
round 0) and divided by K b' instead of K (an extra 1/b' with mean-reduced losses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np
import torch

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Aggregation, Algorithm
from fedbench.algorithms.recursive import RecursiveGradient
from fedbench.errors import require
from fedbench.participation.base import RoundParticipation
from fedbench.records import ClientUpdate
from fedbench.rng import numpy_rng


class Refresh(Enum):
    paper = "paper"  # against the previous model, mean over the K minibatches
    code = "code"  # against the cycle's start, divided by K b' (FedAMD's released code)


@ALGORITHMS.register("bvr_l_sgd")
class BVRLSGD(Algorithm):
    batchable = False
    plain_sgd = True
    server_optimizers = False  # its server update is its own recursion

    @dataclass
    class Config(AlgoConfig):
        aggregation: Aggregation = Aggregation.normalized
        inner_rounds: int = 0  # R, rounds per cycle; 0 = ceil(1 + n/(K b'))
        refresh: Refresh = Refresh.paper

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        require(Aggregation(cfg.aggregation) == Aggregation.normalized, "algo.aggregation",
                f"'{cfg.aggregation}': BVR-L-SGD's synchronisation is the participants' mean.", "use normalized.")
        self.cycle = cfg.inner_rounds or math.ceil(1 + float(ctx.sizes.mean()) / (ctx.local_steps * ctx.batch_size))
        self.code = Refresh(cfg.refresh) == Refresh.code
        self.direction = self.declare("direction", torch.zeros(ctx.dim, device=ctx.device))
        self.reference = self.declare("reference", torch.zeros(ctx.dim, device=ctx.device))  # x_{t-1} or x~
        self.members = self.declare("cycle_members", torch.zeros(ctx.num_clients, dtype=torch.bool))

    def sync_round(self, t: int) -> bool:
        return t % self.cycle == 0

    def plan_round(self, part):
        if self.sync_round(part.round):
            self.members.zero_()
            self.members[torch.as_tensor(part.completed_ids)] = True
            return part
        ids = np.flatnonzero(self.members.numpy() & part.available)
        return RoundParticipation(part.round, part.available, ids, np.ones(ids.size, dtype=bool),
                                  np.full(ids.size, self.ctx.local_steps, dtype=np.int64), np.ones(self.ctx.num_clients))

    def begin_round(self, rc, x):
        super().begin_round(rc, x)
        if self.code and self.sync_round(rc.round):
            self.reference.copy_(x)

    def entry_weights(self, rc):
        p = self.p[rc.part.completed_ids]
        return p / p.sum() if p.size else p

    def client_update(self, trainer, rc, client, steps, x, payload):
        extras = {}
        if self.sync_round(rc.round):
            extras["gradient"] = trainer.gradient(rc, client, x, purpose="bvr/sync")
        if self.code or not self.sync_round(rc.round):
            at_x, at_ref = trainer.batch_gradients(rc, client, [x, self.reference], steps, purpose="bvr/refresh")
            scale = steps * self.ctx.batch_size if self.code else steps
            extras["refresh"] = (at_x - at_ref).mul_(steps / scale)  # batch_gradients returns the mean over K
        return ClientUpdate(delta=None, num_samples=int(self.ctx.sizes[client]), steps=0, loss=None, extras=extras)

    def accumulate(self, rc, client, update, weight):
        for v in update.extras.values():
            rc.acc.add_(v, alpha=weight)

    def after_clients(self, trainer, rc, x):
        ids = rc.part.completed_ids
        if ids.size == 0:
            return []
        if self.sync_round(rc.round):
            self.direction.zero_()
        self.direction.add_(rc.acc)
        j = int(ids[numpy_rng(self.ctx.seed, "bvr/local", rc.round).integers(ids.size)])
        trainer.cost.download(self.direction)
        update = trainer.train(rc, j, self.ctx.local_steps, x, RecursiveGradient(self.direction.clone()))
        rc.scratch.local = update.delta
        return [update]

    def server_update(self, rc, x):
        if getattr(rc.scratch, "local", None) is None:
            return
        if not self.code:
            self.reference.copy_(x)
        x.add_(rc.scratch.local, alpha=self.cfg.server_lr)

    def round_stats(self, rc):
        return {"sync_round": int(self.sync_round(rc.round))}
