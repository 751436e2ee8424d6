"""The vmap cohort runner gives the sequential runner's parameters, costs and losses (1e-5 on CPU), for every
algorithm it runs and for ragged rounds (stragglers, clipped batches); the others are refused at start."""

import numpy
import pytest
import torch

from conftest import TINY, compose
from conftest import make_sim, trained_sim

from fedbench.errors import ConfigError

SUPPORTED = [
    ("algo=fedavg",),
    ("algo=fedavgm", "client.momentum=0.9", "client.weight_decay=1e-3"),
    ("algo=mifa",),
    ("algo=fedvarp",),
    ("algo=mimic",),
    ("algo=amplified_fedavg", "algo.period=2", "algo.warmup_rounds=1", "algo.warmup_lr=0.3"),
    ("algo=fedavg", "participation=straggler"),  # clients finish different numbers of steps
    ("algo=fedavg", "client.batch_size=200"),  # clients smaller than the batch: padded, masked
    ("algo=fedavg", "participation/selection=md", "participation.selection.replacement=true"),  # repeats
    ("algo=fedavg", "engine.cohort_size=3"),  # chunks
    ("algo=scaffold",),
    ("algo=scaffold", "participation/selection=md", "participation.selection.replacement=true"),  # repeats
    ("algo=fedprox", "algo.mu=0.5"),
    ("algo=fedprox_m", "algo.mu=0.1"),
    ("algo=feddyn", "algo.alpha=0.1"),
    ("algo=mimelite",),
    ("algo=scaffold", "participation=straggler", "client.momentum=0.5"),
    ("model=mlp_fedsrc",),  # dropout: each client's masks from its own stream
    ("model=mlp_fedsrc", "algo=scaffold", "participation=straggler"),
    ("model=mlp_784_200_100_10_bn", "dataset=synthetic", "dataset.dim=784"),  # per-client running statistics
    ("model=mlp_784_200_100_10_bn", "dataset=synthetic", "dataset.dim=784", "participation=straggler",
     "client.batch_size=200"),  # BN statistics over real samples only
    ("model=cnn_fmnist", "rounds=2"),  # convolutions: the CPU's NHWC hook leaves vmapped inputs alone
    ("client.grad_noise=0.5",),  # injected noise: each client's draws from its own stream, step by step
    ("client.grad_noise=0.5", "participation=straggler", "algo=scaffold"),  # ragged steps: streams stop with them
    ("client.grad_noise=0.5", "participation/selection=md", "participation.selection.replacement=true"),
]


def _pair(tmp_path, *overrides):
    base = [o for o in TINY if not (o.startswith("participation.") and any(x.startswith("participation=")
                                                                           for x in overrides))]
    seq = trained_sim(compose(*base, *overrides, "engine.client_runner=thin"), tmp_path / "seq")
    vec = trained_sim(compose(*base, *overrides, "engine.client_runner=vmap"), tmp_path / "vmap")
    return seq, vec


@pytest.mark.parametrize("overrides", SUPPORTED, ids=lambda o: "-".join(x.split("=")[-1] for x in o))
def test_vmap_equals_the_sequential_runner(tmp_path, overrides):
    seq, vec = _pair(tmp_path, *overrides)
    assert seq.runner_kind == "thin" and vec.runner_kind == "vmap"
    assert torch.allclose(seq.x, vec.x, atol=1e-5, rtol=0), float((seq.x - vec.x).abs().max())
    assert torch.allclose(seq.buffers, vec.buffers, atol=1e-5, rtol=0)
    assert seq.trainer.cost.totals() == vec.trainer.cost.totals()
    for name in seq.store.tables:
        a, b = seq.store.tables[name], vec.store.tables[name]
        assert (a.seen == b.seen).all()


