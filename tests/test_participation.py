"""Participation processes: frequencies, exact patterns, Markov mixing, unbiased inclusion probabilities, errors.

Statistical checks use a fixed seed and a tolerance of 5 standard errors derived from each process's variance.
"""

import numpy as np
import pytest
from omegaconf import OmegaConf

from conftest import compose
from fedbench.config import CONF_DIR
from fedbench.errors import ConfigError
from fedbench.participation import LayerContext, ParticipationProcess
from fedbench.participation.fedsrc import FedSRCG


def process(n=40, rounds=100, local_steps=5, seed=0, sizes=None, attrs=None, preset="uniform", **layers):
    """A ParticipationProcess from ``participation=<preset>`` plus ``participation.<key>=<value>`` overrides."""
    overrides = [f"participation={preset}"]
    for key, value in layers.items():
        if "/" in key:  # choose a layer: participation/selection=uniform
            overrides.append(f"{key}={value}")
        else:
            overrides.append(f"participation.{key}={value}")
    cfg = compose("dataset=digits", *overrides).participation
    sizes = np.full(n, 10) if sizes is None else np.asarray(sizes)
    return ParticipationProcess(cfg, LayerContext(n, seed, rounds, local_steps, sizes, attrs or {}))


def draw(proc, rounds):
    return [proc.round(t) for t in range(rounds)]


def frequencies(rps):
    avail = np.array([rp.available for rp in rps], dtype=float)
    return avail.mean(axis=0)


# ---- availability: long-run frequencies ----------------------------------------------------------------------
@pytest.mark.parametrize("layers", [
    {"availability.scheme": "constant", "availability.prob": 0.3},
    {"availability.scheme": "levels", "availability.prob": 0.1},
])
def test_bernoulli_frequencies_match_declared_probabilities(layers):
    n, r = 20, 3000
    proc = process(n, r, preset="bernoulli", first_round_full="false", **layers)
    p = proc.availability.prob(0)
    if layers["availability.scheme"] == "levels":  # MimiC code: p_i = p + (i mod 5)(1 - p)/4
        np.testing.assert_allclose(p[:5], [0.1, 0.325, 0.55, 0.775, 1.0])
    freq = frequencies(draw(proc, r))
    tol = 5 * np.sqrt(p * (1 - p) / r) + 1e-12
    assert np.all(np.abs(freq - p) <= tol), (freq, p)


def test_bernoulli_list_of_probabilities():
    n = 4
    proc = process(n, preset="bernoulli", **{"availability.scheme": "list", "availability.probs": "[0,0.5,1,0.25]"})
    np.testing.assert_allclose(proc.availability.prob(3), [0, 0.5, 1, 0.25])


def test_markov_stationary_distribution_and_mixing():
    n, r, pi, lam = 50, 2000, 0.3, 0.6
    proc = process(n, r, preset="markov", **{"availability.stationary": pi, "availability.mixing": lam})
    a = np.array([rp.available for rp in draw(proc, r)], dtype=float)
    # stationarity: mean availability pi; variance of a client's time-average inflated by (1 + lam)/(1 - lam)
    se = np.sqrt(pi * (1 - pi) * (1 + lam) / (1 - lam) / (r * n))
    assert abs(a.mean() - pi) < 5 * se
    per_client_se = np.sqrt(pi * (1 - pi) * (1 + lam) / (1 - lam) / r)
    assert np.all(np.abs(a.mean(axis=0) - pi) < 5 * per_client_se)
    # mixing: P(on at t+1 | on at t) = 1 - b, P(on | off) = a, so the lag-1 autocorrelation is lambda
    on, nxt = a[:-1].ravel() > 0, a[1:].ravel()
    b_on, a_off = pi * (1 - lam), (1 - pi) * (1 - lam)
    assert abs(nxt[on].mean() - (1 - a_off)) < 5 * np.sqrt(a_off * (1 - a_off) / on.sum())
    assert abs(nxt[~on].mean() - b_on) < 5 * np.sqrt(b_on * (1 - b_on) / (~on).sum())
    x = a - a.mean()
    lag1 = (x[:-1] * x[1:]).mean() / x.var()
    assert abs(lag1 - lam) < 0.05


def test_markov_transition_parametrisation_and_marginal_from_unavailable_start():
    proc = process(30, preset="markov", **{"availability.p_on": 0.1, "availability.p_off": 0.3,
                                           "availability.init": "unavailable"})
    m = proc.availability
    assert m.pi == pytest.approx(0.25) and m.lam == pytest.approx(0.6)
    np.testing.assert_allclose(m.prob(0), 0.0)
    np.testing.assert_allclose(m.prob(2), 0.25 * (1 - 0.6**2))


