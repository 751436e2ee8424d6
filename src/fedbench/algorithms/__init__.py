"""Federated algorithms, one file each, on the hook API of ``base.py``."""

from fedbench.algorithms.base import ALGORITHMS, AlgoContext, Algorithm, ClientUpdate, RoundContext
from fedbench.algorithms import (  # noqa: F401  (registers)
    amplified_fedavg, fedavg, fedavgm, fedprox, fedprox_m, fedvarp, mifa, mifa_m, mimic, scaffold,
)

__all__ = ["ALGORITHMS", "AlgoContext", "Algorithm", "ClientUpdate", "RoundContext"]
