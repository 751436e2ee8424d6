"""Selection on the validation split, never on the test set.

``read_validation`` is the only reader of a trial's results: it keeps the ``round`` and ``val_*`` columns of
``metrics.csv`` and drops everything else (``test_*`` included) before any score is computed. A trial's score is
the mean over its tuning seeds of the rule's per-run score; a run that diverged, failed, or holds no validation
evaluation scores worst (a diverged trial is a result, not a crash). Ties (equal scores) go to the smaller step
size (``client.lr``, then ``algo.server_lr``), then to smaller values of the other searched keys, then to the
earlier trial.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fedbench.errors import FedbenchError
from fedbench.runs import read_status

#: the columns of metrics.csv that selection may read
VALIDATION_COLUMNS = ("round", "val_acc", "val_loss")
WORST = (-math.inf, -math.inf)
#: ``--select`` rules: what each scores (higher is better; ties then go to the smaller step)
RULES = {
    "final": "val_acc at the last evaluation",
    "best": "the highest val_acc over the evaluations",
    "last:K": "the mean val_acc over the last K evaluations",
    "loss": "val_loss at the last evaluation (lower is better)",
    "target:T": "the rounds to the first val_acc >= T (fewer is better; not reached is worst, then final val_acc)",
}


def read_validation(run_dir: Path) -> Dict[str, List[float]]:
    """The validation columns of ``run_dir/metrics.csv`` (``VALIDATION_COLUMNS``; others are dropped unread)."""
    path = Path(run_dir) / "metrics.csv"
    out: Dict[str, List[float]] = {c: [] for c in VALIDATION_COLUMNS}
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if any(row.get(c) in (None, "") for c in VALIDATION_COLUMNS):
                    continue
                for c in VALIDATION_COLUMNS:
                    out[c].append(float(row[c]))
    except (OSError, ValueError, csv.Error):
        return {c: [] for c in VALIDATION_COLUMNS}
    return out


@dataclass(frozen=True)
class Rule:
    """A parsed ``--select`` rule (``RULES``)."""

    name: str
    k: int = 1
    target: float = 0.0

    @classmethod
    def parse(cls, text: str) -> "Rule":
        m = re.fullmatch(r"(final|best|loss)|last:(\d+)|target:([0-9.eE+-]+)", text.strip())
        if not m:
            raise FedbenchError(f"Invalid --select '{text}'. Allowed: {', '.join(RULES)} "
                                f"({'; '.join(f'{k}: {v}' for k, v in RULES.items())}). Fix: pass one of these.")
        if m.group(1):
            return cls(m.group(1))
        if m.group(2):
            k = int(m.group(2))
            if k < 1:
                raise FedbenchError(f"Invalid --select '{text}': K must be >= 1. Fix: pass e.g. last:3.")
            return cls("last", k=k)
        try:
            target = float(m.group(3))
        except ValueError:
            target = math.nan
        if not (0 < target <= 1):
            raise FedbenchError(f"Invalid --select '{text}': the target is a validation accuracy in (0, 1]. "
                                "Fix: pass e.g. target:0.7.")
        return cls("target", target=target)

    def __str__(self) -> str:
        return {"last": f"last:{self.k}", "target": f"target:{self.target:g}"}.get(self.name, self.name)

    def describe(self) -> str:
        return RULES[{"last": "last:K", "target": "target:T"}.get(self.name, self.name)].replace(
            "K", str(self.k)).replace("T", f"{self.target:g}")

    def score(self, val: Dict[str, List[float]]) -> Tuple[float, float]:
        """(score, tie-break score) of one run's validation curves; higher is better."""
        acc, loss, rounds = val["val_acc"], val["val_loss"], val["round"]
        if not acc or not all(math.isfinite(x) for x in acc + loss):
            return WORST
        if self.name == "final":
            return acc[-1], 0.0
        if self.name == "best":
            return max(acc), 0.0
        if self.name == "last":
            tail = acc[-self.k:]
            return sum(tail) / len(tail), 0.0
        if self.name == "loss":
            return -loss[-1], 0.0
        hit = next((r for r, a in zip(rounds, acc) if a >= self.target), None)
        return (-math.inf if hit is None else -hit), acc[-1]


def run_score(rule: Rule, run_dir: Path) -> Tuple[Tuple[float, float], str]:
    """(score, status) of one run: worst unless it completed with validation evaluations."""
    status = read_status(Path(run_dir))
    if status != "completed":
        return WORST, status or "missing"
    return rule.score(read_validation(run_dir)), status


def mean_score(scores: Sequence[Tuple[float, float]]) -> Tuple[float, float]:
    """The mean over tuning seeds, element by element (worst if any seed is worst: -inf propagates)."""
    if not scores:
        return WORST
    return tuple(sum(s[i] for s in scores) / len(scores) for i in range(2))  # type: ignore[return-value]


def _tie_key(params: Dict[str, Any], step_keys: Sequence[str]) -> tuple:
    ordered = list(step_keys) + sorted(k for k in params if k not in step_keys)
    key = []
    for k in ordered:
        v = params.get(k)
        key.append((0, float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v)))
    return tuple(key)


def choose(trials: List[dict], step_keys: Sequence[str]) -> Optional[dict]:
    """The selected trial: the highest score, ties to the smaller step (``step_keys`` in order), then smaller
    values of the other keys, then the earlier trial. None when every trial scored worst (none completed)."""
    ranked = sorted(trials, key=lambda t: (tuple(-x for x in t["score"]), _tie_key(t["params"], step_keys),
                                           t["index"]))
    return ranked[0] if ranked and tuple(ranked[0]["score"]) != WORST else None
