"""Client runners: run local steps of the one persistent ``LocalModule`` from a given starting point.

``ThinRunner`` drives the module's ``training_step`` / ``on_before_optimizer_step`` with a plain loop and the
SGD step of ``configure_optimizers`` written out (momentum buffers fresh per client). ``LightningRunner`` runs the
same module under a fresh ``lightning.Trainer`` per client, for checking. Both perform exactly the same floating-point operations on the same batches, hooks included.
"""

from __future__ import annotations

import logging
import warnings
from typing import Optional

import torch

from fedbench.training.local import LocalModule
from fedbench.training.step import LocalRun, mean_loss


class ClientRunner:
    def __init__(self, module: LocalModule):
        self.module = module

    def load(self, params: torch.Tensor, buffers: Optional[torch.Tensor]) -> None:
        self.module.flat.params.copy_(params)
        if buffers is not None and buffers.numel():
            self.module.flat.buffers.copy_(buffers)

    def run(self, run: LocalRun, buffers, batches, lr: float) -> float:
        """Load ``run.start``/``buffers``, take one SGD step per batch under ``run.hook``; return the mean
        minibatch loss. Afterwards the trained parameters are in ``module.flat.params``."""
        self.load(run.start, buffers)
        self.module.run = run
        try:
            self._steps(batches, lr)
        finally:
            self.module.run = None
        return mean_loss(run.losses)

    def _steps(self, batches, lr: float) -> None:
        raise NotImplementedError


class ThinRunner(ClientRunner):
    """The module's hooks in a plain loop; the optimizer step is ``torch.optim.SGD``'s arithmetic written out
    (``sgd_step``), without the optimizer's per-step wrappers (profiling, hooks, state dictionaries): about a
    third of a small model's step. ``configure_optimizers`` is still what the Lightning runner steps with, and the
    two runners agree bit for bit (tests/test_engine.py)."""

    def __init__(self, module: LocalModule):
        super().__init__(module)
        group = module.configure_optimizers().param_groups[0]
        if group["nesterov"] or group["dampening"] or group["maximize"]:
            raise ValueError("the thin runner's SGD step has no nesterov, dampening or maximize")
        self.params = list(group["params"])
        self.momentum, self.weight_decay = group["momentum"], group["weight_decay"]

    def _steps(self, batches, lr):
        m, params = self.module, self.params
        bufs: list = [None] * len(params)
        m.train()
        for i, batch in enumerate(batches):
            for p in params:
                p.grad = None
            loss = m.training_step(batch, i)
            loss.backward()
            m.on_before_optimizer_step(None)
            sgd_step(params, bufs, lr, self.momentum, self.weight_decay)


def sgd_step(params: list, bufs: list, lr: float, momentum: float, weight_decay: float) -> None:
    """One step of ``torch.optim.SGD`` (its single-tensor path, no dampening or nesterov), op for op:
    g <- g + wd p; b <- g (first step) or momentum b + g; p <- p - lr b (or lr g without momentum). ``bufs``
    holds the momentum buffers (None before the first step)."""
    with torch.no_grad():
        for i, p in enumerate(params):
            g = p.grad
            if g is None:
                continue
            if weight_decay != 0:
                g = g.add(p, alpha=weight_decay)
            if momentum != 0:
                if bufs[i] is None:
                    bufs[i] = g.detach().clone()
                else:
                    bufs[i].mul_(momentum).add_(g, alpha=1)
                g = bufs[i]
            p.add_(g, alpha=-lr)


class _Batches:
    """A re-iterable, sized collection of precomputed batches (what ``Trainer.fit`` accepts as a loader)."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


class LightningRunner(ClientRunner):
    def __init__(self, module: LocalModule, accelerator: str = "cpu"):
        super().__init__(module)
        self.accelerator = accelerator
        for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
            logging.getLogger(name).setLevel(logging.ERROR)

    def _steps(self, batches, lr):
        import lightning as L

        self.module.lr = lr
        trainer = L.Trainer(
            max_steps=len(batches), max_epochs=1, accelerator=self.accelerator, devices=1, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            num_sanity_val_steps=0, limit_val_batches=0, deterministic=False,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(self.module, train_dataloaders=_Batches(batches))


def make_runner(kind: str, module: LocalModule, device: torch.device) -> ClientRunner:
    if kind == "thin":
        return ThinRunner(module)
    return LightningRunner(module, accelerator="gpu" if device.type == "cuda" else "cpu")
