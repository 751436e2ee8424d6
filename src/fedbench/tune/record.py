"""How a rerun's ``selection.json`` agrees with a recorded one (``docs/tuned/``): the same trials, each tuning run
ending the same way with the same validation score, and the same choice per method.

On the same kind of machine a rerun gives bit-identical scores (counter-based randomness, one thread per job); on
another CPU or a GPU the last bits of the arithmetic move, and a score at a large step can spread by a few hundredths
(docs/reproductions.md shows such reruns). So the check names each difference and the largest score difference
instead of passing or failing: the reader sees whether a regenerated table rests on the recorded choices.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple


def _params(params: Dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()) or "defaults"


def _runs(method: str, trial: dict, recorded: dict, out: List[str]) -> Tuple[int, float]:
    """Compare one trial's runs (one per tuning seed); returns (runs compared, largest |score difference|)."""
    where, count, largest = f"{method} trial {trial['index']} ({_params(trial['params'])})", 0, 0.0
    for seed, old in recorded.get("runs", {}).items():
        new = trial.get("runs", {}).get(seed)
        if new is None:
            out.append(f"{where}, tuning seed {seed}: not run here")
            continue
        count += 1
        if new["status"] != old["status"]:
            out.append(f"{where}, tuning seed {seed}: {new['status']} here, {old['status']} in the record")
        elif new["score"][0] != old["score"][0]:
            a, b = new["score"][0], old["score"][0]
            largest = max(largest, abs(a - b)) if a is not None and b is not None else largest
            out.append(f"{where}, tuning seed {seed}: score {a} here, {b} in the record")
    return count, largest


def differences(here: dict, record: dict) -> Tuple[List[str], int, float]:
    """Every way ``here`` (a rerun's selection.json, as a dict) departs from ``record``: a method or trial missing
    on either side, a trial searching other values, a tuning run that ended otherwise (completed / diverged) or with
    another validation score, another choice. Returns (the differences, the tuning runs compared, the largest
    absolute score difference among them)."""
    out: List[str] = []
    count, largest = 0, 0.0
    for method in [m for m in here["methods"] if m not in record["methods"]]:
        out.append(f"{method}: not in the record")
    for method, old in record["methods"].items():
        new = here["methods"].get(method)
        if new is None:
            out.append(f"{method}: in the record, not in this run")
            continue
        trials = {t["index"]: t for t in new["trials"]}
        for recorded in old["trials"]:
            trial = trials.get(recorded["index"])
            if trial is None:
                out.append(f"{method} trial {recorded['index']} ({_params(recorded['params'])}): not run here")
            elif trial["params"] != recorded["params"]:
                out.append(f"{method} trial {recorded['index']}: {_params(trial['params'])} here, "
                           f"{_params(recorded['params'])} in the record")
            else:
                n, delta = _runs(method, trial, recorded, out)
                count, largest = count + n, max(largest, delta)
        chosen, was = (new.get("chosen") or {}).get("params"), (old.get("chosen") or {}).get("params")
        if chosen != was:
            out.append(f"{method}: chose {_params(chosen) if chosen is not None else 'nothing'} here, "
                       f"{_params(was) if was is not None else 'nothing'} in the record")
    return out, count, largest


def agreement(here: dict, record: dict, shown: int = 12) -> str:
    """A few lines saying whether ``here`` agrees with ``record`` (``differences``), for a person to read."""
    found, count, largest = differences(here, record)
    methods = len(record["methods"])
    if not found:
        return (f"agrees with the record: all {count} tuning runs end alike with identical scores, and the "
                f"{methods} choices are the same")
    lines = [f"differs from the record in {len(found)} place{'s' * (len(found) != 1)} ({count} tuning runs compared"
             + (f"; largest score difference {largest:.4g}" if largest else "") + "):"]
    lines += [f"  {line}" for line in found[:shown]]
    if len(found) > shown:
        lines.append(f"  ... and {len(found) - shown} more")
    return "\n".join(lines)
