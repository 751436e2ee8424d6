"""Layer interfaces of the participation process and the per-round record it yields."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from fedbench.options import typed
from fedbench.registry import Registry
from fedbench.rng import numpy_rng

AVAILABILITY = Registry("availability process")
SELECTION = Registry("selection rule")
DROPOUT = Registry("dropout model")


@dataclass
class RoundParticipation:
    """What the participation process yields for round t.

    ``selected`` lists client ids (a client appears twice only under selection with replacement);
    ``completed`` and ``local_steps`` are aligned with it. ``expected_count[i]`` is E[number of completed
    entries of client i in round t] -- the inclusion probability times P(complete) for selection without
    replacement, the expected multiplicity with replacement. It is the denominator of the unbiased
    (Horvitz-Thompson) aggregate. ``expected_exact`` says whether it is exact or a Monte-Carlo estimate.
    """

    round: int
    available: np.ndarray  # (N,) bool
    selected: np.ndarray  # (k,) int64
    completed: np.ndarray  # (k,) bool
    local_steps: np.ndarray  # (k,) int64, steps each selected entry performs
    expected_count: np.ndarray  # (N,) float64
    expected_exact: bool = True

    @property
    def completed_ids(self) -> np.ndarray:
        return self.selected[self.completed]

    @property
    def completed_steps(self) -> np.ndarray:
        return self.local_steps[self.completed]


@dataclass
class LayerConfig:
    """The key every layer's Config has: ``kind``, the option's registered name (filled in when the option is
    made, so a layer's name is written once: its decorator)."""

    kind: str = ""

    def __post_init__(self):
        self.kind = self.kind or getattr(type(self), "registered_as", "")


@dataclass
class SimClock:
    """The simulated clock (FedScale's): seconds since the run started, at the start of the round being drawn.
    The process advances it by each round's duration; layers that replay device traces read it."""

    now: float = 0.0


@dataclass
class LayerContext:
    """What a layer may know about the federation when it is built."""

    num_clients: int
    seed: int
    rounds: int
    local_steps: int
    sizes: np.ndarray  # (N,) samples per client
    attrs: Mapping[str, np.ndarray] = field(default_factory=dict)  # per-client attributes of the partition
    #: Long-run P(available) per client, filled in once the availability layer exists (for correlated dropout).
    long_run_availability: Optional[np.ndarray] = None
    model_bytes: int = 0  # the model's size as sent each way (device_capacity's transfer time)
    batch_size: int = 1  # samples per local step (device_capacity's compute time)
    clock: SimClock = field(default_factory=SimClock)
    #: each client's device id, set by an availability layer that replays devices (``device_trace``)
    devices: Optional[list] = None

    def rng(self, purpose: str) -> np.random.Generator:
        """A stream for draws made once per run (offsets, periods, weights), keyed by (seed, purpose)."""
        return numpy_rng(self.seed, f"participation/{purpose}")


class Layer:
    """Common constructor: the layer's validated config and the federation's context.

    ``state_attrs`` declares the attributes that change as rounds are drawn (a Markov chain's state, a permutation
    being walked, adaptive probabilities); they are what a checkpoint saves (``state_dict`` / ``load_state_dict``).
    """

    Config: type
    state_attrs: tuple = ()

    def __init__(self, cfg: Any, ctx: LayerContext):
        self.cfg = typed(cfg)  # read every round: the Config instance, not the DictConfig
        self.ctx = ctx
        self.num_clients = ctx.num_clients

    def state_dict(self) -> dict:
        return {a: copy.deepcopy(getattr(self, a)) for a in self.state_attrs}

    def load_state_dict(self, state: dict) -> None:
        for a in self.state_attrs:
            setattr(self, a, copy.deepcopy(state[a]))


class Availability(Layer):
    """Which clients can take part in round t.

    ``deterministic``: the mask of round t is a function of (seed, t) fixed when the run starts, so expected
    counts conditioned on it are exact. ``independent``: given ``prob(t)``, clients are available independently,
    which lets the process estimate inclusion probabilities with a low-variance Rao-Blackwellized estimator.
    """

    deterministic = False
    independent = False
    uses_clock = False  # the mask depends on the simulated clock (the process then times its rounds)

    def mask(self, t: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def online_for(self) -> Optional[np.ndarray]:
        """Seconds each client stays online from the clock's ``now`` (0 where offline), or None where the process
        has no notion of time within a round (a client available at its start stays so to its end)."""
        return None

    def prob(self, t: int) -> Optional[np.ndarray]:
        """Marginal P(client i available in round t), or None where the process does not define it in closed form.
        A deterministic process's marginal is its mask."""
        if self.deterministic:
            return self.mask(t, None).astype(float)
        raise NotImplementedError

    def sample(self, t: int, rng: np.random.Generator, m: int) -> np.ndarray:
        """``m`` independent draws (m, N) from the marginal law of round t's availability (for estimates)."""
        return rng.random((m, self.num_clients)) < self.prob(t)

    def long_run(self) -> np.ndarray:
        """Long-run fraction of rounds in which each client is available."""
        raise NotImplementedError


class ClientOracle:
    """What a selection rule may ask of the clients at the round's global model x_t before it draws (oracle and
    probing samplers; implemented by the engine, ``fedbench.engine.oracle``). Every call is counted in the run's
    costs: gradients as gradient evaluations, x_t sent to the client, the answer sent back."""

    lr: float  # the round's client learning rate eta_L
    server_lr: float  # the algorithm's eta
    local_steps: int  # K

    def local_updates(self, clients: Sequence[int]) -> list:
        """Each (distinct) client's K plain local SGD steps from x_t (``ClientUpdate``s, in order; each run is the
        one the client would train this round, same batches), trained together where the run batches clients."""
        raise NotImplementedError

    def full_gradients(self, clients: Sequence[int]) -> Any:
        """grad F_i(x_t) over all of each client's data, without injected gradient noise ((len(clients), d))."""
        raise NotImplementedError

    def minibatch_variance(self, client: int, probes: int, with_noise: bool) -> float:
        """Unbiased sample variance of ``probes`` minibatch gradients at x_t, E||g - mean||^2 (their own stream;
        ``with_noise`` includes the client's injected gradient noise)."""
        raise NotImplementedError

    def noise_variance(self, client: int) -> float:
        """E||nu_i||^2 of the gradient noise injected into the client's local steps (0 when none)."""
        raise NotImplementedError

    def loss(self, client: int, samples: Optional[int] = None) -> float:
        """F_i(x_t), the mean loss over the client's data, or over ``samples`` of them (a forward pass)."""
        raise NotImplementedError


class Selection(Layer):
    """Which available clients the server asks to train.

    Besides drawing, a rule states its conditional expected counts: ``expected(masks)`` gives E[count of i | A]
    for each availability mask (rows), and ``expected_forced(masks)`` the same with client i itself set available
    (the Rao-Blackwellized form used for independent availability; only where ``rao_blackwell``).
    ``exact_expected`` is False where ``expected`` is itself a Monte-Carlo estimate.
    A rule that draws from a probability vector returns it from ``probabilities()`` (logged each round).
    """

    adaptive = False  # True when probabilities depend on observed updates (the trace then differs per algorithm)
    exact_expected = True
    rao_blackwell = True
    biased = False  # True: ``expected`` is a nominal rate, not the rule's inclusion probability
    keeps_updates = False  # True: ``end_round`` receives the round's updates (the process holds them)
    asks_every_client = False  # True: ``select`` asks the oracle about every available client each round
    oracle: Optional[ClientOracle] = None  # set by the process before ``select`` when the engine provides one

    def select(self, t: int, available: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def expected(self, masks: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def expected_forced(self, masks: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def probabilities(self) -> Optional[np.ndarray]:
        return None

    def observe(self, t: int, client: int, update: Any, weight: float) -> None:
        """Called with every completed client update and its aggregation weight."""

    def end_round(self, t: int, updates: list) -> None:
        """After the round's updates: ``updates`` lists (client, update, weight) when ``keeps_updates``."""

    def round_stats(self) -> dict:
        """Diagnostics for ``rounds.csv`` (the same keys every round)."""
        return {}


class Dropout(Layer):
    """Which selected clients return an update, and how many local steps they complete.

    ``p_complete`` (N,) is P(a selected entry of client i returns an update); it is fixed for the run.
    """

    p_complete: np.ndarray
    uses_clock = False  # rounds are timed: ``duration()`` says how long the round just applied lasted
    overcommit = 1.0  # > 1: selection draws ceil(overcommit x S) clients and the first ``keep`` = S finishers count
    keep = 0
    availability: Optional[Availability] = None  # set by the process (a timed model asks it who stays online)

    def apply(self, t: int, selected: np.ndarray, steps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Return (completed mask, local steps per entry)."""
        raise NotImplementedError

    def completion(self, t: int, available: np.ndarray, selection: "Selection") -> tuple[np.ndarray, bool]:
        """P(a selected entry of client i completes) in round t (N,), and whether it is exact (the factor of the
        Horvitz-Thompson denominator after selection); a fixed-rate model's is ``p_complete``."""
        return self.p_complete, True

    def duration(self) -> Optional[float]:
        """Simulated seconds the round just applied lasted, or None for a model that does not time rounds."""
        return None
