"""MimeLite (Karimireddy et al., 2020, "Mime", Alg. 1 with SGD + momentum as the base optimizer).

The server broadcasts x_t and its momentum m; client i computes the full-batch gradient c_i = grad f_i(x_t) (its
n_i samples, counted, uploaded beside the delta) and takes local steps with the server momentum frozen:
    y <- y - eta_l ((1 - beta) g_i(y; xi) + beta m).
Server: x_{t+1} = x_t + eta_s sum_i w_i Delta_i,  m <- (1 - beta) sum_i w_i c_i + beta m  (w_i: the aggregate's
weights, 1/S under uniform sampling). beta = 0 is FedAvg (the full-batch gradients are then computed but unused).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm
from fedbench.records import Affine, StepHook
from fedbench.options import option


class FrozenMomentumHook(StepHook):
    def __init__(self, beta: float, momentum: torch.Tensor):
        self.beta, self.momentum = beta, momentum

    def grad(self, ctx):
        ctx.set_grad(ctx.grad().mul_(1 - self.beta).add_(self.momentum, alpha=self.beta))

    def affine(self):
        return Affine(scale=1 - self.beta, offset=self.beta * self.momentum)


@ALGORITHMS.register("mimelite")
class MimeLite(Algorithm):
    affine_steps = True
    @dataclass
    class Config(AlgoConfig):
        beta: float = option(0.9, ge=0, lt=1)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.momentum = self.declare("momentum", torch.zeros(ctx.dim, device=ctx.device))

    def begin_round(self, rc, x):
        super().begin_round(rc, x)
        rc.scratch.full_grads = torch.zeros_like(rc.acc)

    def payload(self, rc, client):
        return {"momentum": self.momentum}

    def step_hook(self, rc, client, x, payload):
        return FrozenMomentumHook(self.cfg.beta, payload["momentum"]) if self.cfg.beta else None

    def finish_update(self, trainer, rc, client, x, update):
        update.extras["full_grad"] = trainer.gradient(rc, client, x)  # grad F_i(x), for the server momentum
        return update

    def accumulate(self, rc, client, update, weight):
        super().accumulate(rc, client, update, weight)
        rc.scratch.full_grads.add_(update.extras["full_grad"], alpha=weight)

    def server_update(self, rc, x):
        super().server_update(rc, x)
        self.momentum.mul_(self.cfg.beta).add_(rc.scratch.full_grads, alpha=1 - self.cfg.beta)
