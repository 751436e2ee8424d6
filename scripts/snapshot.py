"""Prove a refactor bit-identical: snapshot every algorithm's outcome before, compare after.

    python scripts/snapshot.py save /tmp/before      # on the code before the change
    python scripts/snapshot.py save /tmp/after       # on the code after it
    python scripts/snapshot.py compare /tmp/before /tmp/after

``save`` runs tiny sweeps through the command line (so it survives any internal move): every algorithm under
several participation processes, client runners (thin, auto -> vmap where it can, two worker processes) and a
model with BatchNorm buffers. A configuration is keyed by its overrides; ``compare`` demands for each one the same
status, the same final parameters, buffers and algorithm state (bit for bit, from the final checkpoint) and the
same ``metrics.csv`` / ``rounds.csv`` rows, leaving out the wall-clock columns. It prints the number of
configurations compared and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
TINY = ["logger=none", "partition.num_clients=10", "rounds=4", "eval_every=2", "client.lr=0.1",
        "client.local_steps=3", "participation.selection.clients_per_round=4", "divergence_factor=null"]
DIGITS = ["dataset=digits", "partition=iid"]
PARTICIPATION = ["uniform", "markov", "straggler", "dropout", "md"]
ALL = None  # every algorithm option
#: (name, algorithms, overrides, participation processes) of each sweep: every algorithm under the participation
#: processes and runners, then the data side (partitions, datasets, models) under two algorithms
SWEEPS = [
    ("thin", ALL, [*DIGITS, "model=logreg", "engine.client_runner=thin"], PARTICIPATION),
    ("auto", ALL, [*DIGITS, "model=logreg", "engine.client_runner=auto"], PARTICIPATION[:3]),
    ("workers", ALL, [*DIGITS, "model=logreg", "engine.workers=2"], PARTICIPATION[:1]),
    ("bn", ALL, [*DIGITS, "model=mlp", "model.hidden=[16]", "model.batch_norm=true", "engine.client_runner=auto"],
     PARTICIPATION[:2]),
    ("partitions", ["fedavg", "scaffold"], ["dataset=digits", "model=logreg",
     "partition=dirichlet,shards,classes_per_client,majority_class,quantity_skew"], PARTICIPATION[:1]),
    ("natural", ["fedavg"], ["dataset=synthetic", "dataset.num_users=10", "partition=natural", "model=logreg"],
     PARTICIPATION[:1]),
    ("models", ["fedavg", "moon"], ["dataset=fmnist", "partition=dirichlet", "client.batch_size=4",
     "model=lenet5,cnn_fmnist,gradma_cnn,mlp_784_100_10,mlp_784_200_100_10_bn,mlp_fedsrc"], PARTICIPATION[:1]),
]
_TIMING = ("wall_time", "elapsed", "per_s", "time_s")


def algorithms() -> list:
    """The algorithm options the CLI offers (registered algorithms and presets)."""
    sys.path.insert(0, str(ROOT / "src"))
    try:
        from fedbench.config import group_options
    except ImportError:  # before the options were registered in the ConfigStore: one YAML file each
        conf = next(p for p in (ROOT / "src" / "fedbench" / "conf", ROOT / "conf") if p.is_dir())
        return sorted(p.stem for p in (conf / "algo").glob("*.yaml"))
    return group_options("algo")


def _rows(path: Path) -> list:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if not any(t in k for t in _TIMING)} for r in csv.DictReader(f)]


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


def record(job: Path) -> dict:
    """What must stay identical for one job directory."""
    key = " ".join(sorted(yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())))
    try:
        summary = json.loads((job / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {"status": "no summary"}
    out = {"key": key, "status": summary.get("status"), "reason": summary.get("reason"),
           "metrics": _rows(job / "metrics.csv"), "rounds": _rows(job / "rounds.csv")}
    ckpts = sorted((job / "checkpoints").glob("round_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    if ckpts:
        state = torch.load(ckpts[-1], weights_only=True)
        out["x"] = _digest(state["x"])
        out["buffers"] = _digest(state["buffers"])
        # algorithm state as a multiset of tensors: a renamed key is not a different outcome
        out["algorithm"] = sorted(f"{tuple(v.shape)}:{_digest(v)}" for v in state["algorithm"].values())
    return out


def save(dest: Path, only: list) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    records = []
    for sweep, names, extra, parts in SWEEPS:
        if only and sweep not in only:
            continue
        out = dest / "runs" / sweep
        cmd = [sys.executable, str(ROOT / "run.py"), "-m", f"algo={','.join(names or algorithms())}",
               f"participation={','.join(parts)}", *TINY, *extra, f"hydra.sweep.dir={out}"]
        proc = subprocess.run(cmd, cwd=dest, capture_output=True, text=True)
        print(f"{sweep}: exit {proc.returncode}", flush=True)
        for job in sorted(d for d in out.iterdir() if (d / ".hydra").is_dir()):
            records.append(record(job))
    (dest / "snapshot.json").write_text(json.dumps(records, indent=1, sort_keys=True))
    print(f"{len(records)} configurations saved in {dest / 'snapshot.json'}")


def compare(before: Path, after: Path) -> int:
    a = {r["key"]: r for r in json.loads((before / "snapshot.json").read_text())}
    b = {r["key"]: r for r in json.loads((after / "snapshot.json").read_text())}
    bad = 0
    for key in sorted(set(a) | set(b)):
        if key not in a:
            continue  # a configuration that did not exist before (a new option)
        if key not in b:
            print(f"missing after: {key}")
            bad += 1
            continue
        diff = [k for k in sorted(set(a[key]) | set(b[key])) if a[key].get(k) != b[key].get(k)]
        if diff:
            bad += 1
            print(f"DIFFERS in {', '.join(diff)}: {key}")
    completed = sum(r["status"] == "completed" for r in a.values())
    print(f"{len(a)} configurations compared ({completed} completed runs), {bad} differ; "
          f"{len(set(b) - set(a))} new configurations")
    return 1 if bad else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("save")
    p.add_argument("dest", type=Path)
    p.add_argument("--only", nargs="*", default=[], help="sweeps to run (default: all)")
    p = sub.add_parser("compare")
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.cmd == "save":
        save(args.dest.resolve(), args.only)
    else:
        raise SystemExit(compare(args.before.resolve(), args.after.resolve()))


if __name__ == "__main__":
    main()
