"""SCAFFOLD (Karimireddy et al., 2020), option II (MimiC note §4.3).

Client i with control c_i and server control c takes local steps y <- y - eta_l (g_i(y) - c_i + c), then
c_i^+ = c_i - c + (x - y)/(K eta_l) and uploads (Delta y_i, Delta c_i = c_i^+ - c_i): twice the upload bytes.
Server: x <- x + eta_s sum_i w_i Delta y_i;  c <- c + sum_{i in C_t} p_i Delta c_i, which keeps c = sum_i p_i c_i
(= (1/N) sum c_i). K is the number of steps the client completed. ``update_controls=false`` keeps every control
at 0 (then SCAFFOLD is FedAvg). ``control_init=gradient`` starts from c_i = grad f_i(x_0) on all of client i's data
and c = sum_i p_i c_i (FedAMD's SCAFFOLD baseline; one full-participation round whose cost is reported apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm
from fedbench.algorithms.fedavg import FedAvg
from fedbench.records import Affine, StepHook


class ControlInit(Enum):
    zeros = "zeros"
    gradient = "gradient"


class ControlHook(StepHook):
    def __init__(self, correction: torch.Tensor):
        self.correction = correction  # c - c_i

    def grad(self, ctx):
        flat = ctx.module.flat
        torch._foreach_add_(flat.grads(), flat.views(self.correction))

    def affine(self):
        return Affine(offset=self.correction)


@ALGORITHMS.register("scaffold")
class Scaffold(Algorithm):
    affine_steps = True
    @dataclass
    class Config(FedAvg.Config):
        update_controls: bool = True
        control_init: ControlInit = ControlInit.zeros

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.c = self.declare("server_control", torch.zeros(ctx.dim, device=ctx.device))
        self.controls = self.declare_table("client_control")

    def initialize(self, trainer, x):
        if ControlInit(self.cfg.control_init) != ControlInit.gradient or not self.cfg.update_controls:
            return
        for client, c_i in self.gradient_round(trainer, x, "scaffold/init"):
            self.controls.set(client, c_i)
            self.c.add_(c_i, alpha=float(self.p[client]))

    def begin_round(self, rc, x):
        super().begin_round(rc, x)
        rc.scratch.c_change = torch.zeros(self.ctx.dim, device=self.ctx.device)

    def payload(self, rc, client):
        return {"server_control": self.c} if self.cfg.update_controls else {}

    def step_hook(self, rc, client, x, payload):
        return ControlHook(payload["server_control"] - self.controls.get(client)) if self.cfg.update_controls \
            else None

    def finish_update(self, trainer, rc, client, x, update):
        """c_i+ = c_i - c + (x - y_i) / (K eta_l) (option II); the change is uploaded."""
        if self.cfg.update_controls:
            c_i = self.controls.get(client)
            c_new = c_i - self.c - update.delta / (update.steps * rc.lr)
            update.extras["control_change"] = c_new - c_i
            self.controls.set(client, c_new)
        return update

    def accumulate(self, rc, client, update, weight):
        super().accumulate(rc, client, update, weight)
        if "control_change" in update.extras:
            rc.scratch.c_change.add_(update.extras["control_change"], alpha=float(self.p[client]))

    def server_update(self, rc, x):
        super().server_update(rc, x)
        self.c.add_(rc.scratch.c_change)
