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
    learning rate, the round's increase of the cost counters, the sum of the aggregation weights the completed
    updates entered with (1 for a normalized average; an unbiased estimator's varies around 1) and the number of
    updates they weight, and the diagnostics the participation process and the algorithm declare (``round_stats``:
    the same keys every round)."""

    round: int
    available: int
    selected: int
    completed: int
    train_loss: float
    lr: float
    grad_evals: int
    floats_up: int
    floats_down: int
    weight_sum: float = 0.0
    contributors: int = 0
    extra: Dict[str, float] = field(default_factory=dict)

    def row(self) -> Dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**out, **self.extra}


def _column(label: str, **default: Any) -> Any:
    """A field labelled ``label`` in reports (``default=None``: a column only some runs have)."""
    return field(metadata={"label": label}, **default)


@dataclass
class EvalRecord:
    """An evaluation of the global model after round ``round``: the mean training loss since the previous one,
    test loss and accuracy, the rounds' wall time so far, the cost counters' totals and, with
    ``engine.eval_train``, the global model's loss and accuracy on the whole training set and, with
    ``data.val_fraction``, on the server's validation set, and, under a participation process on the simulated
    clock (``device_trace``, ``device_capacity``), the simulated seconds so far. A field's ``label`` is how a report
    names it."""

    round: int = _column("rounds")
    selected: int = _column("selected clients")
    completed: int = _column("completed clients")
    train_loss: float = _column("training loss")
    test_loss: float = _column("test loss")
    test_acc: float = _column("test accuracy")
    wall_time: float = _column("wall time (s)")
    grad_evals: int = _column("gradient evaluations")
    floats_up: int = _column("floats uploaded")
    floats_down: int = _column("floats downloaded")
    bytes_up: int = _column("bytes uploaded")
    bytes_down: int = _column("bytes downloaded")
    global_train_loss: Optional[float] = _column("global training loss", default=None)
    global_train_acc: Optional[float] = _column("global training accuracy", default=None)
    val_loss: Optional[float] = _column("validation loss", default=None)
    val_acc: Optional[float] = _column("validation accuracy", default=None)
    sim_time_s: Optional[float] = _column("simulated time (s)", default=None)

    def row(self) -> Dict[str, Any]:
        """The CSV row (the optional training-set columns only when evaluated)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None or k not in OPTIONAL}

    @classmethod
    def from_row(cls, row: Dict[str, Any]) -> "EvalRecord":
        return cls(**row)


OPTIONAL = ("global_train_loss", "global_train_acc", "val_loss", "val_acc", "sim_time_s")
#: columns computed from others when a run is read: name -> (label, the columns summed, a scale)
DERIVED = {"floats": ("floats communicated", ("floats_up", "floats_down"), 1.0),
           "sim_hours": ("simulated time (hours)", ("sim_time_s",), 1 / 3600)}
#: what a report draws: these curves of ``metrics.csv`` against these cost axes
CURVES = ("test_acc", "test_loss", "train_loss")
COST_AXES = ("round", "grad_evals", "floats", "sim_hours")  # sim_hours: only runs on the simulated clock have it


def label(column: str) -> str:
    """How a report names a column of ``metrics.csv`` (or a derived one)."""
    if column in DERIVED:
        return DERIVED[column][0]
    return next(f.metadata["label"] for f in dataclasses.fields(EvalRecord) if f.name == column)