def test_sinusoidal_frequency_follows_the_wave():
    n, r, period = 200, 400, 20
    proc = process(n, r, preset="sinusoidal", **{"availability.period": period})
    a = np.array([rp.available for rp in draw(proc, r)], dtype=float)
    phase = np.arange(r) % period
    for k in (0, 5, 15):
        rows = a[phase == k]
        p = 0.5 + 0.4 * np.sin(2 * np.pi * k / period)
        assert abs(rows.mean() - p) < 5 * np.sqrt(p * (1 - p) / rows.size)


@pytest.mark.parametrize("redraw", [True, False])
def test_time_varying_draws_floor_pn_clients_with_declared_frequency(redraw):
    n, r = 30, 3000
    proc = process(n, r, preset="time_varying", first_round_full="false",
                   **{"availability.fraction": 0.3, "availability.redraw": str(redraw).lower()})
    rps = draw(proc, r)
    assert {int(rp.available.sum()) for rp in rps} == {9}
    freq = frequencies(rps)
    p = proc.availability.long_run()
    tol = 5 * np.sqrt(p * (1 - p) / r) + (0 if redraw else 5 * np.sqrt(p * (1 - p) / 4000))
    assert np.all(np.abs(freq - p) <= tol)
    if redraw:
        np.testing.assert_allclose(p, 0.3)
    else:  # fixed weights: heavier clients are available more often
        w = proc.availability.fixed
        assert np.corrcoef(w, freq)[0, 1] > 0.8


# ---- availability: exact patterns ------------------------------------------------------------------------------
@pytest.mark.parametrize("dist", ["uniform", "halfnormal"])
def test_round_robin_dropout_is_periodic_and_bounded(dist):
    n, r, tau_max = 60, 120, 20
    proc = process(n, r, preset="round_robin_dropout", first_round_full="false",
                   **{"availability.dist": dist, "availability.tau_max": tau_max})
    a = np.array([rp.available for rp in draw(proc, r)])
    tau = proc.availability.tau
    assert tau.min() >= 1 and tau.max() <= tau_max
    for i in range(n):  # paper phase: active iff t mod tau_i = 0
        np.testing.assert_array_equal(np.flatnonzero(a[:, i]), np.arange(0, r, tau[i]))
    for i in range(n):  # Assumption 1: never inactive for tau_max or more consecutive rounds
        assert np.diff(np.flatnonzero(a[:, i])).max(initial=1) <= tau_max
    if dist == "halfnormal":  # code: round(|N(0, 9)|) clipped, mean active fraction about 0.59
        assert 0.45 < (1 / tau).mean() < 0.75
    else:  # paper: U{0..20}, mean active fraction (1 + H_20)/21 ~ 0.22 (tau = 0 and 1 both mean always)
        assert 0.1 < (1 / tau).mean() < 0.4


def test_periodic_groups_by_index_take_turns_with_offset():
    n, period, groups = 25, 7, 5
    proc = process(n, 200, preset="periodic", **{"availability.group_by": "index", "availability.period": period,
                                                 "availability.num_groups": groups})
    av = proc.availability
    assert 0 <= av.offset < period
    np.testing.assert_array_equal(av.group, np.repeat(np.arange(groups), 5))
    a = np.array([rp.available for rp in draw(proc, 200)])
    for t in range(200):
        g = ((t + av.offset) % (groups * period)) // period
        np.testing.assert_array_equal(a[t], av.group == g)
    # group 0 starts with period - offset rounds, then every group is on for exactly `period` rounds in turn
    runs = np.flatnonzero(np.diff(a[:, 0].astype(int)) != 0)
    assert runs[0] + 1 == period - av.offset


