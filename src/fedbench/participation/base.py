"""Layer interfaces of the participation process and the per-round record it yields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from fedbench.registry import Registry

AVAILABILITY = Registry("availability process")
SELECTION = Registry("selection rule")
DROPOUT = Registry("dropout model")


@dataclass
class RoundParticipation:
    """What the participation process yields for round t.

    ``selected`` lists client ids (a client appears twice only under selection with replacement);
    ``completed`` and ``local_steps`` are aligned with it. ``expected_count[i]`` is E[number of completed
    entries of client i in round t], the inclusion probability for selection without replacement; it is the
    denominator of the unbiased (Horvitz-Thompson) aggregate. ``expected_exact`` says whether it is exact or a
    Monte-Carlo estimate.
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


class Layer:
    """Common constructor: the layer's validated config, the number of clients, client attributes."""

    Config: type

    def __init__(self, cfg: Any, num_clients: int, attrs: Mapping[str, np.ndarray]):
        self.cfg = cfg
        self.num_clients = num_clients
        self.attrs = attrs


class Availability(Layer):
    """Which clients can take part in round t."""

    #: True when the availability of round t is a deterministic function of t (given the seed).
    deterministic = True

    def mask(self, t: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def prob(self, t: int) -> np.ndarray:
        """Marginal P(client i available in round t)."""
        raise NotImplementedError


class Selection(Layer):
    """Which available clients the server asks to train."""

    def select(self, t: int, available: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Return (selected ids, E[count of i in the selection | availability]) for round t."""
        raise NotImplementedError


class Dropout(Layer):
    """Which selected clients return an update, and how many local steps they complete."""

    def apply(
        self, t: int, selected: np.ndarray, steps: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return (completed mask, local steps per entry, P(complete) per client (N,))."""
        raise NotImplementedError
