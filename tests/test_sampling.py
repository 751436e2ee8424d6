"""Probability samplers (FedSRC note): unbiasedness by Monte-Carlo, the oracle probabilities against closed forms on
a constructed federation, Eq. 78's variance gain, the practical refresh, clustered sampling, Power-of-Choice."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import compose
from fedbench.errors import ConfigError
from fedbench.participation import LayerContext, ParticipationProcess
from fedbench.participation.cluster import fill
from fedbench.participation.fedsrc import FedSRCD, FedSRCG
from fedbench.participation.sampling import capped_inclusion, systematic
from conftest import make_sim

SIZES = np.array([5, 10, 15, 20, 25, 30, 35, 40, 10, 10, 20, 60])


def process(preset="uniform", n=12, rounds=100, sizes=SIZES, seed=0, **layers):
    overrides = [f"participation={preset}"]
    for key, value in layers.items():
        overrides.append(f"{key}={value}" if "/" in key else f"participation.{key}={value}")
    cfg = compose("dataset=digits", *overrides).participation
    return ParticipationProcess(cfg, LayerContext(n, seed, rounds, 5, np.asarray(sizes), {}))


class Oracle:
    """A constructed federation: each client's full gradient, update and noise variance are given."""

    def __init__(self, grads=None, deltas=None, noise=None, losses=None, lr=0.01, server_lr=1.0, local_steps=5):
        self.grads, self.deltas, self.noise, self.losses = grads, deltas, noise, losses
        self.lr, self.server_lr, self.local_steps = lr, server_lr, local_steps
        self.asked = []

    def full_gradients(self, clients):
        return torch.stack([torch.as_tensor(self.grads[i], dtype=torch.float64) for i in clients])

    def local_updates(self, clients):
        return [SimpleNamespace(delta=torch.as_tensor(self.deltas[i], dtype=torch.float64), steps=self.local_steps)
                for i in clients]

    def noise_variance(self, i):
        return float(self.noise[i])

    def minibatch_variance(self, i, probes, with_noise):
        return 0.0  # full-batch steps

    def loss(self, i, samples=None):
        self.asked.append(i)
        return float(self.losses[i])


def skew(sel, n):
    """Give an importance sampler a fixed, skewed probability vector."""
    p = np.linspace(1.0, 6.0, n) ** 2
    sel.p = p / p.sum()


# ---- Monte-Carlo unbiasedness of the weighted aggregate ----------------------------------------------------------
UNBIASED = [
    ("md", {}),
    ("md", {"selection.replacement": "false"}),
    ("md", {"selection.floor_mix": 0.5, "selection.weights": "uniform"}),
    ("md", {"selection.weights": "uniform", "selection.replacement": "false", "selection.clients_per_round": 5}),
    ("adaptive", {"participation/selection": "fedsrc_g"}),
    ("adaptive", {"participation/selection": "fedsrc_g", "selection.replacement": "false"}),
    ("adaptive", {"participation/selection": "fedsrc_d", "selection.floor_mix": 0.3}),
    ("adaptive", {"participation/selection": "fedsrc_d", "selection.replacement": "false",
                  "selection.floor_mix": 0.3}),
    ("adaptive", {"participation/selection": "cluster"}),
    ("adaptive", {"participation/selection": "cluster", "selection.weights": "uniform"}),
    ("bernoulli", {"participation/selection": "fedsrc_g", "availability.prob": 0.6, "first_round_full": "false"}),
    ("bernoulli", {"participation/selection": "fedsrc_g", "selection.replacement": "false",
                   "availability.prob": 0.6, "first_round_full": "false"}),
    ("bernoulli", {"participation/selection": "cluster", "availability.prob": 0.7, "first_round_full": "false"}),
]


