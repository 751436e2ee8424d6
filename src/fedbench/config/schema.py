"""Structured-config schemas (dataclasses) for every config group.

Each YAML option under ``conf/<group>/`` starts its defaults list with ``/schema/<group>/<kind>@_here_``, so
Hydra validates keys and types at composition: a typo fails before anything runs, naming the allowed keys.
Algorithm schemas live beside their algorithm (``fedbench.algorithms.*``) and are registered from the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, List, Optional

from omegaconf import MISSING


class Normalization(Enum):
    own = "own"  # the dataset's own per-channel statistics
    mnist = "mnist"  # MNIST statistics (0.1307, 0.3081), as several papers did for FashionMNIST
    none = "none"


@dataclass
class ImageDatasetConfig:
    name: str = MISSING
    download: bool = False
    normalize: Normalization = Normalization.own
    system_dirs: List[str] = field(default_factory=list)  # read-only places searched after data.root


@dataclass
class DigitsConfig:
    name: str = "digits"
    test_fraction: float = 0.2
    normalize: Normalization = Normalization.own


@dataclass
class SyntheticConfig:
    """LEAF / FedProx Synthetic(alpha, beta) (Li et al., 2020, Sec. 5.1)."""

    name: str = "synthetic"
    alpha: float = 1.0
    beta: float = 1.0
    iid: bool = False  # Synthetic-IID: one shared model and input distribution
    dim: int = 60
    num_classes: int = 10
    num_users: int = 30
    size_lognormal_mean: float = 4.0
    size_lognormal_sigma: float = 2.0
    min_samples: int = 50
    test_fraction: float = 0.2
    normalize: Normalization = Normalization.none


@dataclass
class PartitionConfig:
    name: str = MISSING
    num_clients: int = 100
    alpha: float = 0.3  # dirichlet concentration
    min_samples: int = 10  # dirichlet: re-draw until every client has at least this many samples
    max_tries: int = 1000


@dataclass
class ModelConfig:
    name: str = MISSING
    hidden: List[int] = field(default_factory=list)  # mlp hidden sizes
    batch_norm: bool = False  # mlp: BatchNorm1d after each hidden layer


@dataclass
class ParticipationConfig:
    """Three layers, each a nested config group with its own schema (see ``fedbench.participation``)."""

    name: str = MISSING
    availability: Any = MISSING
    selection: Any = MISSING
    dropout: Any = MISSING


class ClientRunner(Enum):
    thin = "thin"  # our own loop driving the LightningModule (fast, default)
    lightning = "lightning"  # a lightning.Trainer per client (slow; for cross-checking)


@dataclass
class EngineConfig:
    client_runner: ClientRunner = ClientRunner.thin
    device: str = "cpu"  # cpu | cuda | cuda:N | auto
    eval_batch_size: int = 2048
    num_threads: int = 0  # torch intra-op threads; 0 keeps torch's default


class WandbMode(Enum):
    offline = "offline"
    online = "online"
    disabled = "disabled"


@dataclass
class LoggerConfig:
    name: str = MISSING
    wandb: bool = False
    mode: WandbMode = WandbMode.offline
    project: str = "fedbench"
    entity: Optional[str] = None
    tags: List[str] = field(default_factory=list)
    console: bool = True  # one progress line per evaluation


@dataclass
class ClientConfig:
    """Local training shared by every algorithm (plain SGD on each client)."""

    local_steps: int = 5
    batch_size: int = 16
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0


@dataclass
class DataConfig:
    root: str = "data"  # relative paths are taken from the directory run.py was started in
    seed: Optional[int] = None  # partition / synthetic-data seed; None = the run's seed
    cache: bool = True  # cache partitions under <root>/cache, keyed by a hash of their inputs


@dataclass
class RootConfig:
    seed: int = 0
    rounds: int = 50
    eval_every: int = 10
    targets: List[float] = field(default_factory=list)
    client: ClientConfig = field(default_factory=ClientConfig)
    data: DataConfig = field(default_factory=DataConfig)
    dataset: Any = MISSING
    partition: Any = MISSING
    model: Any = MISSING
    algo: Any = MISSING
    participation: Any = MISSING
    engine: Any = MISSING
    logger: Any = MISSING
