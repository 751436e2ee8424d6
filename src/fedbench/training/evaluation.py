"""Central evaluation of the global model on held-out data."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedbench.training.local import LocalModule


@torch.no_grad()
def evaluate(module: LocalModule, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of the module's current parameters on (x, y).

    The sums stay on the data's device and are read once at the end, so a GPU evaluation waits for the device once
    rather than twice per batch. Each batch's summed loss is added in float64 in batch order: the same additions,
    bit for bit, as summing the batches' losses as Python floats."""
    module.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=y.device)
    correct = torch.zeros((), dtype=torch.int64, device=y.device)
    for xb, yb in zip(x.split(batch_size), y.split(batch_size)):
        logits = module(xb)
        loss_sum += F.cross_entropy(logits, yb, reduction="sum").double()
        correct += (logits.argmax(1) == yb).sum()
    n = len(y)
    return float(loss_sum) / n, int(correct) / n
