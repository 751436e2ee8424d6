"""The records shared by the engine and the algorithms (a neutral module: it imports neither).

``RoundContext`` is what every server hook sees in round t, ``ClientUpdate`` what a client's local run returns,
``StepHook`` the one extension point inside local training, ``Cost`` the computation and communication counters.
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
    # y_I - x, the model change of the local run; None when the client sends no model update (a FedAMD anchor
    # uploads only a gradient, in ``extras``)
    delta: Optional[torch.Tensor]
    num_samples: int
    steps: int
    loss: Optional[float]  # mean minibatch loss of the run (None: no local steps)
    buffers: Optional[torch.Tensor] = None  # BN running statistics after local training
    extras: Dict[str, torch.Tensor] = field(default_factory=dict)  # further uploads (e.g. control variates)

    def uploads(self) -> list:
        """Every tensor the client sends to the server (what ``Cost.upload`` counts)."""
        tensors = [] if self.delta is None else [self.delta]
        return tensors + list(self.extras.values()) + ([self.buffers] if self.buffers is not None else [])


@dataclass
class Affine:
    """A step hook that is affine in the gradient: g' = scale g + offset + mu (w - anchor) (a proximal term in the
    objective, 0.5 mu ||w - anchor||^2, has this gradient; the reported loss stays the cross-entropy)."""

    scale: float = 1.0
    offset: Optional[torch.Tensor] = None
    mu: float = 0.0
    anchor: Optional[torch.Tensor] = None


class StepHook:
    """An algorithm's hook inside one client's local run; one instance per run (its attributes are that run's).

    Each local step: ``loss(ctx)`` returns the minibatch objective to differentiate (default: the cross-entropy
    ``ctx.loss()``); after backward, ``grad(ctx)`` may replace the gradient (``ctx.grad()`` / ``ctx.set_grad``)
    before the optimizer step. ``ctx`` (``fedbench.training.step.StepContext``) carries the batch, the step index,
    the start point, the current point and helpers that evaluate the model at any flat parameter vector on the same
    batch (``grad_at``, ``features_at``, ``blocks_at``). Both client runners call these two methods identically.
    """

    def loss(self, ctx: "StepContext") -> torch.Tensor:
        return ctx.loss()

    def grad(self, ctx: "StepContext") -> None:
        return None

    def affine(self) -> Optional[Affine]:
        """This hook's step as an ``Affine`` map of the gradient, where it is one (the cohort runner then batches
        it across clients); None otherwise."""
        return None


COUNTERS = ("grad_evals", "floats_up", "floats_down", "bytes_up", "bytes_down")


@dataclass
class Cost:
    """The run's cost counters, each incremented in one place.

    Computation: ``grad_evals`` = samples through a backward pass (a step on a batch of b costs b, an extra gradient
    on the same batch another b, a full local gradient n_i), counted by ``gradients`` wherever the engine computes
    one. Communication: ``floats_*`` / ``bytes_*`` of every tensor sent, counted by ``download`` (server -> one
    client) and ``upload`` (one client -> server); the round loop calls them for the model, the algorithm's payload
    and the client's ``ClientUpdate.uploads()``, and an algorithm that exchanges anything else (an initialization
    round, a second exchange within a round) calls them with the tensors it sends.
    """

    grad_evals: int = 0
    floats_up: int = 0
    floats_down: int = 0
    bytes_up: int = 0
    bytes_down: int = 0

    def gradients(self, samples: int) -> None:
        self.grad_evals += int(samples)

    def download(self, *tensors: torch.Tensor) -> None:
        self.floats_down += sum(t.numel() for t in tensors)
        self.bytes_down += sum(t.numel() * t.element_size() for t in tensors)

    def upload(self, *tensors: torch.Tensor) -> None:
        self.floats_up += sum(t.numel() for t in tensors)
        self.bytes_up += sum(t.numel() * t.element_size() for t in tensors)

    def totals(self) -> Dict[str, int]:
        return {k: getattr(self, k) for k in COUNTERS}

    def since(self, before: Dict[str, int]) -> Dict[str, int]:
        """The counters' increase since ``before`` (a ``totals()`` snapshot)."""
        return {k: getattr(self, k) - before[k] for k in COUNTERS}
