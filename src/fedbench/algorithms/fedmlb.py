"""FedMLB (Kim, Kim & Han, ICML 2022): multi-level branched regularisation, FedAvg aggregation (``fedmlb_m``: the
preset with ``server_optimizer=momentum``, FedAvgM's server step).

The model is split into blocks (``ZooModel.blocks``; B blocks, the classifier last). For each level l = 1..B-1 a
hybrid path feeds the local model's level-l output h_l through the *global* model's blocks l+1..B (frozen: x_t,
no gradient to them, but gradient to h_l) giving logits q_l. With q the local model's logits:
    loss = CE(q, y) + lambda1 * mean_l CE(q_l, y) + lambda2 * mean_l KL(softmax(q_l/T) || softmax(q/T)).
lambda1 = lambda2 = 0 is FedAvg. A model whose blocks before the classifier hold no parameters (logistic
regression, an MLP without hidden layers) has no hybrid path and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm
from fedbench.errors import require
from fedbench.records import StepHook
from fedbench.options import option


class BranchHook(StepHook):
    def __init__(self, x_global: torch.Tensor, lambda1: float, lambda2: float, temperature: float):
        self.x_global, self.l1, self.l2, self.T = x_global, lambda1, lambda2, temperature

    def loss(self, ctx):
        levels = ctx.levels()
        logits, y = levels[-1], ctx.batch[1]
        ce_hybrid, kl_hybrid = [], []
        log_main = F.log_softmax(logits / self.T, dim=1)
        for level, h in enumerate(levels[:-1], start=1):
            q = ctx.blocks_at(self.x_global, h, level)
            ce_hybrid.append(F.cross_entropy(q, y))
            log_q = F.log_softmax(q / self.T, dim=1)
            kl_hybrid.append(F.kl_div(log_main, log_q, reduction="batchmean", log_target=True))
        return ctx.loss() + self.l1 * torch.stack(ce_hybrid).mean() + self.l2 * torch.stack(kl_hybrid).mean()


class Branched:
    """Mixin: FedMLB's local objective on top of any server rule."""

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        blocks = ctx.block_sizes or []
        require(len(blocks) >= 2 and sum(blocks[:-1]) > 0, "model",
                f"FedMLB needs a model with parameterised blocks before its classifier (block sizes {blocks}).",
                "use a model with hidden layers, e.g. model=cnn_fmnist, lenet5, resnet20 or an mlp with hidden=[...].")
        for key in ("lambda1", "lambda2"):
            require(getattr(cfg, key) >= 0, f"algo.{key}", f"{getattr(cfg, key)} is negative.", "use a weight >= 0.")
        require(cfg.temperature > 0, "algo.temperature", f"{cfg.temperature} is not positive.", "use e.g. 1.")

    def step_hook(self, rc, client, x, payload):
        if self.cfg.lambda1 == 0 and self.cfg.lambda2 == 0:
            return None
        return BranchHook(x, self.cfg.lambda1, self.cfg.lambda2, self.cfg.temperature)


@ALGORITHMS.register("fedmlb")
class FedMLB(Branched, Algorithm):
    batchable = False

    @dataclass
    class Config(AlgoConfig):
        lambda1: float = 1.0
        lambda2: float = 1.0
        temperature: float = option(1.0, gt=0)
