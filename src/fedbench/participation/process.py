"""The participation process: availability -> selection -> dropout, one counter-based stream per layer.

Round t's draws come from ``(seed, "participation/<layer>", t)`` and never from the training streams, so every
algorithm run with the same seed sees the same trace (common random numbers across a sweep); only adaptive
selection rules, which look at the updates, break this on purpose.

Expected counts E[m_i] (the Horvitz-Thompson denominators) are

* exact when round t's availability is fixed in advance (``always``, ``periodic``, ``round_robin_dropout``,
  ``trace``, ``device_trace`` given the clock, and round 0 under ``first_round_full``): E[count | A_t] x
  P(complete), the dropout model's P(complete | selected) of the round (``Dropout.completion``);
* exact for ``selection=all`` when the availability marginal is known: P(available) x P(complete);
* otherwise Monte-Carlo estimates over ``inclusion_samples`` draws of the round's availability law. For
  independent clients (``bernoulli``, ``markov``, ``sinusoidal``) the estimator is Rao-Blackwellized,
  p_i(t) E[count_i | A with i available], which is positive and has low variance. Estimates are cached per law.

Under ``availability=device_trace`` or ``dropout=device_capacity`` the process keeps a simulated clock
(``LayerContext.clock``, part of its state): round t is drawn at the clock's time, and the clock then advances by
the round's duration (``Dropout.duration``, or ``round_seconds``) plus ``server_overhead_s``.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Optional

import numpy as np
from omegaconf import OmegaConf

from fedbench.errors import require
from fedbench.participation.base import (AVAILABILITY, DROPOUT, SELECTION, ClientOracle, LayerContext,
                                         RoundParticipation)
from fedbench.options import check_values, typed
from fedbench.participation.selection import All
from fedbench.rng import numpy_rng


class ParticipationProcess:
    def __init__(self, cfg: Any, ctx: LayerContext):
        check_values(cfg, "participation")
        self.cfg = typed(cfg)  # read every round: the Config instance, not the DictConfig
        self.ctx = ctx
        self.num_clients = n = ctx.num_clients
        self.seed = ctx.seed
        self.local_steps = ctx.local_steps
        self.availability = AVAILABILITY.get_class(cfg.availability.kind)(cfg.availability, ctx)
        ctx.long_run_availability = np.asarray(self.availability.long_run(), dtype=np.float64)
        self.dropout = DROPOUT.get_class(cfg.dropout.kind)(cfg.dropout, ctx)
        self.dropout.availability = self.availability
        self.selection = SELECTION.get_class(cfg.selection.kind)(self._selection_cfg(cfg), ctx)
        self.clock = ctx.clock
        #: rounds are placed on the simulated clock (``sim_time_s``) when a layer replays time
        self.clocked = self.availability.uses_clock or self.dropout.uses_clock
        require(0 <= cfg.min_available <= n, "participation.min_available",
                f"{cfg.min_available} is not between 0 and the number of clients ({n}).",
                f"use 0 (no fallback) up to {n}.")
        self.drawn = 0  # rounds drawn so far
        self.last: RoundParticipation | None = None
        self._stats: dict = {}
        self._probabilities: list = []  # (round, p) every ``probabilities_every`` rounds
        self._updates: list = []  # the round's (client, update, weight) for a rule that ``keeps_updates``
        self._trace = self._allocate(min(max(ctx.rounds, 1), 1024))  # grown as rounds are drawn
        self._cache: dict[bytes, np.ndarray] = {}

    def _selection_cfg(self, cfg: Any) -> Any:
        """The selection's config; under over-commitment it draws ceil(overcommit x S) clients and the dropout
        keeps the first S to finish."""
        factor = self.dropout.overcommit
        if factor == 1.0:
            return cfg.selection
        s = OmegaConf.select(cfg.selection, "clients_per_round")
        require(s is not None, "participation.dropout.overcommit",
                f"{factor:g} needs a selection of S clients a round; selection={cfg.selection.kind} has none.",
                "use a selection with clients_per_round (e.g. uniform), or overcommit=1.")
        drawn = math.ceil(factor * s - 1e-9)
        require(drawn <= self.num_clients, "participation.dropout.overcommit",
                f"{factor:g} x {s} clients a round asks for {drawn} of {self.num_clients} clients.",
                f"lower participation.selection.clients_per_round or the factor (at most {self.num_clients / s:.3g}).")
        self.dropout.keep = int(s)
        out = copy.deepcopy(cfg.selection)
        out.clients_per_round = drawn
        return out

    def _allocate(self, rounds: int) -> dict[str, np.ndarray]:
        """Dense rounds x clients arrays filled as rounds are drawn (compact dtypes; grown if more rounds come)."""
        n = self.num_clients
        return {
            "available": np.zeros((rounds, n), dtype=bool),
            "selected": np.zeros((rounds, n), dtype=np.int16),
            "completed": np.zeros((rounds, n), dtype=np.int16),
            "local_steps": np.zeros((rounds, n), dtype=np.int32),
            "expected_count": np.zeros((rounds, n), dtype=np.float32),
            "expected_exact": np.zeros(rounds, dtype=bool),
            "sim_time_s": np.zeros(rounds, dtype=np.float64),  # the clock at the round's end
        }

    def _record(self, rp: RoundParticipation) -> None:
        t = rp.round
        if t >= len(self._trace["expected_exact"]):
            grown = self._allocate(2 * t)
            for k, v in self._trace.items():
                grown[k][: len(v)] = v
            self._trace = grown
        tr = self._trace
        tr["available"][t] = rp.available
        np.add.at(tr["selected"][t], rp.selected, 1)
        np.add.at(tr["completed"][t], rp.completed_ids, 1)
        np.add.at(tr["local_steps"][t], rp.completed_ids, rp.completed_steps)
        tr["expected_count"][t] = rp.expected_count
        tr["expected_exact"][t] = rp.expected_exact
        tr["sim_time_s"][t] = self.clock.now

    def _rng(self, layer: str, t: int) -> np.random.Generator:
        return numpy_rng(self.seed, f"participation/{layer}", t)

    def _top_up(self, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Rows with fewer than ``min_available`` clients get random extra clients (MimiC code's fallback)."""
        k = self.cfg.min_available
        short = masks.sum(axis=1) < k
        if not short.any():
            return masks
        scores = rng.random(masks.shape)
        scores[masks] = 2.0  # the available clients stay
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        extra = np.zeros_like(masks)
        np.put_along_axis(extra, top, True, axis=1)
        out = masks.copy()
        out[short] |= extra[short]
        return out

    def _expected(self, t: int, raw: np.ndarray, first_full: bool) -> tuple[np.ndarray, bool]:
        avail, sel = self.availability, self.selection
        p_complete, exact_complete = self.dropout.completion(t, raw, sel)
        exact = sel.exact_expected and not sel.biased and exact_complete
        if first_full:
            return sel.expected(np.ones((1, self.num_clients), dtype=bool))[0] * p_complete, exact
        if avail.deterministic and raw.sum() >= self.cfg.min_available:
            return sel.expected(raw[None])[0] * p_complete, exact
        prob = avail.prob(t)
        if isinstance(sel, All) and prob is not None and self.cfg.min_available == 0:
            return prob * p_complete, exact_complete
        key = b"" if prob is None else prob.tobytes()
        if sel.adaptive or key not in self._cache:
            rng, m = self._rng("inclusion", t), self.cfg.inclusion_samples
            if avail.independent and sel.rao_blackwell and self.cfg.min_available == 0:
                est = prob * sel.expected_forced(avail.sample(t, rng, m)).mean(axis=0)
            else:
                masks = self._top_up(avail.sample(t, rng, m), rng)
                est = np.maximum(sel.expected(masks).mean(axis=0), 0.5 / m)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = est
        return self._cache[key] * p_complete, False

    def round(self, t: int, oracle: Optional[ClientOracle] = None) -> RoundParticipation:
        """Draw round t. Rounds must be drawn in order (availability may be a Markov chain). ``oracle`` answers
        the selection rule's questions to the clients at x_t (oracle and probing samplers)."""
        if t != self.drawn:
            raise RuntimeError(f"participation rounds must be drawn in order: expected {self.drawn}, got {t}")
        raw = self.availability.mask(t, self._rng("availability", t))
        first_full = t == 0 and self.cfg.first_round_full
        if first_full:
            available = np.ones(self.num_clients, dtype=bool)
        else:
            available = self._top_up(raw[None], self._rng("availability/fallback", t))[0]
        self.selection.oracle = oracle
        selected = np.asarray(self.selection.select(t, available, self._rng("selection", t)), dtype=np.int64)
        self._log_probabilities(t)
        completed, steps = self.dropout.apply(t, selected, self.local_steps, self._rng("dropout", t))
        expected, exact = self._expected(t, raw, first_full)
        rp = RoundParticipation(t, available, selected, completed, steps, expected, expected_exact=exact)
        if self.clocked:
            seconds = self.dropout.duration()
            self.clock.now += (self.cfg.round_seconds if seconds is None else seconds) + self.cfg.server_overhead_s
            self._stats = {**self._stats, "sim_time_s": self.clock.now}
        self._record(rp)
        self.drawn, self.last = t + 1, rp
        return rp

    def _log_probabilities(self, t: int) -> None:
        p = self.selection.probabilities()
        self._stats = self.selection.round_stats()
        if p is not None and t % self.cfg.probabilities_every == 0:
            self._probabilities.append((t, np.asarray(p, dtype=np.float32).copy()))

    def round_stats(self) -> dict:
        """The selection rule's statistics of the round just drawn (e.g. the probability vector's summary)."""
        return self._stats

    def observe(self, t: int, client: int, update: Any, weight: float) -> None:
        """Pass a completed client update and its aggregation weight to the selection rule; a rule that needs the
        whole round's updates at once gets them in ``end_round`` (held here, references, for the round only)."""
        self.selection.observe(t, client, update, weight)
        if self.selection.keeps_updates:
            self._updates.append((client, update, weight))

    def end_round(self, t: int) -> None:
        updates, self._updates = self._updates, []
        self.selection.end_round(t, updates)
        self.selection.oracle = None

    def state_dict(self) -> dict:
        """What a checkpoint saves: rounds drawn, the trace so far, cached inclusion estimates, the probability
        snapshots and each layer's declared state (``Layer.state_attrs``)."""
        return {
            "drawn": self.drawn,
            "clock": self.clock.now,
            "trace": {k: v[: self.drawn].copy() for k, v in self._trace.items()},
            "cache": [[k, v.copy()] for k, v in self._cache.items()],
            "probabilities": [[t, p.copy()] for t, p in self._probabilities],
            "layers": {name: getattr(self, name).state_dict() for name in ("availability", "selection", "dropout")},
        }

    def load_state_dict(self, state: dict) -> None:
        self.drawn = int(state["drawn"])
        self.clock.now = float(state.get("clock", 0.0))
        self._trace = self._allocate(max(min(self.ctx.rounds, 1024), self.drawn, 1))
        for k, v in state["trace"].items():
            self._trace[k][: self.drawn] = v
        self._cache = {bytes(k): np.asarray(v) for k, v in state["cache"]}
        self._probabilities = [(int(t), np.asarray(p)) for t, p in state["probabilities"]]
        for name, layer_state in state["layers"].items():
            getattr(self, name).load_state_dict(layer_state)

    def probability_snapshots(self) -> tuple[np.ndarray, np.ndarray]:
        """(rounds (k,), probabilities (k, N)) recorded every ``probabilities_every`` rounds (empty without)."""
        if not self._probabilities:
            return np.zeros(0, dtype=np.int64), np.zeros((0, self.num_clients), dtype=np.float32)
        rounds, ps = zip(*self._probabilities)
        return np.asarray(rounds, dtype=np.int64), np.stack(ps)

    def trace_arrays(self) -> dict[str, np.ndarray]:
        """The drawn trace as dense rounds x clients arrays (for ``participation.npz`` and plots), plus the
        selection probabilities every ``probabilities_every`` rounds where the rule has them."""
        out = {k: v[: self.drawn] for k, v in self._trace.items() if k != "sim_time_s" or self.clocked}
        rounds, ps = self.probability_snapshots()
        if rounds.size:
            out["probability_rounds"], out["probabilities"] = rounds, ps
        return out

    def trace_image(self, max_rows: int = 1000) -> np.ndarray:
        """Rounds x clients codes 0 unavailable, 1 available, 2 selected, 3 completed; beyond ``max_rows`` rounds,
        consecutive rounds are binned and a bin keeps its highest code (e.g. completed at least once)."""
        arrays = self.trace_arrays()
        code = arrays["available"].astype(np.float32)
        code = np.where(arrays["selected"] > 0, 2.0, code)
        code = np.where(arrays["completed"] > 0, 3.0, code)
        r = code.shape[0]
        if r > max_rows:
            edges = np.linspace(0, r, max_rows + 1).astype(int)
            code = np.maximum.reduceat(code, edges[:-1], axis=0)
        return code
