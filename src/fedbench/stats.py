"""Paired statistics for a sweep: the same seed gives every method of a sweep the same partition and participation
trace, so two methods are compared seed by seed.

* ``paired``: the mean of the per-seed differences d_s = A_s - B_s with a 95 % bootstrap confidence interval over
  the seeds (``scipy.stats.bootstrap``, percentile method; one resample draws seeds, so each seed's pair stays
  together), the probability of improvement P(A > B) = mean_s [1(d_s > 0) + 1/2 1(d_s = 0)], and a verdict that
  names the better method only when the interval excludes 0 *and* so does the paired Student-t interval
  (``scipy.stats.ttest_1samp``): with few seeds the percentile bootstrap is too narrow (with two seeds of the same
  sign its interval never holds 0), and the t-interval is the honest small-sample bound.
* ``paired_costs``: the same for a cost to a target (rounds, gradients, floats; lower is better) where a run that
  never reached the target is right-censored at its budget: a seed whose sign is known (one run reached it before the
  other's budget ended) enters at its bound, a seed whose sign is not is left out, and the verdict stands only if no
  censored seed goes against it.
* ``km_median``: one method's typical cost to a target over its runs, those that never reached it right-censored at
  their budgets: the median of the Kaplan-Meier estimate (``scipy.stats.ecdf`` on ``scipy.stats.CensoredData``),
  where the mean over the runs that reached the target counts only the fast ones.
* ``iqm``: the interquartile mean (the mean of the middle 50 % of scores, ``scipy.stats.trim_mean(x, 0.25)``) with
  a bootstrap CI, and ``profile``: the fraction of runs scoring above each threshold -- the aggregate views of
  Agarwal et al., *Deep RL at the Edge of the Statistical Precipice* (NeurIPS 2021), over several experiments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
RESAMPLES = 10_000


@dataclass
class Paired:
    n: int  # seeds both methods completed
    mean: float  # mean paired difference A - B
    low: float  # CI bounds (nan with fewer than 2 seeds)
    high: float
    p_improvement: float  # P(A > B) over the seeds
    verdict: str

    def row(self) -> dict:
        return {"n": self.n, "mean_diff": self.mean, "ci_low": self.low, "ci_high": self.high,
                "p_improvement": self.p_improvement, "verdict": self.verdict}


def bootstrap_ci(values: Sequence[float], statistic=np.mean, seed: int = 0) -> tuple:
    """(low, high) of the 95 % percentile bootstrap CI of ``statistic`` over ``values`` (nan with fewer than two;
    the value itself when every value is equal, where resampling cannot vary)."""
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return math.nan, math.nan
    if np.all(v == v[0]):
        s = float(statistic(v))
        return s, s
    res = stats.bootstrap((v,), statistic, confidence_level=CONFIDENCE, n_resamples=RESAMPLES, method="percentile",
                          vectorized=False, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def paired(a: Sequence[float], b: Sequence[float], names: tuple = ("A", "B"), seed: int = 0,
           better: str = "better") -> Paired:
    """Compare ``a`` and ``b``, aligned by seed (``a[i]`` and ``b[i]`` share seed i); the verdict reads
    "<name> <better>"."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return Paired(0, math.nan, math.nan, math.nan, math.nan, "no shared seeds")
    low, high = bootstrap_ci(d, seed=seed)
    t_low, t_high = t_interval(d)
    p = float(np.mean((d > 0) + 0.5 * (d == 0)))
    if d.size < 2:
        verdict = "one seed: no interval"
    elif low > 0 and t_low > 0:
        verdict = f"{names[0]} {better}"
    elif high < 0 and t_high < 0:
        verdict = f"{names[1]} {better}"
    else:
        verdict = f"not distinguishable at n={d.size}"
    return Paired(int(d.size), float(d.mean()), low, high, p, verdict)


@dataclass
class PairedCosts:
    paired: Paired  # over the decided seeds, censored ones at their bounds; the verdict names the cheaper
    censored: tuple  # (seeds where A did not reach the target, seeds where B did not) among the decided ones
    undecided: int  # seeds left out: neither reached it, or the censored run stopped before the other reached it

    def row(self) -> dict:
        return {**self.paired.row(), "censored_a": self.censored[0], "censored_b": self.censored[1],
                "undecided": self.undecided}


