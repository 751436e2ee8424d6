"""The papers' small CNNs: the FashionMNIST CNN of Wang & Ji, LeNet-5, the CIFAR CNN and GradMA's CNN."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from fedbench.models.base import MODELS, ModelConfig, SeededDropout, ZooModel, default_init_, kaiming_relu_init_
from fedbench.options import option


@dataclass
class GradMACNNConfig(ModelConfig):
    dropout: float = option(0.5, ge=0, lt=1)


class CNNFMNIST(ZooModel):
    """Table D.2 (FashionMNIST) of Wang & Ji (2022): Conv(32,5x5,p2)-ReLU-MaxPool2 -> Conv(32,5x5,p2)-ReLU-
    MaxPool2 -> Dense(128)-ReLU -> Dense(classes). 228,586 parameters on 1x28x28 inputs."""

    def __init__(self, input_shape: tuple, num_classes: int):
        super().__init__()
        c, h, w = input_shape
        self.conv = nn.Sequential(
            nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        )
        self.hidden = nn.Linear(32 * (h // 4) * (w // 4), 128)
        self.final = nn.Linear(128, num_classes)

    def block_list(self):
        return [self.conv[:3], self.conv[3:], nn.Sequential(nn.Flatten(1), self.hidden, nn.ReLU()), self.final]


class LeNet5(ZooModel):
    """LeNet-5 of FedAMD / MimiC (NIID-Bench SimpleCNNMNIST): Conv(6,5x5)-ReLU-MaxPool2 -> Conv(16,5x5)-ReLU-MaxPool2
    -> FC 120 -> FC 84 -> FC classes, no padding; 44,426 parameters on 1x28x28."""

    def __init__(self, input_shape: tuple, num_classes: int):
        super().__init__()
        c, h, w = input_shape
        self.conv = nn.Sequential(nn.Conv2d(c, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                                  nn.MaxPool2d(2))
        flat = 16 * ((h - 4) // 2 - 4) // 2 * (((w - 4) // 2 - 4) // 2)
        self.fc = nn.Sequential(nn.Linear(flat, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU())
        self.final = nn.Linear(84, num_classes)

    def block_list(self):
        return [self.conv[:3], self.conv[3:], nn.Sequential(nn.Flatten(1), *self.fc[:2]), self.fc[2:], self.final]


class CNNCIFAR(ZooModel):
    """Table D.2 (CIFAR-10) of Wang & Ji (2022): Conv(32,5x5,p2)-ReLU-MaxPool2 -> Conv(64,5x5,p2)-ReLU-MaxPool2 ->
    Dense(512)-ReLU -> Dense(128)-ReLU -> Dense(classes). 2,218,314 parameters on 3x32x32."""

    def __init__(self, input_shape: tuple, num_classes: int):
        super().__init__()
        c, h, w = input_shape
        self.conv = nn.Sequential(nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
                                  nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2))
        self.fc = nn.Sequential(nn.Linear(64 * (h // 4) * (w // 4), 512), nn.ReLU(), nn.Linear(512, 128), nn.ReLU())
        self.final = nn.Linear(128, num_classes)

    def block_list(self):
        return [self.conv[:3], self.conv[3:], nn.Sequential(nn.Flatten(1), *self.fc[:2]), self.fc[2:], self.final]


class GradMACNN(ZooModel):
    """GradMA's CIFAR-10 "LeNet-5" (class ``Lenet`` of its code): Conv(32,5x5)-BN-ReLU-MaxPool2 -> Conv(64,5x5)-BN-
    ReLU-MaxPool2 -> Linear(512)-BN-ReLU-Dropout -> Linear(128)-BN-ReLU-Dropout -> Linear(classes).
    941,834 parameters on 3x32x32."""

    def __init__(self, input_shape: tuple, num_classes: int, dropout: float):
        super().__init__()
        c, h, w = input_shape
        self.conv = nn.Sequential(
            nn.Conv2d(c, 32, 5), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        flat = 64 * (((h - 4) // 2 - 4) // 2) * (((w - 4) // 2 - 4) // 2)
        self.fc = nn.Sequential(nn.Linear(flat, 512), nn.BatchNorm1d(512), nn.ReLU(), SeededDropout(dropout),
                                nn.Linear(512, 128), nn.BatchNorm1d(128), nn.ReLU(), SeededDropout(dropout))
        self.final = nn.Linear(128, num_classes)

    def block_list(self):
        return [self.conv[:4], self.conv[4:], nn.Sequential(nn.Flatten(1), *self.fc[:4]), self.fc[4:], self.final]


@MODELS.register("cnn_fmnist", config=ModelConfig)
def _cnn_fmnist(cfg: Any, input_shape: tuple, num_classes: int):
    return CNNFMNIST(input_shape, num_classes), kaiming_relu_init_


@MODELS.register("cnn_cifar", config=ModelConfig)
def _cnn_cifar(cfg: Any, input_shape: tuple, num_classes: int):
    return CNNCIFAR(input_shape, num_classes), kaiming_relu_init_


@MODELS.register("lenet5", config=ModelConfig)
def _lenet5(cfg: Any, input_shape: tuple, num_classes: int):
    return LeNet5(input_shape, num_classes), default_init_


@MODELS.register("gradma_cnn", config=GradMACNNConfig)
def _gradma_cnn(cfg: Any, input_shape: tuple, num_classes: int):
    return GradMACNN(input_shape, num_classes, cfg.dropout), default_init_
