"""FedScale's device traces: reading them safely, checking them, and generating plausible ones offline.

FedScale (Lai et al., ICML 2022) ships two files keyed by device id:

* ``client_behave_trace``: ``{id: {"active": [t0, ...], "inactive": [t0', ...], "finish_time": T,
  "duration": ..., "model": ...}}`` -- device ``id`` is online on [active[k], inactive[k]) seconds after the
  trace starts, and the trace repeats with period ``finish_time``;
* ``client_device_capacity``: ``{id: {"computation": ms per sample, "communication": kbit/s}}``.

Both are Python pickles, and unpickling runs code, so ``read_records`` reads a pickle with an unpickler that
admits only dicts, lists, tuples, numbers, strings and booleans (any class or function in the stream is refused
before anything is built), and also reads the same content as JSON (an object keyed by id) or Parquet (one row
per device, an ``id`` column). ``behaviour`` and ``capacity`` check every device and refuse bad values naming the
device and the key.
"""

from __future__ import annotations

import io
import json
import math
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from fedbench.errors import FedbenchError

BEHAVIOUR_KEYS = ("active", "inactive", "finish_time")
CAPACITY_KEYS = ("computation", "communication")
DAY_S = 86400.0


class TraceError(FedbenchError):
    """A trace file that cannot be read, or holds a device the simulation cannot use."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds only the pickle opcodes' own types (dict, list, tuple, set, int, float, str, bytes, bool, None):
    every class or callable the stream names goes through ``find_class``, which refuses it, so no code runs."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it refers to {module}.{name}; only dicts, lists, tuples, numbers and "
                                     "strings are read from a trace")


def _load_pickle(path: Path, raw: bytes) -> Any:
    try:
        return _PlainUnpickler(io.BytesIO(raw)).load()
    except pickle.UnpicklingError as exc:
        raise TraceError(f"'{path}' was refused: {exc}. Convert it to JSON or Parquet, or regenerate it with "
                         "plain Python values.") from None
    except Exception as exc:  # truncated or corrupt stream
        raise TraceError(f"'{path}' is not a readable pickle ({type(exc).__name__}: {exc}).") from None


def _load_parquet(path: Path) -> Dict[Any, Dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:
        raise TraceError(f"'{path}' is not a readable Parquet file ({type(exc).__name__}: {exc}).") from None
    if rows and "id" not in rows[0]:
        raise TraceError(f"'{path}' has no 'id' column (columns: {', '.join(rows[0])}); a trace in Parquet has one "
                         "row per device and its id in a column named 'id'.")
    return {row.pop("id"): row for row in rows}


def _json_key(key: str) -> Any:
    """JSON object keys are strings; FedScale's ids are integers, so a decimal key becomes one."""
    return int(key) if key.lstrip("-").isdigit() else key


