"""The local-step API (StepHook / StepContext, trainer.gradient, cost counting), the model protocol, and the
GradMA-table algorithms built on them: reductions, reference one-round checks, both client runners."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import compose
from fedbench.algorithms import ALGORITHMS, AlgoContext, RoundContext, StepHook
from fedbench.algorithms.gradma import WorkerQP, QPStats
from fedbench.training.evaluation import evaluate
from fedbench.training.local import LocalModule
from fedbench.training.runners import ThinRunner
from fedbench.training.step import LocalRun
from fedbench.models import MODELS, build_model
from fedbench.records import Cost
from fedbench.rng import torch_rng
from conftest import make_sim, trained_sim

MLP = ("model=mlp", "model.hidden=[12,8]")
NON_IID = ("partition=dirichlet", "partition.alpha=0.1", "partition.min_samples=5")


def final(cfg, tmp_path, name):
    return trained_sim(cfg, tmp_path / name).x.clone()


# ---- every algorithm, both runners --------------------------------------------------------------------------
@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_algorithm_gives_identical_parameters_under_both_runners(tiny_cfg, tmp_path, algo):
    args = (*MLP, f"algo={algo}", "participation.selection.clients_per_round=2", "client.local_steps=3")
    args += {"amplified_fedavg": ("algo.period=1",), "wait_minibatch": ("algo.period=1",),
             "wait_full": ("algo.period=1",), "fedamd": ("algo.p=0",)}.get(algo, ())
    sims = [make_sim(tiny_cfg(*args, f"engine.client_runner={r}"), tmp_path / r) for r in ("thin", "lightning")]
    for sim in sims:
        before = sim.x.clone()
        sim.initialize()
        sim.round(0)
        assert not torch.equal(before, sim.x)
    assert torch.equal(sims[0].x, sims[1].x)
    assert sims[0].trainer.cost.grad_evals == sims[1].trainer.cost.grad_evals


# ---- reductions -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reference, algo", [
    (("algo=fedavgm", "algo.server_momentum=0.5"),
     ("algo=gradma", "algo.worker_qp=false", "algo.memory_size=0", "algo.beta1=0.5")),
    (("algo=fedavg",), ("algo=gradma_w", "algo.worker_qp=false")),
    (("algo=fedavg",), ("algo=moon", "algo.mu=0")),
    (("algo=fedavg",), ("algo=feddyn", "algo.alpha=0", "algo.dynamic=false")),
    (("algo=fedavg",), ("algo=mimelite", "algo.beta=0")),
    (("algo=fedavg",), ("algo=fedmlb", "algo.lambda1=0", "algo.lambda2=0")),
    (("algo=fedprox", "algo.mu=0.3"), ("algo=feddyn", "algo.alpha=0.3", "algo.dynamic=false")),
])
def test_reductions(tiny_cfg, tmp_path, reference, algo):
    base = final(tiny_cfg(*MLP, *reference, "rounds=2"), tmp_path, "ref")
    other = final(tiny_cfg(*MLP, *algo, "rounds=2"), tmp_path, "other")
    torch.testing.assert_close(other, base, rtol=0, atol=1e-6)


@pytest.mark.parametrize("algo", [("algo=gradma",), ("algo=gradma_w",), ("algo=gradma_s", "algo.beta1=0.5"),
                                  ("algo=moon",), ("algo=feddyn",), ("algo=mimelite",), ("algo=fedmlb",)])
def test_mechanisms_change_the_trajectory(tiny_cfg, tmp_path, algo):
    """The reductions are not vacuous: with its mechanism on, each algorithm leaves FedAvg (GradMA-S: FedAvgM,
    on a label-skewed split where the memory's constraints become active)."""
    ref = ("algo=fedavgm", "algo.server_momentum=0.5") if algo[0] == "algo=gradma_s" else ("algo=fedavg",)
    base = final(tiny_cfg(*MLP, *NON_IID, *ref, "rounds=3"), tmp_path, "ref")
    other = final(tiny_cfg(*MLP, *NON_IID, *algo, "rounds=3"), tmp_path, "other")
    assert (other - base).abs().max() > 1e-4


# ---- GradMA -----------------------------------------------------------------------------------------------------
class FakeStep:
    """The StepContext surface WorkerQP uses, with given gradients."""

    def __init__(self, g, at, start, params):
        self.g, self.at, self.start, self.params, self.step = g, at, start, params, 1

    def grad(self):
        return self.g.clone()

    def set_grad(self, g):
        self.g = g

    def grad_at(self, w, running_stats=False):
        return self.at[id(w)] if id(w) in self.at else self.at["start"]


def test_gradma_worker_leaves_a_gradient_unchanged_when_no_constraint_is_violated():
    start, prev, params = torch.zeros(3), torch.tensor([0.1, 0.0, 0.0]), torch.tensor([0.5, 0.2, 0.0])
    g = torch.tensor([1.0, 1.0, 0.3])
    ctx = FakeStep(g, {id(prev): torch.tensor([1.0, 0.0, 0.0]), "start": torch.tensor([0.0, 2.0, 1.0])}, start,
                   params)
    WorkerQP(prev, None, 0.0, False, QPStats()).grad(ctx)
    assert torch.equal(ctx.g, g)
    ctx = FakeStep(-g, ctx.at, start, params)  # now every constraint is violated: the result satisfies them all
    WorkerQP(prev, None, 0.0, False, QPStats()).grad(ctx)
    cols = torch.stack([torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 2.0, 1.0]), params - start])
    assert bool((cols @ ctx.g >= -1e-6).all()) and not torch.equal(ctx.g, -g)