@pytest.mark.parametrize("preset, layers", UNBIASED)
def test_weighted_aggregate_is_unbiased(preset, layers):
    """E[sum over draws of q_i x_i / E[m_i]] = sum_i q_i x_i: the estimate's mean over many rounds lies within
    5 standard errors (its sample std / sqrt(rounds)) of the full weighted average."""
    n, r = len(SIZES), 3000
    layers = {"selection.clients_per_round": 4, **layers}
    proc = process(preset, n, r, **layers)
    if hasattr(proc.selection, "p"):
        skew(proc.selection, n)
    q = SIZES / SIZES.sum()  # any fixed target weights: the Horvitz-Thompson estimate is unbiased for each
    x = np.random.default_rng(1).normal(size=n) + 3.0
    est = np.empty(r)
    for t in range(r):
        rp = proc.round(t)
        ids = rp.completed_ids
        est[t] = (q[ids] * x[ids] / rp.expected_count[ids]).sum()
    se = est.std() / np.sqrt(r)
    assert abs(est.mean() - q @ x) < 5 * se + 1e-9, (est.mean(), q @ x, se)


def test_sequential_inclusion_estimate_matches_the_draws():
    """Successive sampling has no closed form: the reported (Monte-Carlo) inclusion probabilities match the
    empirical inclusion frequencies, while n p_i does not."""
    n, r = len(SIZES), 4000
    proc = process("md", n, r, **{"selection.replacement": "false", "selection.wor_scheme": "sequential",
                                  "selection.clients_per_round": 4})
    counts = np.zeros(n)
    for t in range(r):
        rp = proc.round(t)
        counts[rp.selected] += 1
        assert not rp.expected_exact
    freq = counts / r
    reported = rp.expected_count
    np.testing.assert_allclose(reported, freq, atol=0.04)
    naive = 4 * SIZES / SIZES.sum()
    assert np.abs(naive - freq).max() > 0.1  # the code's weights 1/(n p_i) are biased for this design


def test_pps_design_is_exact():
    w = np.array([0.5, 0.2, 0.1, 0.1, 0.05, 0.05])
    pi = capped_inclusion(w, 3)[0]
    assert pi.sum() == pytest.approx(3) and pi[0] == 1.0 and (pi <= 1).all()
    np.testing.assert_allclose(pi[1:] / w[1:], pi[1] / w[1])  # proportional below the cap
    rng = np.random.default_rng(0)
    counts = np.zeros(6)
    for _ in range(20000):
        s = systematic(np.arange(6), pi, rng)
        assert len(s) == 3 == len(set(s.tolist()))
        counts[s] += 1
    np.testing.assert_allclose(counts / 20000, pi, atol=0.015)


def test_floor_bounds_the_probabilities():
    proc = process("adaptive", **{"selection.floor_mix": 0.2})
    sel = proc.selection
    sel.p = np.eye(12)[0]
    used = sel.probabilities()
    assert used.min() == pytest.approx(0.2 / 12) and used.sum() == pytest.approx(1.0)
    assert used[0] == pytest.approx(0.8 + 0.2 / 12)


# ---- oracle probabilities on a constructed federation -----------------------------------------------------------
def federation():
    """Four clients with mean-zero gradients: zeta = (1, 1, 3, 3) and injected noise sigma^2 = (0, 4, 0, 4)."""
    grads = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 3.0], [0.0, -3.0]])
    return grads, np.array([1.0, 1.0, 3.0, 3.0]), np.array([0.0, 4.0, 0.0, 4.0])


def test_oracle_fedsrc_d_probabilities_are_eq17():
    grads, zeta, sigma2 = federation()
    proc = process("adaptive", n=4, sizes=np.full(4, 10), **{
        "participation/selection": "fedsrc_d", "selection.mode": "oracle", "selection.clients_per_round": 2})
    oracle = Oracle(grads=grads, noise=sigma2, lr=0.01, server_lr=1.0, local_steps=5)
    proc.round(0, oracle)
    k, lr, s = 5, 0.01, 2
    a1, a2 = 20 * k * k * lr, 5 * k * lr + 1.0 / s  # Eq. 17 with L = 1, with replacement
    expect = np.sqrt(a1 * zeta ** 2 + a2 * sigma2)
    np.testing.assert_allclose(proc.selection.p, expect / expect.sum())
    assert proc.round_stats()["alpha_ratio"] == pytest.approx(a1 / a2)


