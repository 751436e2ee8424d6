"""ResNet-20 (option A shortcuts) and ResNet-18 (option B; CIFAR or ImageNet stem)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
from torch import nn

from fedbench.models.base import MODELS, NormConfig, ZooModel, default_init_, kaiming_relu_init_, norm2d


class Stem(Enum):
    cifar = "cifar"  # 3x3 convolution, stride 1
    imagenet = "imagenet"  # 7x7 stride 2 + max-pool (torchvision)


@dataclass
class ResNet18Config(NormConfig):
    stem: Stem = Stem.cifar


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, norm: str, groups: int, shortcut: str):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.n1 = norm2d(norm, cout, groups)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.n2 = norm2d(norm, cout, groups)
        self.pad = 0
        self.proj: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            if shortcut == "A":  # He et al.'s CIFAR option A: subsample and zero-pad channels, no parameters
                self.pad = cout - cin
                self.stride = stride
            else:
                self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), norm2d(norm, cout, groups))

    def forward(self, x):
        out = torch.relu(self.n1(self.conv1(x)))
        out = self.n2(self.conv2(out))
        if self.pad:
            sc = x[:, :, :: self.stride, :: self.stride]
            sc = torch.nn.functional.pad(sc, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        else:
            sc = self.proj(x)
        return torch.relu(out + sc)


class ResNet(ZooModel):
    """ResNet with a norm switch. resnet20: He et al. (2016) CIFAR ResNet-20 (3 stages x 3 blocks, 16/32/64
    channels, option-A shortcuts; 269,722 parameters with BN for 10 classes). resnet18: 4 stages x 2 blocks,
    64-512 channels, projection shortcuts; stem=cifar (3x3, stride 1) or imagenet (torchvision's 7x7/2 + max-pool)."""

    def __init__(self, input_shape, num_classes, widths, blocks, norm, groups, shortcut, stem):
        super().__init__()
        c = input_shape[0]
        if stem == "imagenet":
            self.stem = nn.Sequential(nn.Conv2d(c, widths[0], 7, 2, 3, bias=False), norm2d(norm, widths[0], groups),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        else:
            self.stem = nn.Sequential(nn.Conv2d(c, widths[0], 3, 1, 1, bias=False), norm2d(norm, widths[0], groups),
                                      nn.ReLU())
        layers, prev = [], widths[0]
        for i, (w, n) in enumerate(zip(widths, blocks)):
            for j in range(n):
                layers.append(BasicBlock(prev, w, 2 if (i > 0 and j == 0) else 1, norm, groups, shortcut))
                prev = w
        self.layers = nn.Sequential(*layers)
        self.final = nn.Linear(prev, num_classes)
        self.stage_ends = [i + 1 for i in range(len(layers)) if i + 1 == len(layers) or layers[i + 1].pad or
                           not isinstance(layers[i + 1].proj, nn.Identity)]

    def block_list(self):
        """The stem with the first stage, each further stage, global pooling, the output layer."""
        starts = [0, *self.stage_ends[:-1]]
        stages = [self.layers[a:b] for a, b in zip(starts, self.stage_ends)]
        return [nn.Sequential(self.stem, *stages[0]), *stages[1:],
                nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1)), self.final]


@MODELS.register("resnet20", config=NormConfig)
def _resnet20(cfg: Any, input_shape: tuple, num_classes: int):
    return ResNet(input_shape, num_classes, [16, 32, 64], [3, 3, 3], cfg.norm.value, cfg.groups, "A", "cifar"), \
        kaiming_relu_init_


@MODELS.register("resnet18", config=ResNet18Config)
def _resnet18(cfg: Any, input_shape: tuple, num_classes: int):
    return ResNet(input_shape, num_classes, [64, 128, 256, 512], [2, 2, 2, 2], cfg.norm.value, cfg.groups, "B",
                  Stem(cfg.stem).value), default_init_