@pytest.mark.parametrize("algo", ["fedavg", "fedprox"])
def test_vmap_round_statistics_match(tmp_path, algo):
    cfg = compose(*TINY, "participation=straggler", f"algo={algo}", "engine.client_runner=thin")
    seq = trained_sim(cfg, tmp_path / "a")
    vec = trained_sim(compose(*TINY, "participation=straggler", f"algo={algo}", "engine.client_runner=vmap"),
                      tmp_path / "b")
    a, b = seq.round(cfg.rounds), vec.round(cfg.rounds)
    assert a.completed == b.completed and a.train_loss == pytest.approx(b.train_loss, abs=1e-5)


@pytest.mark.parametrize("overrides, why", [
    (("algo=gradma",), "hooks"),
    (("algo=moon",), "hooks"),
    (("algo=fedamd",), "hooks"),
])
def test_unsupported_configurations_are_refused_at_start(tmp_path, overrides, why):
    with pytest.raises(ConfigError, match=f"engine.client_runner.*{why}"):
        trained_sim(compose(*TINY, *overrides, "engine.client_runner=vmap", "rounds=1"), tmp_path)


@pytest.mark.parametrize("algo, picked", [("fedavg", "vmap"), ("gradma", "thin")])
def test_auto_picks_vmap_where_it_can_with_the_picked_runners_numbers(tmp_path, algo, picked):
    auto = trained_sim(compose(*TINY, f"algo={algo}", "engine.client_runner=auto"), tmp_path / "auto")
    same = trained_sim(compose(*TINY, f"algo={algo}", f"engine.client_runner={picked}"), tmp_path / "same")
    assert auto.runner_kind == picked and torch.equal(auto.x, same.x)
    assert auto.runner_reason.startswith("auto: ") and same.runner_reason == f"engine.client_runner={picked}"
    assert auto.summary()["client_runner_reason"] == auto.runner_reason


def test_auto_keeps_convolutional_models_on_the_thin_runner_on_a_cpu(tmp_path):
    from conftest import make_sim, write_fake_dataset

    write_fake_dataset("fmnist", tmp_path / "data")
    cfg = compose("dataset=fmnist", "dataset.system_dirs=[]", "model=cnn_fmnist", "partition=iid",
                  "partition.num_clients=10", "participation.selection.clients_per_round=2",
                  "engine.client_runner=auto", "rounds=1")
    sim = make_sim(cfg, tmp_path, tmp_path / "data")
    assert sim.runner_kind == "thin" and "convolutional" in sim.runner_reason


@pytest.mark.parametrize("layer, why", [(torch.nn.Dropout(0.5), "torch.nn.Dropout"),
                                        (torch.nn.BatchNorm1d(4, momentum=None), "cumulative")])
def test_layers_the_cohort_runner_cannot_reproduce_are_named(layer, why):
    from fedbench.training.cohort import unsupported
    from fedbench.training.local import LocalModule
    from fedbench.models import ZooModel

    class Net(ZooModel):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(3, 4), layer, torch.nn.Linear(4, 2))

        def block_list(self):
            return [self.body]

    module = LocalModule(Net(), lr=0.1)
    assert why in unsupported(module, trainer_augments=False)


def test_an_algorithm_that_drives_its_runs_must_declare_it():
    from fedbench.algorithms.base import Algorithm

    with pytest.raises(TypeError, match="declare batchable = False"):
        class Custom(Algorithm):
            def client_update(self, trainer, rc, client, steps, x, payload):
                return None
    with pytest.raises(TypeError, match="affine_steps"):
        class Hooked(Algorithm):
            def step_hook(self, rc, client, x, payload):
                return None

    class Declared(Algorithm):
        batchable = False

        def step_hook(self, rc, client, x, payload):
            return None
    assert not Declared.batchable


def test_work_chunks_sort_by_work_and_bound_the_padding():
    from fedbench.training.cohort import PAD_WASTE, work_chunks

    assert PAD_WASTE == 2.0
    # sorted 1, 1, 2, 3 pad to 4 x 3 = 12 <= 2 x 7; with 10 they would pad to 50 > 2 x 17: cut; 10, 40 pad to
    # 80 <= 2 x 50
    assert work_chunks([3, 1, 40, 1, 2, 10], cap=8) == [[1, 3, 4, 0], [5, 2]]
    assert work_chunks([3, 1, 40, 1, 2, 10], cap=2) == [[1, 3], [4, 0], [5, 2]]
    assert work_chunks([1, 1, 10], cap=8) == [[0, 1], [2]]  # 3 x 10 = 30 > 2 x 12
    assert work_chunks([5] * 7, cap=3) == [[0, 1, 2], [3, 4, 5], [6]]  # equal work: in order, cap-sized
    assert work_chunks([], cap=3) == []


