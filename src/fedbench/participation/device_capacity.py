"""Dropout from device speed and availability on the simulated clock (``dropout=device_capacity``), FedScale's
round timing with a deadline or over-commitment."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

import numpy as np
from scipy.special import gammaln

from fedbench.errors import ConfigError, require
from fedbench.options import option
from fedbench.participation import traces
from fedbench.participation.base import DROPOUT, Dropout, LayerConfig
from fedbench.participation.selection import Uniform

KEY = "participation.dropout"


class Stragglers(Enum):
    drop = "drop"  # a client that misses the deadline returns nothing
    partial = "partial"  # it returns the local steps it did by the deadline (if still online and >= min_steps)


def _rank(times: np.ndarray) -> np.ndarray:
    """Each entry's place when ordered by ``times``, ties by position (0 = first)."""
    rank = np.empty(times.size, dtype=np.int64)
    rank[np.lexsort((np.arange(times.size), times))] = np.arange(times.size)
    return rank


def _log_choose(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def kept_probability(faster: np.ndarray, others: int, drawn: int, keep: int) -> np.ndarray:
    """P(X < keep) for X ~ Hypergeometric(population ``others``, ``faster`` successes, ``drawn`` draws): the
    chance that fewer than ``keep`` of the other selected clients finish before a selected client with ``faster``
    faster finishers among the ``others`` available clients. A sum of ``keep`` probability masses, each
    C(f, x) C(M - f, n - x) / C(M, n), vectorized over the clients (scipy's hypergeom.cdf per client is ~100x
    slower at 10,000 clients)."""
    f = faster.astype(np.float64)[None, :]
    x = np.arange(keep, dtype=np.float64)[:, None]
    m, n = float(others), float(drawn)
    valid = (x <= f) & (n - x >= 0) & (n - x <= m - f)
    safe_x = np.where(valid, x, 0.0)
    log_mass = _log_choose(f, safe_x) + _log_choose(m - f, np.where(valid, n - x, 0.0)) - _log_choose(m, n)
    return np.clip(np.where(valid, np.exp(log_mass), 0.0).sum(axis=0), 0.0, 1.0)


@DROPOUT.register("device_capacity")
class DeviceCapacity(Dropout):
    """A selected client i of K local steps of b samples needs

        T_i = K b c_i / 1000 + 2 B 8 / (1000 m_i)  seconds

    (c_i ms per sample, m_i kbit/s from FedScale's ``client_device_capacity``; the model's B bytes down and up).
    It completes iff it stays online for T_i (the availability's ``online_for``; always, for an availability
    without time) and T_i <= ``deadline_s``. With ``overcommit`` > 1 the selection draws ceil(overcommit x S)
    clients and only the first S to finish count (FedScale's over-commitment, 1.3 by default there).
    ``stragglers=partial``: a client still online at the deadline but not done returns the
    k = floor((deadline_s - transfer) / step time) steps it did, when k >= ``min_steps``.

    The round lasts until the server has what it waits for: the S-th completion under over-commitment, else every
    selected client's answer -- a completion at T_i, a failure when the client goes offline or at the deadline --
    never longer than the deadline. P(complete | selected) is exact (0 or 1 given the clock) without
    over-commitment; with it, P(among the first S | selected) is the hypergeometric probability that fewer than S
    of the other selected clients finish first, exact for ``selection=uniform`` and an approximation otherwise.
    """

    uses_clock = True

    @dataclass
    class Config(LayerConfig):
        path: str = ""  # FedScale client_device_capacity (pickle, JSON or Parquet); "": synthetic capacities
        deadline_s: Optional[float] = option(None, gt=0)  # null: no deadline
        overcommit: float = option(1.0, ge=1)  # FedScale's over-commitment factor (1: none)
        stragglers: Stragglers = Stragglers.drop
        min_steps: int = option(1, ge=1)  # stragglers=partial: fewer steps than this by the deadline is a drop

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        n = ctx.num_clients
        ids = ctx.devices  # each client's device id when the availability replays devices
        if cfg.path:
            try:
                cap = traces.capacity(traces.read_records(cfg.path), cfg.path)
            except traces.TraceError as exc:
                raise ConfigError(f"{KEY}.path", str(exc), "give a FedScale client_device_capacity (pickle, JSON or "
                                  "Parquet), or path='' for synthetic capacities.") from None
        else:
            keys = traces.sorted_ids(set(ids)) if ids is not None else list(range(1, n + 1))
            cap = traces.synth_capacity(keys, ctx.rng("dropout/capacity"))
        row = {k: j for j, k in enumerate(cap.ids)}
        if ids is None:
            require(len(cap.ids) >= n, f"{KEY}.path", f"the capacity file has {len(cap.ids)} devices for {n} clients.",
                    "give at least one device per client, or replay a behaviour trace (availability=device_trace), "
                    "whose devices the capacities are looked up by.")
            ids = cap.ids[:n]
        missing = [k for k in ids if k not in row]
        if missing:
            raise ConfigError(f"{KEY}.path", f"device {missing[0]!r} of the behaviour trace has no capacity entry "
                              f"({len(set(missing))} devices lack one).", "give a capacity file that covers the "
                              "behaviour trace's devices (FedScale's two files share their device ids).")
        j = np.asarray([row[k] for k in ids], dtype=np.int64)
        self.step_s = cap.computation[j] * ctx.batch_size / 1000.0  # one local step
        self.transfer_s = 2.0 * ctx.model_bytes * 8.0 / (1000.0 * cap.communication[j])  # model down and up
        self.deadline = float(cfg.deadline_s) if cfg.deadline_s is not None else np.inf
        self.partial = Stragglers(cfg.stragglers) == Stragglers.partial
        require(not self.partial or cfg.deadline_s is not None, f"{KEY}.stragglers",
                "partial work is what a straggler did by the deadline, and deadline_s is null.",
                f"set {KEY}.deadline_s, or use stragglers=drop.")
        self.overcommit = float(cfg.overcommit)
        need = ctx.local_steps * self.step_s + self.transfer_s
        can = need <= self.deadline
        if self.partial:
            can |= self._partial_steps(np.arange(n)) >= cfg.min_steps
        self.p_complete = can.astype(np.float64)  # ever able to finish (availability aside)
        self._duration: Optional[float] = None

    def _online(self) -> np.ndarray:
        left = None if self.availability is None else self.availability.online_for()
        return np.full(self.num_clients, np.inf) if left is None else left

    def _partial_steps(self, clients: np.ndarray) -> np.ndarray:
        return np.floor((self.deadline - self.transfer_s[clients]) / self.step_s[clients]).astype(np.int64)

    def _outcome(self, clients: np.ndarray, steps: int, online: np.ndarray):
        """For entries ``clients`` as if selected now: (finishes, steps done, time of the answer it sends)."""
        need = steps * self.step_s[clients] + self.transfer_s[clients]
        on = online[clients]
        ok = (need <= on) & (need <= self.deadline)
        done = np.full(clients.size, steps, dtype=np.int64)
        at = np.where(ok, need, np.minimum(on, self.deadline))  # a failure: offline, or the deadline passes
        if self.partial:
            k = np.minimum(self._partial_steps(clients), steps)
            late = ~ok & (on >= self.deadline) & (k >= self.cfg.min_steps)
            ok |= late
            done = np.where(late, k, done)
            at = np.where(late, self.deadline, at)
        return ok, done, at

    def apply(self, t, selected, steps, rng):
        ok, done, at = self._outcome(selected, steps, self._online())
        if selected.size == 0:
            self._duration = None
            return ok, done
        if self.overcommit > 1.0:
            kept = ok & (_rank(np.where(ok, at, np.inf)) < self.keep)
            if kept.sum() == self.keep:  # the S-th completion ends the round
                self._duration = float(at[kept].max())
                return kept, done
            ok = kept
        self._duration = float(min(at.max(), self.deadline))
        return ok, done

    def completion(self, t, available, selection):
        n = self.num_clients
        ok, _, at = self._outcome(np.arange(n), self.ctx.local_steps, self._online())
        p = ok.astype(np.float64)
        if self.overcommit == 1.0:
            return p, True
        # rank of each client's finishing time among the available clients that finish (ties by id)
        finishers = available & ok
        faster = _rank(np.where(finishers, at, np.inf))  # for a finisher: the finishers before it
        pool, draws = int(available.sum()), int(getattr(selection, "s", n))
        kept = (finishers & (faster < self.keep)).astype(np.float64)  # fewer than S finish before it: kept surely
        if pool > draws:  # not every available client is selected: the others finishing first are random
            late = np.flatnonzero(finishers & (faster >= self.keep))
            kept[late] = kept_probability(faster[late], pool - 1, draws - 1, self.keep)
        return kept, isinstance(selection, Uniform)

    def duration(self):
        return self._duration
