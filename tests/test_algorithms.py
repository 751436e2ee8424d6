"""Algorithms for unreliable participation: reductions to FedAvg, hand-computed quadratic examples, LR schedules,
the client-state store."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedbench.algorithms import ALGORITHMS, AlgoContext, ClientUpdate, RoundContext
from fedbench.algorithms.fedprox import ProxHook
from fedbench.errors import ConfigError
from fedbench.training.client_state import ClientStateStore
from fedbench.training.schedule import lr_at
from fedbench.participation import RoundParticipation
from conftest import make_sim, trained_sim

ROUNDS = 3


def final_params(cfg, tmp_path, name):
    return trained_sim(cfg, tmp_path / name).x.clone()


# ---- reductions -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo, participation", [
    (["algo=mifa"], "participation=full"),
    (["algo=mifa", "client.lr_schedule.kind=exponential", "client.lr_schedule.decay=0.5"], "participation=full"),
    (["algo=mifa_m", "algo.server_momentum=0"], "participation=full"),
    (["algo=scaffold", "algo.update_controls=false"], "participation=uniform"),
    (["algo=fedprox", "algo.mu=0"], "participation=uniform"),
    (["algo=fedprox_m", "algo.mu=0", "algo.server_momentum=0"], "participation=uniform"),
    (["algo=amplified_fedavg", "algo.eta=1", "algo.period=2", "algo.aggregation=unbiased"], "participation=uniform"),
    (["algo=mimic", "algo.aggregation=unbiased"], "participation=full"),
    (["algo=mimic", "client.lr_schedule.kind=exponential", "client.lr_schedule.decay=0.5"], "participation=full"),
    (["algo=fedvarp"], "participation=full"),
])
def test_reduces_to_fedavg(tiny_cfg, tmp_path, algo, participation):
    extra = [a for a in algo if a.startswith("client.")]
    base = final_params(tiny_cfg(participation, f"rounds={ROUNDS}", *extra), tmp_path, "fedavg")
    other = final_params(tiny_cfg(participation, f"rounds={ROUNDS}", *algo), tmp_path, "other")
    torch.testing.assert_close(other, base, rtol=0, atol=1e-6)


def test_variants_differ_from_fedavg_when_they_should(tiny_cfg, tmp_path):
    """The reductions above are not vacuous: with their mechanism on, each algorithm moves elsewhere."""
    cases = ["participation=uniform algo=scaffold", "participation=uniform algo=fedprox algo.mu=1",
             "participation=uniform algo=amplified_fedavg algo.eta=3 algo.period=2 algo.aggregation=unbiased",
             "participation=bernoulli_levels algo=mifa", "participation=bernoulli_levels algo=mimic"]
    for i, case in enumerate(cases):
        part = case.split()[0]
        extra = ("participation.first_round_full=false",) if "bernoulli" in part else ()
        base = final_params(tiny_cfg(part, f"rounds={ROUNDS}", *extra), tmp_path, f"a{i}")
        other = final_params(tiny_cfg(*case.split(), f"rounds={ROUNDS}", *extra), tmp_path, f"b{i}")
        assert (other - base).abs().max() > 1e-4, case


def test_mimic_client_side_equals_server_side(tiny_cfg, tmp_path):
    part = ("participation=bernoulli_levels", "rounds=5")
    a = final_params(tiny_cfg(*part, "algo=mimic"), tmp_path, "a")
    b = final_params(tiny_cfg(*part, "algo=mimic", "algo.side=client"), tmp_path, "b")
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_fedprox_loss_hook_gradient_is_mu_times_distance():
    from fedbench.training.local import LocalModule
    from fedbench.training.step import LocalRun, StepContext
    from fedbench.models.linear import LogReg
    from fedbench.records import Cost

    module = LocalModule(LogReg(3, 2), lr=0.1)
    anchor = torch.randn(module.flat.dim)
    batch = (torch.randn(4, 3), torch.tensor([0, 1, 1, 0]))
    run = LocalRun(anchor, None, Cost())
    ce = StepContext(module, run, 0, batch).loss()
    ce.backward()
    ce_grad = module.flat.grad()
    module.zero_grad(set_to_none=True)
    loss = ProxHook(0.7, anchor).loss(StepContext(module, run, 0, batch))
    loss.backward()
    torch.testing.assert_close(module.flat.grad() - ce_grad, 0.7 * (module.flat.params - anchor))
    prox = 0.35 * float(((module.flat.params - anchor) ** 2).sum())
    assert loss.item() - ce.item() == pytest.approx(prox, rel=1e-5)


# ---- hand-computed two-client, two-round example ----------------------------------------------------------------
# f_i(w) = 1/2 ||w - a_i||^2, a_0 = (1, 0), a_1 = (-1, 2), x_0 = 0, I = 2 full-gradient steps of lr 0.5, so every
# local run returns Delta = (1 - 0.5^2)(a_i - x) + (SCAFFOLD's correction). Round 0: both clients; round 1: only
# client 0 (client 1 drops); each client's inclusion probability in round 1 is 1/2 (w_0 = p_0 / 0.5 = 1).
A = torch.tensor([[1.0, 0.0], [-1.0, 2.0]])
LR, STEPS = 0.5, 2


class QuadraticTrainer:
    """Stands in for ClientTrainer: exact gradient steps on f_i, with the algorithm's ``StepHook.grad``."""

    class _Flat:
        def __init__(self, y):
            self.params, self.g = y, None

        def grads(self):
            return [self.g]

        def views(self, vec):
            return [vec]

    class _Ctx:  # the StepContext surface a gradient hook uses
        def __init__(self, client, start, y, step):
            self.module = SimpleNamespace(flat=QuadraticTrainer._Flat(y))
            self.module.flat.g = y - A[client]
            self.start, self.params, self.step, self.client = start, y, step, client

        def grad_at(self, w, running_stats=False):
            return w - A[self.client]

        def grad(self):
            return self.module.flat.g.clone()

        def set_grad(self, g):
            self.module.flat.g = g.clone()

    def gradient(self, rc, client, w, samples=None, purpose="gradient"):
        return w - A[client]

    def train(self, rc, client, steps, start, hook=None, lr=None, batch_size=None):
        y = start.clone()
        for k in range(steps):
            ctx = self._Ctx(client, start, y, k)
            if hook is not None:
                hook.grad(ctx)
            y = y - rc.lr * ctx.module.flat.g
        return ClientUpdate(delta=y - start, num_samples=1, steps=steps, loss=0.0)