def read_records(path: str | Path) -> Dict[Any, Dict[str, Any]]:
    """The ``{device id: {key: value}}`` mapping stored in a FedScale pickle, a JSON object or a Parquet table
    (recognized by their first bytes, whatever the file's name)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise TraceError(f"'{path}' is not a file.")
    raw = path.read_bytes()
    if raw[:4] == b"PAR1":
        data = _load_parquet(path)
    elif raw.lstrip()[:1] in (b"{", b"["):
        try:
            data = json.loads(raw.decode("utf-8"), object_pairs_hook=lambda kv: {_json_key(k): v for k, v in kv})
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TraceError(f"'{path}' is not valid JSON ({exc}).") from None
    elif raw[:1] == b"\x80" or path.suffix in (".pkl", ".pickle"):
        data = _load_pickle(path, raw)
    else:
        raise TraceError(f"'{path}' is neither a pickle, JSON nor Parquet file.")
    if not isinstance(data, dict) or not data:
        raise TraceError(f"'{path}' holds {type(data).__name__}{' (empty)' if not data else ''}, not a mapping "
                         "from device ids to their records.")
    return data


def sorted_ids(ids) -> List[Any]:
    """Device ids in a stable order: numbers and strings apart (a trace may mix them), each sorted."""
    return sorted(ids, key=lambda k: (str(type(k)), k))


def _number(path, device, key, value, low: float = 0.0, strict: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if strict else value >= low)
    if not ok:
        bound = f"> {low:g}" if strict else f">= {low:g}"
        raise TraceError(f"'{path}': device {device!r} has {key}={value!r}; it must be a finite number {bound}.")
    return float(value)


def _record(path, device, rec, keys) -> Dict[str, Any]:
    if not isinstance(rec, dict):
        raise TraceError(f"'{path}': device {device!r} holds {type(rec).__name__}, not a record of {', '.join(keys)}.")
    missing = [k for k in keys if k not in rec]
    if missing:
        raise TraceError(f"'{path}': device {device!r} has no key {missing[0]!r} (a record needs {', '.join(keys)}).")
    return rec


@dataclass
class Behaviour:
    """Online intervals of D devices, flattened: device j's k-th interval is [starts[o_j + k], ends[o_j + k]) with
    o = offsets; the trace of device j repeats with period ``finish[j]`` (FedScale's ``finish_time``)."""

    ids: List[Any]
    starts: np.ndarray  # (M,) float64
    ends: np.ndarray  # (M,)
    offsets: np.ndarray  # (D + 1,) int64
    finish: np.ndarray  # (D,)

    @property
    def num_devices(self) -> int:
        return len(self.ids)

    def online_fraction(self) -> np.ndarray:
        """Fraction of its period each device is online."""
        online = np.add.reduceat(self.ends - self.starts, self.offsets[:-1]) if self.ends.size else 0.0
        counts = np.diff(self.offsets)
        return np.where(counts > 0, online, 0.0) / self.finish

    def to_records(self) -> Dict[Any, Dict[str, Any]]:
        out = {}
        for j, key in enumerate(self.ids):
            lo, hi = self.offsets[j], self.offsets[j + 1]
            out[key] = {"active": self.starts[lo:hi].tolist(), "inactive": self.ends[lo:hi].tolist(),
                        "finish_time": float(self.finish[j]), "duration": float(self.finish[j]), "model": "synthetic"}
        return out


def behaviour(records: Dict[Any, Dict[str, Any]], path: str = "<records>") -> Behaviour:
    """Check a behaviour trace: per device, ``active`` and ``inactive`` lists of equal length with finite times
    >= 0, each interval of positive length, sorted and not overlapping, all within (0, ``finish_time``]."""
    starts, ends, counts, finish = [], [], [], []
    ids = sorted_ids(records)
    for device in ids:
        rec = _record(path, device, records[device], BEHAVIOUR_KEYS)
        act, ina = rec["active"], rec["inactive"]
        for key, seq in (("active", act), ("inactive", ina)):
            if not isinstance(seq, (list, tuple)):
                raise TraceError(f"'{path}': device {device!r} has {key} of type {type(seq).__name__}; a list of "
                                 "times in seconds is needed.")
        if len(act) != len(ina):
            raise TraceError(f"'{path}': device {device!r} has {len(act)} 'active' and {len(ina)} 'inactive' times; "
                             "each online interval needs both.")
        a = np.array([_number(path, device, "active", v) for v in act], dtype=np.float64)
        b = np.array([_number(path, device, "inactive", v) for v in ina], dtype=np.float64)
        end = _number(path, device, "finish_time", rec["finish_time"], strict=True)
        if (b <= a).any():
            k = int(np.argmax(b <= a))
            raise TraceError(f"'{path}': device {device!r} has inactive[{k}]={b[k]:g} <= active[{k}]={a[k]:g}; "
                             "each interval must end after it starts.")
        if (a[1:] < b[:-1]).any():
            k = int(np.argmax(a[1:] < b[:-1])) + 1
            raise TraceError(f"'{path}': device {device!r} has active[{k}]={a[k]:g} before inactive[{k - 1}]="
                             f"{b[k - 1]:g}: its intervals are unsorted or overlap.")
        if b.size and b[-1] > end:
            raise TraceError(f"'{path}': device {device!r} has inactive={b[-1]:g} after finish_time={end:g}, the "
                             "period the trace repeats with.")
        starts.append(a)
        ends.append(b)
        counts.append(a.size)
        finish.append(end)
    return Behaviour(ids, np.concatenate(starts), np.concatenate(ends),
                     np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), np.asarray(finish))


@dataclass
class Capacity:
    """Per device: ``computation`` (ms per training sample) and ``communication`` (kbit/s)."""

    ids: List[Any]
    computation: np.ndarray
    communication: np.ndarray

    def to_records(self) -> Dict[Any, Dict[str, float]]:
        return {k: {"computation": float(c), "communication": float(m)}
                for k, c, m in zip(self.ids, self.computation, self.communication)}


def capacity(records: Dict[Any, Dict[str, Any]], path: str = "<records>") -> Capacity:
    """Check a capacity trace: per device, finite ``computation`` > 0 and ``communication`` > 0."""
    ids = sorted_ids(records)
    comp, comm = [], []
    for device in ids:
        rec = _record(path, device, records[device], CAPACITY_KEYS)
        comp.append(_number(path, device, "computation", rec["computation"], strict=True))
        comm.append(_number(path, device, "communication", rec["communication"], strict=True))
    return Capacity(ids, np.asarray(comp), np.asarray(comm))


