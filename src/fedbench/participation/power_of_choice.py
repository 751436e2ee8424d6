"""Power-of-Choice (Cho et al., 2020; FedSRC note §1.6, A19): a biased baseline.

Each round a candidate set of d available clients is drawn without replacement with probability proportional to
q_i (``candidates``; 0 = 2S), each candidate reports its local loss F_i(x_t) (x_t sent and one float back, counted;
a forward pass over its data, or over ``loss_samples`` of them: Cho et al.'s computation-efficient cpow-d), and
the S candidates with the highest loss train. Selection depends on the
model, so its aggregate is **not** unbiased: no inclusion probability is known, and the round reports the nominal
min(S, |A|)/|A| (as uniform sampling), flagged as not exact. With the unbiased aggregation and q uniform the
weights are then 1/S: the simple average over the selected clients, as in Cho et al.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedbench.errors import ConfigError, require
from fedbench.participation.base import SELECTION, LayerConfig
from fedbench.participation.sampling import Weights, client_weights, gumbel_top
from fedbench.participation.selection import KEY, _Counted
from fedbench.options import option


@SELECTION.register("power_of_choice")
class PowerOfChoice(_Counted):
    adaptive = True
    biased = True

    @dataclass
    class Config(LayerConfig):
        clients_per_round: int = option(10, ge=1)
        candidates: int = 0  # d; 0 = 2 S (capped at N)
        loss_samples: int = 0  # samples per candidate's loss estimate; 0 = all its data (pow-d)
        weights: Weights = Weights.samples

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.d = min(cfg.candidates or 2 * self.s, self.num_clients)
        require(self.s <= self.d <= self.num_clients, f"{KEY}.candidates", f"{cfg.candidates}.",
                f"use 0 (= 2S) or a value between clients_per_round ({self.s}) and the number of clients.")
        self.q = client_weights(cfg.weights, ctx.sizes)

    def select(self, t, available, rng):
        if self.oracle is None:
            raise ConfigError(f"{KEY}.kind", "power_of_choice needs the candidates' losses at x_t, which only a "
                              "simulation provides.", "run it through run.py.")
        ids = np.flatnonzero(available)
        d = min(self.d, ids.size)
        if d == 0:
            return ids
        candidates = ids[gumbel_top(np.log(self.q[ids]), d, rng)]
        samples = self.cfg.loss_samples or None
        losses = np.array([self.oracle.loss(i, samples) for i in candidates.tolist()])
        order = np.lexsort((candidates, -losses))  # highest loss first, ties by id
        return np.sort(candidates[order[: min(self.s, d)]])