def run_two_rounds(name, second_round=(0,), **cfg_overrides):
    cls = ALGORITHMS.get_class(name)
    cfg = cls.Config(**cfg_overrides)
    algo = cls(cfg, AlgoContext(2, 2, np.array([1, 1]), torch.device("cpu"), 0))
    x = torch.zeros(2)
    trainer = QuadraticTrainer()
    second = np.array(second_round)
    rounds = [(np.array([0, 1]), np.ones(2)), (second, np.full(2, 0.5 * second.size))]
    for t, (ids, expected) in enumerate(rounds):
        part = RoundParticipation(t, np.ones(2, bool), ids, np.ones(ids.size, bool), np.full(ids.size, STEPS),
                                  expected)
        rc = RoundContext(t, LR, algo.plan_round(part))
        algo.begin_round(rc, x)
        weights = algo.entry_weights(rc)
        for w, client in zip(weights, ids.tolist()):
            payload = algo.payload(rc, client)
            algo.accumulate(rc, client, algo.client_update(trainer, rc, client, STEPS, x, payload), float(w))
        algo.server_update(rc, x)
    return algo, x


def test_mimic_hand_computed():
    # round 0: D0 = (.75, 0), D1 = (-.75, 1.5); V0 = (0, .75) = x1; c0 = (V0 - D0)/.5 = (-1.5, 1.5), c1 = (1.5, -1.5)
    # round 1: D0' = .75 (a0 - x1) = (.75, -.5625); v = D0' + .5 c0 = (0, .1875); x2 = (0, .9375)
    algo, x = run_two_rounds("mimic")
    torch.testing.assert_close(x, torch.tensor([0.0, 0.9375]), rtol=0, atol=1e-6)
    # c0 <- (V1 - D0')/.5 = ((0, .1875) - (.75, -.5625))/.5 = (-1.5, 1.5); c1 unchanged
    torch.testing.assert_close(algo.corrections.get(0), torch.tensor([-1.5, 1.5]), rtol=0, atol=1e-6)
    torch.testing.assert_close(algo.corrections.get(1), torch.tensor([1.5, -1.5]), rtol=0, atol=1e-6)


