"""Structured-config schemas (dataclasses) for every config group.

Each YAML option under ``conf/<group>/`` starts its defaults list with ``/schema/<group>/<kind>@_here_``, so
Hydra validates keys and types at composition: a typo fails before anything runs, naming the allowed keys.
Algorithm schemas live beside their algorithm (``fedbench.algorithms.*``) and are registered from the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from fedbench.training.schedule import LRScheduleConfig


class Normalization(Enum):
    own = "own"  # per-channel mean/std of the dataset's own training split (computed when loaded)
    mnist = "mnist"  # MNIST statistics (0.1307, 0.3081), as several papers did for FashionMNIST
    custom = "custom"  # the config's mean / std lists
    none = "none"


class Augment(Enum):
    none = "none"
    per_sample = "per_sample"  # random crop (zero padding 4) + horizontal flip, drawn per image
    batch_level = "batch_level"  # one crop offset and one flip per minibatch (Wang & Ji's code, torchvision 0.8)


@dataclass
class ImageDatasetConfig:
    name: str = MISSING
    download: bool = False
    normalize: Normalization = Normalization.own
    mean: List[float] = field(default_factory=list)  # normalize=custom
    std: List[float] = field(default_factory=list)
    augment: Augment = Augment.none  # train-time augmentation (CIFAR / SVHN / Tiny-ImageNet)
    system_dirs: List[str] = field(default_factory=list)  # read-only places searched after data.root
    writer_split: bool = False  # emnist: use LEAF FEMNIST's per-writer split when its files are present


@dataclass
class DigitsConfig:
    name: str = "digits"
    test_fraction: float = 0.2
    normalize: Normalization = Normalization.own
    mean: List[float] = field(default_factory=list)
    std: List[float] = field(default_factory=list)


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
    mean: List[float] = field(default_factory=list)
    std: List[float] = field(default_factory=list)


class ClassesScheme(Enum):
    balanced = "balanced"  # FedAMD: every label held by the same number of clients, equal shares
    mimic = "mimic"  # MimiC / NIID-Bench #C=k: client i holds label i mod C plus k-1 random others


@dataclass
class PartitionConfig:
    name: str = MISSING
    num_clients: int = 100
    alpha: float = 0.3  # dirichlet concentration
    min_samples: int = 10  # dirichlet / quantity_skew: every client gets at least this many samples
    max_tries: int = 1000  # dirichlet: re-draws allowed to satisfy min_samples
    equal_sizes: bool = False  # dirichlet: FedSRC-D code's per-client q_i ~ Dir(alpha * prior), floor(n/N) each
    seed_samples: int = 0  # dirichlet: every client first gets this many random samples (GradMA's code: 2)
    shards_per_client: int = 2  # shards
    classes_per_client: int = 2  # classes_per_client: k
    scheme: ClassesScheme = ClassesScheme.balanced  # classes_per_client
    max_per_client: int = 0  # classes_per_client scheme=mimic: cap per client (2000 in MimiC), 0 = none
    similarity: float = 0.05  # majority_class: fraction of samples sent to a uniformly random client
    sigma: float = 1.0  # quantity_skew: log-normal sigma of client sizes


class Norm(Enum):
    batch = "batch"
    group = "group"
    none = "none"


@dataclass
class ModelConfig:
    name: str = MISSING
    hidden: List[int] = field(default_factory=list)  # mlp hidden sizes
    batch_norm: bool = False  # mlp: BatchNorm1d after each hidden layer
    hidden_dropout: float = 0.0  # mlp: dropout before each hidden ReLU (FedSRC's MLP: 0.5)
    norm: Norm = Norm.batch  # resnet20 / resnet18 / vgg11 normalization layers
    groups: int = 2  # GroupNorm groups
    stem: str = "cifar"  # resnet18: cifar (3x3, stride 1) | imagenet (7x7 stride 2 + max-pool, torchvision)
    variant: str = "mimic"  # vgg11: mimic (no BN, classifier 512-512-C) | gradma (BN, classifier 128-C)
    dropout: float = 0.5  # gradma_cnn / vgg11 classifier dropout


@dataclass
class ParticipationConfig:
    """Three layers, each a nested config group with its own schema (see ``fedbench.participation``)."""

    name: str = MISSING
    availability: Any = MISSING
    selection: Any = MISSING
    dropout: Any = MISSING
    first_round_full: bool = False  # every client takes part in round 0 (MimiC's assumption, §5)
    min_available: int = 0  # top up rounds with fewer available clients at random (MimiC code uses 2)
    inclusion_samples: int = 2000  # Monte-Carlo draws for inclusion probabilities that have no closed form
    probabilities_every: int = 10  # rounds between full selection-probability vectors in participation.npz


class ClientRunner(Enum):
    thin = "thin"  # our own loop driving the LightningModule (fast, default)
    lightning = "lightning"  # a lightning.Trainer per client (slow; for cross-checking)
    vmap = "vmap"  # the round's clients batched with torch.func.vmap (fedbench.training.cohort)
    auto = "auto"  # vmap where the configuration allows it, else thin


class MemoryFormat(Enum):
    auto = "auto"  # channels_last for convolutional models on CPU (and on CUDA under bf16-mixed)
    contiguous = "contiguous"
    channels_last = "channels_last"


class ClientStateBackend(Enum):
    memory = "memory"  # rows in RAM, allocated when a client is first written
    memmap = "memmap"  # one disk-backed (N, d) float32 file per table, for N*d beyond RAM


@dataclass
class EngineConfig:
    client_runner: ClientRunner = ClientRunner.thin
    cohort_size: int = 128  # client_runner=vmap: clients trained together at most (bounds memory)
    device: str = "cpu"  # cpu | cuda | cuda:N | auto
    eval_batch_size: int = 0  # 0: EVAL_BATCH by device (fedbench.engine.simulation)
    eval_train: bool = False  # also evaluate the global model on the whole training set (global_train_loss/acc)
    num_threads: int = 0  # torch intra-op threads; 0 = by the rule in fedbench.engine.simulation.auto_threads
    workers: int = 0  # > 1: train each round's clients in this many processes, one thread each (engine.workers)
    precision: str = "fp32"  # fp32 | tf32 (CUDA) | bf16-mixed (fedbench.training.numerics)
    memory_format: MemoryFormat = MemoryFormat.auto
    client_state: ClientStateBackend = ClientStateBackend.memory
    client_state_dir: Optional[str] = None  # memmap files; null = <run dir>/client_state


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


class NoiseSpread(Enum):
    uniform = "uniform"  # s_i = grad_noise * u_i, u_i ~ U(0, 1) once per client (FedSRC note A18)
    constant = "constant"  # s_i = grad_noise for every client


@dataclass
class ClientConfig:
    """Local training shared by every algorithm (plain SGD on each client)."""

    local_steps: int = 5
    batch_size: int = 16
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_schedule: LRScheduleConfig = field(default_factory=LRScheduleConfig)
    # injected gradient noise N(0, s_i^2 I) on every local step (the FedSRC synthetic task); 0 = none
    grad_noise: float = 0.0
    grad_noise_spread: NoiseSpread = NoiseSpread.uniform


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
    checkpoint_every: Optional[int] = None  # rounds between checkpoints; null = at each evaluation, 0 = only at stops
    checkpoint_keep: int = 2  # newest checkpoints kept
    resume: Optional[str] = None  # true: continue this config's latest run (or start it); a run dir: continue it
    divergence_factor: Optional[float] = 10.0  # stop when test loss > factor x initial test loss; null = off
    algo_settings: Dict[str, Any] = field(default_factory=dict)  # preset: {algorithm: {key: value}} for that algo
    where_supported: Dict[str, Any] = field(default_factory=dict)  # preset: {group: {key: value}} where the key exists
    targets: List[float] = field(default_factory=lambda: [0.6, 0.7, 0.75])  # test accuracies: rounds-to-target
    loss_targets: List[float] = field(default_factory=list)  # global training losses (needs engine.eval_train)
    client: ClientConfig = field(default_factory=ClientConfig)
    data: DataConfig = field(default_factory=DataConfig)
    dataset: Any = MISSING
    partition: Any = MISSING
    model: Any = MISSING
    algo: Any = MISSING
    participation: Any = MISSING
    engine: Any = MISSING
    logger: Any = MISSING
