"""FedAMD: anchor sampling (Wu et al., ICML 2023; FedAMD note §1).

Round t: each participant becomes an anchor with probability p_t, else a miner (Alg. 1 line 6), drawn from the
stream (seed, "fedamd/roles", t, client), so every algorithm of a sweep keeps the participation trace.
  anchor: v^(i) <- grad f_i(x_t; B), |B| = b (``anchor_batch``; 0 = all n_i samples), uploaded into the cache;
          it does not move the model.
  miner:  from g_0 = g~_t = sum_m p_m v^(m) (the cached mean; p_m = 1/M, Eq. 1), K recursive steps (Eq. 2,
          ``fedbench.algorithms.recursive``); uploads Delta = x_K - x_t.
Server (Eq. 3): x_{t+1} = x_t + eta_s sum_{miners} w_i Delta_i -- w_i = p_i / sum_{miners} p_j (``normalized``,
the paper's 1/nu) or p_i / (E[m_i] (1 - p_t)) (``unbiased``) -- and x unchanged without miners; the cache, and so
g~, changes only after the miners have used g~_t: g~_{t+1} = g~_t + sum_{anchors} p_i (v_new^(i) - v_old^(i)).
Schedules (§1.6): ``constant`` p_t = p ("auto": Cor. 4.9's (2/(A+2))^{1/A} / c; "bound": the minimizer of
Thm 4.8's 1/(1-p^A) + 2M/(A p sqrt(1-p^A)), / c; A = the round's selected entries) and ``sequential``
(Eq. 4: p_t = 1 if (t - phase) mod tau = 0 else 0); ``time_varying`` is the official code's deprecated option
(not in the paper).
Cache (§1.3, §1.7): initialized by one full-participation gradient round at x_0 (``cache_init=gradient``; costs
reported apart) or zeros. ``cache=server`` keeps the N x d table at the server (the anchor uploads v); ``client``
leaves each v^(i) with its client and the server keeps only g~ (the anchor uploads v_new - v_old): the same
arithmetic, so the same trajectory bit for bit.
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
from fedbench.records import ClientUpdate, RoundContext
from fedbench.rng import numpy_rng
from fedbench.options import option


class Schedule(Enum):
    constant = "constant"
    sequential = "sequential"
    time_varying = "time_varying"  # the official code's deprecated --ts: p_t = min(1 / log(max((t+14)/5, e)), 1)


class CacheInit(Enum):
    gradient = "gradient"  # v^(m) = grad f_m(x_0; b) for every client (paper, code)
    zeros = "zeros"


class CacheAt(Enum):
    server = "server"  # N x d table at the server (paper's Algorithm 1)
    client = "client"  # each client keeps its v^(m); the server keeps g~ only (massive-client variant, §3)


def bound_optimal_p(a: int, m: int) -> float:
    """argmin over p in (0, 1) of Thm 4.8's h(p) = 1/(1-p^A) + 2M/(A p sqrt(1-p^A)) (golden-section search;
    h is unimodal there: it blows up at both ends)."""
    h = lambda p: 1 / (1 - p**a) + 2 * m / (a * p * math.sqrt(1 - p**a))  # noqa: E731
    lo, hi, r = 1e-6, 1 - 1e-9, (math.sqrt(5) - 1) / 2
    for _ in range(100):
        c, d = hi - r * (hi - lo), lo + r * (hi - lo)
        lo, hi = (lo, d) if h(c) < h(d) else (c, hi)
    return (lo + hi) / 2


@ALGORITHMS.register("fedamd")
class FedAMD(Algorithm):
    batchable = False
    plain_sgd = True
    server_optimizers = False  # its server update is its own recursion

    @dataclass
    class Config(AlgoConfig):
        aggregation: Aggregation = Aggregation.normalized  # the paper's mean over the nu miners
        schedule: Schedule = Schedule.constant
        p: str = "auto"  # constant schedule: a probability, auto (Cor. 4.9) or bound (Thm 4.8 minimizer)
        c: float = option(1.0, ge=1)  # divisor of the auto / bound probability (Cor. 4.9's c >= 1)
        tau: int = option(2, ge=1)  # sequential schedule period
        phase: int = 0  # sequential: anchor rounds are those with (t - phase) mod tau = 0
        anchor_batch: int = 0  # b; 0 = the client's full local data
        cache_init: CacheInit = CacheInit.gradient
        cache: CacheAt = CacheAt.server
        skip_k0_grad: bool = False  # g_1 = g~ without evaluating the cancelling pair at k = 0

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.schedule = Schedule(cfg.schedule)
        self.fixed_p = None
        if self.schedule == Schedule.constant and str(cfg.p) not in ("auto", "bound"):
            try:
                self.fixed_p = float(cfg.p)
            except ValueError:
                self.fixed_p = math.nan
            require(0 <= self.fixed_p <= 1, "algo.p", f"'{cfg.p}' is not a probability.",
                    "use a value in [0, 1], auto ((2/(A+2))^(1/A) / c) or bound (Thm 4.8's minimizer / c).")
        self.cache_at = CacheAt(cfg.cache)
        self.gbar = self.declare("global_bullseye", torch.zeros(ctx.dim, device=ctx.device))
        self.cache = self.declare_table("caching_gradient")

    # ---- roles ------------------------------------------------------------------------------------------------
    def probability(self, rc: RoundContext) -> float:
        """p_t of round t."""
        if self.schedule == Schedule.sequential:
            return 1.0 if (rc.round - self.cfg.phase) % self.cfg.tau == 0 else 0.0
        if self.schedule == Schedule.time_varying:
            return min(1.0 / math.log(max((rc.round + 14) / 5, math.e)), 1.0)
        if self.fixed_p is not None:
            return self.fixed_p
        a = max(int(rc.part.selected.size), 1)
        p = (2 / (a + 2)) ** (1 / a) if str(self.cfg.p) == "auto" else bound_optimal_p(a, self.ctx.num_clients)
        return p / self.cfg.c

    def is_anchor(self, rc: RoundContext, client: int) -> bool:
        p = rc.scratch.p
        return p >= 1 or (p > 0 and numpy_rng(self.ctx.seed, "fedamd/roles", rc.round, client).random() < p)

    # ---- hooks ------------------------------------------------------------------------------------------------
    def initialize(self, trainer, x):
        if CacheInit(self.cfg.cache_init) != CacheInit.gradient:
            return
        b = self.cfg.anchor_batch or None
        for client, v in self.gradient_round(trainer, x, "fedamd/init", b):
            self.cache.set(client, v)
            self.gbar.add_(v, alpha=float(self.p[client]))

    def begin_round(self, rc, x):
        super().begin_round(rc, x)
        rc.scratch.p = self.probability(rc)
        rc.scratch.cache_change = torch.zeros_like(rc.acc)
        rc.scratch.anchors = rc.scratch.miners = 0

    def entry_weights(self, rc):
        ids = rc.part.completed_ids
        miner = np.array([not self.is_anchor(rc, i) for i in ids.tolist()], dtype=bool)
        p = np.where(miner, self.p[ids], 0.0)
        if Aggregation(self.cfg.aggregation) == Aggregation.normalized:
            return p / p.sum() if p.sum() > 0 else p
        return p / np.maximum(rc.part.expected_count[ids] * (1.0 - rc.scratch.p), 1e-300)

    def payload(self, rc, client):
        return {} if self.is_anchor(rc, client) else {"global_bullseye": self.gbar}

    def client_update(self, trainer, rc, client, steps, x, payload):
        if "global_bullseye" in payload:
            hook = RecursiveGradient(payload["global_bullseye"], skip_first=self.cfg.skip_k0_grad)
            return trainer.train(rc, client, steps, x, hook)
        v = trainer.gradient(rc, client, x, samples=self.cfg.anchor_batch or None, purpose="fedamd/anchor")
        if self.cache_at == CacheAt.client:  # the client keeps v and uploads the change
            extras = {"cache_change": v - self.cache.get(client)}
            self.cache.set(client, v)
        else:
            extras = {"anchor_gradient": v}
        return ClientUpdate(delta=None, num_samples=int(self.ctx.sizes[client]), steps=0, loss=None, extras=extras)

    def accumulate(self, rc, client, update, weight):
        if update.delta is not None:
            rc.scratch.miners += 1
            rc.acc.add_(update.delta, alpha=weight)
            return
        rc.scratch.anchors += 1
        change = update.extras.get("cache_change")
        if change is None:  # server-side cache: the server forms the same difference
            v = update.extras["anchor_gradient"]
            change = v - self.cache.get(client)
            self.cache.set(client, v)
        rc.scratch.cache_change.add_(change, alpha=float(self.p[client]))

    def server_update(self, rc, x):
        if rc.scratch.miners:
            super().server_update(rc, x)
        self.gbar.add_(rc.scratch.cache_change)

    def round_stats(self, rc):
        return {"anchors": rc.scratch.anchors, "miners": rc.scratch.miners, "anchor_p": rc.scratch.p}

    def server_state_bytes(self):
        table = self.ctx.num_clients * self.ctx.dim * self.gbar.element_size()
        return super().server_state_bytes() + (table if self.cache_at == CacheAt.server else 0)