# ---- synthetic devices ---------------------------------------------------------------------------------------

def synth_behaviour(num_devices: int, rng: np.random.Generator, days: float = 7.0) -> Behaviour:
    """Plausible mobile-device availability (FedScale's traces are of this shape; the numbers are ours):

    * a nightly charging session most days (probability q_j ~ Beta(4, 2) per day), starting around the device's
      charging time c_j ~ N(23 h, 1.5 h) (+- 1 h from night to night) and lasting LogNormal(log 3 h, 0.6) hours;
    * daytime sessions: Poisson(lambda_j) a day, lambda_j ~ LogNormal(log 6, 0.8) per device (some devices are rarely
      online, a few very often), starting uniformly over the day, with heavy-tailed lengths: Pareto(alpha = 1.5)
      above 10 minutes, capped at 4 hours;
    * overlapping sessions merge; the trace repeats every ``days`` days.

    Measured on 2,000 devices: online 21 % of the time on average (10th-90th percentile 11-35 %), 42 % of the devices
    online at midnight and 13-15 % in the afternoon; median session 19 minutes, 99th percentile 7 hours.
    """
    period = days * DAY_S
    whole_days = max(int(math.ceil(days)), 1)
    starts, ends, counts = [], [], []
    rate = np.exp(rng.normal(np.log(6.0), 0.8, size=num_devices))
    charge = rng.normal(23.0, 1.5, size=num_devices) * 3600.0
    nightly = rng.beta(4.0, 2.0, size=num_devices)
    for j in range(num_devices):
        night = rng.random(whole_days) < nightly[j]
        n0 = int(night.sum())
        t_night = np.flatnonzero(night) * DAY_S + charge[j] + rng.normal(0.0, 3600.0, size=n0)
        len_night = np.exp(rng.normal(np.log(3 * 3600.0), 0.6, size=n0))
        n1 = rng.poisson(rate[j] * days)
        t_day = rng.uniform(0, period, size=n1)
        len_day = np.minimum(600.0 * (1.0 + rng.pareto(1.5, size=n1)), 4 * 3600.0)
        t0 = np.mod(np.concatenate([t_night, t_day]), period)
        length = np.concatenate([len_night, len_day])
        # a session running past the period's end continues at its start (the trace is cyclic)
        over = t0 + length > period
        t0 = np.concatenate([t0, np.zeros(int(over.sum()))])
        t1 = np.concatenate([np.minimum(t0[: length.size] + length, period), (t0[: length.size] + length - period)[over]])
        order = np.argsort(t0, kind="stable")
        a, b = _merge(t0[order], t1[order])
        starts.append(a)
        ends.append(b)
        counts.append(a.size)
    return Behaviour(list(range(1, num_devices + 1)), np.concatenate(starts) if starts else np.zeros(0),
                     np.concatenate(ends) if ends else np.zeros(0),
                     np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), np.full(num_devices, period))


def _merge(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted intervals [a_k, b_k) merged where they overlap or touch."""
    if a.size == 0:
        return a, b
    reach = np.maximum.accumulate(b)
    new = np.concatenate([[True], a[1:] > reach[:-1]])
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:], [a.size]]) - 1
    return a[first], reach[last]


def synth_capacity(ids: List[Any], rng: np.random.Generator) -> Capacity:
    """Device speeds spread over about two orders of magnitude, as in FedScale's capacity file:
    computation ~ LogNormal(log 40 ms per sample, 1.0) and communication ~ LogNormal(log 5,000 kbit/s, 1.0), so the
    1st and 99th percentiles of each are about 100x apart."""
    n = len(ids)
    return Capacity(list(ids), np.exp(rng.normal(np.log(40.0), 1.0, size=n)),
                    np.exp(rng.normal(np.log(5000.0), 1.0, size=n)))


def write_records(records: Dict[Any, Dict[str, Any]], path: str | Path, fmt: str) -> Path:
    """Write ``records`` as FedScale does (``pickle``, plain values only), as ``json`` or as ``parquet``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "pickle":
        path.write_bytes(pickle.dumps(records, protocol=4))
    elif fmt == "json":
        path.write_text(json.dumps({str(k): v for k, v in records.items()}))
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist([{"id": k, **v} for k, v in records.items()]), path)
    else:
        raise ValueError(f"unknown trace format {fmt!r}")
    return path
