"""Model zoo. Models are built on the meta device and initialized from an explicit generator, so building a
model never touches (or depends on) torch's global RNG."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

from fedbench.registry import Registry

MODELS = Registry("model")


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


class LogReg(nn.Module):
    """Multinomial logistic regression on flattened inputs."""

    def __init__(self, in_features: int, num_classes: int):
        super().__init__()
        self.final = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return self.final(x.flatten(1))


class MLP(nn.Module):
    """Fully connected ReLU network, optionally with BatchNorm1d after each hidden layer."""

    def __init__(self, in_features: int, hidden: list[int], num_classes: int, batch_norm: bool = False):
        super().__init__()
        layers: list[nn.Module] = []
        prev = in_features
        for h in hidden:
            layers.append(nn.Linear(prev, h))
            if batch_norm:
                layers.append(nn.BatchNorm1d(h))
            layers.append(nn.ReLU())
            prev = h
        self.body = nn.Sequential(*layers)
        self.final = nn.Linear(prev, num_classes)

    def forward(self, x):
        return self.final(self.body(x.flatten(1)))


class CNNFMNIST(nn.Module):
    """Table D.2 (FashionMNIST) of Wang & Ji (2022): Conv(32,5x5,p2)-ReLU-MaxPool2 -> Conv(32,5x5,p2)-ReLU-
    MaxPool2 -> Dense(128)-ReLU -> Dense(classes). 228,586 parameters on 1x28x28 inputs."""

    def __init__(self, input_shape: tuple, num_classes: int):
        super().__init__()
        c, h, w = input_shape
        self.features = nn.Sequential(
            nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        )
        self.hidden = nn.Linear(32 * (h // 4) * (w // 4), 128)
        self.final = nn.Linear(128, num_classes)

    def forward(self, x):
        return self.final(torch.relu(self.hidden(self.features(x).flatten(1))))


def _numel(shape: tuple) -> int:
    return int(math.prod(shape))


@MODELS.register("logreg")
def _logreg(cfg: Any, input_shape: tuple, num_classes: int):
    return LogReg(_numel(input_shape), num_classes), default_init_


@MODELS.register("mlp")
def _mlp(cfg: Any, input_shape: tuple, num_classes: int):
    return MLP(_numel(input_shape), list(cfg.hidden), num_classes, cfg.batch_norm), kaiming_relu_init_


@MODELS.register("cnn_fmnist")
def _cnn_fmnist(cfg: Any, input_shape: tuple, num_classes: int):
    return CNNFMNIST(input_shape, num_classes), kaiming_relu_init_


def build_model(cfg: Any, input_shape: tuple, num_classes: int, gen: torch.Generator) -> nn.Module:
    """Build ``cfg.name`` for inputs of ``input_shape`` and initialize it from ``gen``."""
    factory = MODELS.get_class(cfg.name)
    with torch.device("meta"):
        model, init = factory(cfg, tuple(input_shape), num_classes)
    return materialize(model, gen, init)
