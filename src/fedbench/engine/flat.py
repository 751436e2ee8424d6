"""Bind a module's parameters and floating-point buffers to views of two flat vectors.

Loading a model is then one ``copy_`` and reading it is free: the optimizer updates the flat vector in place.
"""

from __future__ import annotations

import torch
from torch import nn


def _bind(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    total = sum(t.numel() for t in tensors)
    flat = torch.empty(total, dtype=torch.float32, device=device)
    offset = 0
    for t in tensors:
        n = t.numel()
        flat[offset: offset + n].copy_(t.detach().reshape(-1))
        t.data = flat[offset: offset + n].view_as(t)
        offset += n
    return flat


class FlatModel:
    """``params`` and ``buffers`` are flat float32 vectors that the module's tensors are views of."""

    def __init__(self, module: nn.Module):
        device = next(module.parameters()).device
        self.param_tensors = list(module.parameters())
        self.buffer_tensors = [b for b in module.buffers() if b.is_floating_point()]
        self.params = _bind(self.param_tensors, device)
        self.buffers = _bind(self.buffer_tensors, device)

    @property
    def dim(self) -> int:
        return self.params.numel()

    def views(self, vec: torch.Tensor) -> list[torch.Tensor]:
        """Views of a flat (d,) vector shaped like the parameters, for per-parameter (foreach) arithmetic."""
        out, offset = [], 0
        for p in self.param_tensors:
            n = p.numel()
            out.append(vec[offset: offset + n].view_as(p))
            offset += n
        return out

    def grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.param_tensors]