def test_mifa_hand_computed():
    # G = D/lr. round 0: G0 = (1.5, 0), G1 = (-1.5, 3); x1 = .5 * mean = (0, .75)
    # round 1: G0' = (1.5, -1.125); mean(G0', G1) = (0, .9375); x2 = x1 + .5 (0, .9375) = (0, 1.21875)
    _, x = run_two_rounds("mifa")
    torch.testing.assert_close(x, torch.tensor([0.0, 1.21875]), rtol=0, atol=1e-6)
    # without rescaling (MimiC code): x2 = x1 + mean(D0', D1) = (0, .75) + (0, .46875) -- same at constant lr
    _, x = run_two_rounds("mifa", rescale_stale=False)
    torch.testing.assert_close(x, torch.tensor([0.0, 1.21875]), rtol=0, atol=1e-6)


def test_fedvarp_hand_computed():
    # round 0 (full, w = 1/2): v = (G0 + G1)/2 = (0, 1.5); x1 = .5 v = (0, .75); y = (G0, G1), ybar = (0, 1.5)
    # round 1 (client 0, w = 1): v = ybar + (G0' - y0) = (0, 1.5) + (0, -1.125) = (0, .375); x2 = (0, .9375)
    _, x = run_two_rounds("fedvarp")
    torch.testing.assert_close(x, torch.tensor([0.0, 0.9375]), rtol=0, atol=1e-6)


def test_client_drawn_twice_uses_its_start_of_round_memory():
    # round 1 draws client 0 twice (with replacement, E[m_0] = 1, w = 1/2 per entry); both entries return
    # G0' = (1.5, -1.125) and both correct against y0 = (1.5, 0) as it was at the start of the round:
    # FedVARP v = ybar + 2 * (1/2)(G0' - y0) = (0, .375), x2 = (0, .9375), ybar = (1/2)(G0' + G1) = (0, .9375)
    algo, x = run_two_rounds("fedvarp", second_round=(0, 0))
    torch.testing.assert_close(x, torch.tensor([0.0, 0.9375]), rtol=0, atol=1e-6)
    torch.testing.assert_close(algo.ybar.float(), torch.tensor([0.0, 0.9375]), rtol=0, atol=1e-6)
    # MimiC (w = 1/2 each): both uploads add .5 c0 = (-.75, .75): V1 = D0' + (-.75, .75) = (0, .1875)
    _, x = run_two_rounds("mimic", second_round=(0, 0))
    torch.testing.assert_close(x, torch.tensor([0.0, 0.9375]), rtol=0, atol=1e-6)


def test_scaffold_hand_computed():
    # round 0 = FedAvg: x1 = (0, .75); c_i = -D_i/(K lr) = -D_i: c0 = (-.75, 0), c1 = (.75, -1.5); c = (0, -.75)
    # round 1, client 0, correction c - c0 = (.75, -.75): y = (0, .75) -> (.125, .75) -> (.1875, .75); D = (.1875, 0)
    # x2 = x1 + 1 * D = (.1875, .75); c0+ = c0 - c - D = (-.9375, .75); c += (1/2)(c0+ - c0) = (-.09375, -.375)
    algo, x = run_two_rounds("scaffold")
    torch.testing.assert_close(x, torch.tensor([0.1875, 0.75]), rtol=0, atol=1e-6)
    torch.testing.assert_close(algo.controls.get(0), torch.tensor([-0.9375, 0.75]), rtol=0, atol=1e-6)
    torch.testing.assert_close(algo.c, torch.tensor([-0.09375, -0.375]), rtol=0, atol=1e-6)


def test_gradma_s_server_qp_hand_computed():
    # round 0: D0 = (.75, 0), D1 = (-.75, 1.5), d = m = (0, .75): no violated constraint, x1 = (0, .75)
    # round 1 (client 0, w = 1): d = D0' = (.75, -.5625), m = .5 (0, .75) + d = (.75, -.1875);
    # D0 = .5 (.75, 0) + d = (1.125, -.5625), D1 = .5 (-.75, 1.5) = (-.375, .75); <m, D1> = -.421875 < 0,
    # so m~ = m + (.421875 / .703125) D1 = (.525, .2625) (and <m~, D0> > 0); x2 = x1 + m~ = (.525, 1.0125)
    algo, x = run_two_rounds("gradma", worker_qp=False, beta1=0.5, beta2=0.5, memory_size=2)
    torch.testing.assert_close(x, torch.tensor([0.525, 1.0125]), rtol=0, atol=1e-6)
    torch.testing.assert_close(algo.momentum, torch.tensor([0.525, 0.2625]), rtol=0, atol=1e-6)


