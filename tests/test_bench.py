"""scripts/bench.py --quick runs (tiny sizes), so the benchmark never rots; it writes its table as JSON."""

import json
import subprocess
import sys

from conftest import ROOT

#: the floors' tests' data: 4 clients of 3, 9, 5 and 2 rows (4 features, 3 classes) as FederatedData lays them out
RAGGED = (
    "import sys; sys.path.insert(0, 'scripts'); import bench, numpy as np, torch\n"
    "import torch.nn.functional as F\n"
    "from torch.func import grad\n"
    "from types import SimpleNamespace\n"
    "torch.manual_seed(0)\n"
    "sizes = [3, 9, 5, 2]\n"
    "off = torch.tensor(np.concatenate([[0], np.cumsum(sizes)]))\n"
    "data = SimpleNamespace(offsets=off, x=torch.randn(int(off[-1]), 4), y=torch.randint(0, 3, (int(off[-1]),)))\n"
)


def _python(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter at the repository root (scripts/bench.py puts src/ first on sys.path)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_bench_quick_runs_and_reports_every_variant(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--reps", "1",
                           "--rounds", "2", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = json.loads(out.read_text())["workloads"]["Q-mlp"]
    assert set(row) == {"default", "thin", "vmap", "floor", "floor-vmap"}
    assert all(v["rounds_per_s"] > 0 for v in row.values())
    assert {"train", "server", "participation", "rest", "evaluation"} <= set(row["thin"]["split_s"])
    oracle = json.loads(out.read_text())["workloads"]["Q-oracle"]  # FedSRC-G's oracle: its floors are its own
    assert set(oracle) == {"default", "thin", "vmap", "floor", "floor-vmap"}
    assert all(v["rounds_per_s"] > 0 for v in oracle.values())
    assert oracle["thin"]["split_s"]["participation"] > oracle["thin"]["split_s"]["server"]  # the oracle's runs


def test_the_oracle_floor_is_fedsrc_g_in_plain_pytorch():
    """The floor's FedSRC-G round, sequential and vmapped with padding, gives the same model (same draws) and
    moves it: the batched floor is the same arithmetic, not a cheaper one."""
    code = RAGGED + (
        "def loss(w, xb, yb, mask):\n"
        "    ls = F.cross_entropy(xb @ w.view(3, 4).T, yb, reduction='none')\n"
        "    return (ls * mask).sum() / mask.sum()\n"
        "out = []\n"
        "for batched in (False, True):\n"
        "    torch.manual_seed(1)\n"
        "    x = torch.zeros(12)\n"
        "    model = torch.nn.Linear(4, 3, bias=False)\n"
        "    step = bench.oracle_floor(data, x, model, grad(loss), batched, 3, 0.1, 2, 0.0,\n"
        "                              np.random.default_rng(0))\n"
        "    step(0); step(1)\n"
        "    out.append(step.state['x'])\n"
        "assert out[0].abs().sum() > 0, out\n"
        "torch.testing.assert_close(out[0], out[1], rtol=0, atol=1e-6)\n"
        "print('ok')\n")
    proc = _python(code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_the_fedavg_floor_is_fedavg_in_plain_pytorch():
    """The FedAvg floor's round, sequential (autograd on the model, torch.optim.SGD) and vmapped, gives the same model
    on the same draws; and with S = 1 client and one step it is x - lr * grad by hand, the softmax cross-entropy's
    gradient (p - onehot)^T X / b of a linear model, on rows an identically seeded generator draws. (A sequential
    floor that trained x in place, so that every Delta_i was 0, fails both.)"""
    code = RAGGED + (
        "def loss(w, xb, yb):\n"
        "    return F.cross_entropy(xb @ w.view(3, 4).T, yb)\n"
        "def floor(batched, steps, s, x0):\n"
        "    model = torch.nn.Linear(4, 3, bias=False)\n"
        "    return bench.fedavg_floor(data, x0.clone(), model, grad(loss), batched, steps, 2, 0.1, s,\n"
        "                              np.random.default_rng(0))\n"
        "x0 = torch.randn(12)\n"
        "out = []\n"
        "for batched in (False, True):\n"
        "    step = floor(batched, 3, 2, x0)\n"
        "    step(0); step(1)\n"
        "    out.append(step.state['x'])\n"
        "assert (out[0] - x0).abs().sum() > 0, out\n"
        "torch.testing.assert_close(out[0], out[1], rtol=0, atol=1e-6)\n"
        "rng = np.random.default_rng(0)\n"
        "c = rng.choice(4, 1, replace=False)[0]\n"
        "rows = rng.integers(int(off[c]), int(off[c + 1]), (1, 2))[0]\n"
        "X, Y = data.x[rows], data.y[rows]\n"
        "W = x0.view(3, 4)\n"
        "P = torch.softmax(X @ W.T, 1) - F.one_hot(Y, 3).to(X.dtype)\n"
        "want = (W - 0.1 * P.T @ X / 2).reshape(-1)\n"
        "for batched in (False, True):\n"
        "    step = floor(batched, 1, 1, x0)\n"
        "    step(0)\n"
        "    torch.testing.assert_close(step.state['x'], want, rtol=0, atol=1e-6)\n"
        "print('ok')\n")
    proc = _python(code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_sweep_split_times_a_packed_sweep_in_parts():
    """--split's worker on a tiny packed sweep (MLP on digits: the cohort runner packs it on a CPU): the packs'
    training and the evaluations are timed, and the parts fit in the whole."""
    code = (
        "import json, sys; sys.path.insert(0, 'scripts'); import bench\n"
        "bench.SWEEPS['T'] = [*bench.QUICK['Q-mlp'], 'rounds=4', 'eval_every=2', 'client.lr=0.05,0.1', 'seed=0']\n"
        "print(json.dumps(bench.sweep_split('T', [])))\n")
    proc = _python(code)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    split = json.loads(proc.stdout.strip().splitlines()[-1])
    assert split["train_s"] > 0 and split["evaluation_s"] > 0 and split["evaluations"] >= 4
    assert split["startup_s"] > 0 and split["rest_s"] >= 0
    assert split["startup_s"] + split["train_s"] + split["evaluation_s"] <= split["seconds"]


def test_sweep_split_refuses_a_sweep_whose_jobs_no_pack_trains():
    """On the thin runner no pack trains: --split says so and how to split it, instead of reporting the whole run as
    start-up (and a negative rest)."""
    code = (
        "import sys; sys.path.insert(0, 'scripts'); import bench\n"
        "bench.SWEEPS['T'] = [*bench.QUICK['Q-mlp'], 'rounds=2', 'eval_every=2', 'client.lr=0.05', 'seed=0',\n"
        "                     'engine.client_runner=thin']\n"
        "bench.sweep_split('T', [])\n")
    proc = _python(code)
    assert proc.returncode != 0
    assert "T: no pack trained" in proc.stderr and "engine.client_runner=vmap" in proc.stderr
