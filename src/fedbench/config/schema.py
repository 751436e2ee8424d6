"""Structured-config schemas (dataclasses) for every config group.

The run's own options live here; every component's Config lives beside the component (algorithms, participation
layers, datasets, partitions, models) and is registered from its registry (``fedbench.config.register_configs``),
so Hydra validates keys and types at composition: a typo fails before anything runs, naming the allowed keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from fedbench.options import LR_GRID, option
from fedbench.training.schedule import LRScheduleConfig


@dataclass
class ParticipationConfig:
    """Three layers, each a nested config group with its own schema (see ``fedbench.participation``)."""

    name: str = MISSING
    availability: Any = MISSING
    selection: Any = MISSING
    dropout: Any = MISSING
    first_round_full: bool = False  # every client takes part in round 0 (MimiC's assumption, §5)
    min_available: int = 0  # top up rounds with fewer available clients at random (MimiC code uses 2)
    inclusion_samples: int = option(2000, ge=100)  # Monte-Carlo draws for inclusion probabilities without closed form
    probabilities_every: int = option(10, ge=1)  # rounds between selection-probability vectors in participation.npz
    # the simulated clock (sim_time_s), kept when a layer replays device time (availability=device_trace,
    # dropout=device_capacity): a round lasts what the dropout model times, or round_seconds where it times nothing
    # (another dropout model, or no client selected), plus the server's overhead
    round_seconds: float = option(60.0, gt=0)
    server_overhead_s: float = option(0.0, ge=0)


class ClientRunner(Enum):
    thin = "thin"  # our own loop driving the LightningModule (every algorithm; convolutional models on a CPU)
    lightning = "lightning"  # a lightning.Trainer per client (slow; for cross-checking)
    vmap = "vmap"  # the round's clients batched with torch.func.vmap (fedbench.training.cohort)
    auto = "auto"  # default: vmap where the configuration allows it and pays, else thin (the reason is logged)


class MemoryFormat(Enum):
    auto = "auto"  # channels_last for convolutional models on CPU (and on CUDA under bf16-mixed)
    contiguous = "contiguous"
    channels_last = "channels_last"


class ClientStateBackend(Enum):
    memory = "memory"  # rows in RAM, allocated when a client is first written
    memmap = "memmap"  # one disk-backed (N, d) float32 file per table, for N*d beyond RAM


@dataclass
class EngineConfig:
    client_runner: ClientRunner = ClientRunner.auto
    cohort_size: int = option(128, ge=1)  # client_runner=vmap: clients trained together at most (bounds memory)
    pack_size: int = option(16, ge=1)  # hydra/launcher=packed: jobs trained as one cohort at most (memory)
    device: str = option("cpu", pattern=r"cpu|auto|mps|cuda(:\d+)?", describe="cpu, cuda, cuda:N, mps or auto")
    eval_batch_size: int = 0  # 0: EVAL_BATCH by device (fedbench.engine.simulation)
    eval_train: bool = False  # also evaluate the global model on the whole training set (global_train_loss/acc)
    num_threads: int = 0  # torch intra-op threads; 0 = by the rule in fedbench.engine.simulation.auto_threads
    workers: int = 0  # > 1: train each round's clients in this many processes, one thread each (engine.workers)
    precision: str = option("fp32", choices=("fp32", "tf32", "bf16-mixed"))  # tf32: CUDA (training.numerics)
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
    project: str = option("fedbench", pattern=r"[^/\\\x23?%:]{1,128}",
                          describe="a W&B project name (1-128 characters, none of / \\ \x23 ? % :)")
    entity: Optional[str] = option(None, pattern=r"[\w.-]{1,128}", describe="a W&B entity (user or team) name")
    tags: List[str] = option(factory=list, pattern=r".{1,64}", describe="a W&B tag (1-64 characters)")
    console: bool = True  # one progress line per evaluation


class NoiseSpread(Enum):
    uniform = "uniform"  # s_i = grad_noise * u_i, u_i ~ U(0, 1) once per client (FedSRC note A18)
    constant = "constant"  # s_i = grad_noise for every client


@dataclass
class ClientConfig:
    """Local training shared by every algorithm (plain SGD on each client)."""

    local_steps: int = option(5, ge=1)
    batch_size: int = option(16, ge=1)
    lr: float = option(0.05, gt=0, tune=LR_GRID)
    momentum: float = option(0.0, ge=0, lt=1)
    weight_decay: float = 0.0
    lr_schedule: LRScheduleConfig = field(default_factory=LRScheduleConfig)
    # injected gradient noise N(0, s_i^2 I) on every local step (the FedSRC synthetic task); 0 = none
    grad_noise: float = 0.0
    grad_noise_spread: NoiseSpread = NoiseSpread.uniform


@dataclass
class DataConfig:
    root: str = "data"  # relative paths are taken from the directory run.py was started in
    seed: Optional[int] = option(None, ge=0, lt=2**32)  # partition / synthetic-data seed; None = the run's seed
    cache: bool = True  # cache partitions under <root>/cache, keyed by a hash of their inputs
    val_fraction: float = option(0.0, ge=0, lt=1)  # per-class share held out before partitioning: val_acc / val_loss


@dataclass
class BudgetConfig:
    """Stop after the first round whose cumulative counter reaches the budget (status completed)."""

    grad_evals: Optional[float] = option(None, gt=0)  # gradient evaluations (metrics.csv's grad_evals)
    floats: Optional[float] = option(None, gt=0)  # floats communicated, up + down


@dataclass
class RootConfig:
    seed: int = option(0, ge=0, lt=2**32)  # rejected outside [0, 2^32), never wrapped
    rounds: int = option(50, ge=1)
    eval_every: int = option(10, ge=1)
    checkpoint_every: Optional[int] = None  # rounds between checkpoints; null = at each evaluation, 0 = only at stops
    checkpoint_keep: int = option(2, ge=1)  # newest checkpoints kept
    resume: Optional[str] = None  # true: continue this config's latest run (or start it); a run dir: continue it
    divergence_factor: Optional[float] = option(10.0, gt=1)  # stop when test loss > factor x initial; null = off
    algo_settings: Dict[str, Any] = field(default_factory=dict)  # preset: {algorithm: {key: value}} for that algo
    when: Dict[str, Any] = field(default_factory=dict)  # preset: {"key=value": {key: value}} applied when key=value
    where_supported: Dict[str, Any] = field(default_factory=dict)  # preset: {group: {key: value}} where the key exists
    tune_space: Dict[str, Any] = field(default_factory=dict)  # preset: {"*" | algorithm: {key: [values]}} for fedbench-tune
    targets: List[float] = option(factory=lambda: [0.6, 0.7, 0.75], gt=0, le=1)  # test accuracies: rounds-to-target
    loss_targets: List[float] = option(factory=list, gt=0)  # global training losses (needs engine.eval_train)
    top_k: List[int] = option(factory=list, ge=1)  # report: mean of a run's k best test accuracies (FedSRC's 5)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    data: DataConfig = field(default_factory=DataConfig)
    dataset: Any = MISSING
    partition: Any = MISSING
    model: Any = MISSING
    algo: Any = MISSING
    participation: Any = MISSING
    engine: Any = MISSING
    logger: Any = MISSING
