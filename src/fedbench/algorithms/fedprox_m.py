"""FedProx with server momentum: FedProx's local objective, FedAvgM's server step m = beta m + Delta, x += eta_s m."""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.algorithms.base import ALGORITHMS
from fedbench.algorithms.fedavgm import FedAvgM
from fedbench.algorithms.fedprox import Proximal


@ALGORITHMS.register("fedprox_m")
class FedProxM(Proximal, FedAvgM):
    @dataclass
    class Config(FedAvgM.Config):
        name: str = "fedprox_m"
        mu: float = 0.01
