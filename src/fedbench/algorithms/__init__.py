"""Federated algorithms, one file each, on the hook API of ``base.py``."""

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, AlgoContext, Algorithm
from fedbench.records import ClientUpdate, RoundContext, StepHook
from fedbench.algorithms import (  # noqa: F401  (registers)
    amplified_fedavg, bvr_l_sgd, fedamd, fedavg, feddyn, fedmlb, fedpage, fedprox, fedvarp, gradma,
    mifa, mimelite, mimic, moon, scaffold,
)

__all__ = ["ALGORITHMS", "AlgoConfig", "AlgoContext", "Algorithm", "ClientUpdate", "RoundContext", "StepHook"]
