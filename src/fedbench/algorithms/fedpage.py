"""FedPAGE (Zhao, Li & Richtarik, 2021), as FedAMD's baseline adapts it to partial participation (FedAMD note §2.3).

PAGE's recursion at the server: x_{t+1} = x_t - eta_s d_t, where d_t is
  full round (t = 0, and with probability ``p_page`` from the stream (seed, "fedpage/full", t)): every client's
      gradient on all its data at x_t, d_t = sum_i p_i grad f_i(x_t) (the round waits for all N clients,
      overriding the participation draw, as the method assumes);
  partial round (the participation's clients): client i runs K + 1 recursive steps (Eq. 2 of the FedAMD note,
      ``fedbench.algorithms.recursive``) from g_0 = d_{t-1}: the first on all its data between x_{t-1} and x_t,
      g_1 = d_{t-1} - grad f_i(x_{t-1}) + grad f_i(x_t),  y_1 = x_t - eta_l g_1,
      then K on minibatches (x_{-1} = x_t); it returns d_i = (x_t - y_{K+1}) / (K eta_l), and d_t = sum w_i d_i.
A partial round costs 2 n_i + 2 K b' gradient evaluations and 4 d floats per client (x_t, x_{t-1}, d_{t-1} down,
the direction up); a full round n_i and 2 d. A round where nobody completes changes nothing. The recursion carries
d_t (PAGE); ``carry_server_lr`` carries eta_s d_t instead (the official code; the same when eta_s = 1).

``server_lr`` (eta_s) scales a *gradient* here, where FedAvg's scales a model delta of K local steps (about
K eta_l times a gradient): at eta_s = 1 a full round is gradient descent at rate 1, some 1/(K eta_l) times FedAvg's
step. Its search space (``fedbench-tune``) therefore reaches down to 0.01; a preset gives it its own value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm
from fedbench.algorithms.recursive import RecursiveGradient
from fedbench.participation.base import RoundParticipation
from fedbench.records import ClientUpdate
from fedbench.rng import numpy_rng
from fedbench.options import Search, option


@ALGORITHMS.register("fedpage")
class FedPAGE(Algorithm):
    batchable = False
    plain_sgd = True
    server_optimizers = False  # its server update is its own recursion

    @dataclass
    class Config(AlgoConfig):
        p_page: float = option(0.5, ge=0, le=1)  # probability of a full round (FedAMD's code: FMNIST 0.5, EMNIST 0.2)
        server_lr: float = option(1.0, gt=0, tune=Search((1.0, 0.3, 0.1, 0.03, 0.01), log=True))
        carry_server_lr: bool = False  # official code: the recursion carries eta_s d_t

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.direction = self.declare("direction", torch.zeros(ctx.dim, device=ctx.device))
        self.previous = self.declare("previous_model", torch.zeros(ctx.dim, device=ctx.device))

    def full_round(self, t: int) -> bool:
        return t == 0 or numpy_rng(self.ctx.seed, "fedpage/full", t).random() < self.cfg.p_page

    def plan_round(self, part):
        if not self.full_round(part.round):
            return part
        n = self.ctx.num_clients
        ids = np.arange(n)
        return RoundParticipation(part.round, np.ones(n, dtype=bool), ids, np.ones(n, dtype=bool),
                                  np.full(n, self.ctx.local_steps, dtype=np.int64), np.ones(n))

    def payload(self, rc, client):
        if self.full_round(rc.round):
            return {}
        return {"previous_model": self.previous, "direction": self.direction}

    def client_update(self, trainer, rc, client, steps, x, payload):
        if not payload:
            g = trainer.gradient(rc, client, x, purpose="fedpage/full")
            return ClientUpdate(delta=None, num_samples=int(self.ctx.sizes[client]), steps=0, loss=None,
                                extras={"gradient": g})
        g1 = payload["direction"] - trainer.gradient(rc, client, payload["previous_model"], purpose="fedpage/full") \
            + trainer.gradient(rc, client, x, purpose="fedpage/full")
        y1 = x - rc.lr * g1
        update = trainer.train(rc, client, steps, y1, RecursiveGradient(g1, prev=x))
        update.delta.add_(y1 - x)  # y_{K+1} - x_t
        return update

    def accumulate(self, rc, client, update, weight):
        if update.delta is None:
            rc.acc.add_(update.extras["gradient"], alpha=weight)
        else:
            rc.acc.add_(update.delta, alpha=-weight / (update.steps * rc.lr))

    def server_update(self, rc, x):
        if not rc.part.completed.any():
            return
        self.previous.copy_(x)
        x.add_(rc.acc, alpha=-self.cfg.server_lr)
        self.direction.copy_(rc.acc)
        if self.cfg.carry_server_lr:
            self.direction.mul_(self.cfg.server_lr)

    def round_stats(self, rc):
        return {"full_round": int(self.full_round(rc.round))}