def test_oracle_fedsrc_d_without_replacement_uses_eta_over_n():
    grads, zeta, sigma2 = federation()
    proc = process("adaptive", n=4, sizes=np.full(4, 10), **{
        "participation/selection": "fedsrc_d", "selection.mode": "oracle", "selection.clients_per_round": 2,
        "selection.replacement": "false"})
    proc.round(0, Oracle(grads=grads, noise=sigma2))
    a1, a2 = 20 * 25 * 0.01, 5 * 5 * 0.01 + 1.0 / 4  # eta / N without replacement (note A3)
    expect = np.sqrt(a1 * zeta ** 2 + a2 * sigma2)
    np.testing.assert_allclose(proc.selection.p, expect / expect.sum())


def test_oracle_fedsrc_g_probabilities_are_data_weighted_update_norms():
    sizes = np.array([10, 20, 30, 40])
    deltas = np.array([[3.0, 4.0], [0.0, 1.0], [2.0, 0.0], [0.0, 0.5]])
    proc = process("adaptive", n=4, sizes=sizes, **{"selection.mode": "oracle", "selection.clients_per_round": 2})
    proc.round(0, Oracle(deltas=deltas))
    s = sizes * np.linalg.norm(deltas, axis=1)
    np.testing.assert_allclose(proc.selection.p, s / s.sum())


def test_fedsrc_d_variance_gain_over_uniform_eq78():
    """With alpha_ratio = 1 and grad f = 0, p_i proportional to sqrt(zeta_i^2 + sigma_i^2) minimizes the variance of
    the aggregate of noisy gradients; Eq. 78: Var_uniform / Var_D = m sum c_i / (sum sqrt c_i)^2 >= 1. Checked in
    closed form and by Monte-Carlo over draws and gradient noise."""
    grads, zeta, sigma2 = federation()
    c = zeta ** 2 + sigma2
    proc = process("adaptive", n=4, sizes=np.full(4, 10), **{
        "participation/selection": "fedsrc_d", "selection.mode": "oracle", "selection.alpha_ratio": 1.0,
        "selection.clients_per_round": 1})
    proc.round(0, Oracle(grads=grads, noise=sigma2))
    p = proc.selection.p
    m = 4
    ratio = (np.sum(c) / (1 / m)) / np.sum(c / p)
    assert ratio == pytest.approx(m * c.sum() / np.sqrt(c).sum() ** 2) and ratio > 1.0

    rng = np.random.default_rng(0)
    draws = 200_000

    def mc_variance(probs):
        i = rng.choice(4, size=draws, p=probs)
        g = grads[i] + rng.normal(size=(draws, 2)) * np.sqrt(sigma2[i] / 2)[:, None]
        est = g / (m * probs[i])[:, None]  # one draw, weight q_i / p_i with q_i = 1/m
        return (est ** 2).sum(1).mean()  # the mean is 0

    v_uniform, v_d = mc_variance(np.full(4, 0.25)), mc_variance(p)
    assert v_uniform == pytest.approx(np.sum(c) / m, rel=0.03)
    assert v_d == pytest.approx(np.sum(c / p) / m ** 2, rel=0.03)
    assert v_uniform / v_d == pytest.approx(ratio, rel=0.05)


# ---- practical variants ------------------------------------------------------------------------------------------
def update(delta, steps=5):
    return SimpleNamespace(delta=torch.as_tensor(delta, dtype=torch.float64), steps=steps)


