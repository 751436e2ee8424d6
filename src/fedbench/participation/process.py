"""The participation process: availability -> selection -> dropout, one counter-based stream per layer.

Round t's draws come from ``(seed, "participation/<layer>", t)`` and never from the training streams, so every
algorithm run with the same seed sees the same trace (common random numbers across a sweep).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from fedbench.participation.base import AVAILABILITY, DROPOUT, SELECTION, RoundParticipation
from fedbench.rng import numpy_rng


class ParticipationProcess:
    def __init__(
        self,
        cfg: Any,
        num_clients: int,
        seed: int,
        local_steps: int,
        attrs: Mapping[str, np.ndarray] | None = None,
    ):
        attrs = attrs or {}
        self.num_clients = num_clients
        self.seed = seed
        self.local_steps = local_steps
        self.availability = AVAILABILITY.get_class(cfg.availability.kind)(cfg.availability, num_clients, attrs)
        self.selection = SELECTION.get_class(cfg.selection.kind)(cfg.selection, num_clients, attrs)
        self.dropout = DROPOUT.get_class(cfg.dropout.kind)(cfg.dropout, num_clients, attrs)
        self.history: list[RoundParticipation] = []

    def _rng(self, layer: str, t: int) -> np.random.Generator:
        return numpy_rng(self.seed, f"participation/{layer}", t)

    def round(self, t: int) -> RoundParticipation:
        """Draw round t. Rounds must be drawn in order (availability may be a Markov chain)."""
        if t != len(self.history):
            raise RuntimeError(f"participation rounds must be drawn in order: expected {len(self.history)}, got {t}")
        available = self.availability.mask(t, self._rng("availability", t))
        selected, cond_count = self.selection.select(t, available, self._rng("selection", t))
        completed, steps, p_complete = self.dropout.apply(t, selected, self.local_steps, self._rng("dropout", t))
        # Given a deterministic availability, E[count | A_t] is the marginal expectation.
        expected = cond_count * p_complete
        rp = RoundParticipation(t, available, selected, completed, steps, expected, expected_exact=True)
        self.history.append(rp)
        return rp

    def trace_arrays(self) -> dict[str, np.ndarray]:
        """The drawn trace as dense rounds x clients arrays (for ``participation.npz`` and plots)."""
        r, n = len(self.history), self.num_clients
        out = {
            "available": np.zeros((r, n), dtype=bool),
            "selected": np.zeros((r, n), dtype=np.int16),
            "completed": np.zeros((r, n), dtype=np.int16),
            "local_steps": np.zeros((r, n), dtype=np.int32),
            "expected_count": np.zeros((r, n), dtype=np.float32),
        }
        for t, rp in enumerate(self.history):
            out["available"][t] = rp.available
            np.add.at(out["selected"][t], rp.selected, 1)
            np.add.at(out["completed"][t], rp.completed_ids, 1)
            np.add.at(out["local_steps"][t], rp.completed_ids, rp.completed_steps)
            out["expected_count"][t] = rp.expected_count
        return out
