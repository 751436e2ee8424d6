"""Cost accounting: gradient evaluations and floats sent, hand-counted over two rounds of a tiny run."""

import pytest

from conftest import make_sim, participation_trace

K, B = 5, 16  # tiny run: local steps, batch size


def _two_rounds(tiny_cfg, tmp_path, *overrides):
    sim = make_sim(tiny_cfg(*overrides), tmp_path)
    parts = participation_trace(sim, 2)
    init = sim.initialize()
    stats = [sim.round(t) for t in range(2)]
    return sim, init, stats, parts


def _totals(stats):
    return {k: sum(getattr(s, k) for s in stats) for k in ("grad_evals", "floats_up", "floats_down")}


def test_fedavg_and_scaffold(tiny_cfg, tmp_path):
    sim, init, stats, _ = _two_rounds(tiny_cfg, tmp_path / "avg")
    d, s = sim.dim, 4
    assert _totals(stats) == {"grad_evals": 2 * s * K * B, "floats_up": 2 * s * d, "floats_down": 2 * s * d}
    assert not any(init.values())
    assert sim.trainer.cost.bytes_up == 4 * sim.trainer.cost.floats_up
    sim, init, stats, _ = _two_rounds(tiny_cfg, tmp_path / "scaffold", "algo=scaffold", "algo.control_init=gradient")
    # x and c down, the delta and the control change up; the controls' initial gradients are counted apart
    assert _totals(stats) == {"grad_evals": 2 * s * K * B, "floats_up": 4 * s * d, "floats_down": 4 * s * d}
    n = int(sim.data.sizes.sum())
    assert init["grad_evals"] == n and init["floats_up"] == init["floats_down"] == sim.data.num_clients * d


def test_fedamd(tiny_cfg, tmp_path):
    sim, init, stats, parts = _two_rounds(tiny_cfg, tmp_path, "algo=fedamd", "algo.p=0.5")
    d = sim.dim
    expected = {"grad_evals": 0, "floats_up": 0, "floats_down": 0}
    for t, part in enumerate(parts):
        for i in part.completed_ids.tolist():
            anchor = sim.algo.is_anchor(SimpleRound(t, 0.5), i)
            expected["grad_evals"] += int(sim.data.sizes[i]) if anchor else 2 * K * B
            expected["floats_down"] += d if anchor else 2 * d  # x (+ g~ for a miner)
            expected["floats_up"] += d  # v or Delta
    assert sum(s.extra["anchors"] for s in stats) and sum(s.extra["miners"] for s in stats)  # both roles occur
    assert _totals(stats) == expected
    assert init == {"grad_evals": int(sim.data.sizes.sum()), "floats_up": 10 * d, "floats_down": 10 * d,
                    "bytes_up": 40 * d, "bytes_down": 40 * d}


class SimpleRound:
    def __init__(self, t, p):
        from types import SimpleNamespace

        self.round, self.scratch = t, SimpleNamespace(p=p)


def test_gradma(tiny_cfg, tmp_path):
    """Worker QP: 3 gradients a step, 2 at tau = 1 and at tau = 0 without a previous local model."""
    sim, _, stats, parts = _two_rounds(tiny_cfg, tmp_path, "algo=gradma")
    d = sim.dim
    first = set(parts[0].completed_ids.tolist())
    per_client = [(2 + 2 + 3 * (K - 2)) * B] * 4
    per_client += [((3 if i in first else 2) + 2 + 3 * (K - 2)) * B for i in parts[1].completed_ids.tolist()]
    assert _totals(stats) == {"grad_evals": sum(per_client), "floats_up": 8 * d, "floats_down": 8 * d}


def test_fedpage_partial_round(tiny_cfg, tmp_path):
    sim = make_sim(tiny_cfg("algo=fedpage", "algo.p_page=0"), tmp_path)
    ids = participation_trace(sim, 2)[1].completed_ids
    full, partial = sim.round(0), sim.round(1)
    d, n = sim.dim, sim.data.sizes
    assert full.completed == 10 and full.grad_evals == int(n.sum()) and full.floats_up == 10 * d
    assert partial.grad_evals == sum(2 * int(n[i]) + 2 * K * B for i in ids)
    assert partial.floats_down + partial.floats_up == pytest.approx(4 * d * ids.size)


S = 4  # clients a round in the tiny run


@pytest.mark.parametrize("algo, budget, limit, spend, stop", [
    # FedAvg: S d down + S d up a round, so 3 rounds spend exactly 6 S d
    ("fedavg", "floats", lambda d: 6 * S * d, lambda d: 2 * S * d, 3),
    # SCAFFOLD: x and c down, delta and control change up (4 S d a round): the same budget ends after round 2
    ("scaffold", "floats", lambda d: 6 * S * d, lambda d: 4 * S * d, 2),
    # one evaluation past round 2's count: round 3 reaches it
    ("fedavg", "grad_evals", lambda d: 2 * S * K * B + 1, lambda d: S * K * B, 3),
])
def test_budgets_stop_at_the_first_round_that_reaches_them(tiny_cfg, tmp_path, algo, budget, limit, spend, stop):
    from conftest import csv_rows, run_resumable

    d = make_sim(tiny_cfg(), tmp_path / "probe").dim
    cfg = tiny_cfg(f"algo={algo}", "rounds=10", "eval_every=5", f"budget.{budget}={limit(d)}")
    sim, summary = run_resumable(cfg, tmp_path / "run", tmp_path / "data")
    assert summary["status"] == "completed" and summary["rounds"] == stop, summary["reason"]
    assert f"budget.{budget}" in summary["reason"] and f"round {stop}" in summary["reason"]
    assert int(csv_rows(tmp_path / "run" / "metrics.csv")[-1]["round"]) == stop  # the last round is evaluated
    spent = sim.trainer.cost.totals()
    used = spent["grad_evals"] if budget == "grad_evals" else spent["floats_up"] + spent["floats_down"]
    assert used == stop * spend(d) and (stop - 1) * spend(d) < limit(d) <= used
