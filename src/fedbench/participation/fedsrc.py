"""FedSRC-G and FedSRC-D: unbiased importance sampling of clients (Wang et al. 2022, arXiv 2205.13925 v1; FedSRC
note §1.4-1.5). Both draw S clients from p (with or without replacement, ``fedbench.participation.sampling``) and
the algorithm aggregates with the unbiased weights q_i / E[m_i] (= q_i / (S p_i) with replacement).

Two modes:

* ``oracle`` (the theory; for small federations): p is computed at the start of every round from every available
  client's statistics at x_t, asked through the engine's client oracle and counted in the run's costs;
* ``practical`` (Sec. 6): p starts uniform; after a round only the participants' probabilities are refreshed from
  their scores s_i, redistributing the mass they held, p_i <- (sum_{j in S} p_j) s_i / sum_{j in S} s_j (the
  paper's "(1 - sum p)" is a typo, A5); the others keep their stale p_j. Fewer than two scored participants, or
  all scores zero, leave p unchanged (A23).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

import numpy as np
import torch

from fedbench.errors import ConfigError, require
from fedbench.participation.base import SELECTION
from fedbench.participation.sampling import ProbabilitySampler, SamplerConfig, client_weights
from fedbench.participation.selection import KEY
from fedbench.options import option


class Mode(Enum):
    practical = "practical"  # stale probabilities refreshed from the participants' updates (Sec. 6)
    oracle = "oracle"  # every available client's statistics at x_t, each round (Cor. 4.2 / 4.8)


class _Importance(ProbabilitySampler):
    """p (N,) starting at 1/N; ``mode`` oracle recomputes it before each draw, practical refreshes it after."""

    adaptive = True
    state_attrs = ("p",)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.mode = Mode(cfg.mode)
        self.asks_every_client = self.mode == Mode.oracle  # local runs (FedSRC-G), full gradients (FedSRC-D)
        self.q = client_weights(cfg.weights, ctx.sizes)
        self.p = np.full(ctx.num_clients, 1.0 / ctx.num_clients)

    def probs(self):
        return self.p

    def select(self, t, available, rng):
        if self.mode == Mode.oracle:
            ids = np.flatnonzero(available)
            if ids.size:
                s = self.oracle_scores(self._oracle(), ids)
                p = np.zeros(self.num_clients)
                p[ids] = s / s.sum() if np.isfinite(s).all() and s.sum() > 0 else 1.0 / ids.size
                self.p = p
        return super().select(t, available, rng)

    def _oracle(self):
        if self.oracle is None:
            raise ConfigError(f"{KEY}.mode", f"{self.cfg.mode} needs the clients' statistics at x_t, which only a "
                              "simulation provides.", "run it through run.py, or use mode=practical.")
        return self.oracle

    def oracle_scores(self, oracle, ids: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def refresh(self, scores: dict) -> None:
        """The mass-preserving stale update of the participants' probabilities (note §1.4, A5, A23)."""
        ids = np.array(sorted(i for i, s in scores.items() if np.isfinite(s)), dtype=np.int64)
        s = np.array([scores[i] for i in ids.tolist()], dtype=np.float64)
        if ids.size >= 2 and s.sum() > 0:
            self.p[ids] = self.p[ids].sum() * s / s.sum()


@SELECTION.register("fedsrc_g")
class FedSRCG(_Importance):
    """FedSRC-G (FedIS), note §1.4: p_i proportional to q_i ||sum_k g_k^i|| (Eq. 10, data-weighted as in App. B).

    oracle: every available client runs its K plain local SGD steps from x_t (the run it would train, same batches)
    and s_i = q_i ||Delta_i||; practical: s_i = q_i ||Delta_i|| of each participant's update this round (for
    plain SGD ||Delta_i|| = eta_L ||sum_k g_k||, a common factor). A run without a model update is not scored.
    """

    @dataclass
    class Config(SamplerConfig):
        mode: Mode = Mode.practical

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.scores: dict = {}

    def oracle_scores(self, oracle, ids):
        updates = oracle.local_updates(ids.tolist())
        return np.array([self.q[i] * float(u.delta.norm()) for i, u in zip(ids.tolist(), updates)])

    def observe(self, t, client, update, weight):
        if self.mode == Mode.practical and update.delta is not None:
            self.scores[client] = float(self.q[client] * update.delta.norm())

    def end_round(self, t, updates):
        scores, self.scores = self.scores, {}
        if self.mode == Mode.practical:
            self.refresh(scores)


class Scorer(Enum):
    paper = "paper"  # s_i = q_i sqrt(alpha1 zeta_i^2 + alpha2 sigma_i^2)  (Eq. 17)
    code = "code"  # s_i = q_i ((1 - beta) ||g_i|| + beta ||g_i - c||)  (official code, A9)


class Reference(Enum):
    weighted_mean = "weighted_mean"  # sum_j w_j g_j / sum_j w_j under the aggregation weights (paper scorer, §1.5)
    sampled_mean = "sampled_mean"  # the unweighted mean of the participants' mean gradients (the code's c, A8)


class Sigma(Enum):
    probe = "probe"  # the unbiased sample variance of ``probes`` minibatch gradients at x_t (A7)
    none = "none"  # sigma_i = 0: diversity only (Sec. 5, large K)


