"""scripts/bench.py --quick runs (tiny sizes), so the benchmark never rots; it writes its table as JSON."""

import json
import subprocess
import sys

from conftest import ROOT


def test_bench_quick_runs_and_reports_every_variant(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--reps", "1",
                           "--rounds", "2", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = json.loads(out.read_text())["workloads"]["Q-mlp"]
    assert set(row) == {"default", "thin", "vmap", "floor", "floor-vmap"}
    assert all(v["rounds_per_s"] > 0 for v in row.values())
    assert {"train", "server", "participation", "rest", "evaluation"} <= set(row["thin"]["split_s"])


def test_sweep_split_times_a_packed_sweep_in_parts():
    """--split's worker on a tiny packed sweep (MLP on digits: the cohort runner packs it on a CPU): the packs'
    training and the evaluations are timed, and the parts fit in the whole."""
    code = (
        "import json, sys; sys.path.insert(0, 'scripts'); import bench\n"
        "bench.SWEEPS['T'] = [*bench.QUICK['Q-mlp'], 'rounds=4', 'eval_every=2', 'client.lr=0.05,0.1', 'seed=0']\n"
        "print(json.dumps(bench.sweep_split('T', [])))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
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
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode != 0
    assert "T: no pack trained" in proc.stderr and "engine.client_runner=vmap" in proc.stderr