def test_practical_fedsrc_g_moves_mass_to_larger_updates_and_keeps_the_others():
    proc = process("adaptive", n=6, sizes=np.full(6, 10), **{"selection.clients_per_round": 3})
    sel = proc.selection
    assert isinstance(sel, FedSRCG)
    before = sel.p.copy()
    for client, norm in [(0, 1.0), (1, 1.0), (2, 4.0)]:
        proc.observe(0, client, update([norm, 0.0]), 1.0)
    proc.end_round(0)
    assert sel.p.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(sel.p[3:], before[3:])
    np.testing.assert_allclose(sel.p[:3], before[:3].sum() * np.array([1, 1, 4]) / 6)


@pytest.mark.parametrize("scorer", ["paper", "code"])
def test_practical_fedsrc_d_moves_mass_to_the_diverse_client(scorer):
    proc = process("adaptive", n=6, sizes=np.full(6, 10), **{
        "participation/selection": "fedsrc_d", "selection.clients_per_round": 4, "selection.scorer": scorer,
        "selection.sigma": "none"})
    sel = proc.selection
    assert isinstance(sel, FedSRCD)
    sel.oracle = Oracle()
    before = sel.p.copy()
    deltas = {0: [1.0, 0.0], 1: [1.1, 0.0], 2: [0.9, 0.0], 3: [-2.0, 0.0]}  # client 3 points away from the rest
    for client, delta in deltas.items():
        proc.observe(0, client, update(delta), 0.25)
    proc.end_round(0)
    assert sel.p.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(sel.p[4:], before[4:])
    assert sel.p[3] == sel.p[:4].max() and sel.p[3] > before[3]


def test_practical_fedsrc_d_probes_the_variance_at_the_clients():
    proc = process("adaptive", n=4, sizes=np.full(4, 10), **{
        "participation/selection": "fedsrc_d", "selection.clients_per_round": 2, "selection.alpha_ratio": 0.0})

    class Probing(Oracle):
        def minibatch_variance(self, i, probes, with_noise):
            assert with_noise and probes == 4
            return [1.0, 9.0, 0.0, 0.0][i]

    proc.selection.oracle = Probing()
    before = proc.selection.p.copy()
    for client in (0, 1):
        proc.observe(0, client, update([1.0, 0.0]), 0.5)
    proc.end_round(0)
    np.testing.assert_allclose(proc.selection.p[:2], before[:2].sum() * np.array([1, 3]) / 4)  # sqrt(sigma^2)


def test_oracle_mode_without_a_simulation_is_refused():
    proc = process("adaptive", **{"selection.mode": "oracle"})
    with pytest.raises(ConfigError, match="participation.selection.mode"):
        proc.round(0)


# ---- clustered sampling and Power-of-Choice ----------------------------------------------------------------------
def test_cluster_distributions_respect_fraboni_constraints():
    proc = process("adaptive", **{"participation/selection": "cluster", "selection.clients_per_round": 4})
    r = proc.selection.r
    q = SIZES / SIZES.sum()
    np.testing.assert_allclose(r.sum(axis=1), 1.0)
    np.testing.assert_allclose(r.sum(axis=0), 4 * q)
    rp = proc.round(0)
    assert rp.selected.size == 4 and rp.expected_exact
    np.testing.assert_allclose(rp.expected_count, 4 * q)


def test_similarity_clusters_group_clients_with_similar_updates():
    n = 8
    proc = process("adaptive", n=n, sizes=np.full(n, 10), **{
        "participation/selection": "cluster", "selection.scheme": "similarity", "selection.clients_per_round": 2})
    directions = np.array([[1.0, 0.1], [0.1, 1.0]])
    for client in range(n):
        proc.observe(0, client, update(directions[client % 2] * (1 + client / 10)), 1.0)
    proc.end_round(0)
    r = proc.selection.r
    for row in r:  # each distribution holds one direction's clients only
        members = np.flatnonzero(row > 0)
        assert len(set((members % 2).tolist())) == 1
    np.testing.assert_allclose(r.sum(axis=0), 2 / n)