def test_gradma_memory_never_exceeds_m_and_evicts_least_frequent_absent_first():
    cls = ALGORITHMS.get_class("gradma")
    algo = cls(cls.Config(worker_qp=False, memory_size=3), AlgoContext(4, 6, np.ones(6), torch.device("cpu"), 0))

    def memory():
        return sorted(int(c) for c in algo.slot_client if c >= 0)

    assert algo.memory_reduction(np.array([0, 1])) == {0, 1}
    assert algo.memory_reduction(np.array([0, 2])) == {2} and memory() == [0, 1, 2]  # counts 0:2, 1:1, 2:1
    # 3 arrives with a full memory: the absent entries are 1 and 2 with one participation each; 1 entered first
    assert algo.memory_reduction(np.array([3, 2])) == {3} and memory() == [0, 2, 3]
    assert int(algo.count[1]) == 0  # an evicted client's counter restarts
    # 4 arrives: only 0 (count 2) and 3 (count 1) are absent; 3 has fewer participations although it is newer
    assert algo.memory_reduction(np.array([4, 2])) == {4} and memory() == [0, 2, 4]
    # with S > m some clients cannot be memorised, and the sampled ones are never evicted
    algo.memory_reduction(np.array([1, 3, 5, 0]))
    assert len(memory()) == 3 and set(memory()) <= {1, 3, 5, 0}


def test_gradma_state_lives_in_the_store_memmap_gives_the_same_run_and_state_round_trips(tiny_cfg, tmp_path):
    args = (*MLP, *NON_IID, "algo=gradma", "algo.memory_size=5", "algo.qp_mode=layer", "rounds=3")
    mem = trained_sim(tiny_cfg(*args), tmp_path / "mem")
    disk = trained_sim(tiny_cfg(*args, "engine.client_state=memmap", f"engine.client_state_dir={tmp_path / 'cs'}"),
                       tmp_path / "disk")
    assert torch.equal(mem.x, disk.x)
    assert (tmp_path / "cs" / "gradma.memory.f32").is_file() and (tmp_path / "cs" / "gradma.last_local.f32").is_file()
    state = mem.algo.state_dict()
    assert {"momentum", "gram", "slot_client", "clients/memory/rows", "clients/last_local/rows"} <= set(state)
    fresh = make_sim(tiny_cfg(*args), tmp_path / "fresh").algo
    fresh.load_state_dict(state)
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, state[key]), key


def test_gradma_counts_three_gradients_per_step(tiny_cfg, tmp_path):
    cfg = tiny_cfg("algo=gradma", "algo.prev_anchor=global_model", "client.local_steps=3", "client.batch_size=8")
    sim = make_sim(cfg, tmp_path)
    stats = sim.round(0)
    # S = 4 clients x 3 steps x 8 samples; steps 0 and 1 have x_{-1} = x_t (two distinct gradients), step 2 three
    assert stats.grad_evals == 4 * 8 * (2 + 2 + 3)
    assert stats.extra["memory_entries"] == 4 and stats.extra["qp_worker_fallbacks"] == 0