RAGGED = ("dataset=synthetic", "dataset.num_users=12", "partition=natural", "model=logreg", "client.batch_size=100000",
          "client.grad_noise=0.5", "participation/selection=fedsrc_g_oracle",
          "participation.selection.clients_per_round=3", "rounds=3", "eval_every=3",
          "engine.num_threads=1")  # a BN model on these clients is sensitive to the thread count's blocking (3e-5)


def test_the_oracle_trains_every_client_together_in_chunks_of_similar_size(tmp_path, monkeypatch):
    """FedSRC-G's oracle on clients of unequal sizes (full-batch steps, injected noise): the vmap runner trains the
    clients it asks in regrouped chunks and gives the thin runner's probabilities and parameters (1e-5), with the
    same costs."""
    from fedbench.training import cohort

    seq = trained_sim(compose(*RAGGED, "engine.client_runner=thin"), tmp_path / "seq")
    calls, chunks_of = [], cohort.work_chunks
    monkeypatch.setattr(cohort, "work_chunks", lambda work, cap: calls.append((work, chunks_of(work, cap))) or
                        calls[-1][1])
    even = trained_sim(compose(*TINY, "engine.client_runner=vmap"), tmp_path / "even")
    assert even.runner_kind == "vmap" and calls == []  # equal batches: the cohort_size chunks, in order
    vec = trained_sim(compose(*RAGGED, "engine.client_runner=vmap", "engine.cohort_size=5"), tmp_path / "vec")
    sizes = vec.data.sizes
    assert sizes.max() > 4 * sizes.min()  # the federation is ragged
    asked = [(work, chunks) for work, chunks in calls if len(work) == 12]
    assert len(asked) == 3  # once a round, for the 12 clients asked; the rest: rounds' 3 trained clients
    assert all(len(work) == 3 for work, _ in calls if len(work) != 12)
    for work, chunks in asked:
        assert sorted(i for c in chunks for i in c) == list(range(12)) and len(chunks) >= 3
        assert sorted(work) == sorted(5 * n for n in sizes.tolist())  # K = 5 full-batch steps each
    assert torch.allclose(seq.x, vec.x, atol=1e-5, rtol=0), float((seq.x - vec.x).abs().max())
    assert numpy.allclose(seq.participation.selection.p, vec.participation.selection.p, atol=1e-6)
    assert seq.trainer.cost.totals() == vec.trainer.cost.totals()


@pytest.mark.parametrize("selection", ["uniform", "fedsrc_g_oracle", "fedsrc_d_oracle"])
def test_auto_keeps_widely_ragged_batches_thin_on_a_cpu_and_batches_an_oracles_questions(tmp_path, selection):
    """Clients of 46 to 1,064 samples in full-data batches: the rounds stay on the thin runner (a CPU); a selection
    that asks every client each round has its questions answered by a cohort runner of its own, with the thin
    runner's numbers (1e-5)."""
    overrides = [o for o in RAGGED if not o.startswith("participation/selection")]
    overrides.append(f"participation/selection={selection}")
    sim = trained_sim(compose(*overrides), tmp_path / "auto")
    assert sim.runner_kind == "thin" and sim.cohort is None and "batches range from" in sim.runner_reason
    oracle = selection != "uniform"
    assert (sim.oracle_runner is not None) == oracle
    assert ("questions to every available client" in sim.runner_reason) == oracle, sim.runner_reason
    thin = trained_sim(compose(*overrides, "engine.client_runner=thin"), tmp_path / "thin")
    assert thin.oracle_runner is None
    assert torch.allclose(sim.x, thin.x, atol=1e-5, rtol=0)
    assert sim.trainer.cost.totals() == thin.trainer.cost.totals()


