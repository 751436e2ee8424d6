"""The typed records a run produces: one ``RoundRecord`` per round (``rounds.csv``, W&B ``round/*``) and one
``EvalRecord`` per evaluation (``metrics.csv``, W&B, the summary's history). Their field names are the CSV
columns."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Optional


@dataclass
class RoundRecord:
    """Round ``round`` (1-based): participation counts, the mean training loss of its completed clients, the client
    learning rate, the round's increase of the cost counters, and the diagnostics the participation process and the
    algorithm declare (``round_stats``: the same keys every round)."""

    round: int
    available: int
    selected: int
    completed: int
    train_loss: float
    lr: float
    grad_evals: int
    floats_up: int
    floats_down: int
    extra: Dict[str, float] = field(default_factory=dict)

    def row(self) -> Dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**out, **self.extra}


@dataclass
class EvalRecord:
    """An evaluation of the global model after round ``round``: the mean training loss since the previous one,
    test loss and accuracy, the rounds' wall time so far, the cost counters' totals and, with
    ``engine.eval_train``, the global model's loss and accuracy on the whole training set."""

    round: int
    selected: int
    completed: int
    train_loss: float
    test_loss: float
    test_acc: float
    wall_time: float
    grad_evals: int
    floats_up: int
    floats_down: int
    bytes_up: int
    bytes_down: int
    global_train_loss: Optional[float] = None
    global_train_acc: Optional[float] = None

    def row(self) -> Dict[str, Any]:
        """The CSV row (the optional training-set columns only when evaluated)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None or k not in OPTIONAL}

    @classmethod
    def from_row(cls, row: Dict[str, Any]) -> "EvalRecord":
        return cls(**row)


OPTIONAL = ("global_train_loss", "global_train_acc")
