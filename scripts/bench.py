"""Throughput benchmark of the round loop: rounds/s and local steps/s, evaluation excluded.

    python scripts/bench.py                       # default experiment (FashionMNIST CNN), thin runner
    python scripts/bench.py engine.device=cuda    # any Hydra overrides
    python scripts/bench.py --rounds 20 --compare-lightning
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedbench.cli import _compose  # noqa: E402
from fedbench.config import register_configs  # noqa: E402
from fedbench.engine.simulation import Simulation  # noqa: E402


def measure(overrides: list[str], rounds: int, warmup: int = 2) -> dict:
    cfg = _compose(["logger=none", *overrides])
    with tempfile.TemporaryDirectory() as tmp:
        sim = Simulation(cfg, Path(tmp), ROOT / cfg.data.root)
        for t in range(warmup):
            sim.round(t)
        if sim.device.type == "cuda":
            import torch

            torch.cuda.synchronize()
        start = time.perf_counter()
        steps = 0
        for t in range(warmup, warmup + rounds):
            sim.round(t)
            steps += int(sim.participation.last.completed_steps.sum())
        if sim.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        t0 = time.perf_counter()
        sim.evaluate()
        eval_s = time.perf_counter() - t0
    return {"overrides": overrides, "device": str(sim.device), "rounds": rounds, "seconds": round(elapsed, 3),
            "rounds_per_s": round(rounds / elapsed, 3), "local_steps_per_s": round(steps / elapsed, 1),
            "eval_seconds": round(eval_s, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--compare-lightning", action="store_true", help="also time engine.client_runner=lightning")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    register_configs()
    results = [measure(args.overrides, args.rounds)]
    if args.compare_lightning:
        results.append(measure([*args.overrides, "engine.client_runner=lightning"], max(2, args.rounds // 5)))
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
