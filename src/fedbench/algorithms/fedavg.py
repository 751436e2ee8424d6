"""FedAvg (McMahan et al., 2017) with a server learning rate.

x_{t+1} = x_t + eta_s * sum_{i in C_t} w_i (y^i_{t,I} - x_t), with w_i = p_i / E[m_i] (unbiased under the declared
inclusion probabilities; = 1/S for S-of-N uniform sampling and p_i = 1/N) or p_i / sum_C p_j (normalized).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm


@ALGORITHMS.register("fedavg")
class FedAvg(Algorithm):
    @dataclass
    class Config(AlgoConfig):
        """FedAvg takes the common keys only (weighting, aggregation, server_lr, server_optimizer)."""
