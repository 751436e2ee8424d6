"""The vmap cohort runner (``engine.client_runner=vmap``): a round's clients train together.

Parameters of up to ``engine.cohort_size`` clients are stacked into a (C, d) matrix; each local step is one
``torch.func.vmap`` of ``grad`` of the functional model over the cohort, followed by the SGD update of every row
(momentum and weight decay as ``torch.optim.SGD``). Clients that differ in batch size (a client with fewer samples
than ``client.batch_size``, or an algorithm's full-batch option) are padded and masked: a padded sample has weight 0
in its client's mean loss. Clients that differ in local steps (stragglers) are masked per step: a finished client's
row no longer moves. Each client's minibatches come from the same counter-based stream as under the sequential
runners, so a round gives the sequential runner's parameters up to floating-point reassociation (~1e-7).

What runs: algorithms whose local run is SGD on the cross-entropy, shaped only through ``local_options``,
``finish_update`` and step hooks that are affine in the gradient (``StepHook.affine``: g' = scale g + offset +
mu (w - anchor), per client) -- FedAvg, FedAvgM, MIFA, FedVARP, MimiC, amplified FedAvg, SCAFFOLD, FedProx, FedDyn,
MimeLite and their momentum variants -- on models without BatchNorm or dropout, without injected gradient noise.
``unsupported`` names the reason otherwise, checked when the run starts. A round in which a client with a step
hook appears twice (selection with replacement) runs sequentially: its second run must see the state its first
one left.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, vmap

from fedbench.records import Affine, ClientUpdate, RoundContext


def unsupported(algo, module, noise: bool, trainer_augments: bool) -> Optional[str]:
    """Why this run cannot use the cohort runner, or None."""
    from fedbench.algorithms.base import Algorithm
    from fedbench.models import SeededDropout

    cls = type(algo)
    if cls.client_update is not Algorithm.client_update or cls.after_clients is not Algorithm.after_clients \
            or not (cls.step_hook is Algorithm.step_hook or cls.affine_steps):
        return f"algo={algo.cfg.name} shapes its local steps with hooks the cohort runner does not batch"
    if module.flat.buffers.numel():
        return "the model has BatchNorm statistics"
    if any(isinstance(m, (SeededDropout, torch.nn.Dropout)) and m.p > 0 for m in module.model.modules()):
        return "the model uses dropout"
    if noise:
        return "client.grad_noise injects per-client gradient noise"
    if trainer_augments:
        return "the dataset is augmented per batch"
    return None


class CohortTrainer:
    def __init__(self, module, cohort_size: int, momentum: float, weight_decay: float):
        self.module, self.cohort_size = module, cohort_size
        self.momentum, self.weight_decay = momentum, weight_decay
        model, flat = module.model, module.flat

        def loss(w, x, y, mask):
            logits = functional_call(model, flat.named_views(model, w), (x,))
            ce = F.cross_entropy(logits, y, reduction="none")
            return (ce * mask).sum() / mask.sum()

        self._step = vmap(grad_and_value(loss))

    def updates(self, trainer, rc: RoundContext, entries: Sequence[Tuple[int, int, dict, Optional[Affine]]],
                start: torch.Tensor) -> List[ClientUpdate]:
        """The ``ClientUpdate`` of each entry (client, local steps, ``local_options``, its hook's ``Affine`` or
        None), in order, ``cohort_size`` at a time; the trainer's streams and counters are used as
        ``trainer.train`` would."""
        out: List[ClientUpdate] = []
        for k in range(0, len(entries), self.cohort_size):
            out += self._cohort(trainer, rc, entries[k: k + self.cohort_size], start)
        return out

    def _cohort(self, trainer, rc, entries, start):
        runs = [trainer.batch_indices(rc, c, steps, opts.get("batch_size")) for c, steps, opts, _ in entries]
        lrs = torch.tensor([opts.get("lr", rc.lr) for _, _, opts, _ in entries], dtype=start.dtype,
                           device=start.device)
        C, T = len(entries), max(steps for _, steps, _, _ in entries)
        B = max(b for _, b in runs)
        data, device = trainer.data, start.device
        if all(b == B and steps == T for (_, b), (_, steps, _, _) in zip(runs, entries)):  # no padding: one gather
            idx = torch.stack([i for i, _ in runs]).view(C, T, B)
            M = torch.ones((C, T, B), dtype=start.dtype, device=device)
        else:  # pad each client's (steps, b) block into (T, B); padded samples get weight 0
            idx = torch.zeros((C, T, B), dtype=torch.long, device=device)
            M = torch.zeros((C, T, B), dtype=start.dtype, device=device)
            for i, ((ids, b), (_, steps, _, _)) in enumerate(zip(runs, entries)):
                idx[i, :steps, :b] = ids.view(steps, b)
                M[i, :steps, :b] = 1.0
        X, Y = data.x[idx], data.y[idx]
        active = M[:, :, 0] > 0  # (C, T): client i takes step s
        P = start.unsqueeze(0).repeat(C, 1)
        buf = torch.zeros_like(P) if self.momentum else None
        hooks = _stack_affine([a for *_, a in entries], start)
        losses = torch.zeros(C, T, dtype=start.dtype, device=start.device)
        for s in range(T):
            on = active[:, s]
            g, loss = self._step(P, X[:, s], Y[:, s], M[:, s] + (~on)[:, None].to(M.dtype))
            if hooks is not None:
                scale, offset, mu, anchor = hooks
                g = scale[:, None] * g + offset + mu[:, None] * (P - anchor)
            losses[:, s] = torch.where(on, loss, torch.zeros_like(loss))
            if self.weight_decay:
                g = g + self.weight_decay * P
            if buf is not None:
                buf = torch.where(on[:, None], self.momentum * buf + g, buf)
                g = buf
            P = P - (lrs * on.to(P.dtype))[:, None] * g
        sizes = [b for _, b in runs]
        trainer.cost.gradients(sum(b * steps for b, (_, steps, _, _) in zip(sizes, entries)))
        steps_done = torch.tensor([steps for _, steps, _, _ in entries], dtype=losses.dtype, device=losses.device)
        mean_loss = (losses.sum(1) / steps_done.clamp_min(1)).tolist()
        D = P - start
        return [ClientUpdate(delta=D[i], num_samples=int(trainer.data.sizes[client]), steps=steps,
                             loss=mean_loss[i] if steps else None)
                for i, (client, steps, _, _) in enumerate(entries)]


def _stack_affine(maps: list, start: torch.Tensor) -> Optional[tuple]:
    """Per-client (scale (C,), offset (C, d), mu (C,), anchor (C, d)) of the entries' hooks; None when no entry
    has one (identity maps for those without)."""
    if all(a is None for a in maps):
        return None
    maps = [a or Affine() for a in maps]
    zeros = torch.zeros_like(start)
    scale = torch.tensor([a.scale for a in maps], dtype=start.dtype, device=start.device)
    mu = torch.tensor([a.mu for a in maps], dtype=start.dtype, device=start.device)
    offset = torch.stack([zeros if a.offset is None else a.offset for a in maps])
    anchor = torch.stack([start if a.anchor is None else a.anchor for a in maps])
    return scale, offset, mu, anchor
