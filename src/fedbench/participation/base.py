"""Layer interfaces of the participation process and the per-round record it yields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np

from fedbench.errors import require
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

    def rng(self, purpose: str) -> np.random.Generator:
        """A stream for draws made once per run (offsets, periods, weights), keyed by (seed, purpose)."""
        return numpy_rng(self.seed, f"participation/{purpose}")


def probability(value: float, key: str) -> float:
    require(0.0 <= value <= 1.0, key, f"{value} is not a probability.", "use a value in [0, 1].")
    return float(value)


class Layer:
    """Common constructor: the layer's validated config and the federation's context."""

    Config: type

    def __init__(self, cfg: Any, ctx: LayerContext):
        self.cfg = cfg
        self.ctx = ctx
        self.num_clients = ctx.num_clients


class Availability(Layer):
    """Which clients can take part in round t.

    ``deterministic``: the mask of round t is a function of (seed, t) fixed when the run starts, so expected
    counts conditioned on it are exact. ``independent``: given ``prob(t)``, clients are available independently,
    which lets the process estimate inclusion probabilities with a low-variance Rao-Blackwellized estimator.
    """

    deterministic = False
    independent = False

    def mask(self, t: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

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


class Selection(Layer):
    """Which available clients the server asks to train.

    Besides drawing, a rule states its conditional expected counts: ``expected(masks)`` gives E[count of i | A]
    for each availability mask (rows), and ``expected_forced(masks)`` the same with client i itself set available
    (the Rao-Blackwellized form used for independent availability).
    """

    adaptive = False  # True when probabilities depend on observed updates (the trace then differs per algorithm)

    def select(self, t: int, available: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def expected(self, masks: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def expected_forced(self, masks: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def observe(self, t: int, client: int, update: Any) -> None:
        """Called with every completed client update (adaptive samplers use it)."""


class Dropout(Layer):
    """Which selected clients return an update, and how many local steps they complete.

    ``p_complete`` (N,) is P(a selected entry of client i returns an update); it is fixed for the run.
    """

    p_complete: np.ndarray

    def apply(self, t: int, selected: np.ndarray, steps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Return (completed mask, local steps per entry)."""
        raise NotImplementedError
