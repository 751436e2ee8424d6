"""Train-time augmentation on normalized tensors: random crop with zero padding 4 and horizontal flip."""

from __future__ import annotations

import torch


def crop_flip(x: torch.Tensor, gen: torch.Generator, fill: torch.Tensor, per_sample: bool = True,
              pad: int = 4) -> torch.Tensor:
    """RandomCrop(H, padding=pad) + RandomHorizontalFlip on a batch (B, C, H, W).

    ``fill`` (C,) is the normalized value of a black pixel, so padding equals torchvision's zero padding before
    normalization. ``per_sample=False`` draws one offset and one flip for the whole batch (what torchvision 0.8's
    tensor transforms did to a minibatch in Wang & Ji's code).
    """
    b, c, h, w = x.shape
    n = b if per_sample else 1
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=gen).to(x.device)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=gen).to(x.device)
    flip = (torch.rand(n, generator=gen) < 0.5).to(x.device)
    padded = fill.to(x).view(1, c, 1, 1).expand(b, c, h + 2 * pad, w + 2 * pad).clone()
    padded[:, :, pad:pad + h, pad:pad + w] = x
    rows = (dy.view(-1, 1) + torch.arange(h, device=x.device)).expand(b, h)
    cols = dx.view(-1, 1) + torch.arange(w, device=x.device)
    cols = torch.where(flip.view(-1, 1), cols.flip(1), cols).expand(b, w)
    bi = torch.arange(b, device=x.device).view(b, 1, 1, 1)
    ci = torch.arange(c, device=x.device).view(1, c, 1, 1)
    return padded[bi, ci, rows.view(b, 1, h, 1), cols.view(b, 1, 1, w)]
