"""fedbench's throughput against a floor: plain PyTorch loops doing the same arithmetic, in the same run.

    python scripts/bench.py                 # W1, W1-big, W2, W3, W4, W5-oracle (minutes), table + bench.json
    python scripts/bench.py --only W2 --reps 5
    python scripts/bench.py --quick         # tiny sizes on scikit-learn's digits (the test suite runs this)
    python scripts/bench.py --only W1 --variants thin floor --set engine.num_threads=0 engine.precision=bf16-mixed
    python scripts/bench.py --sweeps P-W2   # 8-job sweeps end to end: sequential, joblib n_jobs=2, packed
    python scripts/bench.py --sweeps P-lenet --split --set engine.device=cuda   # a packed run's time, split

Each (workload, variant) runs in its own process (so peak RSS is its own): fedbench with the engine's defaults
(``default``: the runner ``engine.client_runner=auto`` picks), the thin and (where the configuration allows it) vmap
runners, and two floors with no framework -- a sequential loop (copy the global vector into the model, I SGD steps
per client, average the deltas) and a vmap-batched loop (torch.func over the round's clients); for the FedSRC-G
oracle workloads, the floors are that round in plain PyTorch (``oracle_floor``). Rounds/s is the median of
``--reps`` timed repetitions after a warm-up; fedbench's split of a
round (local training, aggregation/server, participation, the rest) is timed inside the same rounds, evaluation
apart (one evaluation, shown per round at the workload's eval_every, and against a bare no-grad forward of the same
model over the test set at its best batch size). Ratios are fedbench / floor. ``--set``
appends overrides to every workload (the floors read ``engine.num_threads`` from them: 0 = torch's default, every
core); the workloads pin one thread otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

FMNIST = ["dataset=fmnist", "partition=iid", "model=cnn_fmnist", "client.local_steps=5", "client.batch_size=16",
          "client.lr=0.05", "participation=uniform", "engine.num_threads=1"]
WORKLOADS = {
    "W1": [*FMNIST, "partition.num_clients=100", "participation.selection.clients_per_round=10"],
    "W1-big": [*FMNIST, "partition.num_clients=500", "participation.selection.clients_per_round=50"],
    "W2": [*FMNIST, "model=logreg", "partition.num_clients=1000", "participation.selection.clients_per_round=100",
           "client.local_steps=10", "client.batch_size=10"],
    "W3-mifa": [*FMNIST, "algo=mifa", "partition.num_clients=1000", "participation.selection.clients_per_round=10"],
    "W3-scaffold": [*FMNIST, "algo=scaffold", "partition.num_clients=1000",
                    "participation.selection.clients_per_round=10"],
    "W3-mifa-10k": [*FMNIST, "algo=mifa", "partition.num_clients=10000",
                    "participation.selection.clients_per_round=10", "engine.client_state=memmap"],
    "W4": ["experiment=wang22_fmnist_periodic", "engine.num_threads=1"],
    # FedSRC-G in oracle mode at the paper's 150 clients: every round, every client's K = 5 full-batch local steps
    # (injected noise; 33 to 7,244 samples) to score it, then the S = 10 drawn clients' runs
    "W5-oracle": ["experiment=fedsrc_synthetic", "participation/selection=fedsrc_g_oracle", "client.lr=0.003",
                  "engine.num_threads=1"],
}
#: whole sweeps of 8 jobs (4 learning rates x 2 seeds), timed end to end per launcher (``--sweeps``)
SWEEPS = {
    "P-W2": [*[o for o in WORKLOADS["W2"] if not o.startswith("engine.")], "rounds=60", "eval_every=30",
             "client.lr=0.01,0.02,0.05,0.1", "seed=0,1"],
    "P-mlp": ["experiment=wang22_fmnist_periodic_small", "rounds=300", "eval_every=100",
              "client.lr=2.5e-5,5e-5,1e-4,2e-4", "seed=0,1"],
    # LeNet-5 evaluated every 5 rounds (test and validation), as the MimiC and FedAMD sections run it
    "P-lenet": ["experiment=mimic_fmnist_roundrobin_small", "rounds=40", "client.lr=0.01,0.03,0.1,0.3", "seed=0,1"],
}
LAUNCHERS = {
    "sequential": [],  # Hydra's basic launcher with the engine's defaults: one job after another
    "sequential-thin": ["engine.client_runner=thin"],  # the same with the thin runner (the default until 2026-11)
    "joblib-2": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "engine.num_threads=1"],
    "packed": ["hydra/launcher=packed"],
}
QUICK = {
    "Q-mlp": ["dataset=digits", "partition=iid", "model=mlp", "partition.num_clients=20", "client.local_steps=3",
              "client.batch_size=8", "participation=uniform", "participation.selection.clients_per_round=5",
              "engine.num_threads=1"],
    "Q-oracle": ["experiment=fedsrc_synthetic_small", "participation/selection=fedsrc_g_oracle",
                 "dataset.num_users=12", "participation.selection.clients_per_round=3", "engine.num_threads=1"],
}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _median_rate(step, rounds: int, reps: int, sync) -> tuple:
    step(0)  # warm-up
    times = []
    t = 1
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        for _ in range(rounds):
            step(t)
            t += 1
        sync()
        times.append(time.perf_counter() - start)
    return rounds / statistics.median(times), times


class CallTimer:
    """Wraps functions so each call adds its seconds to ``seconds[key]`` and counts in ``calls[key]``; ``first[key]``
    is the clock at the first call. ``sync`` runs before and after each call (a GPU's synchronize: the call's own
    device work, not what it queued, is then what is timed)."""

    def __init__(self, sync: Callable[[], None] = lambda: None):
        self.sync = sync
        self.seconds: Dict[str, float] = defaultdict(float)
        self.calls: Dict[str, int] = defaultdict(int)
        self.first: Dict[str, float] = {}

    def wrap(self, obj, name: str, key: str) -> None:
        fn = getattr(obj, name)

        def wrapper(*a, **k):
            self.sync()
            t0 = time.perf_counter()
            self.first.setdefault(key, t0)
            try:
                return fn(*a, **k)
            finally:
                self.sync()
                self.seconds[key] += time.perf_counter() - t0
                self.calls[key] += 1
        setattr(obj, name, wrapper)


def child_json(cmd: list, what: str) -> dict:
    """Run ``cmd`` (this script in another process) and return the JSON object on its last line of output."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def read_summaries(sweep_dir: Path) -> list:
    """The ``summary.json`` of each job of a sweep directory."""
    return [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/summary.json"))]


def sweep_seconds(name: str, launcher: str, reps: int, extra: list) -> dict:
    """Wall-clock seconds of ``run.py -m`` over the sweep ``name`` under ``launcher`` (median of ``reps``, each in
    a fresh sweep directory), and the per-job client runner and pack size from the summaries."""
    times = []
    for _ in range(reps):
        out = Path(tempfile.mkdtemp())
        cmd = [sys.executable, str(ROOT / "run.py"), "-m", "logger=none", *SWEEPS[name], *LAUNCHERS[launcher],
               *extra, f"hydra.sweep.dir={out}"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"{name} {launcher} failed:\n{proc.stderr[-2000:]}")
        summaries = read_summaries(out)
        shutil.rmtree(out, ignore_errors=True)
    return {"seconds": statistics.median(times), "times": times, "jobs": len(summaries),
            "client_runner": sorted({s["client_runner"] for s in summaries}),
            "packed_jobs": sorted({s["packed_jobs"] for s in summaries})}


def sweep_split(name: str, extra: list) -> dict:
    """One packed run of sweep ``name`` in this process, its wall time split with the device synchronized around
    each part: start-up (imports, composing the jobs' configurations, building their simulations: until the first
    pack trains), the packs' local training (``fedbench.pack.compute``), evaluation of the global models (test,
    validation and training data: the ``evaluate`` behind ``Simulation.evaluate*``), and the rest (the jobs' serial
    work each round: aggregation, server updates, participation, logs; later packs' start-up; a job the cohort
    runner cannot run trains in the rest)."""
    import torch

    from fedbench import cli, pack
    from fedbench.engine import simulation

    timer = CallTimer(torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None))
    timer.wrap(pack, "compute", "train")
    timer.wrap(simulation, "evaluate", "evaluation")
    out = Path(tempfile.mkdtemp())
    sys.argv = [str(ROOT / "run.py"), "-m", "logger=none", *SWEEPS[name], *LAUNCHERS["packed"], *extra,
                f"hydra.sweep.dir={out}"]
    start = time.perf_counter()
    cli.main()
    total = time.perf_counter() - start
    runners = sorted({s["client_runner"] for s in read_summaries(out)})
    shutil.rmtree(out, ignore_errors=True)
    if "train" not in timer.first:  # the jobs trained outside the packs: start-up would be the whole run
        raise SystemExit(f"{name}: no pack trained, so the run has no training part to split: its jobs ran on the "
                         f"{', '.join(runners)} runner (engine.client_runner=auto keeps convolutional models on the "
                         "thin one on a CPU); add --set engine.client_runner=vmap, or run it on a GPU")
    startup = timer.first["train"] - start
    train, evaluation = timer.seconds["train"], timer.seconds["evaluation"]
    return {"seconds": total, "startup_s": startup, "train_s": train, "evaluation_s": evaluation,
            "rest_s": total - startup - train - evaluation, "evaluations": timer.calls["evaluation"]}