def test_fill_splits_a_client_across_distributions():
    r = fill([[0, 1, 2]], np.array([1.5, 0.25, 0.25]), 2)
    np.testing.assert_allclose(r, [[1.0, 0, 0], [0.5, 0.25, 0.25]])


def test_power_of_choice_takes_the_highest_losses_among_candidates():
    n = 10
    losses = np.arange(n, dtype=float)[::-1]  # client 0 has the highest loss
    proc = process("adaptive", n=n, sizes=np.full(n, 10), **{
        "participation/selection": "power_of_choice", "selection.clients_per_round": 3,
        "selection.candidates": 6})
    oracle = Oracle(losses=losses)
    rp = proc.round(0, oracle)
    assert len(oracle.asked) == 6 and set(rp.selected.tolist()) == set(sorted(oracle.asked)[:3])
    assert not rp.expected_exact and proc.selection.biased
    with pytest.raises(ConfigError, match="power_of_choice"):
        proc.round(1)


def test_update_norm_is_an_alias_of_fedsrc_g():
    cfg = compose("dataset=digits", "participation/selection=update_norm").participation.selection
    assert cfg.kind == "fedsrc_g" and cfg.mode.value == "practical"


# ---- in the engine -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("runner", ["engine.client_runner=thin", "engine.client_runner=vmap", "engine.workers=2"])
def test_fedsrc_g_oracle_asks_every_client_and_trains_the_same_run(tiny_cfg, tmp_path, monkeypatch, request, runner):
    from fedbench.engine.oracle import EngineOracle

    sim = make_sim(tiny_cfg("participation=adaptive", "participation.selection.mode=oracle",
                            "participation.selection.clients_per_round=3", runner), tmp_path)
    request.addfinalizer(sim.close)
    asked, trained = {}, []
    local_updates = EngineOracle.local_updates

    def record(self, clients):
        updates = local_updates(self, clients)
        asked.update(zip(clients, updates))
        return updates

    monkeypatch.setattr(EngineOracle, "local_updates", record)
    accumulate = sim.algo.accumulate

    def keep(rc, client, u, w):
        trained.append((client, u.delta))
        accumulate(rc, client, u, w)

    monkeypatch.setattr(sim.algo, "accumulate", keep)
    in_process = []  # runs the main process trains one at a time: all of them under the thin runner only
    train = type(sim.trainer).train
    monkeypatch.setattr(type(sim.trainer), "train",
                        lambda self, *a, **k: in_process.append(a[1]) or train(self, *a, **k))
    stats = sim.round(0)
    assert sorted(asked) == list(range(10))
    assert len(in_process) == (13 if sim.runner_kind == "thin" else 0), sim.runner_kind
    first = {}
    for i, delta in trained:
        first.setdefault(i, delta)
    assert all(torch.equal(delta, asked[i].delta) for i, delta in first.items())  # the same batches and masks
    before, again = set(first), 0
    for t in (1, 2, 3):  # later rounds: clients that trained the round before are probed on their fresh streams
        asked.clear(), trained.clear()
        sim.round(t)
        later = {}
        for i, delta in trained:
            later.setdefault(i, delta)
        assert all(torch.equal(delta, asked[i].delta) for i, delta in later.items()), t
        again += len(before & set(later))
        before = set(later)
    assert again > 0  # the case the first round cannot show happened
    steps = sim.cfg.client.local_steps * sim.cfg.client.batch_size
    assert stats.grad_evals == (10 + 3) * steps
    assert stats.floats_up == 3 * sim.dim + 10  # the three updates, one norm from every client
    norms = np.array([float(asked[i].delta.norm()) for i in range(10)]) * sim.data.sizes
    np.testing.assert_allclose(sim.participation.selection.p, norms / norms.sum(), rtol=1e-6)


