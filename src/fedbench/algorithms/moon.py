"""MOON (Li, He & Song, CVPR 2021): model-contrastive local objective, FedAvg aggregation (``moon_m``: the preset with
``server_optimizer=momentum``, FedAvgM's server step).

For the step's batch, with z = features of the local model, z_g of the global model x_t and z_p of the client's
previous local model (Eq. 3, cosine similarity sim, temperature tau):
    l_con = -log( exp(sim(z, z_g)/tau) / (exp(sim(z, z_g)/tau) + exp(sim(z, z_p)/tau)) ),
    loss  = CE + mu * l_con   (Eq. 4).
z is ``ZooModel.features`` (the representation the classifier head reads: the zoo's counterpart of MOON's
projection-head output). z_g and z_p are computed without gradient on the same batch and dropout masks. A client
with no previous local model uses x_t (l_con is then constant). mu = 0 is FedAvg.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm
from fedbench.errors import require
from fedbench.records import StepHook
from fedbench.options import Search, option


def contrastive(z: torch.Tensor, z_global: torch.Tensor, z_prev: torch.Tensor, tau: float) -> torch.Tensor:
    """MOON's Eq. 3, averaged over the batch: cross-entropy of the logits [sim(z, z_g), sim(z, z_p)]/tau at 0."""
    pos = F.cosine_similarity(z.flatten(1), z_global.flatten(1), dim=1)
    neg = F.cosine_similarity(z.flatten(1), z_prev.flatten(1), dim=1)
    logits = torch.stack([pos, neg], dim=1) / tau
    return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))


class ContrastiveHook(StepHook):
    def __init__(self, mu: float, tau: float, x_global: torch.Tensor, prev: torch.Tensor):
        self.mu, self.tau, self.x_global, self.prev = mu, tau, x_global, prev

    def loss(self, ctx):
        z, _ = ctx.forward()
        z_global = ctx.features_at(self.x_global)
        z_prev = z_global if self.prev is self.x_global else ctx.features_at(self.prev)
        return ctx.loss() + self.mu * contrastive(z, z_global, z_prev, self.tau)


class Contrastive:
    """Mixin: MOON's local objective and the per-client previous local model, on top of any server rule."""

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        require(cfg.mu >= 0, "algo.mu", f"{cfg.mu} is negative.", "use mu >= 0 (MOON: 5 on CIFAR-10, 1 on CIFAR-100).")
        require(cfg.temperature > 0, "algo.temperature", f"{cfg.temperature} is not positive.", "use e.g. 0.5.")
        self.previous = self.declare_table("previous_local")

    def step_hook(self, rc, client, x, payload):
        if self.cfg.mu == 0:
            return None
        prev = self.previous.get(client) if client in self.previous else x
        return ContrastiveHook(self.cfg.mu, self.cfg.temperature, x, prev)

    def client_update(self, trainer, rc, client, steps, x, payload):
        update = super().client_update(trainer, rc, client, steps, x, payload)
        if self.cfg.mu > 0:
            self.previous.set(client, x + update.delta)
        return update


@ALGORITHMS.register("moon")
class Moon(Contrastive, Algorithm):
    batchable = False

    @dataclass
    class Config(AlgoConfig):
        mu: float = option(1.0, tune=Search((0.1, 1.0, 5.0, 10.0), log=True))  # MOON paper Sec. 4.1
        temperature: float = option(0.5, gt=0)