def test_gradma_w_worker_qp_hand_computed():
    # round 0, client i from x = 0 (x_{-1} = x): step 0 is plain (g = grad at x); step 1 at y1 = a_i/2 has
    # g = -a_i/2 and the drift column c = a_i/2 with <g, c> < 0: g~ = g - <g,c>/|c|^2 c = 0, so Delta_i = a_i/2.
    # x1 = mean = (0, .5). Round 1, client 0 (x_{-1} = its last local model (.5, 0)): step 0 g = (-1, .5) is
    # unconstrained, y1 = (.5, .25); step 1 g = (-.5, .25) = -c, so g~ = 0 again: x2 = (.5, .25)
    algo, x = run_two_rounds("gradma", server_qp=False)
    torch.testing.assert_close(x, torch.tensor([0.5, 0.25]), rtol=0, atol=1e-6)
    torch.testing.assert_close(algo.last_local.get(0), torch.tensor([0.5, 0.25]), rtol=0, atol=1e-6)


def test_feddyn_hand_computed():
    # alpha = 1: local gradient (y - a_i) + (y - x) - lambda_i. Round 0: 2y - a_i, y: 0 -> a_i/2 -> a_i/2,
    # Delta_0 = (.5, 0), Delta_1 = (-.5, 1); lambda_i = -Delta_i; h = -(1/2)(0, 1) = (0, -.5);
    # x1 = mean Delta - h = (0, .5) + (0, .5) = (0, 1).
    # Round 1, client 0: gradient 2y - (.5, 1): y (0, 1) -> (.25, .5) -> (.25, .5), Delta = (.25, -.5);
    # h = (0, -.5) - (1/2)(.25, -.5) = (-.125, -.25); x2 = (0, 1) + (.25, -.5) + (.125, .25) = (.375, .75)
    algo, x = run_two_rounds("feddyn", alpha=1.0)
    torch.testing.assert_close(x, torch.tensor([0.375, 0.75]), rtol=0, atol=1e-6)
    torch.testing.assert_close(algo.linear.get(0), torch.tensor([-0.75, 0.5]), rtol=0, atol=1e-6)
    torch.testing.assert_close(algo.h, torch.tensor([-0.125, -0.25]), rtol=0, atol=1e-6)


def test_mimelite_hand_computed():
    # beta = .5, m = 0: direction .5 g; round 0: y: 0 -> .25 a_i -> .4375 a_i, x1 = .4375 mean(a) = (0, .4375);
    # full gradients at 0: -a_i, mean (0, -1): m1 = .5 (0, -1) = (0, -.5).
    # Round 1, client 0: d = .5 (y - a0) + .5 m1: y (0, .4375) -> (.25, .453125) -> (.4375, .46484375) = x2;
    # m2 = .5 (x1 - a0) + .5 m1 = (-.5, -.03125)
    algo, x = run_two_rounds("mimelite", beta=0.5)
    torch.testing.assert_close(x, torch.tensor([0.4375, 0.46484375]), rtol=0, atol=1e-6)
    torch.testing.assert_close(algo.momentum, torch.tensor([-0.5, -0.03125]), rtol=0, atol=1e-6)


def test_amplified_fedavg_window_amplification():
    # P = 2, eta = 3, aggregation 1/|C|: x1 = (0, .75); x2pre = x1 + D0' = (.75, .1875); x2 = 0 + 3 (x2pre - 0)
    _, x = run_two_rounds("amplified_fedavg", eta=3.0, period=2)
    torch.testing.assert_close(x, torch.tensor([2.25, 0.5625]), rtol=0, atol=1e-6)


def test_wait_baselines_train_everyone_once_per_period(tiny_cfg, tmp_path):
    cfg = tiny_cfg("algo=amplified_fedavg", "algo.mode=wait_full", "algo.period=3", "algo.warmup_rounds=1",
                   "rounds=7")
    sim = make_sim(cfg, tmp_path)
    trained = [sim.round(t).completed for t in range(7)]
    assert trained == [4, 0, 0, 10, 0, 0, 10]  # warm-up round, then all 10 clients at the end of each window