def paired_costs(a: Sequence[float], a_budget: Sequence[float], b: Sequence[float], b_budget: Sequence[float],
                 names: tuple = ("A", "B"), seed: int = 0) -> PairedCosts:
    """Compare two methods' costs to a target, aligned by seed: ``a[i]`` is A's cost on seed i, nan where A never
    reached the target, and ``a_budget[i]`` what A had spent at its last evaluation (its cost is then right-censored:
    beyond the budget). Per seed, d = a - b where both reached the target. Where only B reached it, at cost c, and A
    ran to a budget L >= c, B is the cheaper on that seed and d enters at its bound L - c (A's true cost lies beyond
    L, so B's advantage is understated); symmetrically when only A reached it. Where neither reached it, or the
    censored run stopped before the other reached it (L < c), the sign is unknown and the seed is left out.

    The interval and verdict are ``paired``'s on these values, the verdict naming the cheaper method ("<name>
    cheaper"). A censored seed's true difference lies further from 0 than its bound, on the side of the method that
    reached the target, so a verdict against a censored seed could be overturned: it is then withheld."""
    d_a, d_b = [], []
    censored, undecided = [0, 0], 0
    for x, lx, y, ly in zip(*(np.asarray(v, dtype=float) for v in (a, a_budget, b, b_budget))):
        if math.isfinite(x) and math.isfinite(y):
            pair = (x, y)
        elif math.isfinite(y) and lx >= y:  # A censored at lx, after B reached it
            pair, censored[0] = (lx, y), censored[0] + 1
        elif math.isfinite(x) and ly >= x:
            pair, censored[1] = (x, ly), censored[1] + 1
        else:
            undecided += 1
            continue
        d_a.append(pair[0])
        d_b.append(pair[1])
    # lower is better: the verdict "names[1] cheaper" when A - B > 0
    result = paired(d_a, d_b, names[::-1], seed, better="cheaper")
    winner = {f"{names[0]} cheaper": 0, f"{names[1]} cheaper": 1}.get(result.verdict)
    if winner is not None and censored[winner]:  # seeds where the named winner did not reach the target
        result.verdict = f"not decided: {censored[winner]} censored seed(s) favour {names[1 - winner]}"
    return PairedCosts(result, tuple(censored), undecided)


def km_median(costs: Sequence[float], budgets: Sequence[float]) -> tuple:
    """(median, exact) of a cost to a target over runs: ``costs[i]`` is run i's cost, nan where it never reached the
    target, and ``budgets[i]`` what it had spent at its last evaluation, where such a run is right-censored. The
    median is the smallest cost at which the Kaplan-Meier survival S(c) = prod over the reaching costs c_j <= c of
    (1 - d_j / n_j) (d_j runs reaching the target at c_j, n_j still short of it just before) falls to 1/2 or below,
    with ``exact`` True; where it never does (at most half the runs reached it), the median lies beyond every cost
    and budget observed, and that largest value is returned with ``exact`` False. With all runs reaching the target it
    is their lower median. (nan, False) without a run."""
    c, budget = np.asarray(costs, dtype=float), np.asarray(budgets, dtype=float)
    hit = np.isfinite(c)
    if not c.size:
        return math.nan, False
    last = float(max(c[hit].max(initial=-math.inf), budget[~hit].max(initial=-math.inf)))
    if not hit.any():
        return last, False
    sf = stats.ecdf(stats.CensoredData(uncensored=c[hit], right=budget[~hit])).sf
    half = np.nonzero(sf.probabilities <= 0.5 + 1e-12)[0]  # 1e-12: a product of ratios that is 1/2 exactly
    return (float(sf.quantiles[half[0]]), True) if half.size else (last, False)


def t_interval(d: np.ndarray) -> tuple:
    """The 95 % Student-t interval of the mean of ``d`` (nan with fewer than two values; the value itself when all
    are equal)."""
    if d.size < 2:
        return math.nan, math.nan
    if np.all(d == d[0]):
        return float(d[0]), float(d[0])
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(CONFIDENCE)
    return float(ci.low), float(ci.high)


def iqm(values: Sequence[float], seed: int = 0) -> tuple:
    """(interquartile mean, CI low, CI high, n) of the finite ``values``."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return math.nan, math.nan, math.nan, 0
    middle = lambda x, axis=-1: stats.trim_mean(x, 0.25, axis=axis)  # noqa: E731
    low, high = bootstrap_ci(v, middle, seed)
    return float(middle(v)), low, high, int(v.size)


def profile(values: Sequence[float], thresholds: np.ndarray) -> np.ndarray:
    """The performance profile: for each threshold tau, the fraction of runs scoring above it."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return np.full(len(thresholds), math.nan)
    return (v[None, :] > np.asarray(thresholds)[:, None]).mean(axis=1)


def shared_seeds(a: dict, b: dict) -> tuple:
    """(seeds in both, a's values, b's values) of two {seed: value} maps, seeds in order."""
    seeds = sorted(set(a) & set(b))
    return seeds, [a[s] for s in seeds], [b[s] for s in seeds]


def fmt_ci(p: Optional[Paired], digits: int = 3) -> str:
    if p is None or p.n == 0:
        return "—"
    if math.isnan(p.low):
        return f"{p.mean:+.{digits}f}"
    return f"{p.mean:+.{digits}f} [{p.low:+.{digits}f}, {p.high:+.{digits}f}]"
