"""Client runners: run local steps of the one persistent ``LocalModule`` from a given starting point.

``ThinRunner`` (default) drives the module's ``training_step`` / ``on_before_optimizer_step`` /
``configure_optimizers`` with a plain loop and one optimizer reused across clients (its state is cleared per
client). ``LightningRunner`` runs the same module under a fresh ``lightning.Trainer`` per client, for checking.
Both perform exactly the same floating-point operations on the same batches, hooks included.
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
    def __init__(self, module: LocalModule):
        super().__init__(module)
        self.optimizer = module.configure_optimizers()

    def _steps(self, batches, lr):
        m, opt = self.module, self.optimizer
        opt.state.clear()
        for group in opt.param_groups:
            group["lr"] = lr
        m.train()
        for i, batch in enumerate(batches):
            opt.zero_grad(set_to_none=True)
            loss = m.training_step(batch, i)
            loss.backward()
            m.on_before_optimizer_step(opt)
            opt.step()


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
