"""Divergence: the run stops (status diverged, with the reason) when a round's training loss or the global
model is not finite, or when the test loss is not finite or exceeds ``divergence_factor`` x the initial one."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import torch

from fedbench.engine.callbacks.base import Callback


class Divergence(Callback):
    def __init__(self, factor: Optional[float]):
        self.factor = factor
        self.initial_test_loss: Optional[float] = None

    def on_run_start(self, sim) -> None:
        if not sim.resumed and self.factor is not None:
            self.initial_test_loss = sim.evaluate()[0]

    def on_round_end(self, sim, record) -> None:
        r = record.round
        if sim.nonfinite_loss:
            sim.request_stop("diverged", f"the training loss of round {r} is not finite")
        elif not bool(torch.isfinite(sim.x).all()):
            sim.request_stop("diverged", f"the global model has non-finite parameters after round {r}")

    def on_evaluate(self, sim, record) -> None:
        r, loss = record.round, record.test_loss
        if not math.isfinite(loss):
            sim.request_stop("diverged", f"the test loss at round {r} is not finite")
        elif self.factor is not None and self.initial_test_loss is not None and loss > self.factor * self.initial_test_loss:
            sim.request_stop("diverged", f"the test loss at round {r} ({loss:.4g}) exceeds divergence_factor="
                             f"{self.factor:g} x the initial test loss ({self.initial_test_loss:.4g})")

    def state_dict(self) -> Dict[str, Any]:
        return {"initial_test_loss": self.initial_test_loss}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.initial_test_loss = state["initial_test_loss"]
