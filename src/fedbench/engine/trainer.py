"""ClientTrainer: a client's minibatches (from its counter-based stream) + the client runner -> ClientUpdate."""

from __future__ import annotations

from collections import Counter
from typing import Optional

import torch

from fedbench.algorithms.base import ClientUpdate, RoundContext
from fedbench.data.federated import FederatedData
from fedbench.engine.local import LocalHooks
from fedbench.engine.runners import ClientRunner
from fedbench.rng import torch_rng


class ClientTrainer:
    def __init__(self, data: FederatedData, runner: ClientRunner, seed: int, batch_size: int):
        self.data = data
        self.runner = runner
        self.seed = seed
        self.batch_size = batch_size
        self.buffers: Optional[torch.Tensor] = None  # global floating-point buffers (BN statistics)
        self._occurrences: Counter = Counter()

    def begin_round(self) -> None:
        self._occurrences.clear()

    def batches(self, rc: RoundContext, client: int, steps: int, batch_size: Optional[int] = None) -> list:
        """The client's minibatches for this round, from the stream (seed, "batches", round, client); a client
        drawn twice in one round (selection with replacement) gets a fresh stream for its second run."""
        k = self._occurrences[client]
        self._occurrences[client] += 1
        purpose = "batches" if k == 0 else f"batches/{k}"
        gen = torch_rng(self.seed, purpose, rc.round, client)
        return self.data.client_batches(client, steps, batch_size or self.batch_size, gen)

    def train(self, rc: RoundContext, client: int, steps: int, start: torch.Tensor,
              hooks: Optional[LocalHooks] = None, lr: Optional[float] = None,
              batch_size: Optional[int] = None) -> ClientUpdate:
        """Run ``steps`` local SGD steps of ``client`` from ``start``; return delta = y_steps - start.
        ``lr`` and ``batch_size`` override the round's learning rate and ``client.batch_size``."""
        batches = self.batches(rc, client, steps, batch_size)
        self.runner.module.set_dropout_generator(torch_rng(self.seed, "dropout", rc.round, client))
        loss = self.runner.run(start, self.buffers, batches, rc.lr if lr is None else lr, hooks)
        flat = self.runner.module.flat
        return ClientUpdate(
            delta=flat.params - start,
            num_samples=int(self.data.sizes[client]),
            steps=steps,
            loss=loss,
            buffers=flat.buffers.clone() if flat.buffers.numel() else None,
        )