def run_splits(names: list, reps: int, extra: list) -> dict:
    """``sweep_split`` of each sweep, each repetition in its own process (median by total seconds)."""
    print(f"{'sweep':<8} {'seconds':>8} {'start-up':>9} {'train':>8} {'evaluation':>11} {'rest':>8}  "
          "evaluations, per one")
    results = {}
    for name in names:
        runs = [child_json([sys.executable, __file__, "--split-one", name, "--set", *extra], f"{name} split")
                for _ in range(reps)]
        r = results[name] = {**sorted(runs, key=lambda run: run["seconds"])[len(runs) // 2], "runs": runs}
        print(f"{name:<8} {r['seconds']:8.1f} {r['startup_s']:9.1f} {r['train_s']:8.1f} {r['evaluation_s']:11.2f} "
              f"{r['rest_s']:8.1f}  "
              f"{r['evaluations']}, {1000 * r['evaluation_s'] / max(r['evaluations'], 1):.1f} ms", flush=True)
    return results


def run_sweeps(names: list, launchers: list, reps: int, extra: list) -> dict:
    print(f"{'sweep':<8} {'launcher':<16} {'seconds':>8} {'packed is':>10}  runner, pack")
    results = {}
    for name in names:
        row = results[name] = {launcher: sweep_seconds(name, launcher, reps, extra) for launcher in launchers}
        for launcher, r in row.items():
            faster = r["seconds"] / row["packed"]["seconds"] if "packed" in row else float("nan")
            print(f"{name:<8} {launcher:<16} {r['seconds']:8.1f} {faster:9.2f}x  {','.join(r['client_runner'])}, "
                  f"x{','.join(map(str, r['packed_jobs']))}", flush=True)
    return results


def fedbench_variant(overrides: list, runner: str, rounds: int, reps: int) -> dict:
    import torch

    from fedbench.cli import _compose
    from fedbench.config import register_configs
    from fedbench.engine.simulation import Simulation

    register_configs()
    cfg = _compose(["logger=none", *overrides, *([] if runner == "default" else [f"engine.client_runner={runner}"])])
    run_dir = Path(tempfile.mkdtemp())
    sim = Simulation(cfg, run_dir, ROOT / cfg.data.root)
    if runner == "vmap" and sim.cohort is None:
        return {"skipped": "vmap unsupported"}
    timer = CallTimer()  # host time inside the timed rounds (the rounds' own sync brackets them)
    timer.wrap(sim.participation, "round", "participation")
    timer.wrap(sim.algo, "client_update", "train")
    if sim.cohort is not None:
        timer.wrap(sim.cohort, "updates", "train")
    for name in ("accumulate", "server_update", "begin_round"):
        timer.wrap(sim.algo, name, "server")
    sync = torch.cuda.synchronize if sim.device.type == "cuda" else (lambda: None)
    rate, times = _median_rate(sim.round, rounds, reps, sync)
    total = sum(times)
    sim.evaluate()  # warm-up: first-call kernel selection and allocations are not evaluation's cost
    sync()
    t0 = time.perf_counter()
    sim.evaluate()
    sync()
    eval_s = time.perf_counter() - t0
    rss = _rss_mb()  # before the bare forward's large batches
    bare_s = _bare_forward(sim, sync)
    per_round = {k: timer.seconds[k] / (rounds * reps + 1) for k in ("train", "server", "participation")}
    per_round["rest"] = max(total / (rounds * reps) - sum(per_round.values()), 0.0)
    per_round["evaluation"] = eval_s / (cfg.eval_every)
    sim.close()
    store = sim.store.report()
    shutil.rmtree(run_dir, ignore_errors=True)  # memmap client state can be gigabytes
    return {"rounds_per_s": rate, "split_s": per_round, "eval_s": eval_s, "bare_forward_s": bare_s,
            "peak_rss_mb": rss,
            "client_state_bytes": store.get("bytes"), "eval_every": cfg.eval_every, "device": str(sim.device), "num_clients": sim.data.num_clients,
            "dim": sim.dim}


def _bare_forward(sim, sync) -> float:
    """Seconds of a bare no-grad forward of the same model over the test tensors at the best of three batch sizes:
    what evaluation cannot beat."""
    import torch

    model, x = sim.module.model.eval(), sim.data.x_test
    best = float("inf")
    with torch.no_grad():
        model(x[:256])  # warm-up
        for bs in (256, 1024, 4096):
            t0 = time.perf_counter()
            for xb in x.split(bs):
                model(xb)
            sync()
            best = min(best, time.perf_counter() - t0)
    return best


def floor_variant(overrides: list, batched: bool, rounds: int, reps: int) -> dict:
    """Plain PyTorch: the same data, model, S, I, batch and lr; uniform S-of-N sampling, FedAvg's mean delta (for
    a FedSRC-G oracle workload, ``oracle_floor``)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call, grad

    from fedbench.cli import _compose
    from fedbench.config import register_configs
    from fedbench.data import build_federated
    from fedbench.engine.stack import resolve_device
    from fedbench.models import build_model

    register_configs()
    cfg = _compose(["logger=none", *overrides])
    if cfg.engine.num_threads:
        torch.set_num_threads(cfg.engine.num_threads)
    device = resolve_device(cfg.engine.device)
    data = build_federated(cfg.dataset, cfg.partition, ROOT / cfg.data.root, 0, True)
    data.to(device)
    model = build_model(cfg.model, data.input_shape, data.num_classes, torch.Generator().manual_seed(0)).to(device)
    params = list(model.parameters())
    x = torch.nn.utils.parameters_to_vector(params).detach()
    s, rng = cfg.participation.selection.clients_per_round, np.random.default_rng(0)
    steps, b, lr = cfg.client.local_steps, cfg.client.batch_size, cfg.client.lr
    names = [k for k, _ in model.named_parameters()]
    shapes = [p.shape for p in params]
    sizes = [p.numel() for p in params]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def logits(w, xb):  # the model at the flat parameters w
        ws = dict(zip(names, [t.view(sh) for t, sh in zip(torch.split(w, sizes), shapes)]))
        return functional_call(model, ws, (xb,))

    selection = cfg.participation.selection
    if selection.kind == "fedsrc_g" and getattr(selection.get("mode"), "name", selection.get("mode")) == "oracle":
        def loss_sum(w, xb, yb, mask):  # a client's mean loss over its real (unmasked) rows
            losses = F.cross_entropy(logits(w, xb), yb, reduction="none")
            return (losses * mask).sum() / mask.sum()

        step = oracle_floor(data, x, model, grad(loss_sum), batched, steps, lr, s, cfg.client.grad_noise, rng)
    else:
        def loss_fn(w, xb, yb):
            return F.cross_entropy(logits(w, xb), yb)

        step = fedavg_floor(data, x, model, grad(loss_fn), batched, steps, b, lr, s, rng)
    rate, _ = _median_rate(step, rounds, reps, sync)
    return {"rounds_per_s": rate, "peak_rss_mb": _rss_mb()}


def fedavg_floor(data, x, model, grad_fn, batched: bool, steps: int, b: int, lr: float, s: int, rng) -> Callable:
    """A FedAvg round in plain PyTorch: S of N clients drawn uniformly without replacement, each runs ``steps`` SGD
    steps of ``b`` rows drawn with replacement from its own, x += (1/S) sum Delta_i (FedAvg, McMahan et al. 2017,
    Alg. 1, with equal weights and a server step of 1). ``batched``: the S runs vmapped (``grad_fn`` of the flat
    parameters and a batch); else one client after another on ``model`` with torch.optim.SGD. Returns the round
    (``round_(t)``), whose ``state["x"]`` is the model after the latest one."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.func import vmap

    n, offsets = len(data.offsets) - 1, np.asarray(data.offsets)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=lr)
    step_all = vmap(grad_fn)
    state = {"x": x}

    def draw():  # the clients and each one's batches, (S, steps, b) row indices
        clients = rng.choice(n, s, replace=False)
        idx = np.stack([rng.integers(offsets[c], offsets[c + 1], (steps, b)) for c in clients])
        return torch.from_numpy(idx).to(x.device)

    def round_seq(t):
        w, idx = state["x"], draw()
        acc = torch.zeros_like(w)
        for i in range(s):
            torch.nn.utils.vector_to_parameters(w.clone(), params)  # (views of the copy: w stays the round's start)
            for k in range(steps):
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(data.x[idx[i, k]]), data.y[idx[i, k]]).backward()
                opt.step()
            acc += torch.nn.utils.parameters_to_vector(params).detach() - w
        state["x"] = w + acc / s

    def round_vmap(t):
        w, idx = state["x"], draw()
        X, Y = data.x[idx], data.y[idx]
        P = w.unsqueeze(0).repeat(s, 1)
        for k in range(steps):
            P = P - lr * step_all(P, X[:, k], Y[:, k])
        state["x"] = (P - w).mean(0) + w

    round_ = round_vmap if batched else round_seq
    round_.state = state  # the model after the latest round
    return round_


