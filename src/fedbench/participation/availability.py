"""Availability processes: which clients can take part in round t.

Per-round randomness comes from the round's stream ``(seed, "participation/availability", t)``; draws made once
per run (offsets, periods tau_i, fixed weights, phases) come from ``(seed, "participation/availability/<what>")``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import List, Optional

import numpy as np

from fedbench.errors import ConfigError, require
from fedbench.participation.base import AVAILABILITY, Availability, LayerConfig
from fedbench.options import option

KEY = "participation.availability"


@AVAILABILITY.register("always")
class Always(Availability):
    """Every client is available in every round."""

    deterministic = True

    @dataclass
    class Config(LayerConfig):
        pass

    def mask(self, t, rng):
        return np.ones(self.num_clients, dtype=bool)

    def long_run(self):
        return np.ones(self.num_clients)


class BernoulliScheme(Enum):
    constant = "constant"  # p_i = prob (MimiC paper text, §7.1 "static active probability")
    levels = "levels"  # p_i = prob + (i mod L)(1 - prob)/(L - 1) (MimiC code's static mode, L = 5)
    list = "list"  # p_i = probs[i]


@AVAILABILITY.register("bernoulli")
class Bernoulli(Availability):
    """Client i is available in round t independently with a static probability p_i."""

    independent = True

    @dataclass
    class Config(LayerConfig):
        scheme: BernoulliScheme = BernoulliScheme.constant
        prob: float = option(0.5, ge=0, le=1)
        levels: int = option(5, ge=2)
        probs: List[float] = option(factory=list, ge=0, le=1)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        n = ctx.num_clients
        scheme = BernoulliScheme(cfg.scheme)
        if scheme == BernoulliScheme.list:
            require(len(cfg.probs) == n, f"{KEY}.probs", f"has {len(cfg.probs)} entries for {n} clients.",
                    f"give one probability per client ({n} values), or use scheme=constant|levels.")
            self.p = np.asarray(cfg.probs, dtype=np.float64)
        else:
            p = float(cfg.prob)
            if scheme == BernoulliScheme.levels:
                self.p = p + (np.arange(n) % cfg.levels) * (1.0 - p) / (cfg.levels - 1)
            else:
                self.p = np.full(n, p)

    def mask(self, t, rng):
        return rng.random(self.num_clients) < self.p

    def prob(self, t):
        return self.p

    def long_run(self):
        return self.p


class MarkovInit(Enum):
    stationary = "stationary"
    available = "available"
    unavailable = "unavailable"


@AVAILABILITY.register("markov")
class Markov(Availability):
    """Independent two-state on/off chains: off->on with probability a (``p_on``), on->off with b (``p_off``).

    Either give (``p_on``, ``p_off``) or the stationary availability pi = a/(a+b) and the mixing rate
    lambda = 1 - a - b (``stationary``, ``mixing``); then a = pi(1 - lambda), b = (1 - pi)(1 - lambda). The
    marginal is exact: P(on at t) = pi + (P(on at 0) - pi) lambda^t (arbitrary-participation note §2.4).
    """

    independent = True
    state_attrs = ("state",)

    @dataclass
    class Config(LayerConfig):
        stationary: float = option(0.5, ge=0, le=1)
        mixing: float = option(0.8, gt=-1, lt=1)
        p_on: Optional[float] = option(None, ge=0, le=1)
        p_off: Optional[float] = option(None, ge=0, le=1)
        init: MarkovInit = MarkovInit.stationary

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        if cfg.p_on is not None or cfg.p_off is not None:
            require(cfg.p_on is not None and cfg.p_off is not None, f"{KEY}.p_on",
                    "only one of p_on and p_off is set.", "set both transition probabilities, or neither.")
            a, b = float(cfg.p_on), float(cfg.p_off)
        else:
            pi, lam = float(cfg.stationary), float(cfg.mixing)
            a, b = pi * (1.0 - lam), (1.0 - pi) * (1.0 - lam)
            require(a <= 1.0 and b <= 1.0, f"{KEY}.mixing",
                    f"stationary={pi} with mixing={lam} needs transition probabilities {a:.3g}, {b:.3g} > 1.",
                    "use a larger mixing rate (lambda >= 1 - 1/pi and >= 1 - 1/(1 - pi)).")
        require(a + b > 0, f"{KEY}.p_on", "p_on + p_off = 0: the chains never move.", "use p_on + p_off > 0.")
        self.a, self.b = a, b
        self.pi = a / (a + b)
        self.lam = 1.0 - a - b
        init = MarkovInit(cfg.init)
        self.p0 = {MarkovInit.stationary: self.pi, MarkovInit.available: 1.0, MarkovInit.unavailable: 0.0}[init]
        self.state: Optional[np.ndarray] = None

    def mask(self, t, rng):
        u = rng.random(self.num_clients)
        if t == 0:
            self.state = u < self.p0
        else:
            self.state = np.where(self.state, u >= self.b, u < self.a)
        return self.state.copy()

    def prob(self, t):
        return np.full(self.num_clients, self.pi + (self.p0 - self.pi) * self.lam**t)

    def long_run(self):
        return np.full(self.num_clients, self.pi)


@AVAILABILITY.register("periodic")
class Periodic(Availability):
    """Groups of clients take turns, ``period`` rounds each, after a random offset o ~ U{0..period-1}.

    Group g is available iff floor(((t + o) mod (G * period)) / period) = g (arbitrary-participation note §2.2,
    generator B: 5 groups of 2 majority labels, 100 rounds each). Groups: contiguous index blocks
    round(gN/G) <= n < round((g+1)N/G), or the sorted distinct values of a client attribute cut into G blocks.
    """

    deterministic = True

    @dataclass
    class Config(LayerConfig):
        num_groups: int = option(5, ge=1)
        period: int = option(100, ge=1)
        group_by: str = "index"
        random_offset: bool = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        n, g = ctx.num_clients, cfg.num_groups
        require(1 <= g <= n, f"{KEY}.num_groups", f"{g} groups for {n} clients.", f"use 1 <= num_groups <= {n}.")
        if cfg.group_by == "index":
            bounds = np.round(np.arange(g + 1) * n / g).astype(int)
            self.group = np.searchsorted(bounds, np.arange(n), side="right") - 1
        else:
            allowed = ", ".join(["index", *sorted(ctx.attrs)])
            require(cfg.group_by in ctx.attrs, f"{KEY}.group_by",
                    f"'{cfg.group_by}' is not an attribute of this partition's clients.", f"use one of: {allowed}.")
            values = np.asarray(ctx.attrs[cfg.group_by])
            uniq, idx = np.unique(values, return_inverse=True)
            require(uniq.size >= g, f"{KEY}.num_groups",
                    f"attribute '{cfg.group_by}' takes only {uniq.size} distinct values, fewer than {g} groups.",
                    f"use num_groups <= {uniq.size}.")
            self.group = (idx * g) // uniq.size
        self.offset = int(ctx.rng("availability/offset").integers(cfg.period)) if cfg.random_offset else 0
        self.cycle = g * cfg.period

    def mask(self, t, rng):
        return self.group == ((t + self.offset) % self.cycle) // self.cfg.period

    def long_run(self):
        return np.full(self.num_clients, 1.0 / self.cfg.num_groups)


class TauDist(Enum):
    uniform = "uniform"  # paper text: tau_i ~ U{0..tau_max}
    halfnormal = "halfnormal"  # official code: tau_i = min(round(|N(0, scale^2)|), tau_max)


class Phase(Enum):
    zero = "zero"  # active iff t mod tau_i = 0 (code)
    random = "random"  # active iff (t + phi_i) mod tau_i = 0, phi_i ~ U{0..tau_i-1}


@AVAILABILITY.register("round_robin_dropout")
class RoundRobinDropout(Availability):
    """MimiC's bounded consecutive dropout (§7.1): client i is active every tau_i rounds (tau_i = 0: always).

    So a client is never inactive for more than tau_max - 1 consecutive rounds (Assumption 1).
    """

    deterministic = True

    @dataclass
    class Config(LayerConfig):
        tau_max: int = option(20, ge=1)
        dist: TauDist = TauDist.uniform
        halfnormal_scale: float = option(3.0, gt=0)
        phase: Phase = Phase.zero

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        rng = ctx.rng("availability/tau")
        n = ctx.num_clients
        if TauDist(cfg.dist) == TauDist.uniform:
            tau = rng.integers(0, cfg.tau_max + 1, size=n)
        else:
            tau = np.minimum(np.rint(np.abs(rng.normal(0.0, cfg.halfnormal_scale, size=n))), cfg.tau_max)
        self.tau = np.maximum(tau.astype(np.int64), 1)  # tau = 0 and tau = 1 both mean "always active"
        if Phase(cfg.phase) == Phase.random:
            self.phase = (rng.random(n) * self.tau).astype(np.int64)
        else:
            self.phase = np.zeros(n, dtype=np.int64)

    def mask(self, t, rng):
        return (t + self.phase) % self.tau == 0

    def long_run(self):
        return 1.0 / self.tau


@AVAILABILITY.register("time_varying")
class TimeVarying(Availability):
    """MimiC's time-varying probabilities (§7.1): floor(P N) clients drawn without replacement with probability
    proportional to weights a_i ~ U[low, high], fresh every round (``redraw``) or drawn once.

    Sampling uses Efraimidis-Spirakis keys u^(1/a_i), the same law as successive weighted draws. With fresh
    weights every client has inclusion probability floor(PN)/N exactly (symmetry); with fixed weights it is
    estimated.
    """

    @dataclass
    class Config(LayerConfig):
        fraction: float = option(0.1, ge=0, le=1)
        weight_low: float = option(1.0, gt=0)
        weight_high: float = option(10.0, gt=0)
        redraw: bool = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.k = int(np.floor(cfg.fraction * ctx.num_clients))
        require(self.k >= 1, f"{KEY}.fraction", f"floor({cfg.fraction} x {ctx.num_clients}) = 0 active clients.",
                f"use fraction >= {1 / ctx.num_clients:.3g}.")
        require(0 < cfg.weight_low <= cfg.weight_high, f"{KEY}.weight_low",
                f"weights U[{cfg.weight_low}, {cfg.weight_high}] are not a positive range.",
                "use 0 < weight_low <= weight_high.")
        self.fixed = None if cfg.redraw else self._weights(ctx.rng("availability/weights"), 1)[0]

    def _weights(self, rng, m):
        return rng.uniform(self.cfg.weight_low, self.cfg.weight_high, size=(m, self.num_clients))

    def _draw(self, rng, m):
        w = self._weights(rng, m) if self.fixed is None else self.fixed[None, :]
        keys = np.log(rng.random((m, self.num_clients))) / w
        top = np.argpartition(-keys, self.k - 1, axis=1)[:, : self.k]
        masks = np.zeros((m, self.num_clients), dtype=bool)
        np.put_along_axis(masks, top, True, axis=1)
        return masks

    def mask(self, t, rng):
        return self._draw(rng, 1)[0]

    def sample(self, t, rng, m):
        return self._draw(rng, m)

    def prob(self, t):
        return np.full(self.num_clients, self.k / self.num_clients) if self.fixed is None else None

    def long_run(self):
        if self.fixed is None:
            return np.full(self.num_clients, self.k / self.num_clients)
        return self._draw(self.ctx.rng("availability/long_run"), 4000).mean(axis=0)


class SinePhase(Enum):
    same = "same"  # every client oscillates in phase
    spread = "spread"  # phi_i = 2 pi i / N
    random = "random"  # phi_i ~ U[0, 2 pi)


@AVAILABILITY.register("sinusoidal")
class Sinusoidal(Availability):
    """Independent availability with p_i(t) = mean + amplitude * sin(2 pi t / period + phi_i)."""

    independent = True

    @dataclass
    class Config(LayerConfig):
        mean: float = option(0.5, ge=0, le=1)
        amplitude: float = option(0.4, ge=0, le=1)
        period: int = option(50, ge=1)
        phase: SinePhase = SinePhase.same

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        require(cfg.amplitude >= 0 and 0 <= cfg.mean - cfg.amplitude and cfg.mean + cfg.amplitude <= 1,
                f"{KEY}.amplitude", f"mean {cfg.mean} +- amplitude {cfg.amplitude} leaves [0, 1].",
                "choose 0 <= amplitude <= min(mean, 1 - mean).")
        n = ctx.num_clients
        phase = SinePhase(cfg.phase)
        if phase == SinePhase.spread:
            self.phi = 2 * np.pi * np.arange(n) / n
        elif phase == SinePhase.random:
            self.phi = ctx.rng("availability/phase").uniform(0, 2 * np.pi, size=n)
        else:
            self.phi = np.zeros(n)

    def prob(self, t):
        return self.cfg.mean + self.cfg.amplitude * np.sin(2 * np.pi * t / self.cfg.period + self.phi)

    def mask(self, t, rng):
        return rng.random(self.num_clients) < self.prob(t)

    def long_run(self):
        return np.mean([self.prob(t) for t in range(self.cfg.period)], axis=0)


def read_matrix(path: Path, key: str) -> np.ndarray:
    """A numeric matrix from a .npy file (recognized by its magic bytes, whatever the name) or comma-separated
    text; anything else -- binary junk, pickles, archives, text that is not numbers -- is a ``ConfigError``."""
    fix = "save a rounds x clients 0/1 matrix with numpy.save (.npy) or as comma-separated rows of 0 and 1."
    try:
        with open(path, "rb") as f:
            head = f.read(6)
        if head == b"\x93NUMPY":
            matrix = np.load(path, allow_pickle=False)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an empty file: numpy warns, then the shape check refuses it
                matrix = np.loadtxt(path, delimiter=",", ndmin=2, encoding="utf-8")
        matrix = np.asarray(matrix, dtype=np.float64)
    except Exception as exc:  # unreadable, not UTF-8 text, a pickle, ragged rows, non-numbers
        raise ConfigError(key, f"'{path}' could not be read as a numeric matrix ({type(exc).__name__}).",
                          fix) from None
    return matrix


@AVAILABILITY.register("trace")
class Trace(Availability):
    """Replays a recorded rounds x clients 0/1 matrix (``.npy``, or ``.csv`` with one row per round).

    Past its last row the trace wraps around (``wrap=true``) or the run is refused at start.
    """

    deterministic = True

    @dataclass
    class Config(LayerConfig):
        path: str = ""
        wrap: bool = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        path = Path(cfg.path).expanduser()
        key = f"{KEY}.path"
        require(bool(cfg.path) and path.is_file(), key, f"'{cfg.path}' is not a file.",
                "give the path of a rounds x clients .npy or .csv file of 0/1 values.")
        matrix = read_matrix(path, key)
        n = ctx.num_clients
        require(matrix.ndim == 2 and matrix.shape[1] == n and matrix.shape[0] >= 1, key,
                f"the trace has shape {matrix.shape}, but a rounds x clients matrix with {n} columns is needed.",
                f"give one column per client ({n}), one row per round.")
        require(matrix.size > 0 and bool(np.isin(matrix, (0, 1)).all()), key, "the trace holds values other than 0 and 1.",
                "mark available clients with 1 and unavailable ones with 0.")
        require(cfg.wrap or matrix.shape[0] >= ctx.rounds, key,
                f"the trace has {matrix.shape[0]} rounds but the run has {ctx.rounds}.",
                f"set {KEY}.wrap=true to replay it cyclically, or lower rounds.")
        self.matrix = matrix.astype(bool)

    def mask(self, t, rng):
        return self.matrix[t % self.matrix.shape[0]].copy()

    def long_run(self):
        return self.matrix.mean(axis=0)
