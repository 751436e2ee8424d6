"""VGG-11 (MimiC's and GradMA's variants) and the 2-d normalization layer the deep models share."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
from torch import nn

from fedbench.models.base import MODELS, Norm, NormConfig, SeededDropout, ZooModel, default_init_, norm2d
from fedbench.options import option


class VGGVariant(Enum):
    mimic = "mimic"  # MimiC's code: no BN, classifier 512-512-C
    gradma = "gradma"  # GradMA's VGGNet: BN, classifier 128-C


@dataclass
class VGGConfig(NormConfig):
    norm: Norm = Norm.none  # MimiC's VGG-11 has no normalization layers
    variant: VGGVariant = VGGVariant.mimic
    dropout: float = option(0.5, ge=0, lt=1)  # classifier dropout


class VGG11(ZooModel):
    """VGG-11 (config A: 64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M) on 32x32 inputs.

    variant=mimic (MimiC's code, no BN): classifier Dropout-Linear(512)-ReLU-Dropout-Linear(512)-ReLU-Linear(C),
    convs initialized N(0, sqrt(2 / (9 out))) with zero bias; 9,750,922 parameters for 10 classes.
    variant=gradma (GradMA's ``VGGNet``, BN): classifier Linear(128)-ReLU-Dropout-Linear(C), default init.
    """

    CFG = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]

    def __init__(self, input_shape: tuple, num_classes: int, norm: str, groups: int, variant: str, dropout: float):
        super().__init__()
        layers: list[nn.Module] = []
        prev = input_shape[0]
        for v in self.CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(prev, v, 3, padding=1), norm2d(norm, v, groups), nn.ReLU()]
                prev = v
        self.conv = nn.Sequential(*layers)
        flat = 512 * (input_shape[1] // 32) * (input_shape[2] // 32)
        if variant == "mimic":
            self.fc = nn.Sequential(SeededDropout(dropout), nn.Linear(flat, 512), nn.ReLU(), SeededDropout(dropout),
                                    nn.Linear(512, 512), nn.ReLU())
            self.final = nn.Linear(512, num_classes)
        else:
            self.fc = nn.Sequential(nn.Linear(flat, 128), nn.ReLU(), SeededDropout(dropout))
            self.final = nn.Linear(128, num_classes)

    def block_list(self):
        """The five convolution stages (each ends in a max-pool), the classifier's hidden part, the output layer."""
        pools = [i for i, m in enumerate(self.conv) if isinstance(m, nn.MaxPool2d)]
        stages = [self.conv[a + 1: b + 1] for a, b in zip([-1, *pools[:-1]], pools)]
        return [*stages, nn.Sequential(nn.Flatten(1), *self.fc), self.final]


def vgg_mimic_init_(module: nn.Module, gen: torch.Generator) -> None:
    """MimiC's VGG init: conv weights N(0, sqrt(2 / (k*k*out))), zero bias; linear layers PyTorch's default."""
    if isinstance(module, nn.Conv2d):
        k = module.kernel_size[0] * module.kernel_size[1] * module.out_channels
        nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / k), generator=gen)
        nn.init.zeros_(module.bias)
    else:
        default_init_(module, gen)


@MODELS.register("vgg11", config=VGGConfig)
def _vgg11(cfg: Any, input_shape: tuple, num_classes: int):
    variant = VGGVariant(cfg.variant).value
    model = VGG11(input_shape, num_classes, cfg.norm.value, cfg.groups, variant, cfg.dropout)
    return model, vgg_mimic_init_ if variant == "mimic" else default_init_