def test_wait_algorithm_options_are_the_modes_at_the_warmup_learning_rate(tiny_cfg, tmp_path):
    args = ("algo.period=3", "algo.warmup_rounds=1", "algo.warmup_lr=0.3", "rounds=4")
    mode = final_params(tiny_cfg("algo=amplified_fedavg", "algo.mode=wait_minibatch", "algo.eta=1", *args),
                        tmp_path, "mode")
    option = final_params(tiny_cfg("algo=wait_minibatch", *args), tmp_path, "option")
    torch.testing.assert_close(mode, option, rtol=0, atol=0)
    sim = make_sim(tiny_cfg("algo=wait_full", *args), tmp_path / "full")
    assert [sim.algo.local_options(RoundContext(t, 0.1, None), 0).get("lr") for t in (0, 3)] == [0.3, 0.3]
    sim = make_sim(tiny_cfg("algo=wait_full", "algo.wait_lr=0.02", *args), tmp_path / "wait_lr")
    assert [sim.algo.local_options(RoundContext(t, 0.1, None), 0).get("lr") for t in (0, 3)] == [0.3, 0.02]
    with pytest.raises(ConfigError, match="algo.wait_lr"):  # amplified runs never train at it
        make_sim(tiny_cfg("algo=amplified_fedavg", "algo.wait_lr=0.02", *args), tmp_path / "amplified")


# ---- learning-rate schedules ------------------------------------------------------------------------------------
def test_lr_schedules(tiny_cfg):
    cfg = tiny_cfg("client.lr_schedule.kind=exponential", "client.lr_schedule.decay=0.95",
                   "client.lr_schedule.floor=1e-5").client.lr_schedule
    assert lr_at(cfg, 0.01, 0, 200) == 0.01
    assert lr_at(cfg, 0.01, 10, 200) == pytest.approx(0.01 * 0.95**10)
    assert lr_at(cfg, 0.01, 150, 200) == 1e-5  # MimiC: the floor binds from t = 135
    step = tiny_cfg("client.lr_schedule.kind=step", "client.lr_schedule.milestones=[0.5,0.75]").client.lr_schedule
    assert [lr_at(step, 1.0, t, 100) for t in (0, 49, 50, 74, 75, 99)] == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01])


def test_schedule_reaches_round_context(tiny_cfg, tmp_path):
    sim = make_sim(tiny_cfg("client.lr_schedule.kind=exponential", "client.lr_schedule.decay=0.5"), tmp_path)
    assert [sim.round(t).lr for t in range(3)] == pytest.approx([0.1, 0.05, 0.025])


# ---- client-state store -----------------------------------------------------------------------------------------
def test_memmap_store_gives_the_same_run(tiny_cfg, tmp_path):
    args = ("participation=bernoulli_levels", "algo=mifa", "rounds=4")
    a = final_params(tiny_cfg(*args), tmp_path, "mem")
    b = final_params(tiny_cfg(*args, "engine.client_state=memmap", f"engine.client_state_dir={tmp_path / 'cs'}"),
                     tmp_path, "disk")
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert (tmp_path / "cs" / "mifa.latest_update.f32").is_file()


def test_store_rows_and_checkpoint_roundtrip(tmp_path):
    for backend in ("memory", "memmap"):
        store = ClientStateStore(5, torch.device("cpu"), backend, tmp_path / backend)
        t = store.table("algo/memory", 3)
        assert torch.equal(t.get(2), torch.zeros(3)) and 2 not in t
        t.set(2, torch.tensor([1.0, 2.0, 3.0]))
        state = t.state()
        assert state["ids"].tolist() == [2] and store.report()["bytes"] == 12
        t.set(2, torch.zeros(3))
        t.load(state)
        assert torch.equal(t.get(2), torch.tensor([1.0, 2.0, 3.0]))


def test_dense_tables_give_the_matrix_without_copies(tmp_path):
    for backend in ("memory", "memmap"):
        store = ClientStateStore(50, torch.device("cpu"), backend, tmp_path / backend)
        t = store.table("algo/slots", 3, rows=4, dense=True)
        t.set(2, torch.tensor([1.0, 2.0, 3.0]))
        m = t.matrix()
        assert m.shape == (4, 3) and torch.equal(m[2], torch.tensor([1.0, 2.0, 3.0]))
        t.set(1, torch.ones(3))
        assert torch.equal(m[1], torch.ones(3))  # a view of the table, not a copy
        t.discard(2)
        assert torch.equal(t.get(2), torch.zeros(3)) and torch.equal(m[2], torch.zeros(3)) and 2 not in t
        assert store.report()["bytes"] == (4 * 3 * 4 if backend == "memory" else 3 * 4)