def oracle_floor(data, x, model, grad_fn, batched: bool, steps: int, lr: float, s: int, nu: float,
                 rng) -> Callable:
    """A FedSRC-G oracle round in plain PyTorch (FedSRC note §1.4): every client's K full-batch steps from x_t with
    its injected noise N(0, s_i^2 I), s_i = nu u_i, scored q_i ||Delta_i|| (q_i = n_i / n); S draws with replacement
    from p_i proportional to the score; the drawn clients' runs again; x += sum (q_i / (S p_i)) Delta_i.
    ``batched``: each group of runs vmapped (``grad_fn`` of the flat parameters, a batch and a row mask), every
    client padded to the group's largest (the mask keeps the mean over its own rows), the naive way to batch ragged
    full-batch steps; else one client after another on ``model`` with autograd. Returns the round
    (``round_(t)``), whose ``state["x"]`` is the model after the latest one."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.func import vmap

    counts = np.diff(data.offsets.numpy())
    q = counts / counts.sum()
    std = torch.as_tensor(nu * rng.uniform(size=len(counts)), dtype=x.dtype, device=x.device)
    step_all = vmap(grad_fn)

    params = list(model.parameters())

    def runs_seq(clients, w):
        out = []
        for c in clients:
            lo, hi = int(data.offsets[c]), int(data.offsets[c + 1])
            xb, yb = data.x[lo:hi], data.y[lo:hi]
            torch.nn.utils.vector_to_parameters(w.clone(), params)  # the parameters become views of the copy
            for _ in range(steps):
                grads = torch.autograd.grad(F.cross_entropy(model(xb), yb), params)
                with torch.no_grad():
                    for p, g in zip(params, grads):
                        p.sub_(lr * (g + std[c] * torch.randn_like(g)))
            out.append(torch.nn.utils.parameters_to_vector(params).detach() - w)
        return torch.stack(out)

    def runs_vmap(clients, w):
        n = torch.as_tensor(counts[clients], device=x.device)[:, None]
        rows = torch.arange(int(n.max()), device=x.device)
        lo = data.offsets[torch.as_tensor(clients)].to(x.device)[:, None]
        mask = (rows < n).to(x.dtype)
        idx = lo + torch.minimum(rows, n - 1)  # padded rows repeat the client's last one (masked out)
        xb, yb = data.x[idx], data.y[idx]
        v = w.expand(len(clients), -1)
        for _ in range(steps):
            v = v - lr * (step_all(v, xb, yb, mask) + std[clients][:, None] * torch.randn_like(v))
        return v - w

    runs = runs_vmap if batched else runs_seq
    state = {"x": x}

    def round_(t):
        w = state["x"]
        everyone = np.arange(len(counts))
        score = q * runs(everyone, w).norm(dim=1).cpu().numpy()
        p = score / score.sum()
        drawn = rng.choice(len(counts), s, replace=True, p=p)
        weights = torch.as_tensor(q[drawn] / (s * p[drawn]), dtype=w.dtype, device=w.device)
        state["x"] = w + (weights[:, None] * runs(drawn, w)).sum(0)

    round_.state = state  # the model after the latest round
    return round_


VARIANTS = ("default", "thin", "vmap", "floor", "floor-vmap")  # default: no engine.client_runner override


def _machine() -> dict:
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "gpu": gpu,
            "torch": torch.__version__, "python": platform.python_version()}


def run_one(name: str, variant: str, rounds: int, reps: int, quick: bool, extra: list = ()) -> dict:
    overrides = [*(QUICK if quick else WORKLOADS)[name], *extra]
    if variant in ("default", "thin", "vmap"):
        return fedbench_variant(overrides, variant, rounds, reps)
    return floor_variant(overrides, variant == "floor-vmap", rounds, reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (seconds), for the test suite")
    parser.add_argument("--only", nargs="*", help="workloads to run (default: all)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per timed repetition")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions (median)")
    parser.add_argument("--out", default="bench.json")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every workload")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS,
                        help="variants to run (ratios need floor and floor-vmap)")
    parser.add_argument("--one", nargs=2, metavar=("WORKLOAD", "VARIANT"), help=argparse.SUPPRESS)
    parser.add_argument("--sweeps", nargs="*", metavar="SWEEP", choices=list(SWEEPS),
                        help=f"time whole 8-job sweeps per launcher instead ({', '.join(SWEEPS)}; none listed: all)")
    parser.add_argument("--launchers", nargs="*", default=list(LAUNCHERS), choices=list(LAUNCHERS))
    parser.add_argument("--split", action="store_true",
                        help="with --sweeps: one packed run of each, its time split into training, evaluation, rest")
    parser.add_argument("--split-one", metavar="SWEEP", choices=list(SWEEPS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.split_one:
        print(json.dumps(sweep_split(args.split_one, args.set)))
        return
    if args.sweeps is not None and args.split:
        results = run_splits(args.sweeps or list(SWEEPS), args.reps, args.set)
        Path(args.out).write_text(json.dumps({"machine": _machine(), "splits": results}, indent=2))
        print(f"wrote {args.out}")
        return
    if args.sweeps is not None:
        results = run_sweeps(args.sweeps or list(SWEEPS), args.launchers, args.reps, args.set)
        Path(args.out).write_text(json.dumps({"machine": _machine(), "sweeps": results}, indent=2))
        print(f"wrote {args.out}")
        return
    rounds = args.rounds or (3 if args.quick else 5)
    if args.one:
        print(json.dumps(run_one(*args.one, rounds, args.reps, args.quick, args.set)))
        return
    names = args.only or list(QUICK if args.quick else WORKLOADS)
    results = {"machine": _machine(), "overrides": args.set, "workloads": {}}
    print(f"{'workload':<12} {'variant':<11} {'rounds/s':>9} {'vs floor':>9} {'vs vmap floor':>13} "
          f"{'train':>7} {'server':>7} {'partic.':>7} {'rest':>7} {'eval/r':>7} {'RSS MB':>7}")
    for name in names:
        row = {}
        for variant in args.variants:
            if args.quick:  # in this process (seconds; peak RSS is then the process's so far)
                row[variant] = run_one(name, variant, rounds, args.reps, True, args.set)
                continue
            cmd = [sys.executable, __file__, "--one", name, variant, "--rounds", str(rounds), "--reps",
                   str(args.reps), "--set", *args.set]
            row[variant] = child_json(cmd, f"{name} {variant}")
        results["workloads"][name] = row
        for variant, r in row.items():
            if "skipped" in r:
                continue
            ratio = r["rounds_per_s"] / row["floor"]["rounds_per_s"] if "floor" in row else float("nan")
            ratio_v = r["rounds_per_s"] / row["floor-vmap"]["rounds_per_s"] if "floor-vmap" in row else float("nan")
            sp = r.get("split_s", {})
            cols = " ".join(f"{1000 * sp[k]:6.1f}m" if k in sp else f"{'':>7}"
                            for k in ("train", "server", "participation", "rest", "evaluation"))
            print(f"{name:<12} {variant:<11} {r['rounds_per_s']:9.2f} {ratio:8.2f}x {ratio_v:12.2f}x {cols} "
                  f"{r['peak_rss_mb']:7.0f}", flush=True)
            if "bare_forward_s" in r:
                times = r["eval_s"] / r["bare_forward_s"]
                print(f"{'':<12} {variant:<11} one evaluation {r['eval_s']:.2f} s = {times:.2f}x a bare no-grad "
                      "forward over the test set at the best batch size", flush=True)
        if name == "W4" and "thin" in row:
            best = max((v for k, v in row.items() if k in ("thin", "vmap") and "rounds_per_s" in v),
                       key=lambda v: v["rounds_per_s"])
            hours = 300_000 * (1 / best["rounds_per_s"] + best["split_s"]["evaluation"]) / 3600
            results["workloads"][name]["projected_300k_rounds_h"] = hours
            print(f"W4: 300,000 rounds projected at {hours:.1f} h (with an evaluation every 50 rounds)")
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