def test_periodic_groups_by_majority_label():
    labels = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9] * 3)
    proc = process(30, preset="periodic", attrs={"majority_label": labels},
                   **{"availability.group_by": "majority_label"})
    np.testing.assert_array_equal(proc.availability.group, labels // 2)  # 5 groups of 2 labels


def test_regularized_selection_covers_every_client_once_per_pass():
    n, s = 20, 5
    proc = process(n, 40, preset="regularized", **{"selection.clients_per_round": s})
    counts = np.zeros((10, n), dtype=int)
    for t in range(40):
        rp = proc.round(t)
        assert len(set(rp.selected.tolist())) == s
        counts[t // (n // s), rp.selected] += 1
        np.testing.assert_allclose(rp.expected_count, s / n)
    assert (counts == 1).all()


def test_regularized_among_periodic_availability_is_exact_within_a_phase():
    n, s, period = 30, 2, 12
    proc = process(n, 60, preset="periodic", **{"availability.group_by": "index", "availability.period": period,
                                                "availability.num_groups": 3, "availability.random_offset": "false",
                                                "selection.clients_per_round": s})
    rps = draw(proc, 60)
    for start in range(0, 60, period):  # each phase: 10 available clients, 2 a round -> 5-round passes
        for block in (range(start, start + 5), range(start + 5, start + 10)):
            ids = np.concatenate([rps[t].selected for t in block])
            np.testing.assert_array_equal(np.sort(ids), np.flatnonzero(rps[start].available))


def test_skip_permutation_reproduces_the_code_sampler():
    proc = process(10, preset="regularized", **{"selection.clients_per_round": 5, "selection.mode": "skip_permutation"})
    seen = np.concatenate([proc.round(t).selected for t in range(2)])
    np.testing.assert_array_equal(np.sort(seen), np.arange(10))  # all available: one pass = N/S rounds


def test_trace_replays_file_and_wraps(tmp_path):
    trace = (np.arange(12).reshape(4, 3) % 2).astype(int)
    np.save(tmp_path / "t.npy", trace)
    np.savetxt(tmp_path / "t.csv", trace, delimiter=",", fmt="%d")
    for name in ("t.npy", "t.csv"):
        proc = process(3, 10, preset="trace", **{"availability.path": str(tmp_path / name)})
        a = np.array([rp.available for rp in draw(proc, 10)])
        np.testing.assert_array_equal(a, trace[np.arange(10) % 4].astype(bool))


# ---- selection / dropout -----------------------------------------------------------------------------------------
def test_md_samples_with_replacement_in_proportion_to_sizes():
    sizes = np.array([1, 2, 3, 4] * 5)
    n, r, s = 20, 2000, 10
    proc = process(n, r, preset="md", sizes=sizes, **{"selection.clients_per_round": s})
    counts = np.zeros(n)
    for t in range(r):
        rp = proc.round(t)
        assert rp.selected.size == s
        np.add.at(counts, rp.selected, 1)
    expected = s * sizes / sizes.sum()
    np.testing.assert_allclose(proc.last.expected_count, expected)
    assert np.all(np.abs(counts / r - expected) < 5 * np.sqrt(expected / r))


def test_straggler_completes_a_random_part_of_the_steps():
    proc = process(20, 300, local_steps=6, preset="straggler", **{"dropout.prob": 0.5, "dropout.min_steps": 2})
    rps = draw(proc, 300)
    steps = np.concatenate([rp.local_steps for rp in rps])
    assert steps.min() == 2 and steps.max() == 6
    assert abs((steps < 6).mean() - 0.5) < 0.05
    assert all(rp.completed.all() for rp in rps)
    np.testing.assert_array_equal(proc.trace_arrays()["local_steps"].sum(axis=1), [rp.local_steps.sum() for rp in rps])


def test_dropout_correlated_with_availability():
    proc = process(10, preset="bernoulli", **{"availability.scheme": "levels", "availability.prob": 0.2,
                                              "participation/dropout": "bernoulli", "dropout.prob": 0.2,
                                              "dropout.correlation": "availability"})
    away = 1 - proc.availability.prob(1)
    np.testing.assert_allclose(proc.dropout.q, np.clip(0.2 * away / away.mean(), 0, 1))
    assert proc.dropout.q[4] == 0.0 and proc.dropout.q[0] > 0.2


def test_first_round_full_and_min_available_fallback():
    proc = process(30, preset="bernoulli", min_available=3, **{"availability.prob": 0.0})
    rps = draw(proc, 5)
    assert rps[0].available.all() and rps[0].expected_exact
    assert all(rp.available.sum() == 3 for rp in rps[1:])
    np.testing.assert_allclose(rps[1].expected_count, 0.1, atol=0.03)  # 3 of 30 at random


def test_adaptive_sampler_preserves_mass_and_keeps_stale_probabilities():
    proc = process(8, preset="adaptive", **{"selection.clients_per_round": 3})
    sel = proc.selection
    assert isinstance(sel, FedSRCG)
    rp = proc.round(0)

    class U:
        def __init__(self, v):
            import torch
            self.delta = torch.tensor([v])

    ids = sorted(set(rp.selected.tolist()))
    before = sel.p.copy()
    for k, i in enumerate(ids):
        proc.observe(0, i, U(k + 1.0), 1.0)
    proc.end_round(0)
    assert sel.p.sum() == pytest.approx(1.0)
    others = np.setdiff1d(np.arange(8), ids)
    np.testing.assert_array_equal(sel.p[others], before[others])
    if len(ids) >= 2:
        scores = np.arange(1, len(ids) + 1, dtype=float)
        np.testing.assert_allclose(sel.p[ids], before[ids].sum() * scores / scores.sum())


# ---- unbiasedness of the reported inclusion probabilities -------------------------------------------------------
@pytest.mark.parametrize("preset, layers", [
    ("uniform", {"selection.clients_per_round": 4}),
    ("md", {"selection.clients_per_round": 4}),
    ("bernoulli", {"availability.scheme": "levels", "availability.prob": 0.1, "first_round_full": "false"}),
    ("bernoulli", {"availability.scheme": "levels", "availability.prob": 0.2, "participation/selection": "uniform",
                   "selection.clients_per_round": 3, "first_round_full": "false"}),
    ("dropout", {"selection.clients_per_round": 5, "dropout.prob": 0.3}),
    ("markov", {"selection.clients_per_round": 3}),
    ("time_varying", {"availability.redraw": "false", "first_round_full": "false"}),
])
def test_horvitz_thompson_aggregate_is_unbiased(preset, layers):
    n, r = 12, 4000
    sizes = np.arange(1, n + 1) * 5
    proc = process(n, r, preset=preset, sizes=sizes, **layers)
    x = np.random.default_rng(1).normal(size=n) + 3.0
    estimates = np.empty(r)
    for t in range(r):
        rp = proc.round(t)
        ids = rp.completed_ids
        estimates[t] = (x[ids] / rp.expected_count[ids]).sum() / n
    se = estimates.std() / np.sqrt(r)
    assert abs(estimates.mean() - x.mean()) < 5 * se + 1e-9, (estimates.mean(), x.mean(), se)


def test_same_seed_same_trace_different_seed_different_trace():
    a = draw(process(20, preset="markov", seed=3), 30)
    b = draw(process(20, preset="markov", seed=3), 30)
    c = draw(process(20, preset="markov", seed=4), 30)
    assert all(np.array_equal(x.selected, y.selected) for x, y in zip(a, b))
    assert not all(np.array_equal(x.selected, y.selected) for x, y in zip(a, c))


# ---- invalid parameters fail at start ----------------------------------------------------------------------------
def test_invalid_parameters_name_the_key(tmp_path):
    cases = [
        ({"availability.prob": 1.5}, "bernoulli", "participation.availability.prob"),
        ({"availability.scheme": "list", "availability.probs": "[0.5]"}, "bernoulli", "participation.availability.probs"),
        ({"availability.stationary": -0.1}, "markov", "participation.availability.stationary"),
        ({"availability.group_by": "colour"}, "periodic", "participation.availability.group_by"),
        ({"availability.amplitude": 0.7}, "sinusoidal", "participation.availability.amplitude"),
        ({"availability.fraction": 0.01}, "time_varying", "participation.availability.fraction"),
        ({"selection.clients_per_round": 41}, "uniform", "participation.selection.clients_per_round"),
        ({"dropout.prob": -1}, "dropout", "participation.dropout.prob"),
        ({"availability.path": str(tmp_path / "missing.npy")}, "trace", "participation.availability.path"),
    ]
    for layers, preset, key in cases:
        with pytest.raises(ConfigError) as err:
            process(40, preset=preset, attrs={"majority_label": np.arange(40) % 10}, **layers)
        assert err.value.key == key, (layers, str(err.value))
        assert "Fix:" in str(err.value)


def test_trace_with_wrong_shape_or_values(tmp_path):
    np.save(tmp_path / "wide.npy", np.ones((5, 7)))
    np.save(tmp_path / "twos.npy", np.full((5, 4), 2))
    np.save(tmp_path / "short.npy", np.ones((5, 4)))
    for name, extra, text in [("wide.npy", {}, "shape (5, 7)"), ("twos.npy", {}, "other than 0 and 1"),
                              ("short.npy", {"availability.wrap": "false"}, "5 rounds but the run has 100")]:
        with pytest.raises(ConfigError, match=text.replace("(", r"\(").replace(")", r"\)")):
            process(4, 100, preset="trace", **{"availability.path": str(tmp_path / name), **extra})


def test_every_preset_composes_with_its_documented_keys():

    presets = sorted(p.stem for p in (CONF_DIR / "participation").glob("*.yaml"))
    assert {"bernoulli", "markov", "periodic", "round_robin_dropout", "time_varying", "sinusoidal", "trace",
            "regularized", "md", "dropout", "straggler", "adaptive", "uniform", "full"} <= set(presets)
    for name in presets:
        cfg = compose("dataset=digits", f"participation={name}").participation
        assert cfg.name == name and OmegaConf.select(cfg, "availability.kind")


def test_trace_arrays_record_every_round_and_grow_past_the_planned_rounds():
    proc = process(6, rounds=3, preset="dropout", **{"selection.clients_per_round": 2, "dropout.prob": 0.5})
    rps = draw(proc, 10)
    tr = proc.trace_arrays()
    assert tr["selected"].shape == (10, 6) and tr["expected_exact"].all()
    for t, rp in enumerate(rps):
        np.testing.assert_array_equal(np.flatnonzero(tr["selected"][t]), rp.selected)
        np.testing.assert_array_equal(np.flatnonzero(tr["completed"][t]), rp.completed_ids)
