"""``fedbench-traces``: write synthetic device traces in FedScale's format, and check trace files.

    fedbench-traces synth --devices 1000 [--days 7] [--seed 0] [--format pickle|json|parquet] --out DIR
    fedbench-traces check FILE [FILE ...]

``synth`` writes ``DIR/client_behave_trace`` and ``DIR/client_device_capacity`` (``.json`` / ``.parquet`` added
for those formats), the two files ``participation=fedscale`` reads through ``participation.availability.path``
and ``participation.dropout.path``; their statistics are documented in ``fedbench.participation.traces``.
``check`` reads each file with the restricted reader, validates every device and prints a summary.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from fedbench.participation import traces
from fedbench.rng import numpy_rng

SUFFIX = {"pickle": "", "json": ".json", "parquet": ".parquet"}


def synth(args) -> int:
    rng = numpy_rng(args.seed, "traces/synth")
    beh = traces.synth_behaviour(args.devices, rng, args.days)
    cap = traces.synth_capacity(beh.ids, rng)
    out = Path(args.out)
    for name, records in (("client_behave_trace", beh.to_records()), ("client_device_capacity", cap.to_records())):
        path = traces.write_records(records, out / f"{name}{SUFFIX[args.format]}", args.format)
        print(f"fedbench-traces: wrote {path}")
    print(describe_behaviour(beh))
    print(describe_capacity(cap))
    return 0


def describe_behaviour(beh: traces.Behaviour) -> str:
    frac = beh.online_fraction()
    lengths = beh.ends - beh.starts
    q = np.quantile(lengths, [0.5, 0.99]) / 60 if lengths.size else (0.0, 0.0)
    return (f"behaviour: {beh.num_devices:,} devices, {lengths.size:,} online intervals, period "
            f"{np.median(beh.finish) / traces.DAY_S:.3g} days (median); online {frac.mean():.1%} of the time on "
            f"average (10th-90th percentile {np.quantile(frac, 0.1):.1%}-{np.quantile(frac, 0.9):.1%}); sessions: "
            f"median {q[0]:.0f} min, 99th percentile {q[1]:.0f} min")


def describe_capacity(cap: traces.Capacity) -> str:
    c, m = np.quantile(cap.computation, [0.01, 0.5, 0.99]), np.quantile(cap.communication, [0.01, 0.5, 0.99])
    return (f"capacity: {len(cap.ids):,} devices; computation {c[0]:.3g} / {c[1]:.3g} / {c[2]:.3g} ms per sample, "
            f"communication {m[0]:.3g} / {m[1]:.3g} / {m[2]:.3g} kbit/s (1st / 50th / 99th percentile)")


def check(args) -> int:
    for path in args.files:
        records = traces.read_records(path)
        first = next(iter(records.values()))
        if isinstance(first, dict) and set(traces.CAPACITY_KEYS) <= set(first):
            print(f"{path}: {describe_capacity(traces.capacity(records, path))}")
        else:
            print(f"{path}: {describe_behaviour(traces.behaviour(records, path))}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fedbench-traces", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("synth", help="write synthetic FedScale-format behaviour and capacity traces")
    s.add_argument("--devices", type=int, required=True)
    s.add_argument("--days", type=float, default=7.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--format", choices=sorted(SUFFIX), default="pickle")
    s.add_argument("--out", required=True)
    c = sub.add_parser("check", help="read and validate trace files, and summarize them")
    c.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "synth" and (args.devices < 1 or not args.days > 0):
        parser.error("--devices must be >= 1 and --days > 0")
    try:
        return synth(args) if args.command == "synth" else check(args)
    except traces.TraceError as exc:
        print(f"fedbench-traces: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
