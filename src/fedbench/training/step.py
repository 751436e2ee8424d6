"""Step helpers: evaluate the model at any flat parameter vector, and the context a ``StepHook`` sees.

``FunctionalModel`` runs the model's blocks (``fedbench.models.ZooModel.blocks``) with parameters taken as views
of a flat vector through ``torch.func.functional_call``: no copies, no hidden module state. Off-point evaluations
use batch statistics (train mode) with BatchNorm running statistics frozen (they run on clones that are thrown
away), so only the local run's own steps move the client's buffers. These functions take flat vectors and batches
only, so a vectorized runner can map them over a round's clients.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedbench.training.numerics import Numerics
from fedbench.records import Cost, StepHook


class FunctionalModel:
    """The model's blocks evaluated at flat parameter vectors (``flat`` gives the name -> offset map)."""

    def __init__(self, model: nn.Module, flat):
        self.flat = flat
        self.blocks: Sequence[nn.Module] = model.blocks()
        self.numerics = Numerics(torch.device("cpu"))

    def run(self, w: torch.Tensor, x: torch.Tensor, start: int = 0, stop: Optional[int] = None) -> torch.Tensor:
        """Apply blocks ``start:stop`` to ``x`` with parameters ``w`` (flat, may require grad); BN stats frozen."""
        with self.numerics.autocast():
            for block in self.blocks[start:stop]:
                tensors = self.flat.named_views(block, w)
                tensors.update({n: b.clone() for n, b in block.named_buffers()})
                x = functional_call(block, tensors, (x,))
        return x.float()

    def features(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.run(w, x, 0, -1)

    def logits(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.run(w, x)

    def loss_grad(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                  running_stats: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean cross-entropy, its flat gradient) of the batch at ``w``; ``running_stats`` evaluates in eval mode
        (BN running statistics, no dropout) instead of with batch statistics."""
        wv = w.detach().requires_grad_(True)
        if not running_stats:
            loss = F.cross_entropy(self.logits(wv, x), y)
        else:
            modes = [b.training for b in self.blocks]
            for b in self.blocks:
                b.eval()
            try:
                loss = F.cross_entropy(self.logits(wv, x), y)
            finally:
                for b, mode in zip(self.blocks, modes):
                    b.train(mode)
        (g,) = torch.autograd.grad(loss, wv)
        return loss.detach(), g


@dataclass
class LocalRun:
    """One client's local run as the runners see it: from where, with which hook, counted where."""

    start: torch.Tensor  # x_t, the point the run starts from (flat)
    hook: Optional[StepHook]
    cost: Cost
    losses: list = field(default_factory=list)
    # (std, generator): N(0, std^2 I) noise added to each step's gradient before the hook (the client's injected
    # gradient noise, ``client.grad_noise``); None: no noise
    noise: Optional[tuple] = None


class StepContext:
    """What ``StepHook.loss`` / ``StepHook.grad`` see in local step ``step``: the batch, the start point
    ``start``, the current point ``params`` (the module's flat parameters), and helpers on the same batch.

    Extra evaluations replay the step's dropout masks (the generator is rewound to its state before the step's
    forward pass and restored afterwards) and share its augmentation (batches are augmented once), and each
    gradient is counted in the run's ``Cost``.
    """

    def __init__(self, module: "LocalModule", run: LocalRun, step: int, batch):
        self.module, self.run, self.step, self.batch = module, run, step, batch
        gen = module.dropout_generator
        self._rng_before = gen.get_state() if gen is not None else None
        self._levels: Optional[list[torch.Tensor]] = None

    # ---- the step's own forward pass -------------------------------------------------------------------------
    @property
    def start(self) -> torch.Tensor:
        return self.run.start

    @property
    def params(self) -> torch.Tensor:
        return self.module.flat.params

    def levels(self) -> list[torch.Tensor]:
        """The output of every block of the model on the batch at the current point, with autograd (computed
        once per step): the intermediate levels, then the features, then the logits."""
        if self._levels is None:
            h, self._levels = self.batch[0], []
            with self.module.numerics.autocast():
                for block in self.module.model.blocks():
                    h = block(h)
                    self._levels.append(h)
            self._levels = [h.float() for h in self._levels]
        return self._levels

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(features, logits) of the batch at the current point."""
        levels = self.levels()
        return levels[-2] if len(levels) > 1 else self.batch[0], levels[-1]

    def loss(self) -> torch.Tensor:
        """The cross-entropy of the batch at the current point (what the run reports as its training loss)."""
        loss = F.cross_entropy(self.forward()[1], self.batch[1])
        self.run.losses.append(loss.detach())
        return loss

    # ---- after backward --------------------------------------------------------------------------------------
    def grad(self) -> torch.Tensor:
        """The flat gradient of this step's objective (valid in ``StepHook.grad``)."""
        return self.module.flat.grad()

    def set_grad(self, g: torch.Tensor) -> None:
        self.module.flat.set_grad(g)

    # ---- the same batch at other points ----------------------------------------------------------------------
    def _replay(self, fn):
        gen = self.module.dropout_generator
        if gen is None:
            return fn()
        after = gen.get_state()
        gen.set_state(self._rng_before)
        try:
            return fn()
        finally:
            gen.set_state(after)

    def grad_at(self, w: torch.Tensor, running_stats: bool = False) -> torch.Tensor:
        """The flat cross-entropy gradient of this step's batch at the flat point ``w`` (counted); batch
        statistics unless ``running_stats``."""
        x, y = self.batch
        g = self._replay(lambda: self.module.functional.loss_grad(w, x, y, running_stats)[1])
        self.run.cost.gradients(len(y))
        return g

    def features_at(self, w: torch.Tensor) -> torch.Tensor:
        """Features of this step's batch at ``w``, without gradient."""
        with torch.no_grad():
            return self._replay(lambda: self.module.functional.features(w, self.batch[0]))

    def blocks_at(self, w: torch.Tensor, z: torch.Tensor, start: int) -> torch.Tensor:
        """Blocks ``start:`` at ``w`` applied to ``z`` (e.g. a local intermediate output), differentiable in z."""
        return self._replay(lambda: self.module.functional.run(w.detach(), z, start))


def mean_loss(losses: list) -> float:
    return float(torch.stack(losses).mean()) if losses else float("nan")

