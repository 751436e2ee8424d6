"""FedProx with server momentum: FedProx's local objective, FedAvgM's server step m = beta m + Delta, x += eta_s m."""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.algorithms.base import ALGORITHMS
from fedbench.algorithms.fedavgm import FedAvgM
from fedbench.algorithms.fedprox import check_mu, prox_hooks


@ALGORITHMS.register("fedprox_m")
class FedProxM(FedAvgM):
    @dataclass
    class Config(FedAvgM.Config):
        name: str = "fedprox_m"
        mu: float = 0.01

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        check_mu(cfg)

    def local_hooks(self, rc, client, x, payload):
        return prox_hooks(self.cfg, x)
