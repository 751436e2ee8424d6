"""Logistic regression and the MLP (hidden sizes, optional BatchNorm and hidden dropout)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List

from torch import nn

from fedbench.models.base import (MODELS, ModelConfig, SeededDropout, ZooModel, _numel, default_init_,
                                  kaiming_relu_init_)
from fedbench.options import option


@dataclass
class MLPConfig(ModelConfig):
    hidden: List[int] = option(factory=lambda: [200], ge=1)  # hidden layer sizes
    batch_norm: bool = False  # BatchNorm1d after each hidden layer
    hidden_dropout: float = option(0.0, ge=0, lt=1)  # dropout before each hidden ReLU (FedSRC's MLP: 0.5)


class LogReg(ZooModel):
    """Multinomial logistic regression on flattened inputs."""

    def __init__(self, in_features: int, num_classes: int):
        super().__init__()
        self.final = nn.Linear(in_features, num_classes)

    def block_list(self):
        return [nn.Flatten(1), self.final]


class MLP(ZooModel):
    """Fully connected ReLU network, optionally with BatchNorm1d after each hidden layer and dropout before each
    hidden ReLU (FedSRC's 784-64-10 MLP: Linear-Dropout(0.5)-ReLU, note A15)."""

    def __init__(self, in_features: int, hidden: list[int], num_classes: int, batch_norm: bool = False,
                 dropout: float = 0.0):
        super().__init__()
        layers: list[nn.Module] = []
        prev = in_features
        for h in hidden:
            layers.append(nn.Linear(prev, h))
            if batch_norm:
                layers.append(nn.BatchNorm1d(h))
            if dropout > 0:
                layers.append(SeededDropout(dropout))
            layers.append(nn.ReLU())
            prev = h
        self.body = nn.Sequential(*layers)
        self.final = nn.Linear(prev, num_classes)
        self.per_layer = 2 + int(batch_norm) + int(dropout > 0)

    def block_list(self):
        """One block per hidden layer (Linear[-BN][-Dropout]-ReLU; the first also flattens), then the output."""
        if not len(self.body):
            return [nn.Flatten(1), self.final]
        k = self.per_layer
        hidden = [self.body[i: i + k] for i in range(0, len(self.body), k)]
        return [nn.Sequential(nn.Flatten(1), *hidden[0]), *hidden[1:], self.final]


@MODELS.register("logreg", config=ModelConfig)
def _logreg(cfg: Any, input_shape: tuple, num_classes: int):
    return LogReg(_numel(input_shape), num_classes), default_init_


@MODELS.register("mlp", config=MLPConfig)
def _mlp(cfg: Any, input_shape: tuple, num_classes: int):
    return MLP(_numel(input_shape), list(cfg.hidden), num_classes, cfg.batch_norm, cfg.hidden_dropout), \
        kaiming_relu_init_
