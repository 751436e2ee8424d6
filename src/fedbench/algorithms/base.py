"""The algorithm API: a server-side object with hooks, operating on flat parameter vectors.

Per round the engine calls, in order::

    initialize(trainer, x)                              # once before round 0 (its costs are reported apart)
    part = plan_round(part)                             # may replace who trains (e.g. wait-for-all baselines)
    begin_round(rc, x)                                  # once; x is the global model (d,)
    for each completed client entry (client i, steps s):
        payload = payload(rc, i)                        # what is broadcast besides x (counted as sent)
        update  = client_update(trainer, rc, i, s, x, payload)   # local work (steps shaped by step_hook)
        accumulate(rc, i, update, weight)               # streaming aggregation, O(d) memory
    after_clients(trainer, rc, x)                       # more local runs that need the round's aggregate
    server_update(rc, x)                                # update x in place
    round_stats(rc)                                     # optional diagnostics for rounds.csv / W&B

``rc`` (``RoundContext``, ``fedbench.records``) carries the participation of the round: selected and completed
clients, their expected counts (inclusion probabilities) and local steps, the round's client learning rate, the
aggregate ``rc.acc`` and the round's temporaries ``rc.scratch``. Inside local training, ``step_hook`` returns a
``StepHook`` that sets each step's objective and may replace its gradient (see ``fedbench.training.step``). Typed
options extend ``AlgoConfig`` (weighting, aggregation, server_lr are common to all). State that must survive
a checkpoint is declared: server vectors with ``declare``, per-client vectors with ``declare_table`` (rows in the
shared client-state store, ``fedbench.training.client_state``). Costs are counted by the engine: gradients by the
trainer, communication for x, the payload and ``ClientUpdate.uploads()``; an exchange outside that flow (in
``initialize`` or ``after_clients``) counts what it sends with ``trainer.cost.download`` / ``upload``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Dict, Optional

import numpy as np
import torch

from fedbench.training.client_state import ClientStateStore, ClientTable
from fedbench.algorithms.server_optimizer import ServerOptimizer, ServerStep
from fedbench.errors import ConfigError
from fedbench.records import ClientUpdate, RoundContext, StepHook
from fedbench.registry import Registry
from fedbench.options import option, typed

if TYPE_CHECKING:
    from fedbench.training.trainer import ClientTrainer

ALGORITHMS = Registry("algorithm")


class Weighting(Enum):
    uniform = "uniform"  # p_i = 1/N: the unweighted client average
    samples = "samples"  # p_i = n_i / n: the sample-size weighted average


class Aggregation(Enum):
    unbiased = "unbiased"  # sum over completed of p_i / E[m_i] * delta_i (Horvitz-Thompson)
    normalized = "normalized"  # sum over completed of p_i delta_i / sum over completed p_j


@dataclass
class AlgoConfig:
    """The keys every algorithm accepts; an algorithm's ``Config`` extends this (and may change the defaults).

    ``kind`` is the registered implementation and ``name`` the run's label (the preset's name: ``fedavgm`` is
    ``kind: fedavg`` with ``server_optimizer: momentum``); both default to the name the class is registered under.
    """

    name: str = ""
    kind: str = ""
    weighting: Weighting = Weighting.uniform
    aggregation: Aggregation = Aggregation.unbiased
    server_lr: float = option(1.0, gt=0)
    server_optimizer: ServerOptimizer = ServerOptimizer.sgd  # fedbench.algorithms.server_optimizer (Reddi et al.)
    server_momentum: float = option(0.9, ge=0, lt=1)  # beta1 of momentum / adam / yogi / adagrad
    server_beta2: float = option(0.99, ge=0, le=1)  # adam / yogi
    server_tau: float = option(1e-3, gt=0)  # adam / yogi / adagrad: adaptivity (v starts at tau^2)

    def __post_init__(self):
        self.kind = self.kind or getattr(type(self), "registered_as", "")
        self.name = self.name or self.kind


@dataclass
class AlgoContext:
    dim: int
    num_clients: int
    sizes: np.ndarray  # (N,) samples per client
    device: torch.device
    seed: int
    store: Optional["ClientStateStore"] = None  # per-client tables; a private in-memory store when None
    local_steps: int = 1  # client.local_steps
    batch_size: int = 1  # client.batch_size
    param_sizes: Optional[list] = None  # entries per parameter tensor, in flat order (per-layer arithmetic)
    block_sizes: Optional[list] = None  # parameters per model block (``ZooModel.blocks``), head last
    clients_per_round: int = 0  # S, the entries a round selects (participation.selection); 0 = unknown
class Algorithm:
    """Base class; its defaults implement FedAvg with the unbiased aggregate and server learning rate 1."""

    name: str
    Config: type
    # What the algorithm declares to the engine (checked against its methods when the class is defined):
    plain_sgd = False  # True: local steps follow the algorithm's own recursion; client momentum/decay are refused
    affine_steps = False  # True: its step hooks are affine in the gradient (``StepHook.affine``): vmap batches them
    server_optimizers = True  # its server step is ``server_step`` on a pseudo-gradient: any server_optimizer
    batchable = True  # its local runs are (client, steps, local_options, affine hook) entries: the vmap cohort
    #                   runner and worker processes can run them; False for algorithms that drive the trainer
    #                   themselves (own client_update / after_clients) or shape steps with non-affine hooks

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own_runs = cls.client_update is not Algorithm.client_update or cls.after_clients is not Algorithm.after_clients
        hooked = cls.step_hook is not Algorithm.step_hook and not cls.affine_steps
        if cls.batchable and (own_runs or hooked):
            raise TypeError(f"{cls.__name__} declares batchable = True but "
                            + ("overrides client_update / after_clients" if own_runs else
                               "shapes its steps with a step_hook without declaring affine_steps")
                            + ": declare batchable = False")

    def __init__(self, cfg: Any, ctx: AlgoContext):
        self.cfg = typed(cfg)  # read every round: the Config instance, not the DictConfig
        self.ctx = ctx
        self._state: Dict[str, torch.Tensor] = {}
        self._tables: Dict[str, ClientTable] = {}
        if ctx.store is None:
            ctx.store = ClientStateStore(ctx.num_clients, ctx.device)
        sizes = ctx.sizes.astype(np.float64)
        self.p = sizes / sizes.sum() if Weighting(cfg.weighting) == Weighting.samples else \
            np.full(ctx.num_clients, 1.0 / ctx.num_clients)
        if not type(self).server_optimizers and ServerOptimizer(cfg.server_optimizer) != ServerOptimizer.sgd:
            raise ConfigError("algo.server_optimizer", f"{ServerOptimizer(cfg.server_optimizer).value} with "
                              f"algo={cfg.name}, whose server update is its own recursion, not a step on a "
                              "pseudo-gradient.", "use server_optimizer=sgd.")
        self.server_step = ServerStep(cfg, ctx.dim, ctx.device, self.declare)

    # ---- declared state -------------------------------------------------------------------------------------
    def declare(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Register ``tensor`` as checkpointed state under ``name`` and return it."""
        if name in self._state:
            raise ValueError(f"state '{name}' declared twice")
        self._state[name] = tensor
        return tensor

    def declare_table(self, name: str, dim: Optional[int] = None, rows: Optional[int] = None,
                      dense: bool = False) -> ClientTable:
        """Register a (rows, dim) table in the client-state store (rows read as 0 until written; ``rows`` defaults
        to the N clients, ``dense`` allocates it as one matrix); the store refuses a name declared twice."""
        self._tables[name] = self.ctx.store.table(f"{self.cfg.name}/{name}", dim or self.ctx.dim, rows, dense)
        return self._tables[name]

    def state_dict(self, tables: bool = True) -> Dict[str, torch.Tensor]:
        """Declared state (copies); with ``tables`` also the client tables' rows (a run's checkpoint saves those
        through the client-state store instead, which keeps memmap tables by reference)."""
        out = {k: v.detach().clone() for k, v in self._state.items()}
        for name, table in self._tables.items() if tables else ():
            out.update({f"clients/{name}/{k}": v.clone() for k, v in table.state().items()})
        return out

    def load_state_dict(self, state: Dict[str, torch.Tensor], tables: bool = True) -> None:
        names = {f"clients/{name}/{k}" for name in self._tables for k in ("ids", "rows")} if tables else set()
        missing = (set(self._state) | names) ^ set(state)
        if missing:
            raise KeyError(f"state keys differ: {sorted(missing)}")
        for k, v in self._state.items():
            v.copy_(state[k])
        for name, table in self._tables.items() if tables else ():
            table.load({k: state[f"clients/{name}/{k}"] for k in ("ids", "rows")})

    def server_state_bytes(self) -> int:
        return sum(v.numel() * v.element_size() for v in self._state.values())

    # ---- weights ---------------------------------------------------------------------------------------------
    def entry_weights(self, rc: RoundContext) -> np.ndarray:
        """Aggregation weight of each completed entry (aligned with ``rc.part.completed_ids``).

        unbiased: w_i = p_i / E[m_i], so E[sum_i w_i delta_i] = sum_i p_i delta_i over all N clients
        (E[m_i] is the inclusion probability, or the expected multiplicity under sampling with replacement).
        normalized: w_i = p_i / sum_{completed j} p_j.
        """
        ids = rc.part.completed_ids
        if ids.size == 0:
            return np.zeros(0)
        p = self.p[ids]
        if Aggregation(self.cfg.aggregation) == Aggregation.normalized:
            return p / p.sum()
        expected = rc.part.expected_count[ids]
        if np.any(expected <= 0):
            raise RuntimeError("a client completed a round although its expected count is 0")
        return p / expected

    # ---- hooks -----------------------------------------------------------------------------------------------
    def initialize(self, trainer: "ClientTrainer", x: torch.Tensor) -> None:
        """Work at x_0 before round 0 (e.g. a full-participation gradient round); nothing by default."""

    def gradient_round(self, trainer: "ClientTrainer", x: torch.Tensor, purpose: str,
                       samples: Optional[int] = None):
        """A full-participation gradient exchange at x (an initialization round): yields (client, gradient on all
        its data, or on ``samples`` of them) for every client, each download of x and upload counted."""
        rc = RoundContext(round=0, lr=0.0, part=None)
        for client in range(self.ctx.num_clients):
            trainer.cost.download(x)
            g = trainer.gradient(rc, client, x, samples=samples, purpose=purpose)
            trainer.cost.upload(g)
            yield client, g

    def plan_round(self, part: RoundParticipation) -> RoundParticipation:
        """Who trains this round; the participation process's draw unless an algorithm overrides it."""
        return part

    def begin_round(self, rc: RoundContext, x: torch.Tensor) -> None:
        """Allocate the round's aggregate ``rc.acc``; an override puts its other temporaries in ``rc.scratch``."""
        rc.acc = torch.zeros(self.ctx.dim, device=self.ctx.device)

    def payload(self, rc: RoundContext, client: int) -> Dict[str, torch.Tensor]:
        return {}

    def step_hook(self, rc: RoundContext, client: int, x: torch.Tensor,
                  payload: Dict[str, torch.Tensor]) -> Optional[StepHook]:
        """The hook shaping each local step of ``client``'s run this round (None: plain SGD on the loss)."""
        return None

    def local_options(self, rc: RoundContext, client: int) -> Dict[str, Any]:
        """Overrides of this client's local run: ``lr`` and / or ``batch_size`` (none by default)."""
        return {}

    def finish_update(self, trainer: "ClientTrainer", rc: RoundContext, client: int, x: torch.Tensor,
                      update: ClientUpdate) -> ClientUpdate:
        """The client's work after its local run, before upload: post-processing the update (MimiC's correction,
        SCAFFOLD's control variate) or extra uploads (MimeLite's full gradient at x)."""
        return update

    def client_update(self, trainer: "ClientTrainer", rc: RoundContext, client: int, steps: int,
                      x: torch.Tensor, payload: Dict[str, torch.Tensor]) -> ClientUpdate:
        """One client's local run from x: ``step_hook`` shapes its steps, ``local_options`` its learning rate and
        batch size, ``finish_update`` its upload. Algorithms that keep to these three run under every client
        runner, the vmap cohort runner included (``fedbench.training.cohort``)."""
        update = trainer.train(rc, client, steps, x, self.step_hook(rc, client, x, payload),
                               **self.local_options(rc, client))
        return self.finish_update(trainer, rc, client, x, update)

    def accumulate(self, rc: RoundContext, client: int, update: ClientUpdate, weight: float) -> None:
        rc.acc.add_(update.delta, alpha=weight)

    def after_clients(self, trainer: "ClientTrainer", rc: RoundContext, x: torch.Tensor) -> list:
        """Local runs that need the round's aggregate of client updates (e.g. BVR-L-SGD's one local run on the
        synchronized direction), before ``server_update``. Returns their ``ClientUpdate``s, whose uploads and
        losses the engine counts (the algorithm counts what it sends them); none by default."""
        return []

    def server_update(self, rc: RoundContext, x: torch.Tensor) -> None:
        """x <- x + step(Delta_t) with the round's aggregate Delta_t = ``rc.acc`` (``server_optimizer``)."""
        self.server_step(x, rc.acc)

    def round_stats(self, rc: RoundContext) -> Dict[str, float]:
        """Diagnostics of the round for ``rounds.csv`` and W&B ``round/*`` (the same keys every round)."""
        return {}
