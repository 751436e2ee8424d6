"""Model zoo. Models are built on the meta device and initialized from an explicit generator, so building a
model never touches (or depends on) torch's global RNG."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

from fedbench.errors import require
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


def _norm2d(kind: str, channels: int, groups: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(min(groups, channels), channels)
    return nn.Identity()


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
                layers += [nn.Conv2d(prev, v, 3, padding=1), _norm2d(norm, v, groups), nn.ReLU()]
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


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, norm: str, groups: int, shortcut: str):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.n1 = _norm2d(norm, cout, groups)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.n2 = _norm2d(norm, cout, groups)
        self.pad = 0
        self.proj: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            if shortcut == "A":  # He et al.'s CIFAR option A: subsample and zero-pad channels, no parameters
                self.pad = cout - cin
                self.stride = stride
            else:
                self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _norm2d(norm, cout, groups))

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
            self.stem = nn.Sequential(nn.Conv2d(c, widths[0], 7, 2, 3, bias=False), _norm2d(norm, widths[0], groups),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        else:
            self.stem = nn.Sequential(nn.Conv2d(c, widths[0], 3, 1, 1, bias=False), _norm2d(norm, widths[0], groups),
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


def _numel(shape: tuple) -> int:
    return int(math.prod(shape))


@MODELS.register("logreg")
def _logreg(cfg: Any, input_shape: tuple, num_classes: int):
    return LogReg(_numel(input_shape), num_classes), default_init_


@MODELS.register("mlp")
def _mlp(cfg: Any, input_shape: tuple, num_classes: int):
    require(0 <= cfg.hidden_dropout < 1, "model.hidden_dropout", f"{cfg.hidden_dropout}.", "use a value in [0, 1).")
    return MLP(_numel(input_shape), list(cfg.hidden), num_classes, cfg.batch_norm, cfg.hidden_dropout), \
        kaiming_relu_init_


@MODELS.register("cnn_fmnist")
def _cnn_fmnist(cfg: Any, input_shape: tuple, num_classes: int):
    return CNNFMNIST(input_shape, num_classes), kaiming_relu_init_


@MODELS.register("cnn_cifar")
def _cnn_cifar(cfg: Any, input_shape: tuple, num_classes: int):
    return CNNCIFAR(input_shape, num_classes), kaiming_relu_init_


@MODELS.register("lenet5")
def _lenet5(cfg: Any, input_shape: tuple, num_classes: int):
    return LeNet5(input_shape, num_classes), default_init_


@MODELS.register("gradma_cnn")
def _gradma_cnn(cfg: Any, input_shape: tuple, num_classes: int):
    return GradMACNN(input_shape, num_classes, cfg.dropout), default_init_


@MODELS.register("vgg11")
def _vgg11(cfg: Any, input_shape: tuple, num_classes: int):
    require(cfg.variant in ("mimic", "gradma"), "model.variant", f"'{cfg.variant}' is not a VGG-11 variant.",
            "use mimic or gradma.")
    model = VGG11(input_shape, num_classes, cfg.norm.value, cfg.groups, cfg.variant, cfg.dropout)
    return model, vgg_mimic_init_ if cfg.variant == "mimic" else default_init_


@MODELS.register("resnet20")
def _resnet20(cfg: Any, input_shape: tuple, num_classes: int):
    return ResNet(input_shape, num_classes, [16, 32, 64], [3, 3, 3], cfg.norm.value, cfg.groups, "A", "cifar"), \
        kaiming_relu_init_


@MODELS.register("resnet18")
def _resnet18(cfg: Any, input_shape: tuple, num_classes: int):
    require(cfg.stem in ("cifar", "imagenet"), "model.stem", f"'{cfg.stem}' is not a ResNet stem.",
            "use cifar or imagenet.")
    return ResNet(input_shape, num_classes, [64, 128, 256, 512], [2, 2, 2, 2], cfg.norm.value, cfg.groups, "B",
                  cfg.stem), default_init_


def build_model(cfg: Any, input_shape: tuple, num_classes: int, gen: torch.Generator) -> nn.Module:
    """Build ``cfg.name`` for inputs of ``input_shape`` and initialize it from ``gen``."""
    factory = MODELS.get_class(cfg.name)
    with torch.device("meta"):
        model, init = factory(cfg, tuple(input_shape), num_classes)
    return materialize(model, gen, init)
