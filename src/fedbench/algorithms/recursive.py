"""The recursive variance-reduced gradient estimator (SARAH / SPIDER) inside a local run, shared by FedAMD's
miners, FedPAGE's partial rounds and BVR-L-SGD's local steps (FedAMD note Eq. 2):

    g_{k+1} = g_k - grad f(x_{k-1}; B_k) + grad f(x_k; B_k),    x_{k+1} = x_k - eta_l g_{k+1},

both gradients on the step's own batch B_k (same augmented views, same dropout masks: ``StepContext.grad_at``
replays them), so a step costs 2 b gradient evaluations. g_0 and x_{-1} are given; x_{-1} = x_0 (the run's start)
makes the first pair cancel, and ``skip_first`` then takes g_1 = g_0 without evaluating it (b fewer).
"""

from __future__ import annotations

from typing import Optional

import torch

from fedbench.records import StepHook


class RecursiveGradient(StepHook):
    def __init__(self, g0: torch.Tensor, prev: Optional[torch.Tensor] = None, skip_first: bool = False):
        self.g = g0
        self.prev = prev  # x_{-1}; None = the run's start
        self.skip_first = skip_first and prev is None

    def grad(self, ctx):
        current = ctx.params.detach().clone()
        if ctx.step == 0 and self.skip_first:
            g = self.g.clone()
        else:
            g = self.g - ctx.grad_at(ctx.start if self.prev is None else self.prev) + ctx.grad()
        ctx.set_grad(g)
        self.g, self.prev = g, current
