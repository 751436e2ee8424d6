"""FedDyn (Acar et al., ICLR 2021, Algorithm 1): dynamic regularisation.

Client k (in delta units, Delta_k = theta_k - x_t):
    local objective  L_k(theta) - <grad L_k(theta_k^{t-1}), theta> + alpha/2 ||theta - x_t||^2, i.e. each local step
    uses g - lambda_k + alpha (theta - x_t) with lambda_k = grad L_k(theta_k^{t-1}) (0 before k's first round);
    lambda_k <- lambda_k - alpha Delta_k.
Server: h <- h - alpha sum_{k in P_t} p_k Delta_k  (p_k = 1/N: the paper's 1/m),
        x_{t+1} = x_t + eta_s sum_k w_k Delta_k - h / alpha   (the average of the theta_k minus h/alpha).
``dynamic=false`` freezes lambda_k and h at 0: the local objective is FedProx's with mu = alpha and the server
FedAvg's, so alpha = 0 with ``dynamic=false`` is FedAvg (the documented reduction).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm
from fedbench.errors import require
from fedbench.options import Search, option
from fedbench.records import Affine, StepHook


class DynamicHook(StepHook):
    def __init__(self, alpha: float, x: torch.Tensor, linear: torch.Tensor):
        self.alpha, self.x, self.linear = alpha, x, linear

    def grad(self, ctx):
        g = ctx.grad() - self.linear
        if self.alpha:
            g.add_(ctx.params.detach() - self.x, alpha=self.alpha)
        ctx.set_grad(g)

    def affine(self):
        return Affine(offset=-self.linear, mu=self.alpha, anchor=self.x)


@ALGORITHMS.register("feddyn")
class FedDyn(Algorithm):
    affine_steps = True
    @dataclass
    class Config(AlgoConfig):
        alpha: float = option(0.01, tune=Search((0.001, 0.01, 0.1), log=True))  # grid: GradMA Sec. 5
        dynamic: bool = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        ok = cfg.alpha > 0 or (cfg.alpha == 0 and not cfg.dynamic)
        require(ok, "algo.alpha", f"{cfg.alpha} with dynamic={cfg.dynamic}.",
                "use alpha > 0 (the paper's grid: 0.001, 0.01, 0.1); alpha = 0 only with algo.dynamic=false.")
        if cfg.dynamic:
            self.linear = self.declare_table("linear")
            self.h = self.declare("h", torch.zeros(ctx.dim, device=ctx.device))

    def step_hook(self, rc, client, x, payload):
        if not self.cfg.dynamic:
            return DynamicHook(self.cfg.alpha, x, torch.zeros_like(x)) if self.cfg.alpha else None
        return DynamicHook(self.cfg.alpha, x, self.linear.get(client))

    def accumulate(self, rc, client, update, weight):
        super().accumulate(rc, client, update, weight)
        if self.cfg.dynamic:
            self.linear.set(client, self.linear.get(client) - self.cfg.alpha * update.delta)
            self.h.add_(update.delta, alpha=-self.cfg.alpha * float(self.p[client]))

    def server_update(self, rc, x):
        super().server_update(rc, x)
        if self.cfg.dynamic:
            x.add_(self.h, alpha=-1.0 / self.cfg.alpha)
