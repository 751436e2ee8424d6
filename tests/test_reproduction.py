"""Reproduction checks (``make test-slow``; CI runs them too).

MimiC §7 / Fig. 7 in miniature: FashionMNIST, 20 clients holding 2 classes each (#C=2), availability
p_i = 0.1 + (i mod 5) 0.225 (the MimiC code's five levels, so the classes of clients 0, 5, 10, 15 are rarely
seen), round 0 with everyone, 40 rounds of 5 local steps. FedAvg averages over the active clients (1/|S_t|, the
paper's baseline) and drifts toward the often-available clients' classes; MIFA and MimiC must beat it.
Measured here: FedAvg 0.723, MIFA 0.770, MimiC 0.764 (mean final test accuracy over seeds 0-2).
"""

import numpy as np
import pytest

from conftest import compose
from conftest import trained_sim

SETUP = ("dataset=fmnist", "partition=classes_per_client", "partition.num_clients=20", "partition.scheme=mimic",
         "model=logreg", "participation=bernoulli_levels", "rounds=40", "client.local_steps=5", "client.lr=0.05")


def final_accuracy(algo_overrides, seed, tmp_path):
    cfg = compose(*SETUP, *algo_overrides, f"seed={seed}")
    return trained_sim(cfg, tmp_path / f"{'_'.join(algo_overrides)}_{seed}", tmp_path / "data").evaluate()[1]


@pytest.mark.slow
def test_mifa_and_mimic_beat_fedavg_under_heterogeneous_availability(tmp_path):
    mean = {}
    for name, overrides in {"fedavg": ("algo=fedavg", "algo.aggregation=normalized"),
                            "mifa": ("algo=mifa",), "mimic": ("algo=mimic",)}.items():
        mean[name] = np.mean([final_accuracy(overrides, seed, tmp_path) for seed in (0, 1, 2)])
    assert mean["mifa"] > mean["fedavg"] + 0.01, mean
    assert mean["mimic"] > mean["fedavg"] + 0.01, mean


@pytest.mark.slow
def test_gradma_benchmark_script_runs(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "bench.json"
    subprocess.run([sys.executable, str(root / "scripts" / "bench_gradma.py"), "--quick", "--rounds", "1", "--reps", "1",
                    "--out", str(out)], check=True, cwd=root, capture_output=True)
    result = json.loads(out.read_text())
    assert result["seconds_per_round"]["gradma"] > 0 and result["server_qp"]["memory"] == 10


@pytest.mark.slow
def test_fedamd_fmnist_preset_costs_follow_the_papers_table2_conventions(tmp_path):
    """FedAMD note §4.3 on the real preset (d = 44,426, n = 600, K b' = 640, A = 20): an anchor costs n gradient
    evaluations and 2d floats, a miner 2 K b' and 3d; the cache initialization (N n, N d each way) is apart."""
    from conftest import make_sim

    sim = make_sim(compose("experiment=fedamd_fmnist", "rounds=3"), tmp_path, tmp_path / "data")
    d = sim.dim
    assert d == 44426 and set(sim.data.sizes.tolist()) == {600}
    assert sim.initialize() == {"grad_evals": 100 * 600, "floats_up": 100 * d, "floats_down": 100 * d,
                                "bytes_up": 400 * d, "bytes_down": 400 * d}
    for t in range(3):
        s = sim.round(t)
        assert s.extra["anchors"] + s.extra["miners"] == 20 and s.extra["anchor_p"] == pytest.approx((2 / 22) ** (1 / 20))
        assert s.grad_evals == s.extra["anchors"] * 600 + s.extra["miners"] * 2 * 640
        assert (s.floats_up, s.floats_down) == (20 * d, (20 + s.extra["miners"]) * d)


@pytest.mark.slow
def test_fedsrc_synthetic_small_samplers_train_and_pay_their_oracle_costs(tmp_path):
    """fedsrc_synthetic_small (20 LEAF Synthetic(1,1) users, S = 5, K = 5 full-batch steps, injected noise nu = 2),
    150 of its 300 rounds, seeds 0-2: every sampler at least halves the global training loss, and the
    oracle rules pay for what they ask each round (FedSRC-D: every client's full gradient, n in all; FedSRC-G:
    every client's K-step run, K n) on top of the selected clients' K n_i. The ordering of the samplers is not
    asserted: the measured table is in the README (issue 11)."""
    from conftest import make_sim

    extra_per_round = {"uniform": lambda n: 0, "md": lambda n: 0, "fedsrc_d_oracle": lambda n: n,
                       "fedsrc_g_oracle": lambda n: 5 * n}
    for rule, extra in extra_per_round.items():
        for seed in (0, 1, 2):
            cfg = compose("experiment=fedsrc_synthetic_small", f"participation/selection={rule}", f"seed={seed}",
                          "rounds=150", "engine.num_threads=1")
            sim = make_sim(cfg, tmp_path / f"{rule}_{seed}", tmp_path / "data")
            start = sim.evaluate_train()[0]
            n = int(sim.data.sizes.sum())
            for t in range(cfg.rounds):
                stats = sim.round(t)
                part = sim.participation.last
                trained = 5 * int(sim.data.sizes[part.completed_ids].sum())
                assert stats.grad_evals == trained + extra(n), (rule, t)
            final = sim.evaluate_train()[0]
            assert final < start / 2, (rule, seed, start, final)
