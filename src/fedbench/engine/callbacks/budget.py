"""Budgets in cost units: the run ends (status completed, the reason naming the budget) after the first round
whose cumulative counter reaches ``budget.grad_evals`` or ``budget.floats`` (floats up + down), so runs of
different algorithms can be compared at equal computation or communication. The counters are the run's own
(``metrics.csv``); an initialization exchange (``init_cost`` in the summary) is reported apart, as everywhere."""

from __future__ import annotations

from typing import Optional

from fedbench.engine.callbacks.base import Callback


class Budget(Callback):
    def __init__(self, grad_evals: Optional[float], floats: Optional[float]):
        self.grad_evals, self.floats = grad_evals, floats

    def on_round_end(self, sim, record) -> None:
        spent = sim.trainer.cost.totals()
        used = {"grad_evals": spent["grad_evals"], "floats": spent["floats_up"] + spent["floats_down"]}
        for key, limit in (("grad_evals", self.grad_evals), ("floats", self.floats)):
            if limit is not None and used[key] >= limit:
                sim.request_stop("completed", f"budget.{key}={limit:g} reached at round {record.round} "
                                 f"({used[key]:,} {key.replace('_', ' ')})")
                return