@SELECTION.register("fedsrc_d")
class FedSRCD(_Importance):
    """FedSRC-D (DELTA), note §1.5: p_i proportional to q_i sqrt(alpha1 zeta_i^2 + alpha2 sigma_i^2) (Eq. 17) with
    zeta_i = ||grad F_i(x_t) - grad f(x_t)|| and sigma_i^2 the variance of a local step's stochastic gradient;
    alpha1 = 20 K^2 L eta_L, alpha2 = 5 K L eta_L + eta / S with replacement, + eta / N without (A3). Only the
    ratio r = alpha1 / alpha2 matters (``alpha_ratio`` overrides it; logged as ``alpha_ratio``).

    oracle: grad F_i(x_t) over each available client's data, grad f = sum q_i grad F_i / sum q_i over them,
    sigma_i^2 = E||nu_i||^2 of the injected gradient noise + the minibatch variance from ``probes`` gradients
    (exactly 0 when a batch is the client's whole data). practical (paper scorer): each participant's mean
    gradient g_i = -Delta_i / (eta_L K_i), zeta_i = ||g_i - reference|| (``reference``: the participants'
    aggregation-weighted mean, or their plain mean), sigma_i^2 estimated at x_t by the client from ``probes``
    minibatch gradients (counted, one float sent); ``scorer=code`` is the official code's
    (1 - beta) q_i ||g_i|| + beta q_i ||g_i - c|| with c the participants' plain mean.
    """

    keeps_updates = True

    @dataclass
    class Config(SamplerConfig):
        mode: Mode = Mode.practical
        scorer: Scorer = Scorer.paper
        reference: Reference = Reference.weighted_mean  # scorer=paper; the code scorer uses the plain mean
        sigma: Sigma = Sigma.probe
        probes: int = option(4, ge=1)
        smoothness: float = option(1.0, gt=0)  # L in alpha1, alpha2 (unknown in practice; only the ratio matters)
        alpha_ratio: Optional[float] = None  # r = alpha1 / alpha2; null = from Eq. 17
        beta: float = option(0.5, ge=0, le=1)  # scorer=code

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.scorer, self.reference, self.sigma = Scorer(cfg.scorer), Reference(cfg.reference), Sigma(cfg.sigma)
        require(cfg.probes >= 2 or self.sigma == Sigma.none, f"{KEY}.probes", f"{cfg.probes}.",
                "use at least 2 minibatch gradients for a sample variance (or sigma=none).")
        self.keeps_updates = self.mode == Mode.practical
        self.sigma2: dict = {}
        self.ratio = float("nan")
        self.state_attrs = ("p", "ratio")

    def select(self, t, available, rng):
        if self.oracle is not None and self.scorer == Scorer.paper:
            self.ratio = self.alpha_ratio(self.oracle)
        return super().select(t, available, rng)

    def alpha_ratio(self, oracle) -> float:
        """r = alpha1 / alpha2 of Eq. 17 (K local steps, eta_L, eta, S or N), or the configured override."""
        if self.cfg.alpha_ratio is not None:
            return float(self.cfg.alpha_ratio)
        k, lr, big_l = oracle.local_steps, oracle.lr, self.cfg.smoothness
        batch = self.s if self.replacement else self.num_clients
        return 20 * k * k * big_l * lr / (5 * k * big_l * lr + oracle.server_lr / batch)

    def _variance(self, oracle, client: int, with_noise: bool) -> float:
        if self.sigma == Sigma.none:
            return 0.0
        return oracle.minibatch_variance(client, self.cfg.probes, with_noise)

    def oracle_scores(self, oracle, ids):
        self.ratio = r = self.alpha_ratio(oracle)
        grads = oracle.full_gradients(ids.tolist())
        q = torch.as_tensor(self.q[ids], dtype=grads.dtype, device=grads.device)
        mean = (q[:, None] * grads).sum(0) / q.sum()
        zeta2 = ((grads - mean) ** 2).sum(1).cpu().numpy().astype(np.float64)
        sigma2 = np.array([0.0 if self.sigma == Sigma.none else
                           oracle.noise_variance(i) + self._variance(oracle, i, with_noise=False)
                           for i in ids.tolist()])
        return self.q[ids] * np.sqrt(r * zeta2 + sigma2)

    def observe(self, t, client, update, weight):
        if self.mode == Mode.practical and update.delta is not None and self.scorer == Scorer.paper \
                and client not in self.sigma2:
            self.sigma2[client] = self._variance(self._oracle(), client, with_noise=True)

    def end_round(self, t, updates):
        sigma2, self.sigma2 = self.sigma2, {}
        if self.mode != Mode.practical:
            return
        first = {}
        for client, update, weight in updates:
            if update.delta is not None:
                first.setdefault(client, (update, weight))
        if len(first) < 2:
            return
        lr = self._oracle().lr
        ids = sorted(first)
        grads = torch.stack([-first[i][0].delta / (lr * max(first[i][0].steps, 1)) for i in ids])
        if self.reference == Reference.weighted_mean and self.scorer == Scorer.paper:
            w = torch.tensor([first[i][1] for i in ids], dtype=grads.dtype, device=grads.device)
            ref = (w[:, None] * grads).sum(0) / w.sum() if float(w.sum()) > 0 else grads.mean(0)
        else:
            ref = grads.mean(0)
        zeta = (grads - ref).norm(dim=1).cpu().numpy().astype(np.float64)
        q = self.q[ids]
        if self.scorer == Scorer.code:
            norms = grads.norm(dim=1).cpu().numpy().astype(np.float64)
            s = q * ((1 - self.cfg.beta) * norms + self.cfg.beta * zeta)
        else:
            self.ratio = r = self.alpha_ratio(self._oracle())
            s = q * np.sqrt(r * zeta ** 2 + np.array([sigma2.get(i, 0.0) for i in ids]))
        self.refresh(dict(zip(ids, s.tolist())))

    def round_stats(self):
        stats = super().round_stats()
        if self.scorer == Scorer.paper and self.sigma != Sigma.none:
            stats["alpha_ratio"] = self.ratio
        return stats
