
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedbench.algorithms import RoundContext
from fedbench.models import build_model
from fedbench.rng import torch_rng

from conftest import make_sim, participation_trace


def test_flat_params_are_views(tiny_cfg, tmp_path):
    sim = make_sim(tiny_cfg(), tmp_path)
    flat = sim.module.flat
    flat.params.zero_()
    assert all(float(p.detach().abs().sum()) == 0 for p in sim.module.parameters())
    assert flat.dim == sum(p.numel() for p in sim.module.parameters())


def test_add_grad_adds_in_place_and_fills_a_missing_gradient():
    """FlatModel.add_grad: g_p += vec's slice for every parameter that has a gradient (the same tensor, changed in
    place), and a parameter without one gets its slice; equal bit for bit to set_grad(grad() + vec)."""
    from fedbench.training.flat import FlatModel

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    flat = FlatModel(model)
    model[0](torch.randn(5, 3)).square().sum().backward()
    assert model[1].weight.grad is None  # the second layer gets no gradient
    want = flat.grad() + (vec := torch.randn(flat.dim))
    first = model[0].weight.grad
    flat.add_grad(vec)
    assert model[0].weight.grad is first  # in place
    assert torch.equal(flat.grad(), want)
    assert torch.equal(model[1].weight.grad, flat.view(model[1].weight, vec))


@pytest.mark.parametrize("model", ["logreg", "cnn_fmnist", "mlp"])
def test_thin_and_lightning_runners_agree_exactly(tiny_cfg, tmp_path, model):
    extra = ("model.batch_norm=true",) if model == "mlp" else ()
    thin = make_sim(tiny_cfg(f"model={model}", "client.momentum=0.9", "client.weight_decay=1e-3",
                             "engine.client_runner=thin", *extra), tmp_path)
    light = make_sim(tiny_cfg(f"model={model}", "client.momentum=0.9", "client.weight_decay=1e-3",
                              "engine.client_runner=lightning", *extra), tmp_path)
    assert torch.equal(thin.x, light.x)
    for t in range(2):
        thin.round(t)
        light.round(t)
    assert torch.equal(thin.x, light.x)
    assert torch.equal(thin.buffers, light.buffers)


def test_fedavg_single_client_full_participation_is_plain_sgd(tiny_cfg, tmp_path):
    cfg = tiny_cfg("partition.num_clients=1", "participation=full", "client.local_steps=7", "client.batch_size=8")
    sim = make_sim(cfg, tmp_path)
    # reference: the same model, the same batches, a hand-written SGD loop
    model = build_model(cfg.model, sim.data.input_shape, sim.data.num_classes, torch_rng(cfg.seed, "init"))
    w = [p.detach().clone() for p in model.parameters()]
    for t in range(3):
        gen = torch_rng(cfg.seed, "batches", t, 0)
        for xb, yb in sim.data.client_batches(0, 7, 8, gen):
            for p, v in zip(model.parameters(), w):
                p.data.copy_(v)
                p.grad = None
            F.cross_entropy(model(xb), yb).backward()
            w = [v - cfg.client.lr * p.grad for p, v in zip(model.parameters(), w)]
        sim.round(t)
    assert torch.allclose(sim.x, torch.cat([v.flatten() for v in w]), atol=1e-6)


def test_fedavg_aggregate_is_mean_of_client_models(tiny_cfg, tmp_path):
    """Uniform S-of-N, p_i = 1/N, unbiased weights 1/S: x_{t+1} = mean of the S local models."""
    sim = make_sim(tiny_cfg(), tmp_path)
    ref = make_sim(tiny_cfg(), tmp_path / "ref")
    part = ref.participation.round(0)
    rc = RoundContext(0, ref.cfg.client.lr, part)
    models = []
    for c in part.completed_ids:
        models.append(ref.trainer.train(rc, int(c), 5, ref.x).delta + ref.x)
    sim.round(0)
    assert torch.allclose(sim.x, torch.stack(models).mean(0), atol=1e-6)