def test_fedsrc_d_oracle_in_the_engine_matches_the_closed_form(tiny_cfg, tmp_path):
    """Full-batch steps (sigma_i^2 is the injected noise d s_i^2 exactly) and zeta_i from gradients computed here."""
    from fedbench.engine.stack import noise_levels

    cfg = tiny_cfg("participation=adaptive", "participation/selection=fedsrc_d", "participation.selection.mode=oracle",
                   "participation.selection.clients_per_round=4", "client.batch_size=1000", "client.grad_noise=0.05")
    sim = make_sim(cfg, tmp_path)
    x0 = sim.x.clone()
    sim.round(0)
    module, data = sim.module, sim.data
    grads = []
    for i in range(10):
        module.flat.params.data.copy_(x0)
        module.zero_grad()
        lo, hi = int(data.offsets[i]), int(data.offsets[i + 1])
        torch.nn.functional.cross_entropy(module(data.x[lo:hi]), data.y[lo:hi]).backward()
        grads.append(module.flat.grad().double())
    g = torch.stack(grads)
    q = torch.as_tensor(data.sizes / data.sizes.sum(), dtype=torch.float64)
    zeta2 = ((g - (q[:, None] * g).sum(0)) ** 2).sum(1).numpy()
    sigma2 = noise_levels(cfg, 10, cfg.seed) ** 2 * sim.dim
    k, lr = cfg.client.local_steps, cfg.client.lr
    r = 20 * k * k * lr / (5 * k * lr + 1.0 / 4)
    expect = q.numpy() * np.sqrt(r * zeta2 + sigma2)
    np.testing.assert_allclose(sim.participation.selection.p, expect / expect.sum(), rtol=1e-4)


def test_injected_gradient_noise_is_the_same_under_both_runners(tiny_cfg, tmp_path):
    sims = [make_sim(tiny_cfg("client.grad_noise=0.3", f"engine.client_runner={r}"), tmp_path / r)
            for r in ("thin", "lightning")]
    plain = make_sim(tiny_cfg(), tmp_path / "plain")
    for t in range(2):
        for sim in (*sims, plain):
            sim.round(t)
    assert torch.equal(sims[0].x, sims[1].x) and not torch.allclose(sims[0].x, plain.x)
    levels = sims[0].trainer.noise_std
    assert levels.shape == (10,) and (0 <= levels).all() and (levels <= 0.3).all() and levels.std() > 0


def test_probe_variance_estimates_the_injected_noise(tiny_cfg, tmp_path):
    from fedbench.engine.oracle import EngineOracle

    sim = make_sim(tiny_cfg("client.batch_size=1000", "client.grad_noise=0.2", "client.grad_noise_spread=constant"),
                   tmp_path)
    oracle = EngineOracle(sim.trainer, 0, 0.1, sim.x, 1.0, 5)
    estimates = [oracle.minibatch_variance(i, 20, with_noise=True) for i in range(10)]
    assert np.mean(estimates) == pytest.approx(0.04 * sim.dim, rel=0.1)  # d s^2; full batches add nothing
    assert oracle.minibatch_variance(0, 20, with_noise=False) == 0.0


@pytest.mark.parametrize("overrides, key", [
    (("loss_targets=[0.5]",), "loss_targets"),
    (("client.grad_noise=-1",), "client.grad_noise"),
    (("participation=adaptive", "participation.selection.floor_mix=2"), "participation.selection.floor_mix"),
    (("participation=adaptive", "participation/selection=fedsrc_d", "participation.selection.probes=1"),
     "participation.selection.probes"),
    (("participation=adaptive", "participation/selection=power_of_choice", "participation.selection.candidates=2"),
     "participation.selection.candidates"),
    (("participation.probabilities_every=0",), "participation.probabilities_every"),
])
def test_bad_sampler_and_noise_options_name_the_key(tiny_cfg, tmp_path, overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        make_sim(tiny_cfg(*overrides), tmp_path)
