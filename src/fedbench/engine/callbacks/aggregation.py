"""Aggregation made visible: every round's weight sum is in ``rounds.csv`` (``RoundRecord.weight_sum``); a run
whose weights do not sum to 1 says so once on the terminal and in ``summary.json`` (``aggregation``), with the
range of the sums. Unbiased estimators (``algo.aggregation=unbiased``: w_i = p_i / E[m_i]) are legitimate, and
their sums vary around 1 by design; what this prevents is the silent surprise of a baseline whose rounds step by
a fraction (1/N per active client instead of 1/|S_t|) or a multiple of the average its paper uses."""

from __future__ import annotations

from typing import Any, Dict, Optional

from fedbench.algorithms.base import Aggregation, Weighting
from fedbench.engine.callbacks.base import Callback

TOLERANCE = 1e-6


def _settings(sim) -> tuple:
    cfg = sim.cfg.algo
    return Weighting(cfg.weighting).value, Aggregation(cfg.aggregation).value


class AggregationAudit(Callback):
    def __init__(self, logger):
        self.logger = logger
        self.low: Optional[float] = None
        self.high: Optional[float] = None
        self.said = False

    def on_round_end(self, sim, record) -> None:
        if record.contributors == 0:
            return
        s = record.weight_sum
        self.low = s if self.low is None else min(self.low, s)
        self.high = s if self.high is None else max(self.high, s)
        if abs(s - 1.0) > TOLERANCE and not self.said:
            self.said = True
            weighting, aggregation = _settings(sim)
            self.logger.print(f"[{sim.cfg.algo.name}] note: round {record.round}'s aggregation weights sum to {s:.4g}, "
                              f"not 1 (algo.weighting={weighting}, algo.aggregation={aggregation}); every round's "
                              "sum is in rounds.csv (weight_sum)")

    def summary(self, sim) -> Dict[str, Any]:
        weighting, aggregation = _settings(sim)
        normalized = self.low is None or (abs(self.low - 1) <= TOLERANCE and abs(self.high - 1) <= TOLERANCE)
        return {"weighting": weighting, "aggregation": aggregation, "weights_sum_to_one": normalized,
                "weight_sum_min": self.low, "weight_sum_max": self.high}

    def state_dict(self) -> Dict[str, Any]:
        return {"aggregation_audit": {"low": self.low, "high": self.high, "said": self.said}}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        audit = state.get("aggregation_audit") or {}
        self.low, self.high, self.said = audit.get("low"), audit.get("high"), bool(audit.get("said", False))
