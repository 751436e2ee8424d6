"""Cost of drawing the participation process alone (no training): microseconds per round for each preset.

    python scripts/bench_participation.py                   # N = 250 clients, 2000 rounds
    python scripts/bench_participation.py --clients 1000 --rounds 500
    python scripts/bench_participation.py --clients 10000 --rounds 500 --only fedscale

``fedscale`` replays synthetic devices (one per client, built once: the set-up time is printed apart) with the
capacity dropout timing each round of 5 steps of 20 samples for a 1.7 MB model (W1's CNN).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedbench.cli import _compose  # noqa: E402
from fedbench.config import register_configs  # noqa: E402
from fedbench.participation import LayerContext, ParticipationProcess  # noqa: E402

PRESETS = ["uniform", "regularized", "md", "dropout", "straggler", "bernoulli", "bernoulli_levels", "markov",
           "periodic", "round_robin_dropout", "time_varying", "sinusoidal", "fedscale"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--only", nargs="*", default=PRESETS, choices=PRESETS, metavar="PRESET")
    args = parser.parse_args()
    register_configs()
    n = args.clients
    attrs = {"majority_label": np.arange(n) % 10}
    print(f"{'preset':22s} {'us/round':>10s} {'exact rounds':>13s} {'set-up s':>9s}")
    for preset in args.only:
        cfg = _compose(["logger=none", f"participation={preset}"]).participation
        start = time.perf_counter()
        proc = ParticipationProcess(cfg, LayerContext(n, 0, args.rounds, 5, np.full(n, 100), attrs,
                                                      model_bytes=4 * 431_080, batch_size=20))
        setup = time.perf_counter() - start
        start = time.perf_counter()
        for t in range(args.rounds):
            proc.round(t)
        us = (time.perf_counter() - start) / args.rounds * 1e6
        exact = int(proc.trace_arrays()["expected_exact"].sum())
        print(f"{preset:22s} {us:10.1f} {exact:>6d}/{args.rounds} {setup:9.2f}")


if __name__ == "__main__":
    main()
