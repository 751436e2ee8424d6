"""Generalized FedAvg with amplified updates (Wang & Ji, NeurIPS 2022, Algorithm 1; note §1.2-1.6).

Each round x_{t+1} = x_t + sum_n q^n_t Delta^n_t (q = 1/|C_t| by default: ``aggregation=normalized``) and
u accumulates the same sum; at the end of every window of P rounds x_{t+1} += (eta - 1) u and u <- 0, i.e.
x_{t0+P} = x_{t0} + eta (x^pre_{t0+P} - x_{t0}). eta = 1 is FedAvg; P = 1 makes eta a server learning rate.
The first ``warmup_rounds`` rounds are plain FedAvg with local learning rate ``warmup_lr`` (the paper's
experiments); windows start when warm-up ends, and a trailing partial window is never amplified (note §6.7).

Baselines of §1.6 (experimental variant, note §6.14), after warm-up:
``wait_minibatch``: every P rounds all N clients, ignoring availability, run I local steps of minibatches from
the current model and their deltas are averaged (eta = 1); the P - 1 rounds in between only wait.
``wait_full``: the same with each local step on the client's whole local dataset.
Both train at ``wait_lr`` after warm-up, ``warmup_lr`` when unset (the paper's wait-* runs use eta = 1 and its grid
search's winner gamma = the warm-up learning rate, note §6.14, Table D.1); ``wait_lr`` is their searched step in
``fedbench-tune`` (``client.lr`` does not reach them). The presets ``algo=wait_minibatch`` and ``algo=wait_full`` set
``mode``, so one sweep compares them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

import numpy as np
import torch

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Aggregation, Algorithm
from fedbench.errors import ConfigError
from fedbench.participation.base import RoundParticipation
from fedbench.options import option


class Mode(Enum):
    amplified = "amplified"
    wait_minibatch = "wait_minibatch"
    wait_full = "wait_full"


@ALGORITHMS.register("amplified_fedavg")
class AmplifiedFedAvg(Algorithm):
    server_optimizers = False  # its server update is its own recursion
    @dataclass
    class Config(AlgoConfig):
        """``server_lr`` scales every round's step (and so the window sum u); 1 is the paper's."""

        aggregation: Aggregation = Aggregation.normalized
        eta: float = option(10.0, gt=0)
        period: int = option(500, ge=1)
        warmup_rounds: int = 0
        warmup_lr: Optional[float] = option(None, gt=0)  # null: client.lr
        mode: Mode = Mode.amplified
        wait_lr: Optional[float] = option(None, gt=0)  # the wait modes' step after warm-up; null: warmup_lr

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.mode = Mode(cfg.mode)
        if cfg.wait_lr is not None and self.mode == Mode.amplified:
            raise ConfigError("algo.wait_lr", "only the wait modes (algo=wait_minibatch, wait_full) train at it.",
                              "leave it unset (null) for amplified runs; their step after warm-up is client.lr.")
        self.u = self.declare("window_update", torch.zeros(ctx.dim, device=ctx.device))

    def _window_end(self, t: int) -> bool:
        return t >= self.cfg.warmup_rounds and (t + 1 - self.cfg.warmup_rounds) % self.cfg.period == 0

    def plan_round(self, part):
        if self.mode == Mode.amplified or part.round < self.cfg.warmup_rounds:
            return part
        n = self.ctx.num_clients
        if not self._window_end(part.round):  # waiting for every client
            ids = np.zeros(0, dtype=np.int64)
        else:
            ids = np.arange(n)
        return RoundParticipation(part.round, np.ones(n, dtype=bool), ids, np.ones(ids.size, dtype=bool),
                                  np.full(ids.size, self.ctx.local_steps, dtype=np.int64), np.ones(n))

    def local_options(self, rc, client):
        warm = rc.round < self.cfg.warmup_rounds
        options = {}
        if not warm and self.mode != Mode.amplified and self.cfg.wait_lr is not None:
            options["lr"] = self.cfg.wait_lr
        elif (warm or self.mode != Mode.amplified) and self.cfg.warmup_lr is not None:
            options["lr"] = self.cfg.warmup_lr
        if self.mode == Mode.wait_full and not warm:
            options["batch_size"] = int(self.ctx.sizes[client])
        return options

    def server_update(self, rc, x):
        x.add_(rc.acc, alpha=self.cfg.server_lr)
        if self.mode != Mode.amplified or rc.round < self.cfg.warmup_rounds:
            return
        self.u.add_(rc.acc, alpha=self.cfg.server_lr)
        if self._window_end(rc.round):
            x.add_(self.u, alpha=self.cfg.eta - 1.0)
            self.u.zero_()