def test_fedavgm_server_momentum(tiny_cfg, tmp_path):
    """m_{t+1} = beta m_t + Delta_t, x_{t+1} = x_t + eta m_{t+1}: check against FedAvg's aggregates."""
    avg = make_sim(tiny_cfg("participation=full"), tmp_path)
    mom = make_sim(tiny_cfg("participation=full", "algo=fedavgm", "algo.server_momentum=0.5",
                            "algo.server_lr=0.7"), tmp_path)
    m = torch.zeros_like(avg.x)
    for t in range(3):
        avg.x.copy_(mom.x)
        before = avg.x.clone()
        avg.round(t)
        m = 0.5 * m + (avg.x - before)
        mom.round(t)
        assert torch.allclose(mom.x, before + 0.7 * m, atol=1e-6)
    assert torch.allclose(mom.algo.state_dict()["momentum"], m, atol=1e-6)


def test_samples_weighting_matches_sizes(tiny_cfg, tmp_path):
    sim = make_sim(tiny_cfg("algo.weighting=samples", "partition=dirichlet", "partition.alpha=0.5",
                            "partition.min_samples=5"), tmp_path)
    sizes = sim.data.sizes
    assert np.allclose(sim.algo.p, sizes / sizes.sum())


def test_run_is_deterministic(tiny_cfg, tmp_path):
    a, b = make_sim(tiny_cfg(), tmp_path / "a"), make_sim(tiny_cfg(), tmp_path / "b")
    for t in range(3):
        assert a.round(t) == b.round(t)
    assert torch.equal(a.x, b.x)
    c = make_sim(tiny_cfg("seed=1"), tmp_path / "c")
    c.round(0)
    assert not torch.equal(c.x, a.x)


def test_model_init_ignores_global_rng(tiny_cfg):
    cfg = tiny_cfg("model=cnn_fmnist")
    torch.manual_seed(1)
    a = build_model(cfg.model, (1, 28, 28), 10, torch_rng(0, "init"))
    torch.manual_seed(2)
    b = build_model(cfg.model, (1, 28, 28), 10, torch_rng(0, "init"))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert sum(p.numel() for p in a.parameters()) == 228_586
    assert float(a.hidden.bias.detach().abs().sum()) == 0  # Kaiming layers have zero bias; the last layer keeps default init
    assert float(a.final.bias.detach().abs().sum()) > 0


def test_aggregation_weights_are_recorded_and_a_run_that_does_not_normalize_says_so(tiny_cfg, tmp_path, capsys):
    from conftest import csv_rows, run_resumable

    _, plain = run_resumable(tiny_cfg("logger.console=true"), tmp_path / "plain", tmp_path / "data")
    rows = csv_rows(tmp_path / "plain" / "rounds.csv")
    assert all(abs(float(r["weight_sum"]) - 1) < 1e-9 and int(r["contributors"]) == int(r["completed"]) for r in rows)
    assert plain["aggregation"]["weights_sum_to_one"] and "note:" not in capsys.readouterr().out
    cfg = tiny_cfg("partition=dirichlet", "partition.alpha=0.5", "partition.min_samples=20", "algo.weighting=samples",
                   "logger.console=true")
    sim, skewed = run_resumable(cfg, tmp_path / "skewed", tmp_path / "data")
    sums = [float(r["weight_sum"]) for r in csv_rows(tmp_path / "skewed" / "rounds.csv")]
    # unbiased data weights under uniform sampling: w_i = (n_i / n) / (S / N), so a round's sum is N/S x its share
    sizes, n = sim.data.sizes, sim.data.sizes.sum()
    trace = participation_trace(make_sim(cfg, tmp_path / "again"), cfg.rounds)
    expected = [float(sizes[p.completed_ids].sum() / n * 10 / 4) for p in trace]
    np.testing.assert_allclose(sums, expected, rtol=1e-6)
    audit = skewed["aggregation"]
    assert not audit["weights_sum_to_one"] and (audit["weighting"], audit["aggregation"]) == ("samples", "unbiased")
    assert audit["weight_sum_min"] == min(sums) and audit["weight_sum_max"] == max(sums)
    assert capsys.readouterr().out.count("aggregation weights sum to") == 1  # said once
