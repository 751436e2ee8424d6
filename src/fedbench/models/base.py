"""The zoo's shared parts: the ``MODELS`` registry of model factories, ``ZooModel`` (blocks / features / head),
``SeededDropout``, the initializers and ``build_model``. Models are built on the meta device and initialized from
an explicit generator, so building a model never touches (or depends on) torch's global RNG."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable

import torch
from omegaconf import MISSING
from torch import nn

from fedbench.options import option
from fedbench.registry import Registry

MODELS = Registry("model")


@dataclass
class ModelConfig:
    """The options of every model (the fixed architectures -- logreg, lenet5, cnn_fmnist, cnn_cifar -- have no
    others)."""

    name: str = MISSING


class Norm(Enum):
    batch = "batch"
    group = "group"
    none = "none"


@dataclass
class NormConfig(ModelConfig):
    """A deep model with a choice of 2-d normalization layers."""

    norm: Norm = Norm.batch
    groups: int = option(2, ge=1)  # norm=group: GroupNorm groups


def norm2d(kind: str, channels: int, groups: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(min(groups, channels), channels)
    return nn.Identity()


def default_init_(module: nn.Module, gen: torch.Generator) -> None:
    """PyTorch's default Linear/Conv init (kaiming_uniform a=sqrt(5), bias U(+-1/sqrt(fan_in))), from ``gen``."""
    nn.init.kaiming_uniform_(module.weight, a=math.sqrt(5), generator=gen)
    if module.bias is not None:
        fan_in = module.weight[0].numel()
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        nn.init.uniform_(module.bias, -bound, bound, generator=gen)


def kaiming_relu_init_(module: nn.Module, gen: torch.Generator) -> None:
    """Kaiming-normal (ReLU gain) weights and zero biases."""
    nn.init.kaiming_normal_(module.weight, nonlinearity="relu", generator=gen)
    if module.bias is not None:
        nn.init.zeros_(module.bias)


def materialize(model: nn.Module, gen: torch.Generator, init: Callable[[nn.Module, torch.Generator], None]) -> nn.Module:
    """Allocate a meta-device model on the CPU and initialize it in module order.

    ``init`` handles Linear/Conv layers (the model's ``final`` layer always gets PyTorch's default init);
    normalization layers reset to their deterministic defaults.
    """
    model = model.to_empty(device="cpu")
    final = getattr(model, "final", None)
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            (default_init_ if m is final else init)(m, gen)
        elif hasattr(m, "reset_parameters") and m is not model:
            m.reset_parameters()
    for m in model.modules():  # BatchNorm running statistics live in buffers
        if hasattr(m, "reset_running_stats"):
            m.reset_running_stats()
    return model


class ZooModel(nn.Module):
    """The model protocol: ``blocks()`` splits the forward pass into a sequence of modules whose composition is
    ``forward``; ``features(x)`` is every block but the last (the representation), ``head(z)`` the last (the
    classifier), so ``forward(x) = head(features(x))``. Block boundaries are the levels of FedMLB's hybrid paths;
    ``features`` is what MOON contrasts. Blocks share the model's parameters (they are not registered twice)."""

    def block_list(self) -> list[nn.Module]:
        raise NotImplementedError

    def blocks(self) -> tuple[nn.Module, ...]:
        if "_blocks" not in self.__dict__:
            self.__dict__["_blocks"] = tuple(self.block_list())
        return self.__dict__["_blocks"]

    def features(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks()[:-1]:
            x = block(x)
        return x

    def head(self, z: torch.Tensor) -> torch.Tensor:
        return self.blocks()[-1](z)

    def forward(self, x):
        return self.head(self.features(x))


class SeededDropout(nn.Module):
    """Dropout whose mask comes from ``self.generator`` (set per client and round by the trainer), so a model
    with dropout stays reproducible without touching torch's global RNG. Without a generator it uses the global one.
    The mask is drawn on the generator's device (the CPU streams) and moved to the input's, so a CUDA run drops the
    same units as the CPU run."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.generator: torch.Generator | None = None
        self.mask: torch.Tensor | None = None  # a precomputed keep mask (the cohort runner's), used instead

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        keep = self.mask
        if keep is None:
            g = self.generator
            keep = (torch.rand(x.shape, generator=g, device=x.device if g is None else g.device) >= self.p).to(x.device)
        return x * keep / (1 - self.p)


def _numel(shape: tuple) -> int:
    return int(math.prod(shape))


def build_model(cfg: Any, input_shape: tuple, num_classes: int, gen: torch.Generator) -> nn.Module:
    """Build ``cfg.name`` (a model registered with its Config beside it) for inputs of ``input_shape`` and initialize it from ``gen``."""
    factory = MODELS.get_class(cfg.name)
    with torch.device("meta"):
        model, init = factory(cfg, tuple(input_shape), num_classes)
    return materialize(model, gen, init)
