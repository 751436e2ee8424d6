"""The records shared by the engine and the algorithms (a neutral module: it imports neither).

``RoundContext`` is what every server hook sees in round t, ``ClientUpdate`` what a client's local run returns,
``StepHook`` the one extension point inside local training, ``Cost`` the gradient-evaluation counter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Dict, Optional

import torch

from fedbench.participation.base import RoundParticipation


@dataclass
class RoundContext:
    """Round t: its participation, the client learning rate, and the round's temporaries.

    ``acc`` is the streamed aggregate (allocated by ``Algorithm.begin_round``); ``scratch`` holds whatever else an
    algorithm computes in one hook of the round and reads in a later one. Both are dropped when the round ends, so
    they never need checkpointing; state that outlives the round is declared on the algorithm.
    """

    round: int
    lr: float
    part: RoundParticipation
    acc: Optional[torch.Tensor] = None
    scratch: SimpleNamespace = field(default_factory=SimpleNamespace)


@dataclass
class ClientUpdate:
    delta: torch.Tensor  # y_I - x, the model change of the local run
    num_samples: int
    steps: int
    loss: float
    buffers: Optional[torch.Tensor] = None  # BN running statistics after local training
    extras: Dict[str, torch.Tensor] = field(default_factory=dict)  # further uploads (e.g. control variates)

    @property
    def upload_bytes(self) -> int:
        tensors = [self.delta, *self.extras.values()] + ([self.buffers] if self.buffers is not None else [])
        return sum(t.numel() * t.element_size() for t in tensors)


class StepHook:
    """An algorithm's hook inside one client's local run; one instance per run (its attributes are that run's).

    Each local step: ``loss(ctx)`` returns the minibatch objective to differentiate (default: the cross-entropy
    ``ctx.loss()``); after backward, ``grad(ctx)`` may replace the gradient (``ctx.grad()`` / ``ctx.set_grad``)
    before the optimizer step. ``ctx`` (``fedbench.engine.step.StepContext``) carries the batch, the step index,
    the start point, the current point and helpers that evaluate the model at any flat parameter vector on the same
    batch (``grad_at``, ``features_at``, ``blocks_at``). Both client runners call these two methods identically.
    """

    def loss(self, ctx: "StepContext") -> torch.Tensor:
        return ctx.loss()

    def grad(self, ctx: "StepContext") -> None:
        return None


@dataclass
class Cost:
    """Gradient evaluations: samples through a backward pass (a step on a batch of b costs b; an extra gradient
    on the same batch another b; a full local gradient n_i). Every gradient the engine computes is counted here."""

    grad_evals: int = 0

    def gradients(self, samples: int) -> None:
        self.grad_evals += int(samples)
