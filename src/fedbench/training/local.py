"""The client-local trainer as a LightningModule; a ``StepHook`` shapes each of its steps."""

from __future__ import annotations

from typing import Optional

import lightning as L
import torch
from torch import nn

from fedbench.training.flat import FlatModel
from fedbench.training.numerics import Numerics
from fedbench.training.step import FunctionalModel, LocalRun, StepContext


class LocalModule(L.LightningModule):
    """Model + cross-entropy loss + local SGD; parameters live in ``self.flat.params``.

    The runner sets ``self.run`` (a ``LocalRun``) before a client's steps; ``training_step`` builds the step's
    ``StepContext``, asks the run's hook for the objective, and ``on_before_optimizer_step`` lets the hook replace
    the gradient. Every step's batch is counted as gradient evaluations.
    """

    def __init__(self, model: nn.Module, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__()
        self.model = model
        self.flat = FlatModel(model)
        self.functional = FunctionalModel(model, self.flat)
        self.numerics = Numerics(torch.device("cpu"))
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.run: Optional[LocalRun] = None
        self._ctx: Optional[StepContext] = None
        from fedbench.models import SeededDropout

        self._dropouts = [m for m in model.modules() if isinstance(m, SeededDropout)]

    def set_numerics(self, numerics: Numerics) -> None:
        """Use ``numerics`` (precision, memory format; installed on the model) in every forward pass."""
        self.numerics = self.functional.numerics = numerics.apply(self.model)

    def set_dropout_generator(self, gen: Optional[torch.Generator]) -> None:
        """Draw dropout masks of the coming local steps from ``gen`` (a per-(seed, round, client) stream)."""
        for m in self._dropouts:
            m.generator = gen

    @property
    def has_dropout(self) -> bool:
        """Whether the model draws dropout masks (else no dropout stream need be derived)."""
        return bool(self._dropouts)

    @property
    def dropout_generator(self) -> Optional[torch.Generator]:
        return self._dropouts[0].generator if self._dropouts else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.numerics.autocast():
            return self.model(x).float()

    def training_step(self, batch, batch_idx):
        run = self.run
        ctx = StepContext(self, run, batch_idx, batch)
        object.__setattr__(self, "_ctx", ctx)  # a plain value: nn.Module.__setattr__'s checks cost ~5 us a step
        run.cost.gradients(len(batch[1]))
        return run.hook.loss(ctx) if run.hook is not None else ctx.loss()

    def on_before_optimizer_step(self, optimizer) -> None:
        if self.run.noise is not None:  # g <- g + std z, z ~ N(0, I_d) from the run's noise stream
            std, gen = self.run.noise
            p = self.flat.params
            self.flat.add_grad(std * torch.randn(p.shape, generator=gen).to(p.device, p.dtype))
        if self.run.hook is not None:
            self.run.hook.grad(self._ctx)
        object.__setattr__(self, "_ctx", None)

    def configure_optimizers(self):
        return torch.optim.SGD(
            self.model.parameters(), lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay
        )
