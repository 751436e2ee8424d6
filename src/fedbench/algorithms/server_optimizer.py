"""Server optimizers on the aggregated pseudo-gradient (``algo.server_optimizer``), after Reddi et al., *Adaptive
Federated Optimization* (ICLR 2021), Algorithm 2. With Delta_t the round's aggregate update (a descent direction in
model-delta units), beta1 = ``server_momentum``, beta2 = ``server_beta2``, tau = ``server_tau``, eta = ``server_lr``:

* ``sgd``:       x_{t+1} = x_t + eta Delta_t  (FedAvg with a server learning rate)
* ``momentum``:  m_t = beta1 m_{t-1} + Delta_t,  x_{t+1} = x_t + eta m_t  (FedAvgM, Hsu et al. 2019)
* ``adam``:      m_t = beta1 m_{t-1} + (1 - beta1) Delta_t,  v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2
* ``yogi``:      the same m_t,  v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)
* ``adagrad``:   the same m_t,  v_t = v_{t-1} + Delta_t^2
  and for the three adaptive ones x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau), with m_{-1} = 0, v_{-1} = tau^2.

Its state (m, v) is declared algorithm state, so it is checkpointed and resumed exactly.
"""

from __future__ import annotations

from enum import Enum
from typing import Callable

import torch


class ServerOptimizer(Enum):
    sgd = "sgd"
    momentum = "momentum"
    adam = "adam"
    yogi = "yogi"
    adagrad = "adagrad"


ADAPTIVE = (ServerOptimizer.adam, ServerOptimizer.yogi, ServerOptimizer.adagrad)


class ServerStep:
    """x <- x + step(Delta) for one of the ``ServerOptimizer`` rules; ``declare`` registers its state."""

    def __init__(self, cfg, dim: int, device: torch.device, declare: Callable[[str, torch.Tensor], torch.Tensor]):
        self.kind = ServerOptimizer(cfg.server_optimizer)
        self.lr, self.beta1, self.beta2, self.tau = cfg.server_lr, cfg.server_momentum, cfg.server_beta2, cfg.server_tau
        if self.kind != ServerOptimizer.sgd:
            self.m = declare("momentum", torch.zeros(dim, device=device))
        if self.kind in ADAPTIVE:
            self.v = declare("server_v", torch.full((dim,), self.tau ** 2, device=device))

    def __call__(self, x: torch.Tensor, delta: torch.Tensor) -> None:
        kind = self.kind
        if kind == ServerOptimizer.sgd:
            x.add_(delta, alpha=self.lr)
            return
        if kind == ServerOptimizer.momentum:
            self.m.mul_(self.beta1).add_(delta)
            x.add_(self.m, alpha=self.lr)
            return
        self.m.mul_(self.beta1).add_(delta, alpha=1.0 - self.beta1)
        square = delta * delta
        if kind == ServerOptimizer.adam:
            self.v.mul_(self.beta2).add_(square, alpha=1.0 - self.beta2)
        elif kind == ServerOptimizer.yogi:
            self.v.sub_(torch.sign(self.v - square) * square, alpha=1.0 - self.beta2)
        else:
            self.v.add_(square)
        x.addcdiv_(self.m, self.v.sqrt().add_(self.tau), value=self.lr)
