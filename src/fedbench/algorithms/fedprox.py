"""FedProx (Li et al., 2020): local objective F_i(w) + mu/2 ||w - x_t||^2 (MimiC note §4.2), FedAvg aggregation.

The proximal term is added to each minibatch loss through a ``StepHook``, so it acts identically under the thin
and the Lightning client runners. mu = 0 is FedAvg.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm
from fedbench.algorithms.fedavg import FedAvg
from fedbench.records import Affine, StepHook
from fedbench.errors import require
from fedbench.options import Search, option


class ProxHook(StepHook):
    def __init__(self, mu: float, anchor: torch.Tensor):
        self.mu, self.anchor = mu, anchor

    def loss(self, ctx):
        flat = ctx.module.flat
        prox = sum(((p - a) ** 2).sum() for p, a in zip(flat.param_tensors, flat.views(self.anchor)))
        return ctx.loss() + 0.5 * self.mu * prox

    def affine(self):
        return Affine(mu=self.mu, anchor=self.anchor)


class Proximal:
    """Mixin: the proximal local objective, on top of any server rule (any ``server_optimizer``: ``fedprox_m`` is
    the preset with momentum)."""

    affine_steps = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        require(cfg.mu >= 0, "algo.mu", f"{cfg.mu} is negative.", "use mu >= 0 (e.g. 0.01).")

    def step_hook(self, rc, client, x, payload):
        return ProxHook(self.cfg.mu, x) if self.cfg.mu > 0 else None


@ALGORITHMS.register("fedprox")
class FedProx(Proximal, Algorithm):
    @dataclass
    class Config(FedAvg.Config):
        mu: float = option(0.01, tune=Search((0.001, 0.01, 0.1, 1.0), log=True))  # grid: GradMA Sec. 5
