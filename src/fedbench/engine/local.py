"""The client-local trainer as a LightningModule, plus the algorithm hooks it calls during local steps."""

from __future__ import annotations

from typing import Optional

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from fedbench.engine.flat import FlatModel


class LocalHooks:
    """Per-client algorithm hooks applied inside local training (identical under every client runner).

    ``extra_loss`` adds a term to each minibatch loss (e.g. FedProx's mu/2 ||w - w_g||^2);
    ``correct_grad`` edits gradients after backward and before the optimizer step (e.g. SCAFFOLD's c - c_i).
    """

    def extra_loss(self, module: "LocalModule") -> Optional[torch.Tensor]:
        return None

    def correct_grad(self, module: "LocalModule") -> None:
        return None


class LocalModule(L.LightningModule):
    """Model + cross-entropy loss + local SGD; parameters live in ``self.flat.params``."""

    def __init__(self, model: nn.Module, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__()
        self.model = model
        self.flat = FlatModel(model)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.hooks: Optional[LocalHooks] = None
        self.losses: list[torch.Tensor] = []
        from fedbench.models import SeededDropout

        self._dropouts = [m for m in model.modules() if isinstance(m, SeededDropout)]

    def set_dropout_generator(self, gen: Optional[torch.Generator]) -> None:
        """Draw dropout masks of the coming local steps from ``gen`` (a per-(seed, round, client) stream)."""
        for m in self._dropouts:
            m.generator = gen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.losses.append(loss.detach())
        if self.hooks is not None:
            extra = self.hooks.extra_loss(self)
            if extra is not None:
                loss = loss + extra
        return loss

    def on_before_optimizer_step(self, optimizer) -> None:
        if self.hooks is not None:
            self.hooks.correct_grad(self)

    def configure_optimizers(self):
        return torch.optim.SGD(
            self.model.parameters(), lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay
        )
