"""Callbacks that observe a run (``base.Callback``), and ``compose``: the run's list, in call order."""

from __future__ import annotations

from typing import List, Optional

from omegaconf import DictConfig

from fedbench.checkpoint import Checkpointer
from fedbench.engine.callbacks.aggregation import AggregationAudit
from fedbench.engine.callbacks.base import Callback
from fedbench.engine.callbacks.budget import Budget
from fedbench.engine.callbacks.checkpointing import Checkpointing
from fedbench.engine.callbacks.divergence import Divergence
from fedbench.engine.callbacks.evaluation import Evaluation
from fedbench.engine.callbacks.outputs import MetricsLog, Pictures, Progress, RoundLog
from fedbench.logging import RunLogger

__all__ = ["AggregationAudit", "Budget", "Callback", "Checkpointing", "Divergence", "Evaluation", "MetricsLog", "Pictures", "Progress",
           "RoundLog", "compose"]


def compose(cfg: DictConfig, logger: RunLogger, checkpointer: Optional[Checkpointer] = None, config: str = "",
            stop=lambda: None) -> List[Callback]:
    """The callbacks of a run with ``logger`` as its sink, in the order they are called: the pictures and the
    rounds' log, the aggregation audit, the divergence test and the cost budget (before evaluation: a run's last round is evaluated),
    evaluation (which sends ``on_evaluate`` to all), the metrics log, the summary and progress lines, checkpoints and stop requests."""
    every = cfg.eval_every if cfg.checkpoint_every is None else cfg.checkpoint_every
    return [Pictures(logger), RoundLog(logger), AggregationAudit(logger), Divergence(cfg.divergence_factor),
            Budget(cfg.budget.grad_evals, cfg.budget.floats),
            Evaluation(cfg.eval_every, cfg.rounds, cfg.engine.eval_train), MetricsLog(logger), Progress(logger),
            Checkpointing(checkpointer, every, cfg.rounds, config, stop, logger)]
