"""Probability samplers: S clients drawn from a probability vector p over the clients, with the matching expected
counts E[m_i | A] (the Horvitz-Thompson denominators of the unbiased aggregate, FedSRC note §1.0, A2).

Given the available set A, p is restricted to A and renormalized (p^A). Three modes (``replacement``,
``wor_scheme``):

* with replacement: S i.i.d. draws from p^A; E[m_i] = S p^A_i (the expected multiplicity), so the unbiased weight
  of an entry is q_i / (S p^A_i) (note §1.0; a client drawn twice trains twice, once per draw);
* without replacement, ``pps`` (default): a fixed-size pi-ps design. The inclusion probabilities are
  pi_i = min(1, c p^A_i) with c such that sum_A pi_i = min(S, |A|) (clients capped at 1 taken out iteratively;
  note A2), realised exactly by systematic sampling over a random order of A; E[m_i] = pi_i, exact;
* without replacement, ``sequential``: successive draws from p^A renormalized after each (the official code's
  ``torch.multinomial(p, S, replacement=False)``; Gumbel top-S). Its inclusion probabilities have no closed
  form: E[m_i] is a Monte-Carlo estimate over ``inclusion_samples`` draws (reported as not exact).

``floor_mix`` eps replaces p by (1 - eps) p + eps / N wherever it is used (draws and weights), so no probability
falls below eps / N and no weight above N q_i / (S eps).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

import numpy as np

from fedbench.errors import require
from fedbench.participation.base import SELECTION, LayerConfig
from fedbench.participation.selection import KEY, _FixedSize
from fedbench.options import option

MC_DRAWS = 2000  # Monte-Carlo draws for the inclusion probabilities of sequential sampling


class WorScheme(Enum):
    pps = "pps"  # systematic pi-ps sampling with capped inclusion probabilities (exact, unbiased)
    sequential = "sequential"  # successive sampling (official FedSRC code); inclusion probabilities estimated


def capped_inclusion(w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Rows of inclusion probabilities pi = min(1, c w) with sum pi = s per row (w >= 0; rows of w and s aligned;
    a row needs at least s positive entries): clients whose c w_i exceed 1 are fixed at 1 and c is recomputed."""
    w = np.atleast_2d(np.asarray(w, dtype=np.float64))
    s = np.broadcast_to(np.asarray(s, dtype=np.float64), w.shape[:1])
    capped = np.zeros(w.shape, dtype=bool)
    for _ in range(w.shape[1] + 1):
        free = np.where(capped, 0.0, w)
        room = s - capped.sum(axis=1)
        total = free.sum(axis=1)
        c = np.where(total > 0, room / np.where(total > 0, total, 1.0), 0.0)
        pi = np.where(capped, 1.0, c[:, None] * w)
        over = (pi > 1.0 + 1e-12) & ~capped
        if not over.any():
            return np.minimum(pi, 1.0)
        capped |= over
    return np.minimum(pi, 1.0)


