"""FedAMD (anchor sampling), FedPAGE and BVR-L-SGD: the FedAMD note's identities, schedules, cache variants."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedbench.algorithms import ALGORITHMS, AlgoContext, ClientUpdate, RoundContext
from fedbench.algorithms.fedamd import bound_optimal_p
from fedbench.participation.base import RoundParticipation
from fedbench.rng import torch_rng

from conftest import make_sim, participation_trace, trained_sim

FEDAMD = ("algo=fedamd",)


def test_miner_first_step_is_x_minus_lr_gbar(tiny_cfg, tmp_path):
    """At k = 0 the pair of gradients at x_{-1} = x_0 cancels: x_1 = x_t - eta_l g~ whatever the batch."""
    for skip, tol in ((False, 1e-6), (True, 1e-7)):
        sim = make_sim(tiny_cfg(*FEDAMD, "algo.p=0", "client.local_steps=1", f"algo.skip_k0_grad={skip}"),
                       tmp_path / str(skip))
        sim.initialize()
        x0, gbar = sim.x.clone(), sim.algo.gbar.clone()
        stats = sim.round(0)
        assert stats.extra["miners"] == 4 and stats.extra["anchors"] == 0
        torch.testing.assert_close(sim.x, x0 - 0.1 * gbar, rtol=0, atol=tol)
        assert stats.grad_evals == 4 * 16 * (1 if skip else 2)


class _LinearCtx:
    """The StepContext surface of a linear loss f_i(w) = <c_i, w>: every gradient is c_i."""

    def __init__(self, c, start, y, step):
        self.c, self.start, self.params, self.step = c, start, y, step
        self.g = c.clone()

    def grad(self):
        return self.g.clone()

    def grad_at(self, w, running_stats=False):
        return self.c.clone()

    def set_grad(self, g):
        self.g = g.clone()


class _LinearTrainer:
    def __init__(self, c):
        self.c = c

    def train(self, rc, client, steps, start, hook=None, lr=None, batch_size=None):
        y = start.clone()
        for k in range(steps):
            ctx = _LinearCtx(self.c[client], start, y, k)
            hook.grad(ctx)
            y = y - rc.lr * ctx.g
        return ClientUpdate(delta=y - start, num_samples=1, steps=steps, loss=0.0)


def test_linear_loss_moves_by_minus_lr_k_gbar():
    """Constant gradients cancel in the recursion: Delta x = -eta_l K g~ exactly (dyadic numbers: no rounding)."""
    cls = ALGORITHMS.get_class("fedamd")
    algo = cls(cls.Config(p="0"), AlgoContext(2, 2, np.ones(2), torch.device("cpu"), 0))
    algo.gbar.copy_(torch.tensor([0.5, -0.25]))
    trainer = _LinearTrainer(torch.tensor([[1.0, 2.0], [-3.0, 0.75]]))
    x = torch.tensor([1.0, 1.0])
    part = RoundParticipation(0, np.ones(2, bool), np.arange(2), np.ones(2, bool), np.full(2, 4), np.ones(2))
    rc = RoundContext(0, 0.125, part)
    algo.begin_round(rc, x)
    for w, client in zip(algo.entry_weights(rc), (0, 1)):
        algo.accumulate(rc, client, algo.client_update(trainer, rc, client, 4, x, algo.payload(rc, client)), w)
    algo.server_update(rc, x)
    assert torch.equal(x, torch.tensor([1.0, 1.0]) - 0.125 * 4 * torch.tensor([0.5, -0.25]))


def test_all_anchors_never_move_the_model_and_refresh_the_cache(tiny_cfg, tmp_path):
    sim = make_sim(tiny_cfg(*FEDAMD, "algo.p=1"), tmp_path)
    sim.initialize()
    x0, gbar0 = sim.x.clone(), sim.algo.gbar.clone()
    for t, part in enumerate(participation_trace(sim, 3)):
        stats = sim.round(t)
        assert stats.extra["miners"] == 0 and stats.grad_evals == int(sim.data.sizes[part.completed_ids].sum())
    assert torch.equal(sim.x, x0) and torch.equal(sim.algo.gbar, gbar0)  # gradients at the same x_0
    assert np.isnan(stats.train_loss)


def _sarah(sim, w, t, steps, lr, batch):
    """One outer loop of SARAH on client 0: the full gradient at w, then ``steps`` recursive steps on the batches
    of the stream (seed, "batches", t + 1, 0)."""
    data, f = sim.data, sim.module.functional
    x_all, y_all = data.x[: int(data.sizes[0])], data.y[: int(data.sizes[0])]
    g = f.loss_grad(w, x_all, y_all)[1]
    batches = data.client_batches(0, steps, batch, torch_rng(sim.cfg.seed, "batches", t + 1, 0))
    prev = w
    for xb, yb in batches:
        g = g - f.loss_grad(prev, xb, yb)[1] + f.loss_grad(w, xb, yb)[1]
        prev, w = w, w - lr * g
    return w


def test_one_client_sequential_tau2_is_sarah(tiny_cfg, tmp_path):
    cfg = tiny_cfg(*FEDAMD, "algo.schedule=sequential", "algo.tau=2", "partition.num_clients=1",
                   "participation.selection.clients_per_round=1", "client.local_steps=3")
    sim = make_sim(cfg, tmp_path)
    sim.initialize()
    for t in (0, 2):
        expected = _sarah(sim, sim.x.clone(), t, 3, 0.1, 16)
        assert sim.round(t).extra["anchors"] == 1 and sim.round(t + 1).extra["miners"] == 1
        torch.testing.assert_close(sim.x, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("preset, tau", [("fedamd_sequential", 2), ("fedamd_sequential3", 3)])
def test_the_sequential_presets_are_fedamd_with_their_period(tiny_cfg, tmp_path, preset, tau):
    """``algo=fedamd_sequential`` ({0,1}) and ``fedamd_sequential3`` ({0,0,1}) are options of FedAMD, not code: the
    same trajectory as ``algo=fedamd algo.schedule=sequential algo.tau=...``, anchors only in rounds t mod tau = 0."""
    runs = {}
    for name, args in ((preset, (f"algo={preset}",)), ("options", (*FEDAMD, "algo.schedule=sequential",
                                                                    f"algo.tau={tau}"))):
        sim = make_sim(tiny_cfg(*args, "rounds=6"), tmp_path / name)
        sim.initialize()
        roles = [(sim.round(t).extra["anchors"] > 0, sim.x.clone()) for t in range(6)]
        runs[name] = roles
        assert [anchor for anchor, _ in roles] == [t % tau == 0 for t in range(6)]
        assert sim.algo.cfg.name == (preset if name == preset else "fedamd")
    for (_, a), (_, b) in zip(runs[preset], runs["options"]):
        assert torch.equal(a, b)


def _algo(**cfg):
    cls = ALGORITHMS.get_class("fedamd")
    return cls(cls.Config(**cfg), AlgoContext(3, 100, np.ones(100), torch.device("cpu"), 7))


def _anchor_fraction(algo, rounds, a=20):
    counts = []
    for t in range(rounds):
        part = SimpleNamespace(selected=np.arange(a))
        rc = RoundContext(t, 0.1, part)
        rc.scratch.p = algo.probability(rc)
        counts.append(np.mean([algo.is_anchor(rc, i) for i in range(a)]))
    return np.array(counts)


def test_schedules_give_the_declared_anchor_fractions():
    p = 0.3
    frac = _anchor_fraction(_algo(p=str(p)), 200)
    assert abs(frac.mean() - p) < 4 * np.sqrt(p * (1 - p) / frac.size / 20)  # 4 sigma over 4000 Bernoulli draws
    seq = _anchor_fraction(_algo(schedule="sequential", tau=3, phase=1), 30)
    assert seq.tolist() == [1.0 if t % 3 == 1 else 0.0 for t in range(30)]
    decay = _algo(schedule="time_varying")
    ps = [decay.probability(RoundContext(t, 0.1, None)) for t in (0, 100)]
    assert ps == pytest.approx([1 / np.log(14 / 5), 1 / np.log(114 / 5)])
    auto = _algo()
    assert auto.probability(RoundContext(0, 0.1, SimpleNamespace(selected=np.arange(20)))) == pytest.approx(
        (2 / 22) ** (1 / 20)) == pytest.approx(0.887, abs=1e-3)
    assert bound_optimal_p(20, 100) == pytest.approx(0.880, abs=2e-3)  # FedAMD note §1.6: A = 20, M = 100
    assert bound_optimal_p(100, 100) == pytest.approx(0.955, abs=2e-3)
    halved = _algo(p="bound", c=2.0)
    assert halved.probability(RoundContext(0, 0.1, SimpleNamespace(selected=np.arange(20)))) == pytest.approx(
        bound_optimal_p(20, 100) / 2)


@pytest.mark.parametrize("bad, key", [("algo.p=1.5", "algo.p"), ("algo.p=often", "algo.p"), ("algo.c=0.5", "algo.c"),
                                      ("client.momentum=0.9", "client.momentum")])
def test_bad_fedamd_settings_name_the_key(tiny_cfg, tmp_path, bad, key):
    from fedbench.errors import ConfigError

    with pytest.raises(ConfigError, match=key):
        make_sim(tiny_cfg(*FEDAMD, bad), tmp_path)


def test_client_side_cache_equals_server_table_bit_for_bit(tiny_cfg, tmp_path):
    sims = {at: trained_sim(tiny_cfg(*FEDAMD, "algo.p=0.5", "rounds=5", f"algo.cache={at}"), tmp_path / at)
            for at in ("server", "client")}
    assert torch.equal(sims["server"].x, sims["client"].x)
    assert torch.equal(sims["server"].algo.gbar, sims["client"].algo.gbar)
    d, n = sims["server"].dim, sims["server"].data.num_clients
    assert sims["server"].algo.server_state_bytes() - sims["client"].algo.server_state_bytes() == 4 * n * d


def test_fedpage_full_rounds_are_gradient_descent(tiny_cfg, tmp_path):
    sim = make_sim(tiny_cfg("algo=fedpage", "algo.p_page=1", "algo.server_lr=0.5"), tmp_path)
    data, f = sim.data, sim.module.functional
    for t in range(2):
        x = sim.x.clone()
        grads = [f.loss_grad(x, data.x[data.offsets[i]:data.offsets[i + 1]], data.y[data.offsets[i]:data.offsets[i + 1]])[1]
                 for i in range(data.num_clients)]
        stats = sim.round(t)
        assert stats.extra["full_round"] == 1 and stats.completed == data.num_clients
        torch.testing.assert_close(sim.x, x - 0.5 * torch.stack(grads).mean(0), rtol=0, atol=1e-6)


def test_bvr_with_one_round_cycles_and_one_step_is_large_batch_sgd(tiny_cfg, tmp_path):
    """R = 1, K = 1: every round synchronizes v = mean of the participants' full gradients, and the chosen client's
    one step is x - eta_l v (its pair at k = 0 cancels)."""
    sim = make_sim(tiny_cfg("algo=bvr_l_sgd", "algo.inner_rounds=1", "client.local_steps=1"), tmp_path)
    data, f = sim.data, sim.module.functional
    for t, part in enumerate(participation_trace(sim, 2)):
        x = sim.x.clone()
        ids = part.completed_ids
        v = torch.stack([f.loss_grad(x, data.x[data.offsets[i]:data.offsets[i + 1]],
                                     data.y[data.offsets[i]:data.offsets[i + 1]])[1] for i in ids]).mean(0)
        sim.round(t)
        torch.testing.assert_close(sim.x, x - 0.1 * v, rtol=0, atol=1e-6)


def test_bvr_inner_rounds_keep_the_cycle_clients_and_refresh(tiny_cfg, tmp_path):
    sim = make_sim(tiny_cfg("algo=bvr_l_sgd", "algo.inner_rounds=3"), tmp_path)
    members = set(participation_trace(sim, 1)[0].completed_ids.tolist())
    n = {i: int(s) for i, s in enumerate(sim.data.sizes)}
    s0 = sim.round(0)
    assert s0.extra["sync_round"] == 1 and s0.grad_evals == sum(n[i] for i in members) + 2 * 5 * 16
    for t in (1, 2):
        stats = sim.round(t)
        assert stats.extra["sync_round"] == 0 and stats.completed == len(members)
        assert stats.grad_evals == len(members) * 2 * 5 * 16 + 2 * 5 * 16  # refreshes + the chosen client's run
    assert sim.round(3).extra["sync_round"] == 1
