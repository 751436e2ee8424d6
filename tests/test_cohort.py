"""The vmap cohort runner gives the sequential runner's parameters, costs and losses (1e-5 on CPU), for every
algorithm it runs and for ragged rounds (stragglers, clipped batches); the others are refused at start."""

import pytest
import torch

from conftest import TINY, compose
from conftest import trained_sim

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
]


def _pair(tmp_path, *overrides):
    base = [o for o in TINY if not (o.startswith("participation.") and any(x.startswith("participation=")
                                                                           for x in overrides))]
    seq = trained_sim(compose(*base, *overrides), tmp_path / "seq")
    vec = trained_sim(compose(*base, *overrides, "engine.client_runner=vmap"), tmp_path / "vmap")
    return seq, vec


@pytest.mark.parametrize("overrides", SUPPORTED, ids=lambda o: "-".join(x.split("=")[-1] for x in o))
def test_vmap_equals_the_sequential_runner(tmp_path, overrides):
    seq, vec = _pair(tmp_path, *overrides)
    assert vec.cohort is not None
    assert torch.allclose(seq.x, vec.x, atol=1e-5, rtol=0), float((seq.x - vec.x).abs().max())
    assert torch.allclose(seq.buffers, vec.buffers, atol=1e-5, rtol=0)
    assert seq.trainer.cost.totals() == vec.trainer.cost.totals()
    for name in seq.store.tables:
        a, b = seq.store.tables[name], vec.store.tables[name]
        assert (a.seen == b.seen).all()


@pytest.mark.parametrize("algo", ["fedavg", "fedprox"])
def test_vmap_round_statistics_match(tmp_path, algo):
    cfg = compose(*TINY, "participation=straggler", f"algo={algo}")
    seq = trained_sim(cfg, tmp_path / "a")
    vec = trained_sim(compose(*TINY, "participation=straggler", f"algo={algo}", "engine.client_runner=vmap"),
                      tmp_path / "b")
    a, b = seq.round(cfg.rounds), vec.round(cfg.rounds)
    assert a.completed == b.completed and a.train_loss == pytest.approx(b.train_loss, abs=1e-5)


@pytest.mark.parametrize("overrides, why", [
    (("algo=gradma",), "hooks"),
    (("algo=moon",), "hooks"),
    (("algo=fedamd",), "hooks"),
    (("client.grad_noise=0.1",), "noise"),
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
    assert why in unsupported(module, noise=False, trainer_augments=False)


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
