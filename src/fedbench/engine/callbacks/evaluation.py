"""Evaluation of the global model: every ``eval_every`` rounds, at the last round and when the run stops; the
history of ``EvalRecord``s, of which the summary is made."""

from __future__ import annotations

import math
from typing import Any, Dict, List

import numpy as np

from fedbench.engine.callbacks.base import Callback
from fedbench.engine.metrics import EvalRecord, RoundRecord


class Evaluation(Callback):
    def __init__(self, every: int, rounds: int, eval_train: bool):
        self.every, self.rounds, self.eval_train = every, rounds, eval_train
        self.history: List[EvalRecord] = []
        self.window_losses: List[float] = []  # training losses of the rounds since the last evaluation

    def on_round_end(self, sim, record: RoundRecord) -> None:
        self.window_losses.append(record.train_loss)
        r = record.round
        if r % self.every == 0 or r == self.rounds or sim.stop_status is not None:
            sim.emit_evaluate(self.evaluate(sim, record))

    def evaluate(self, sim, record: RoundRecord) -> EvalRecord:
        wall = sim.elapsed_now()
        test_loss, test_acc = sim.evaluate()
        finite = [v for v in self.window_losses if not math.isnan(v)]
        ev = EvalRecord(round=record.round, selected=record.selected, completed=record.completed,
                        train_loss=float(np.mean(finite)) if finite else math.nan, test_loss=test_loss,
                        test_acc=test_acc, wall_time=wall, **sim.trainer.cost.totals())
        if self.eval_train:
            ev.global_train_loss, ev.global_train_acc = sim.evaluate_train()
        if sim.data.x_val is not None:
            ev.val_loss, ev.val_acc = sim.evaluate_val()
        if sim.participation.clocked:
            ev.sim_time_s = sim.participation.clock.now
        self.window_losses = []
        self.history.append(ev)
        return ev

    def state_dict(self) -> Dict[str, Any]:
        return {"history": [ev.row() for ev in self.history], "window_losses": self.window_losses}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.history = [EvalRecord.from_row(row) for row in state["history"]]
        self.window_losses = list(state["window_losses"])
