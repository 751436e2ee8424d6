"""Central evaluation of the global model on held-out data."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedbench.training.local import LocalModule


@torch.no_grad()
def evaluate(module: LocalModule, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of the module's current parameters on (x, y)."""
    module.eval()
    loss_sum, correct = 0.0, 0
    for xb, yb in zip(x.split(batch_size), y.split(batch_size)):
        logits = module(xb)
        loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
        correct += int((logits.argmax(1) == yb).sum())
    n = len(y)
    return loss_sum / n, correct / n