# ---- MOON and FedMLB against hand-written references --------------------------------------------------------
def reference_round(sim, t, client, objective):
    """Client ``client``'s local run of round t written out by hand: model copies, the same batches, plain SGD."""
    model = copy.deepcopy(sim.module.model)
    for p, v in zip(model.parameters(), sim.module.flat.views(sim.x)):
        p.data = v.detach().clone()
    gen = torch_rng(sim.cfg.seed, "batches", t, client)
    for xb, yb in sim.data.client_batches(client, sim.cfg.client.local_steps, sim.cfg.client.batch_size, gen):
        model.zero_grad()
        objective(model, xb, yb).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= sim.cfg.client.lr * p.grad
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def model_at(sim, vec):
    m = copy.deepcopy(sim.module.model)
    for p, v in zip(m.parameters(), sim.module.flat.views(vec)):
        p.data = v.detach().clone()
        p.requires_grad_(False)
    return m


@pytest.mark.parametrize("algo", ["moon", "fedmlb"])
def test_moon_and_fedmlb_one_round_against_a_written_out_reference(tiny_cfg, tmp_path, algo):
    cfg = tiny_cfg(*MLP, f"algo={algo}", "partition.num_clients=1", "participation=full", "client.local_steps=3",
                   "algo.temperature=0.7", *(("algo.mu=2",) if algo == "moon" else ("algo.lambda1=0.5",)))
    sim = make_sim(cfg, tmp_path)
    sim.round(0)  # MOON: the client now has a previous local model different from the global one
    x1 = sim.x.clone()
    prev = sim.algo.previous.get(0) if algo == "moon" else None
    glob = model_at(sim, x1)

    def moon(model, xb, yb):
        z, zg, zp = model.features(xb), glob.features(xb), model_at(sim, prev).features(xb)
        pos = torch.exp(F.cosine_similarity(z, zg, dim=1) / 0.7)
        neg = torch.exp(F.cosine_similarity(z, zp, dim=1) / 0.7)
        return F.cross_entropy(model(xb), yb) + 2 * (-torch.log(pos / (pos + neg))).mean()

    def fedmlb(model, xb, yb):
        blocks, gblocks = model.blocks(), glob.blocks()
        h, ce, kl = xb, [], []
        hs = []
        for b in blocks[:-1]:
            h = b(h)
            hs.append(h)
        logits = blocks[-1](h)
        p_main = F.softmax(logits / 0.7, 1)
        for level, hl in enumerate(hs, start=1):
            q = hl
            for b in gblocks[level:]:
                q = b(q)
            ce.append(F.cross_entropy(q, yb))
            p_q = F.softmax(q / 0.7, 1)
            kl.append((p_q * (p_q.log() - p_main.log())).sum(1).mean())
        return F.cross_entropy(logits, yb) + 0.5 * sum(ce) / len(ce) + sum(kl) / len(kl)

    expected = reference_round(sim, 1, 0, moon if algo == "moon" else fedmlb)
    sim.round(1)
    torch.testing.assert_close(sim.x, expected, rtol=0, atol=1e-5)


# ---- the step context ---------------------------------------------------------------------------------------------
class Probe(StepHook):
    """Compares ctx.grad_at at the current point with the step's own gradient (same batch, masks, BN path)."""

    def __init__(self):
        self.gaps, self.feature_gaps = [], []

    def grad(self, ctx):
        self.gaps.append(float((ctx.grad_at(ctx.params) - ctx.grad()).abs().max()))
        self.feature_gaps.append(float((ctx.features_at(ctx.params) - ctx.forward()[0].detach()).abs().max()))


def test_grad_at_replays_dropout_masks_and_freezes_bn_statistics():
    model = build_model(compose("model=gradma_cnn").model, (1, 28, 28), 10, torch_rng(0, "init"))  # BN + dropout
    module = LocalModule(model, lr=0.1)
    runner = ThinRunner(module)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 1, 28, 28, generator=gen), torch.randint(0, 10, (8,), generator=gen)) for _ in range(3)]
    start, buffers = module.flat.params.clone(), module.flat.buffers.clone()
    probe, cost = Probe(), Cost()
    module.set_dropout_generator(torch_rng(0, "dropout", 0, 0))
    runner.run(LocalRun(start, probe, cost), buffers, batches, 0.1)
    assert max(probe.gaps) < 1e-5 and max(probe.feature_gaps) < 1e-6
    assert cost.grad_evals == 3 * 8 + 3 * 8  # the steps plus the probe's extra gradients
    after_probe = module.flat.params.clone(), module.flat.buffers.clone()
    module.set_dropout_generator(torch_rng(0, "dropout", 0, 0))
    runner.run(LocalRun(start, None, Cost()), buffers, batches, 0.1)
    # the extra evaluations changed neither the trajectory, nor the BN statistics, nor the later dropout masks
    assert torch.equal(module.flat.params, after_probe[0]) and torch.equal(module.flat.buffers, after_probe[1])


