"""Selection rules among the available clients.

Each rule draws from the round's stream and states its conditional expected counts E[count of i | A_t]
(``expected``) so the process can report exact or estimated inclusion probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from fedbench.errors import require
from fedbench.participation.base import SELECTION, Selection

KEY = "participation.selection"


@SELECTION.register("all")
class All(Selection):
    """Every available client is selected (full participation when all are available)."""

    @dataclass
    class Config:
        kind: str = "all"

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
    class Config:
        kind: str = "uniform"
        clients_per_round: int = 10

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

    @dataclass
    class Config:
        kind: str = "regularized"
        clients_per_round: int = 10
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


class _Weighted(_FixedSize):
    """S draws with replacement among the available clients with probability w_i / sum_{j in A} w_j, so
    E[count of i | A] = S w_i / sum_{j in A} w_j (the expected multiplicity)."""

    def weights(self) -> np.ndarray:
        raise NotImplementedError

    def select(self, t, available, rng):
        ids = np.flatnonzero(available)
        if ids.size == 0:
            return ids
        w = self.weights()[ids]
        return np.sort(rng.choice(ids, size=self.s, replace=True, p=w / w.sum()))

    def expected(self, masks):
        w = self.weights()
        total = masks @ w
        return masks * self.s * w[None, :] / np.where(total > 0, total, 1.0)[:, None]

    def expected_forced(self, masks):
        w = self.weights()
        total = (masks @ w)[:, None] - masks * w[None, :] + w[None, :]
        return self.s * w[None, :] / total


class MDWeights(Enum):
    samples = "samples"  # w_i = n_i (Li et al. 2020, "scheme I")
    uniform = "uniform"


@SELECTION.register("md")
class MD(_Weighted):
    """Multinomial-distribution sampling: S i.i.d. draws with replacement, P(draw = i) = n_i / sum_A n_j."""

    @dataclass
    class Config:
        kind: str = "md"
        clients_per_round: int = 10
        weights: MDWeights = MDWeights.samples

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        sizes = np.asarray(ctx.sizes, dtype=np.float64)
        self.w = sizes if MDWeights(cfg.weights) == MDWeights.samples else np.ones(ctx.num_clients)
        require(bool((self.w > 0).all()), f"{KEY}.weights", "some clients hold no samples.",
                "use weights=uniform, or a partition without empty clients.")

    def weights(self):
        return self.w


class AdaptiveSelection(_Weighted):
    """Base of samplers whose probabilities p (N,) follow the clients' updates.

    Sampling is with replacement from p restricted to the available clients. After a round, each participant's
    update goes to ``score(client, update)``; ``end_round`` then refreshes the participants' probabilities,
    redistributing the mass they held (FedSRC note §1.4, practical version): p_i <- (sum_{j in S} p_j) s_i /
    sum_{j in S} s_j for i in S, others keep their stale p_j; an optional ``floor_mix`` eps mixes with uniform.
    Subclasses implement ``score``. The trace then depends on the algorithm, so it is no longer shared by a sweep.
    """

    adaptive = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.p = np.full(ctx.num_clients, 1.0 / ctx.num_clients)
        self.scores: dict[int, float] = {}
        require(0.0 <= cfg.floor_mix <= 1.0, f"{KEY}.floor_mix", f"{cfg.floor_mix}.", "use a value in [0, 1].")

    def weights(self):
        return self.p

    def score(self, client: int, update) -> float:
        raise NotImplementedError

    def observe(self, t, client, update):
        if update.delta is not None:  # a run without a model update (a FedAMD anchor) is not scored
            self.scores[client] = self.score(client, update)

    def end_round(self, t):
        ids = np.fromiter((i for i, s in self.scores.items() if np.isfinite(s)), dtype=np.int64)
        s = np.array([self.scores[i] for i in ids.tolist()], dtype=np.float64)
        self.scores = {}
        if ids.size >= 2 and s.sum() > 0:
            self.p[ids] = self.p[ids].sum() * s / s.sum()
        eps = self.cfg.floor_mix
        if eps > 0:
            self.p = (1.0 - eps) * self.p + eps / self.num_clients


@SELECTION.register("update_norm")
class UpdateNorm(AdaptiveSelection):
    """Importance sampling by update norm (FedSRC-G practical, note §1.3): s_i = q_i ||Delta_i||, q_i = n_i/n."""

    @dataclass
    class Config:
        kind: str = "update_norm"
        clients_per_round: int = 10
        floor_mix: float = 0.0

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        sizes = np.asarray(ctx.sizes, dtype=np.float64)
        self.q = sizes / sizes.sum()

    def score(self, client, update):
        return float(self.q[client] * update.delta.norm())
