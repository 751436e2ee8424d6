"""Federated algorithms, one file each, on the hook API of ``base.py``."""

from fedbench.algorithms.base import ALGORITHMS, AlgoContext, Algorithm, ClientUpdate, RoundContext
from fedbench.algorithms import fedavg, fedavgm  # noqa: F401  (registers)

__all__ = ["ALGORITHMS", "AlgoContext", "Algorithm", "ClientUpdate", "RoundContext"]