def test_the_oracle_full_gradients_in_chunks_give_the_sequential_run(tmp_path, monkeypatch):
    """FedSRC-D's oracle (every available client's full gradient at x_t) on clients of unequal sizes: the cohort
    runner computes them in one call a round and gives the thin runner's probabilities, parameters and costs."""
    from fedbench.training.cohort import CohortTrainer

    overrides = [o for o in RAGGED if not o.startswith("participation/selection")]
    overrides.append("participation/selection=fedsrc_d_oracle")
    seq = trained_sim(compose(*overrides, "engine.client_runner=thin"), tmp_path / "seq")
    calls, gradients = [], CohortTrainer.gradients
    monkeypatch.setattr(CohortTrainer, "gradients", lambda self, tr, rc, clients, w: calls.append(len(clients)) or
                        gradients(self, tr, rc, clients, w))
    vec = trained_sim(compose(*overrides, "engine.client_runner=vmap", "engine.cohort_size=5"), tmp_path / "vec")
    assert calls == [12, 12, 12]  # every round, every client, in one call
    assert numpy.allclose(seq.participation.selection.p, vec.participation.selection.p, atol=1e-6)
    assert torch.allclose(seq.x, vec.x, atol=1e-5, rtol=0), float((seq.x - vec.x).abs().max())
    assert seq.trainer.cost.totals() == vec.trainer.cost.totals()


@pytest.mark.parametrize("model", [("model=logreg",), ("model=mlp", "model.batch_norm=true")])
def test_chunked_full_gradients_equal_each_clients_own(tmp_path, model):
    """``CohortTrainer.gradients`` in chunks of at most 3 clients of unequal sizes, with BatchNorm's batch
    statistics over each client's real samples: each row is ``ClientTrainer.gradient`` of that client (1e-5),
    the running statistics untouched, the same gradient count."""
    from fedbench.records import RoundContext

    overrides = [o for o in RAGGED if not o.startswith("model=")]
    sim = make_sim(compose(*overrides, *model, "engine.client_runner=vmap", "engine.cohort_size=3"), tmp_path)
    rc, sizes = RoundContext(round=0, lr=0.1, part=None), sim.data.sizes
    norm = len(model) > 1
    clients = [c for c in (5, 0, 11, 3, 7, 1, 9, 2) if not norm or sizes[c] <= 1024]
    assert len(clients) >= 4 and len({int(sizes[c]) for c in clients}) == len(clients)
    assert sim.cohort.can_batch_gradients(sizes.tolist()) == (not norm)  # BN: batch statistics per
    # chunk of 1,024 samples in the sequential gradient
    buffers = sim.module.flat.buffers.clone()
    before = sim.trainer.cost.grad_evals
    batched = sim.cohort.gradients(sim.trainer, rc, clients, sim.x)
    assert sim.trainer.cost.grad_evals - before == sum(int(sim.data.sizes[c]) for c in clients)
    own = torch.stack([sim.trainer.gradient(rc, c, sim.x) for c in clients])
    assert torch.allclose(batched, own, atol=1e-5, rtol=0), float((batched - own).abs().max())
    assert torch.equal(sim.module.flat.buffers, buffers)


def test_a_model_with_dropout_keeps_the_sequential_full_gradients(tmp_path, monkeypatch):
    from fedbench.training.cohort import CohortTrainer

    overrides = [o for o in RAGGED if not o.startswith(("participation/selection", "model="))]
    overrides += ["model=mlp", "model.hidden_dropout=0.3", "participation/selection=fedsrc_d_oracle", "rounds=1"]
    monkeypatch.setattr(CohortTrainer, "gradients", lambda *a: pytest.fail("batched a gradient under dropout"))
    seq = trained_sim(compose(*overrides, "engine.client_runner=thin"), tmp_path / "seq")
    vec = trained_sim(compose(*overrides, "engine.client_runner=vmap"), tmp_path / "vec")
    assert numpy.allclose(seq.participation.selection.p, vec.participation.selection.p, atol=1e-6)