def test_algorithm_state_dict_includes_client_tables():
    cls = ALGORITHMS.get_class("scaffold")
    algo = cls(cls.Config(), AlgoContext(4, 3, np.ones(3), torch.device("cpu"), 0))
    algo.controls.set(1, torch.ones(4))
    state = algo.state_dict()
    assert set(state) == {"server_control", "clients/client_control/ids", "clients/client_control/rows"}
    fresh = cls(cls.Config(), AlgoContext(4, 3, np.ones(3), torch.device("cpu"), 0))
    fresh.load_state_dict(state)
    assert torch.equal(fresh.controls.get(1), torch.ones(4))


def test_summary_reports_memory_and_scaffold_uploads_twice(tiny_cfg, tmp_path):
    from fedbench.logging import RunLogger

    out = {}
    for algo in ("fedavg", "scaffold", "mifa"):
        cfg = tiny_cfg(f"algo={algo}", "rounds=2")
        sim = make_sim(cfg, tmp_path / algo)
        logger = RunLogger(tmp_path / algo / "run", cfg)
        out[algo] = sim.run(logger)
        logger.finish()
        logger.write_summary(out[algo])
        assert json.loads((tmp_path / algo / "run" / "summary.json").read_text())["client_state"]
    assert out["scaffold"]["bytes_up"] == 2 * out["fedavg"]["bytes_up"]
    dim = out["mifa"]["num_parameters"]
    assert out["mifa"]["client_state"]["bytes"] == out["mifa"]["client_state"]["tables"]["mifa/latest_update"] * dim * 4
    assert out["fedavg"]["client_state"]["bytes"] == 0


@pytest.mark.parametrize("experiment, extra", [
    ("mimic_fmnist_roundrobin", ("partition.classes_per_client=2", "partition.max_per_client=0")),
    ("wang22_fmnist_periodic", ("algo.warmup_rounds=1",)),
    ("fedamd_fmnist", ("participation.selection.clients_per_round=4", "algo.p=0.5")),
    ("fedsrc_fmnist", ("participation.selection.clients_per_round=4",)),
    ("fedsrc_fmnist_small", ("participation.selection.clients_per_round=4", "participation/selection=fedsrc_g")),
    ("fedsrc_synthetic_small", ("dataset.num_users=10",)),
])
def test_paper_experiment_presets_run_a_round_at_tiny_scale(experiment, extra, tmp_path):
    from conftest import compose
    from conftest import write_fake_mnist

    write_fake_mnist(tmp_path / "data" / "FashionMNIST" / "raw", n_train=400, n_test=50)
    files = () if "synthetic" in experiment else ("dataset.system_dirs=[]",)  # fake FashionMNIST files only
    cfg = compose(f"experiment={experiment}", "partition.num_clients=10", "rounds=2", "client.local_steps=2",
                  *files, *extra)
    sim = make_sim(cfg, tmp_path, tmp_path / "data")
    sim.initialize()
    before = sim.x.clone()
    for t in range(2):
        sim.round(t)
    assert torch.isfinite(sim.x).all() and not torch.equal(before, sim.x)


@pytest.mark.parametrize("experiment", ["fedsrc_cifar10", "fedsrc_cifar10_small"])
def test_fedsrc_cifar_presets_run_a_round_at_tiny_scale(experiment, tmp_path):
    from conftest import compose
    from conftest import write_fake_cifar

    write_fake_cifar(tmp_path / "data", per_batch=40)
    cfg = compose(f"experiment={experiment}", "partition.num_clients=8", "rounds=1", "client.local_steps=1",
                  "client.batch_size=8", "participation.selection.clients_per_round=2")
    sim = make_sim(cfg, tmp_path, tmp_path / "data")
    before = sim.x.clone()
    stats = sim.round(0)
    assert torch.isfinite(sim.x).all() and not torch.equal(before, sim.x) and stats.extra["p_entropy"] > 0


@pytest.mark.parametrize("algo", [("algo=fedprox", "algo.mu=0.5"), ("algo=scaffold",)])
def test_local_hooks_act_identically_under_the_lightning_runner(tiny_cfg, tmp_path, algo):
    thin = make_sim(tiny_cfg(*algo, "engine.client_runner=thin"), tmp_path / "thin")
    light = make_sim(tiny_cfg(*algo, "engine.client_runner=lightning"), tmp_path / "light")
    for t in range(2):
        thin.round(t)
        light.round(t)
    assert torch.equal(thin.x, light.x)
