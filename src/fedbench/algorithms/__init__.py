"""Federated algorithms, one file each, on the hook API of ``base.py``."""

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, AlgoContext, Algorithm
from fedbench.records import ClientUpdate, RoundContext, StepHook
from fedbench.algorithms import (  # noqa: F401  (registers)
    amplified_fedavg, bvr_l_sgd, fedamd, fedavg, fedavgm, feddyn, fedmlb, fedpage, fedprox, fedprox_m, fedvarp, gradma,
    mifa, mifa_m, mimelite, mimic, moon, scaffold,
)

__all__ = ["ALGORITHMS", "AlgoConfig", "AlgoContext", "Algorithm", "ClientUpdate", "RoundContext", "StepHook"]
