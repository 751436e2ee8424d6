"""Selection rules among the available clients.

Each rule draws from the round's stream and states its conditional expected counts E[count of i | A_t]
(``expected``) so the process can report exact or estimated inclusion probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from fedbench.errors import require
from fedbench.participation.base import SELECTION, LayerConfig, Selection
from fedbench.options import option

KEY = "participation.selection"


@SELECTION.register("all")
class All(Selection):
    """Every available client is selected (full participation when all are available)."""

    @dataclass
    class Config(LayerConfig):
        pass

    def select(self, t, available, rng):
        return np.flatnonzero(available)

    def expected(self, masks):
        return masks.astype(float)

    def expected_forced(self, masks):
        return np.ones(masks.shape)


class _FixedSize(Selection):
    """A rule with ``clients_per_round`` S, checked against the number of clients."""

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        s, n = cfg.clients_per_round, ctx.num_clients
        require(1 <= s <= n, f"{KEY}.clients_per_round", f"{s} is not between 1 and the number of clients ({n}).",
                f"set {KEY}.clients_per_round to at most {n}, or raise partition.num_clients.")
        self.s = s


class _Counted(_FixedSize):
    """min(S, |A|) clients among the available ones with equal marginal probability min(S, |A|)/|A|."""

    def _share(self, counts):
        return np.minimum(self.s, counts) / np.maximum(counts, 1)

    def expected(self, masks):
        return masks * self._share(masks.sum(axis=1))[:, None]

    def expected_forced(self, masks):
        return self._share(masks.sum(axis=1, keepdims=True) - masks + 1)


@SELECTION.register("uniform")
class Uniform(_Counted):
    """S clients uniformly without replacement among the available ones: P(i) = min(S, |A|)/|A| on A."""

    @dataclass
    class Config(LayerConfig):
        clients_per_round: int = option(10, ge=1)

    def select(self, t, available, rng):
        ids = np.flatnonzero(available)
        k = min(self.s, ids.size)
        return np.sort(rng.choice(ids, size=k, replace=False)) if k else ids


class RegularizedMode(Enum):
    permutation = "permutation"  # paper: a random permutation of the available clients, restarted when A changes
    skip_permutation = "skip_permutation"  # official code: pop from a permutation of all N ids, skip unavailable


@SELECTION.register("regularized")
class Regularized(_Counted):
    """Cyclic-permutation selection (arbitrary-participation note §2.2, generator A): a random permutation of the
    available clients is walked S at a time, so with a fixed available set every client participates exactly once
    per |A|/S rounds. ``skip_permutation`` reproduces the official ``NodeSampler`` (ids popped from a permutation
    of all N; unavailable ones are dropped; a refill mid-round may repeat a client, counted twice).
    The reported inclusion probability is the marginal min(S, |A|)/|A| (the paper's q = 1/S).
    """

    state_attrs = ("queue", "pass_key")

    @dataclass
    class Config(LayerConfig):
        clients_per_round: int = option(10, ge=1)
        mode: RegularizedMode = RegularizedMode.permutation

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.skip = RegularizedMode(cfg.mode) == RegularizedMode.skip_permutation
        self.queue: list[int] = []
        self.pass_key = b""

    def select(self, t, available, rng):
        ids = np.flatnonzero(available)
        k = min(self.s, ids.size)
        if k == 0:
            return ids
        return np.sort(np.asarray(self._skip(available, k, rng) if self.skip else self._walk(ids, k, rng)))

    def _skip(self, available, k, rng):
        chosen = []
        while len(chosen) < k:
            if not self.queue:
                self.queue = rng.permutation(self.num_clients).tolist()
            c = self.queue.pop()
            if available[c]:
                chosen.append(c)
        return chosen

    def _walk(self, ids, k, rng):
        key = ids.tobytes()
        if key != self.pass_key:  # the available set changed: start a new pass over it
            self.pass_key, self.queue = key, rng.permutation(ids).tolist()
        chosen = self.queue[:k]
        self.queue = self.queue[k:]
        if len(chosen) < k:  # the pass ended mid-round: the next pass puts this round's clients last
            fresh = rng.permutation(ids).tolist()
            taken = set(chosen)
            fresh = [c for c in fresh if c not in taken] + [c for c in fresh if c in taken]
            need = k - len(chosen)
            chosen += fresh[:need]
            self.queue = fresh[need:]
        return chosen