def test_trainer_gradient_is_the_full_local_gradient_and_is_counted(tiny_cfg, tmp_path):
    sim = make_sim(tiny_cfg(*MLP), tmp_path)
    rc = RoundContext(0, 0.1, sim.participation.round(0))
    lo, hi = int(sim.data.offsets[3]), int(sim.data.offsets[4])
    model = model_at(sim, sim.x)
    for p in model.parameters():
        p.requires_grad_(True)
    F.cross_entropy(model(sim.data.x[lo:hi]), sim.data.y[lo:hi]).backward()
    expected = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(sim.trainer.gradient(rc, 3, sim.x), expected, rtol=1e-5, atol=1e-6)
    assert sim.trainer.cost.grad_evals == hi - lo
    sub = sim.trainer.gradient(rc, 3, sim.x, samples=5)
    assert torch.equal(sub, sim.trainer.gradient(rc, 3, sim.x, samples=5))  # an explicit, replayable stream
    assert sim.trainer.cost.grad_evals == hi - lo + 10


@pytest.mark.parametrize("batch_size", [1, 16, 103, 256])
def test_evaluate_sums_the_batches_as_python_floats_bit_for_bit(batch_size):
    """evaluate() keeps its sums on the device; its result is the per-batch loop that reads each batch's sums as
    Python numbers (one sync per batch), to the last bit, including a partial last batch."""
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 10))
    x, y = torch.randn(103, 20, generator=gen), torch.randint(0, 10, (103,), generator=gen)
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for xb, yb in zip(x.split(batch_size), y.split(batch_size)):
            logits = model(xb)
            loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
            correct += int((logits.argmax(1) == yb).sum())
    assert evaluate(model, x, y, batch_size) == (loss_sum / 103, correct / 103)


def test_mimelite_counts_its_full_batch_gradients_and_uploads_them(tiny_cfg, tmp_path):
    sim = make_sim(tiny_cfg(*MLP, "algo=mimelite"), tmp_path)
    part = make_sim(tiny_cfg(*MLP, "algo=mimelite"), tmp_path / "ref").participation.round(0)
    stats = sim.round(0)
    full = int(sim.data.sizes[part.completed_ids].sum())
    assert stats.grad_evals == 4 * 5 * 16 + full
    fedavg = make_sim(tiny_cfg(*MLP), tmp_path / "avg")
    fedavg.round(0)
    assert sim.trainer.cost.bytes_up == 2 * fedavg.trainer.cost.bytes_up


# ---- the model protocol ---------------------------------------------------------------------------------------
MODEL_INPUTS = {"logreg": (1, 28, 28), "mlp": (1, 28, 28), "mlp_784_200_100_10_bn": (1, 28, 28),
                "cnn_fmnist": (1, 28, 28), "lenet5": (1, 28, 28), "cnn_cifar": (3, 32, 32),
                "gradma_cnn": (3, 32, 32), "vgg11": (3, 32, 32), "vgg11_gradma": (3, 32, 32),
                "resnet20": (3, 32, 32), "resnet18": (3, 32, 32)}


@pytest.mark.parametrize("name", sorted(MODEL_INPUTS))
def test_every_model_implements_features_head_and_blocks(name):
    shape = MODEL_INPUTS[name]
    extra = ("model.hidden=[20,10]",) if name == "mlp" else ()
    model = build_model(compose(f"model={name}", *extra).model, shape, 10, torch_rng(0, "init")).eval()
    module = LocalModule(model, lr=0.1)
    x = torch.randn(2, *shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(x)
        assert torch.equal(model.head(model.features(x)), out)
        h = x
        for block in model.blocks():
            h = block(h)
        assert torch.equal(h, out)
        torch.testing.assert_close(module.functional.logits(module.flat.params, x), out)
    owned = [id(p) for b in model.blocks() for p in b.parameters()]
    assert sorted(owned) == sorted(id(p) for p in model.parameters())  # the blocks partition the parameters
    assert sum(1 for b in model.blocks() if any(True for _ in b.parameters())) >= (1 if name == "logreg" else 2)


def test_model_registry_is_covered():
    assert {n for n in MODELS} <= {n.split("_784")[0] for n in MODEL_INPUTS} | set(MODEL_INPUTS)
