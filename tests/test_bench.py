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
