"""ClientTrainer: a client's minibatches (from its counter-based stream) + the client runner -> ClientUpdate,
and the primitive "gradient of client i's data at point w" that algorithms needing a large-batch gradient use."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from typing import Optional

import numpy as np
import torch

from fedbench.data.federated import FederatedData
from fedbench.training.evaluation import evaluate
from fedbench.training.runners import ClientRunner
from fedbench.training.step import LocalRun
from fedbench.records import ClientUpdate, Cost, RoundContext, StepHook
from fedbench.rng import derive_seeds, torch_rng

GRADIENT_CHUNK = 1024  # samples per forward/backward pass of a full-batch gradient (bounds memory; same mean)


class ClientTrainer:
    """``noise_std`` (N,), where given, is each client's injected gradient noise: N(0, s_i^2 I) added to the
    stochastic gradient of every local step (stream (seed, "grad_noise", round, client)) and of the minibatch
    probes that sample that gradient; full-data gradients stay noiseless."""

    def __init__(self, data: FederatedData, runner: ClientRunner, seed: int, batch_size: int,
                 noise_std: Optional[np.ndarray] = None):
        self.data = data
        self.runner = runner
        self.seed = seed
        self.batch_size = batch_size
        self.noise_std = noise_std
        self.buffers: Optional[torch.Tensor] = None  # global floating-point buffers (BN statistics)
        self.cost = Cost()
        self._occurrences: Counter = Counter()

    def begin_round(self) -> None:
        self._occurrences.clear()

    def batches(self, rc: RoundContext, client: int, steps: int, batch_size: Optional[int] = None,
                purpose: str = "batches") -> list:
        """The client's minibatches for this round, from the stream (seed, purpose, round, client); a client
        drawn twice in one round (selection with replacement) gets a fresh stream for its second run."""
        gen = torch_rng(self.seed, self._occurrence(client, purpose), rc.round, client)
        return self.data.client_batches(client, steps, batch_size or self.batch_size, gen)

    def batch_indices_of(self, rc: RoundContext, entries: list, purpose: str = "batches") -> list:
        """What ``batches`` would gather for every (client, steps, batch size or None) of ``entries``, in order, as
        (indices into the data, batch size): the same streams and counters, the streams' seeds derived together
        (``fedbench.rng.derive_seeds``)."""
        purposes = [self._occurrence(c, purpose) for c, _, _ in entries]
        seeds = np.empty(len(entries), dtype=np.int64)
        for name in set(purposes):
            at = [i for i, q in enumerate(purposes) if q == name]
            seeds[at] = derive_seeds(self.seed, name, rc.round, np.array([entries[i][0] for i in at]))
        out = []
        for (client, steps, batch_size), seed in zip(entries, seeds.tolist()):
            gen = torch.Generator()
            gen.manual_seed(seed)
            out.append(self.data.client_indices(client, steps, batch_size or self.batch_size, gen))
        return out

    def batch_of(self, client: int, batch_size: Optional[int] = None) -> int:
        """The samples in each of the client's minibatches: ``batch_size`` (or ``client.batch_size``), clipped to
        the client's data as ``FederatedData.client_indices`` clips it."""
        return min(batch_size or self.batch_size, int(self.data.sizes[client]))

    def _occurrence(self, client: int, purpose: str) -> str:
        """``purpose`` for the client's first use of a stream in the round, ``purpose/k`` for its k-th repeat."""
        k = self._occurrences[client, purpose]
        self._occurrences[client, purpose] += 1
        return purpose if k == 0 else f"{purpose}/{k}"

    def noise_stream(self, rc: RoundContext, client: int, purpose: str = "grad_noise") -> Optional[tuple]:
        """(std, generator) of the client's injected gradient noise for its next run this round (stream (seed,
        purpose, round, client), its occurrence counted like the batches'), or None when it has none."""
        std = 0.0 if self.noise_std is None else float(self.noise_std[client])
        return (std, torch_rng(self.seed, self._occurrence(client, purpose), rc.round, client)) if std > 0 else None

    def train(self, rc: RoundContext, client: int, steps: int, start: torch.Tensor,
              hook: Optional[StepHook] = None, lr: Optional[float] = None,
              batch_size: Optional[int] = None) -> ClientUpdate:
        """Run ``steps`` local SGD steps of ``client`` from ``start`` under ``hook``; return delta = y - start.
        ``lr`` and ``batch_size`` override the round's learning rate and ``client.batch_size``."""
        batches = self.batches(rc, client, steps, batch_size)
        if self.runner.module.has_dropout:
            self.runner.module.set_dropout_generator(torch_rng(self.seed, "dropout", rc.round, client))
        run = LocalRun(start, hook, self.cost, noise=self.noise_stream(rc, client))
        loss = self.runner.run(run, self.buffers, batches, rc.lr if lr is None else lr)
        flat = self.runner.module.flat
        return ClientUpdate(
            delta=flat.params - start,
            num_samples=int(self.data.sizes[client]),
            steps=steps,
            loss=loss,
            buffers=flat.buffers.clone() if flat.buffers.numel() else None,
        )

    def batch_gradients(self, rc: RoundContext, client: int, points: list, steps: int,
                        batch_size: Optional[int] = None, purpose: str = "refresh") -> list:
        """At each flat point of ``points``, the mean over ``steps`` minibatches of the client's stream ``purpose``
        of the minibatch gradient; every batch is evaluated at every point with the same dropout masks (stream
        (seed, purpose/dropout, round, client)). Costs len(points) x steps x batch gradient evaluations."""
        batches = self.batches(rc, client, steps, batch_size, purpose)
        totals = [torch.zeros_like(w) for w in points]
        with self._masks(rc, client, purpose) as gen:
            for xb, yb in batches:
                state = gen.get_state()
                for w, total in zip(points, totals):
                    gen.set_state(state)
                    total.add_(self.runner.module.functional.loss_grad(w, xb, yb)[1], alpha=1.0 / len(batches))
                    self.cost.gradients(len(yb))
        return totals

    def gradient(self, rc: RoundContext, client: int, w: torch.Tensor, samples: Optional[int] = None,
                 purpose: str = "gradient") -> torch.Tensor:
        """The mean cross-entropy gradient of ``client``'s data at the flat point ``w``: over all its samples
        (``samples=None``), or over ``samples`` of them drawn without replacement from the explicit stream
        (seed, purpose, round, client). Un-augmented inputs, batch statistics with BN running statistics frozen,
        dropout masks from (seed, purpose/dropout, round, client). Costs n (or ``samples``) gradient evaluations."""
        idx = self._indices(rc, client, samples, purpose)
        total = torch.zeros_like(w)
        with self._masks(rc, client, purpose):
            for chunk in idx.split(GRADIENT_CHUNK):
                _, g = self.runner.module.functional.loss_grad(w, self.data.x[chunk], self.data.y[chunk])
                total.add_(g, alpha=len(chunk) / len(idx))
        self.cost.gradients(len(idx))
        return total

    def minibatch_gradients(self, rc: RoundContext, client: int, w: torch.Tensor, count: int,
                            with_noise: bool, purpose: str = "probe") -> list:
        """``count`` stochastic gradients at ``w``, one per minibatch of the stream (seed, purpose, round, client)
        (plus the client's injected noise when ``with_noise``): what a local step at ``w`` would use."""
        batches = self.batches(rc, client, count, purpose=purpose)
        noise = self.noise_stream(rc, client, f"{purpose}/noise") if with_noise else None
        out = []
        with self._masks(rc, client, purpose):
            for xb, yb in batches:
                g = self.runner.module.functional.loss_grad(w, xb, yb)[1]
                self.cost.gradients(len(yb))
                if noise is not None:
                    g = g + noise[0] * torch.randn(g.shape, generator=noise[1]).to(g.device, g.dtype)
                out.append(g)
        return out

    @torch.no_grad()
    def loss(self, rc: RoundContext, client: int, w: torch.Tensor, samples: Optional[int] = None,
             purpose: str = "loss") -> float:
        """F_i(w): the mean cross-entropy of the client's data at ``w`` with the global buffers (eval mode), over
        all its samples or ``samples`` of them drawn without replacement from (seed, purpose, round, client)."""
        idx = self._indices(rc, client, samples, purpose)
        self.runner.load(w, self.buffers)
        return evaluate(self.runner.module, self.data.x[idx], self.data.y[idx], GRADIENT_CHUNK)[0]

    def _indices(self, rc: RoundContext, client: int, samples: Optional[int], purpose: str) -> torch.Tensor:
        """The client's sample indices: all of them, or ``samples`` drawn from the stream (seed, purpose, round,
        client)."""
        lo, hi = int(self.data.offsets[client]), int(self.data.offsets[client + 1])
        n = hi - lo
        if samples is None or samples >= n:
            return torch.arange(lo, hi, device=self.data.x.device)
        perm = torch.randperm(n, generator=torch_rng(self.seed, purpose, rc.round, client))[:samples]
        return (perm + lo).to(self.data.x.device)

    @contextmanager
    def _masks(self, rc: RoundContext, client: int, purpose: str):
        """Train mode with dropout masks from the stream (seed, purpose/dropout, round, client); the local runs'
        generator is restored afterwards."""
        module = self.runner.module
        previous = module.dropout_generator
        gen = torch_rng(self.seed, f"{purpose}/dropout", rc.round, client)
        module.set_dropout_generator(gen)
        module.train()
        try:
            yield gen
        finally:
            module.set_dropout_generator(previous)
