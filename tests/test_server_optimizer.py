"""Server optimizers on the pseudo-gradient (``algo.server_optimizer``, Reddi et al. 2021) and the presets over them."""

import numpy as np
import pytest
import torch

from fedbench.algorithms import ALGORITHMS, AlgoContext
from fedbench.algorithms.server_optimizer import ServerOptimizer
from fedbench.errors import ConfigError
from fedbench.records import RoundContext
from conftest import trained_sim


def _fedavg(**options):
    cls = ALGORITHMS.get_class("fedavg")
    return cls(cls.Config(**options), AlgoContext(2, 1, np.ones(1), torch.device("cpu"), 0))


def _step(algo, x, delta):
    rc = RoundContext(round=0, lr=0.1, part=None)
    rc.acc = torch.tensor(delta)
    algo.server_update(rc, x)


def test_fedadam_two_rounds_by_hand():
    """beta1 0.9, beta2 0.99, tau 1e-3, eta 0.1, x0 = (0.5, -0.5), Delta_1 = (1, -2), Delta_2 = (0.5, 0.25).
    Round 1: m = (0.1, -0.2), v = 0.99 tau^2 + 0.01 (1, 4) = (0.01000099, 0.04000099),
    x = x0 + 0.1 m / (sqrt(v) + tau) = (0.5 + 0.0099005049, -0.5 - 0.0099501262)."""
    algo = _fedavg(server_optimizer=ServerOptimizer.adam, server_lr=0.1)
    x = torch.tensor([0.5, -0.5], dtype=torch.float64)
    algo.server_step.m = algo.server_step.m.double()
    algo.server_step.v = algo.server_step.v.double()
    _step(algo, x, [1.0, -2.0])
    assert x.tolist() == pytest.approx([0.5990050488825424, -0.5995012623676585], abs=1e-7)
    _step(algo, x, [0.5, 0.25])
    assert x.tolist() == pytest.approx([0.7236048965290557, -0.6763998559333428], abs=1e-7)
    assert algo.server_step.m.tolist() == pytest.approx([0.09 + 0.05, -0.18 + 0.025])


def test_yogi_and_adagrad_second_moments_by_hand():
    delta = [2.0, -1.0]
    yogi = _fedavg(server_optimizer=ServerOptimizer.yogi, server_lr=0.1)
    _step(yogi, torch.zeros(2), delta)
    # v - (1 - beta2) d^2 sign(v - d^2) = tau^2 + 0.01 d^2 (v < d^2)
    assert yogi.server_step.v.tolist() == pytest.approx([1e-6 + 0.04, 1e-6 + 0.01], rel=1e-5)
    adagrad = _fedavg(server_optimizer=ServerOptimizer.adagrad, server_lr=0.1)
    _step(adagrad, torch.zeros(2), delta)
    _step(adagrad, torch.zeros(2), delta)
    assert adagrad.server_step.v.tolist() == pytest.approx([1e-6 + 8.0, 1e-6 + 2.0], rel=1e-5)


def test_momentum_is_heavy_ball_and_sgd_is_a_plain_step():
    heavy = _fedavg(server_optimizer=ServerOptimizer.momentum, server_momentum=0.5, server_lr=2.0)
    x = torch.zeros(2)
    _step(heavy, x, [1.0, 0.0])
    _step(heavy, x, [1.0, 0.0])
    assert x.tolist() == [2.0 * 1.0 + 2.0 * 1.5, 0.0]  # m = 1, then 0.5 + 1
    plain = _fedavg(server_lr=0.5)
    x = torch.ones(2)
    _step(plain, x, [2.0, -2.0])
    assert x.tolist() == [2.0, 0.0]
    assert plain.state_dict() == {}  # sgd keeps no state


@pytest.mark.parametrize("preset, base", [("fedadam", "fedavg"), ("mifa_m", "mifa"), ("fedprox_m", "fedprox")])
def test_sgd_at_server_lr_one_reduces_every_preset_to_its_base_exactly(tiny_cfg, tmp_path, preset, base):
    reduced = trained_sim(tiny_cfg(f"algo={preset}", "algo.server_optimizer=sgd", "algo.server_lr=1"),
                          tmp_path / "a")
    plain = trained_sim(tiny_cfg(f"algo={base}"), tmp_path / "b")
    assert torch.equal(reduced.x, plain.x)


def test_presets_keep_their_names_and_run(tiny_cfg, tmp_path):
    for preset, kind, optimizer in [("fedavgm", "fedavg", "momentum"), ("moon_m", "moon", "momentum"),
                                    ("fedmlb_m", "fedmlb", "momentum"), ("fedyogi", "fedavg", "yogi"),
                                    ("fedadagrad", "fedavg", "adagrad"), ("wait_full", "amplified_fedavg", "sgd"),
                                    ("gradma_w", "gradma", "sgd")]:
        cfg = tiny_cfg(f"algo={preset}", "model=mlp", "model.hidden=[8]", "rounds=2")
        assert (cfg.algo.name, cfg.algo.kind, cfg.algo.server_optimizer.value) == (preset, kind, optimizer)
        sim = trained_sim(cfg, tmp_path / preset)
        assert torch.isfinite(sim.x).all()
        assert ("momentum" in sim.algo.state_dict()) == (optimizer != "sgd")


def test_an_algorithm_with_its_own_server_recursion_refuses_another_optimizer(tiny_cfg, tmp_path):
    with pytest.raises(ConfigError, match="algo.server_optimizer.*own recursion"):
        trained_sim(tiny_cfg("algo=fedamd", "algo.server_optimizer=adam"), tmp_path)