def systematic(ids: np.ndarray, pi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A fixed-size sample from ``ids`` with inclusion probabilities ``pi`` (each <= 1, summing to an integer k):
    the units in random order lie on [0, k) with lengths pi; the points u, u+1, ..., u+k-1 (u ~ U[0, 1)) pick
    the units they fall in, each at most once."""
    order = rng.permutation(ids.size)
    edges = np.cumsum(pi[order])
    k = int(round(edges[-1])) if edges.size else 0
    if k:
        edges *= k / edges[-1]  # exact total, so the last point always falls inside
    points = rng.random() + np.arange(k)
    picked = np.searchsorted(edges, points, side="right")
    return np.sort(ids[order[np.minimum(picked, ids.size - 1)]])


def gumbel_top(logp: np.ndarray, k: int, rng: np.random.Generator, draws: Optional[int] = None) -> np.ndarray:
    """Successive sampling of k without replacement from softmax(logp) (Gumbel top-k): indices (k,) or, with
    ``draws``, a (draws, k) array of independent samples."""
    shape = logp.shape if draws is None else (draws, logp.size)
    keys = logp + rng.gumbel(size=shape)
    return np.argpartition(-keys, k - 1, axis=-1)[..., :k]


class ProbabilitySampler(_FixedSize):
    """Base of rules drawing from a probability vector: ``probs()`` (N,), before the floor. Config keys
    ``clients_per_round``, ``replacement``, ``wor_scheme``, ``floor_mix`` (see the module docstring)."""

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.replacement = bool(cfg.replacement)
        self.scheme = WorScheme(cfg.wor_scheme)
        self.exact_expected = self.replacement or self.scheme == WorScheme.pps
        self.rao_blackwell = self.replacement  # E[m_i | A, i available] in closed form for every i at once
        self._mc_round = 0

    def probs(self) -> np.ndarray:
        raise NotImplementedError

    def probabilities(self) -> np.ndarray:
        """The probabilities the draws use: p mixed with the floor, (1 - eps) p + eps / N."""
        eps = self.cfg.floor_mix
        p = self.probs()
        return (1.0 - eps) * p + eps / self.num_clients if eps > 0 else p

    def select(self, t, available, rng):
        self._mc_round = t
        ids = np.flatnonzero(available & (self.probabilities() > 0))
        if ids.size == 0:
            return ids
        p = self.probabilities()[ids]
        p = p / p.sum()
        if self.replacement:
            return np.sort(rng.choice(ids, size=self.s, replace=True, p=p))
        k = min(self.s, ids.size)
        if self.scheme == WorScheme.pps:
            return systematic(ids, capped_inclusion(p, k)[0], rng)
        return np.sort(ids[gumbel_top(np.log(p), k, rng)])

    def expected(self, masks):
        p = self.probabilities()
        w = masks * p[None, :]
        total = w.sum(axis=1, keepdims=True)
        share = w / np.where(total > 0, total, 1.0)
        if self.replacement:
            return self.s * share
        k = np.minimum(self.s, (share > 0).sum(axis=1))
        if self.scheme == WorScheme.pps:
            return capped_inclusion(share, k)
        return self._sequential_inclusion(share, k)

    def expected_forced(self, masks):
        w = self.probabilities()
        total = (masks @ w)[:, None] - masks * w[None, :] + w[None, :]
        return self.s * w[None, :] / np.where(total > 0, total, 1.0)

    def _sequential_inclusion(self, share: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Monte-Carlo inclusion probabilities of successive sampling, ~MC_DRAWS draws in all (per row when there
        is one availability mask), from the stream (seed, "participation/selection/inclusion", t)."""
        rng = self.ctx.rng(f"selection/inclusion/{self._mc_round}")
        rows, n = share.shape
        per_row = max(1, -(-MC_DRAWS // rows))
        out = np.zeros(share.shape)
        with np.errstate(divide="ignore"):
            logp = np.log(share)
        for r in range(rows):
            if k[r] == 0:
                continue
            picks = gumbel_top(logp[r], int(k[r]), rng, per_row)
            out[r] = np.bincount(picks.ravel(), minlength=n) / per_row
        return np.where(share > 0, np.maximum(out, 0.5 / (per_row * rows)), 0.0)

    def round_stats(self):
        """Summary of the probability vector used this round: entropy (nats), max, min, effective number of
        clients 1 / sum p_i^2."""
        p = self.probabilities()
        nz = p[p > 0]
        return {"p_entropy": float(-(nz * np.log(nz)).sum()), "p_max": float(p.max()), "p_min": float(p.min()),
                "p_effective": float(1.0 / (p ** 2).sum())}


class Weights(Enum):
    samples = "samples"  # q_i = n_i / n
    uniform = "uniform"  # q_i = 1 / N


def client_weights(kind, sizes) -> np.ndarray:
    """q (N,): the sample shares or uniform, refusing clients without samples."""
    sizes = np.asarray(sizes, dtype=np.float64)
    q = sizes if Weights(kind) == Weights.samples else np.ones(sizes.size)
    require(bool((q > 0).all()), f"{KEY}.weights", "some clients hold no samples.",
            "use weights=uniform, or a partition without empty clients.")
    return q / q.sum()


@dataclass
class SamplerConfig(LayerConfig):
    """The keys every probability sampler accepts (its ``Config`` extends this)."""

    clients_per_round: int = option(10, ge=1)
    weights: Weights = Weights.samples
    replacement: bool = True
    wor_scheme: WorScheme = WorScheme.pps
    floor_mix: float = option(0.0, ge=0, le=1)


@SELECTION.register("md")
class MD(ProbabilitySampler):
    """Multinomial-distribution sampling (Li et al. 2020, scheme I; FedSRC note §1.2): p_i = q_i = n_i / n,
    S draws with replacement by default."""

    Config = SamplerConfig

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.q = client_weights(cfg.weights, ctx.sizes)

    def probs(self):
        return self.q
