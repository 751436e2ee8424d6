"""The client oracle of a round: what a selection rule may ask the clients at x_t before drawing (FedSRC oracle
modes, FedSRC-D's variance probes, Power-of-Choice's losses). Each question is counted as the clients would pay
for it: x_t sent (unless the client already holds it this round), the gradients computed, the answer sent back."""

from __future__ import annotations

import torch

from fedbench.training.trainer import ClientTrainer
from fedbench.participation.base import ClientOracle
from fedbench.records import RoundContext

SCALAR = torch.zeros(1)  # one float sent back


class EngineOracle(ClientOracle):
    """``batched``: the run's batched runner (the cohort runner or the worker pool), which trains the clients an
    oracle asks for their local runs together (and, where its ``can_batch_gradients`` says so, computes their full
    gradients together), or None (one after another on the run's sequential runner)."""

    def __init__(self, trainer: ClientTrainer, t: int, lr: float, x: torch.Tensor, server_lr: float,
                 local_steps: int, batched=None):
        self.trainer, self.x, self.batched = trainer, x, batched
        self.rc = RoundContext(round=t, lr=lr, part=None)
        self.lr, self.server_lr, self.local_steps = lr, server_lr, local_steps

    @property
    def cost(self):
        return self.trainer.cost

    def local_updates(self, clients):
        for _ in clients:
            self.cost.download(self.x)
        if self.batched is None:
            updates = [self.trainer.train(self.rc, c, self.local_steps, self.x) for c in clients]
        else:
            updates = self.batched.updates(self.trainer, self.rc, [(c, self.local_steps, {}, None) for c in clients],
                                           self.x)
        for _ in clients:
            self.cost.upload(SCALAR)
        return updates

    def full_gradients(self, clients):
        for _ in clients:
            self.cost.download(self.x)
        sizes = [int(self.trainer.data.sizes[c]) for c in clients]
        if self.batched is not None and self.batched.can_batch_gradients(sizes):
            grads = self.batched.gradients(self.trainer, self.rc, clients, self.x)
        else:
            grads = torch.stack([self.trainer.gradient(self.rc, c, self.x, purpose="oracle/gradient")
                                 for c in clients])
        for g in grads:
            self.cost.upload(g)
        return grads

    def minibatch_variance(self, client, probes, with_noise):
        """Unbiased sample variance (1/(R-1)) sum_r ||g_r - mean||^2 of R minibatch gradients at x_t; exactly 0,
        with nothing computed, for noiseless full-batch steps (a batch is then the client's whole data)."""
        n = int(self.trainer.data.sizes[client])
        if self.trainer.batch_size >= n and not (with_noise and self.noise_variance(client) > 0):
            return 0.0
        grads = torch.stack(self.trainer.minibatch_gradients(self.rc, client, self.x, probes, with_noise))
        self.cost.upload(SCALAR)
        return float(((grads - grads.mean(0)) ** 2).sum() / (probes - 1))

    def noise_variance(self, client):
        std = self.trainer.noise_std
        return 0.0 if std is None else float(std[client]) ** 2 * self.x.numel()

    def loss(self, client, samples=None):
        self.cost.download(self.x)
        value = self.trainer.loss(self.rc, client, self.x, samples, purpose="oracle/loss")
        self.cost.upload(SCALAR)
        return value
