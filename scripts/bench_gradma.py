"""What GradMA costs: a round relative to FedAvg's, the QPs' share of it, and the server QP at scale.

    python scripts/bench_gradma.py [--rounds 6] [--reps 3] [--out bench_gradma.json] [--quick]

1. Seconds a round on the default experiment (FashionMNIST, cnn_fmnist, S = 10, I = 5, batch 16) for FedAvg, GradMA-W,
   GradMA: GradMA / FedAvg is the price of the extra gradients. The QPs' overhead is the time spent inside them
   (timed within GradMA's own runs, so machine noise between runs does not enter) over the rest of the round.
   Medians over ``--reps`` runs of ``scripts/bench.py``'s measurement (``--rounds`` rounds after one warm-up
   round, one thread), in this process.
2. The server QP with m = 100 memory entries on the 941,834-parameter GradMA CNN (S = 10 rows change per round),
   flat and per layer, against one GradMA local step of that model (3 gradients, batch 64) measured here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from fedbench import qp  # noqa: E402
from fedbench.algorithms import ALGORITHMS, AlgoContext, RoundContext  # noqa: E402
from fedbench.algorithms import gradma as gradma_module  # noqa: E402
from bench import fedbench_variant  # noqa: E402
from fedbench.cli import _compose  # noqa: E402
from fedbench.config import register_configs  # noqa: E402
from fedbench.training.local import LocalModule  # noqa: E402
from fedbench.training.step import LocalRun  # noqa: E402
from fedbench.training.runners import ThinRunner  # noqa: E402
from fedbench.models import build_model  # noqa: E402
from fedbench.participation import RoundParticipation  # noqa: E402
from fedbench.records import ClientUpdate, Cost  # noqa: E402
from fedbench.rng import torch_rng  # noqa: E402


def seconds_per_round(overrides: list[str], rounds: int, reps: int) -> float:
    """Median over ``reps`` of ``scripts/bench.py``'s measurement (evaluation excluded, one warm-up round)."""
    runs = [fedbench_variant(["engine.num_threads=1", *overrides], "thin", rounds, 1) for _ in range(reps)]
    return statistics.median(1.0 / r["rounds_per_s"] for r in runs)


def qp_share(overrides, rounds, reps) -> tuple[float, float]:
    """(seconds a round, seconds a round inside the two QPs) of GradMA: the worker's projection and the server's
    correction (its inner products, Gram update and solve) are timed inside the same runs."""
    spent = [0.0]
    project, corrected = qp.project, gradma_module.GradMA._corrected

    def timed(fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start
        return wrapper

    qp.project, gradma_module.GradMA._corrected = timed(project), timed(corrected)
    try:
        total = seconds_per_round(overrides, rounds, reps)
    finally:
        qp.project, gradma_module.GradMA._corrected = project, corrected
    return total, spent[0] / (reps * (rounds + 1))


def server_qp_scale(model: list[str], shape: tuple, memory: int, reps: int) -> dict:
    cfg = _compose(["logger=none", *model])
    module = LocalModule(build_model(cfg.model, shape, 10, torch_rng(0, "init")), lr=0.01)
    d, sizes, S = module.flat.dim, module.flat.sizes, memory // 10
    gen = torch.Generator().manual_seed(0)
    out = {"parameters": d, "memory": memory, "changed_rows": S}
    for mode in ("flat", "layer"):
        cls = ALGORITHMS.get_class("gradma")
        algo = cls(cls.Config(worker_qp=False, qp_mode=mode, memory_size=memory),
                   AlgoContext(d, memory, np.ones(memory), torch.device("cpu"), 0, param_sizes=sizes))
        x = torch.zeros(d)
        times = []
        for t in range(10 + reps):
            ids = np.arange(S * t, S * t + S) % memory
            part = RoundParticipation(t, np.ones(memory, bool), ids, np.ones(S, bool), np.full(S, 5),
                                      np.full(memory, S / memory))
            rc = RoundContext(t, 0.01, part)
            algo.begin_round(rc, x)
            for i in ids.tolist():  # deltas with a shared drift and client-specific directions
                delta = 1e-3 * (torch.randn(d, generator=gen) - 0.3)
                algo.accumulate(rc, i, ClientUpdate(delta, 1, 5, 0.0), 1 / S)
            start = time.perf_counter()
            algo.server_update(rc, x)
            if t >= 10:  # memory full
                times.append(time.perf_counter() - start)
        out[f"server_update_{mode}_s"] = statistics.median(times)
        out[f"active_{mode}"] = algo.round_stats(rc)["qp_server_active"]
    runner = ThinRunner(module)
    batch = [(torch.randn(64, *shape, generator=gen), torch.randint(0, 10, (64,), generator=gen))] * 5
    step_times = {}
    for name, hook in (("sgd", None), ("gradma", gradma_module.WorkerQP(module.flat.params.clone(), None, 0.0, False,
                                                                        gradma_module.QPStats()))):
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            runner.run(LocalRun(module.flat.params.clone(), hook, Cost()), None, batch, 0.01)
            times.append((time.perf_counter() - start) / len(batch))
        step_times[name] = statistics.median(times)
    out["local_step_sgd_s"], out["local_step_gradma_s"] = step_times["sgd"], step_times["gradma"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="bench_gradma.json")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (digits, a small MLP): checks the script runs")
    args = ap.parse_args()
    torch.set_num_threads(1)
    register_configs()
    tiny = ["model=mlp", "model.hidden=[16]"]
    base = ["dataset=digits", "partition=iid", "partition.num_clients=20", *tiny] if args.quick else []
    rows = {name: seconds_per_round([*base, f"algo={algo}"], args.rounds, args.reps)
            for name, algo in (("fedavg", "fedavg"), ("gradma_w", "gradma_w"))}
    rows["gradma"], rows["gradma_in_qp"] = qp_share([*base, "algo=gradma"], args.rounds, args.reps)
    result = {"seconds_per_round": rows,
              "gradma_over_fedavg": rows["gradma"] / rows["fedavg"],
              "qp_overhead": rows["gradma_in_qp"] / (rows["gradma"] - rows["gradma_in_qp"]),
              "server_qp": server_qp_scale(tiny, (1, 8, 8), 10, args.reps) if args.quick else
              server_qp_scale(["model=gradma_cnn"], (3, 32, 32), 100, args.reps)}
    print(json.dumps(result, indent=2))
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
