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
        self.offsets: dict[int, int] = {}  # id(parameter) -> its offset in ``params``
        self._layouts: dict[int, tuple] = {}  # id(module) -> ``_layout(module)``
        offset = 0
        for p in self.param_tensors:
            self.offsets[id(p)] = offset
            offset += p.numel()

    @property
    def dim(self) -> int:
        return self.params.numel()

    @property
    def sizes(self) -> list[int]:
        """Number of entries of each parameter tensor, in flat order (the segments of per-layer arithmetic)."""
        return [p.numel() for p in self.param_tensors]

    def view(self, p: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
        """Parameter ``p``'s slice of a flat (d,) vector, shaped like ``p``."""
        o = self.offsets[id(p)]
        return vec[o: o + p.numel()].view_as(p)

    def views(self, vec: torch.Tensor) -> list[torch.Tensor]:
        """Views of a flat (d,) vector shaped like the parameters, for per-parameter (foreach) arithmetic."""
        return [self.view(p, vec) for p in self.param_tensors]

    def named_views(self, module: nn.Module, vec: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{name: view of vec}`` for the parameters of ``module`` (the model or one of its blocks), named as
        ``module.named_parameters()`` names them: the argument ``torch.func.functional_call`` takes. A module
        whose parameters lie side by side in the flat order (the model, a block) is cut with one ``torch.split``,
        whose backward is one concatenation (per-parameter slices would each add a zero-filled (d,) gradient:
        a third of a small model's vmapped step)."""
        layout = self._layouts.get(id(module))
        if layout is None:
            layout = self._layouts[id(module)] = self._layout(module)
        names, shapes, start, sizes = layout
        if start is None:
            return {n: self.view(p, vec) for n, p in module.named_parameters()}
        total = sum(sizes)
        piece = vec if start == 0 and total == vec.shape[-1] else vec.narrow(-1, start, total)
        return {n: t.view(shape) for n, t, shape in zip(names, torch.split(piece, sizes, -1), shapes)}

    def _layout(self, module: nn.Module) -> tuple:
        """(names, shapes, the flat offset of the first parameter or None if they are not contiguous, sizes)."""
        named = list(module.named_parameters())
        names = [n for n, _ in named]
        shapes = [p.shape for _, p in named]
        sizes = [p.numel() for _, p in named]
        offsets = [self.offsets[id(p)] for _, p in named]
        contiguous = bool(named) and all(o + n == nxt for o, n, nxt in zip(offsets, sizes, offsets[1:]))
        return names, shapes, offsets[0] if contiguous else None, sizes

    def grad(self) -> torch.Tensor:
        """The parameters' gradients as one flat vector (zeros where a parameter got none)."""
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in self.param_tensors])

    def set_grad(self, vec: torch.Tensor) -> None:
        for p, v in zip(self.param_tensors, self.views(vec)):
            p.grad = v.detach().clone()

    def add_grad(self, vec: torch.Tensor) -> None:
        """Add a flat (d,) vector to the gradients in place, parameter by parameter (a parameter that got no
        gradient gets its slice): ``set_grad(grad() + vec)`` without the two flat copies."""
        for p, v in zip(self.param_tensors, self.views(vec)):
            if p.grad is None:
                p.grad = v.detach().clone()
            else:
                p.grad.add_(v)

    def grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.param_tensors]
