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
MimeLite and their momentum variants -- without per-batch augmentation. ``unsupported`` names the reason
otherwise, checked when the run starts. Injected gradient noise (``client.grad_noise``) is each client's next draw
of its own stream (seed, "grad_noise", round, client) at each step it takes, added before the hook, as under the
sequential runner.

Dropout (``SeededDropout``): each client's keep masks are drawn before the cohort step from its stream
(seed, "dropout", round, client), layer by layer in forward order and step by step, exactly as the sequential
runner draws them, and passed into the vmapped step. BatchNorm: batch statistics over the client's real samples
only (padding masked out), and per-client running statistics r <- (1 - m) r + m s (s: the batch mean and unbiased
variance, m: the layer's momentum), updated for the steps the client takes; each client's buffers go to the
aggregation as under the sequential runner. A round in which a client with a step
hook appears twice (selection with replacement) runs sequentially: its second run must see the state its first
one left.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, vmap
from torch.nn.modules.batchnorm import _BatchNorm

from fedbench.records import Affine, ClientUpdate, RoundContext
from fedbench.rng import torch_rng
from fedbench.training.trainer import GRADIENT_CHUNK


def unsupported(module, trainer_augments: bool) -> Optional[str]:
    """Why this model and data cannot use the cohort runner, or None (the algorithm's side is its declared
    ``batchable``, which the run layer checks first)."""
    from fedbench.models import SeededDropout

    norms = [m for m in module.model.modules() if isinstance(m, _BatchNorm)]
    if any(m.training and m.momentum is None for m in norms):
        return "a BatchNorm layer keeps a cumulative average (momentum=None)"
    owned = {id(b) for m in norms for b in (m.running_mean, m.running_var) if b is not None}
    if any(id(b) not in owned for b in module.flat.buffer_tensors):
        return "the model has floating-point buffers other than BatchNorm statistics"
    if any(isinstance(m, torch.nn.Dropout) and m.p > 0 and not isinstance(m, SeededDropout)
           for m in module.model.modules()):
        return "the model uses torch.nn.Dropout (global RNG) instead of SeededDropout"
    if trainer_augments:
        return "the dataset is augmented per batch"
    return None


class CohortTrainer:
    def __init__(self, module, cohort_size: int, momentum: float, weight_decay: float):
        from fedbench.models import SeededDropout

        self.module, self.cohort_size = module, cohort_size
        self.momentum, self.weight_decay = momentum, weight_decay
        model, flat = module.model, module.flat
        self.norms = [m for m in model.modules() if isinstance(m, _BatchNorm)]
        self.dropouts = [m for m in model.modules() if isinstance(m, SeededDropout) and m.p > 0]
        self._drop_shapes: Optional[list] = None  # per dropout layer in forward order: (layer, per-sample shape)
        offsets, o = {}, 0
        for b in flat.buffer_tensors:
            offsets[id(b)], o = o, o + b.numel()
        #: per norm: the slices of its running mean and variance in the flat buffers (None: not tracked)
        self._running = [None if m.running_mean is None else
                         (slice(offsets[id(m.running_mean)], offsets[id(m.running_mean)] + m.num_features),
                          slice(offsets[id(m.running_var)], offsets[id(m.running_var)] + m.num_features))
                         for m in self.norms]

        def loss(w, x, y, mask, drops):
            stats: dict = {}  # norm index -> (batch mean, unbiased batch variance)
            for layer, keep in zip(self._drop_order(), drops):
                layer.mask = keep
            for k, m in enumerate(self.norms):
                m.forward = lambda z, k=k, m=m: _masked_batch_norm(m, z, mask, stats, k)
            try:
                with module.numerics.autocast():
                    logits = functional_call(model, flat.named_views(model, w), (x,)).float()
            finally:
                for layer in self.dropouts:
                    layer.mask = None
                for m in self.norms:
                    del m.forward
            ce = F.cross_entropy(logits, y, reduction="none")
            return (ce * mask).sum() / mask.sum(), stats

        self._step = vmap(grad_and_value(loss, has_aux=True))

    def _drop_order(self) -> list:
        return [layer for layer, _ in self._drop_shapes] if self.dropouts else []

    def _dropout_shapes(self, x: torch.Tensor) -> list:
        """(layer, per-sample input shape) of each dropout call of a forward pass, in call order (found once, by
        a forward of one sample in eval mode); a layer called twice in one pass is refused."""
        if self._drop_shapes is None:
            seen: list = []
            handles = [d.register_forward_pre_hook(lambda m, a: seen.append((m, tuple(a[0].shape[1:]))))
                       for d in self.dropouts]
            model, mode = self.module.model, self.module.model.training
            model.eval()
            try:
                with torch.no_grad():
                    model(x[:1])
            finally:
                model.train(mode)
                for h in handles:
                    h.remove()
            if len({id(m) for m, _ in seen}) != len(seen):
                raise RuntimeError("a dropout layer is applied twice in one forward pass: the cohort runner "
                                   "cannot reproduce its masks; use engine.client_runner=thin")
            self._drop_shapes = seen
        return self._drop_shapes

    def _keep_masks(self, owners, entries, runs, T: int, B: int, device) -> tuple:
        """Per dropout layer, the (C, T, B, *shape) keep masks the sequential runner would draw: client i's
        stream (seed, "dropout", round, i) of its own job (``owners``: (trainer, round context) per entry), step
        by step, layer by layer in forward order."""
        if not self.dropouts:
            return ()
        shapes = self._dropout_shapes(owners[0][0].data.x)
        C = len(entries)
        masks = [torch.ones((C, T, B) + shape, device=device) for _, shape in shapes]
        for i, ((client, steps, _, _), (_, b), (trainer, rc)) in enumerate(zip(entries, runs, owners)):
            gen = torch_rng(trainer.seed, "dropout", rc.round, client)
            for s in range(steps):
                for (layer, shape), mask in zip(shapes, masks):
                    keep = torch.rand((b,) + shape, generator=gen, device=gen.device) >= layer.p
                    mask[i, s, :b] = keep.to(device)
        return tuple(masks)

    def updates(self, trainer, rc: RoundContext, entries: Sequence[Tuple[int, int, dict, Optional[Affine]]],
                start: torch.Tensor) -> List[ClientUpdate]:
        """The ``ClientUpdate`` of each entry (client, local steps, ``local_options``, its hook's ``Affine`` or
        None), in order, ``cohort_size`` at a time; the trainer's streams and counters are used as
        ``trainer.train`` would."""
        return self.updates_of([(trainer, rc, entries, start)])[0]

    def updates_of(self, jobs: Sequence[tuple]) -> List[List[ClientUpdate]]:
        """``updates`` of several jobs' rounds at once (a packed sweep, ``fedbench.pack``): ``jobs`` are
        (trainer, round context, entries, start) with the same model; their entries, job after job, are trained
        ``cohort_size`` at a time, each from its own job's start point, learning rate, streams and buffers.
        Entries whose runs differ so much in size (full-data batches of unequal clients) that those chunks would
        pad to more than ``PAD_WASTE`` times their real work are trained in chunks of similar work instead
        (``work_chunks``), where no job repeats a client (whose runs must keep their order). Returns each job's
        updates in its entries' order."""
        items = [(j, entry) for j, (_, _, entries, _) in enumerate(jobs) for entry in entries]
        shapes = [(steps, jobs[j][0].batch_of(client, opts.get("batch_size"))) for j, (client, steps, opts, _) in items]
        chunks = [list(range(k, min(k + self.cohort_size, len(items)))) for k in range(0, len(items), self.cohort_size)]
        work = [steps * b for steps, b in shapes]
        padded = sum(len(c) * max(shapes[i][0] for i in c) * max(shapes[i][1] for i in c) for c in chunks)
        if padded > PAD_WASTE * sum(work) and len({(j, e[0]) for j, e in items}) == len(items):
            chunks = [sorted(c) for c in work_chunks(work, self.cohort_size)]  # a job's entries stay adjacent
        updates: List[Optional[ClientUpdate]] = [None] * len(items)
        for chunk in chunks:
            for i, update in zip(chunk, self._cohort(jobs, [items[i] for i in chunk])):
                updates[i] = update
        out: List[List[ClientUpdate]] = [[] for _ in jobs]
        for (j, _), update in zip(items, updates):
            out[j].append(update)
        return out

    def gradients(self, trainer, rc: RoundContext, clients: Sequence[int], w: torch.Tensor) -> torch.Tensor:
        """(len(clients), d): each client's mean cross-entropy gradient over all its data at the flat point ``w``
        (``ClientTrainer.gradient`` without a sample draw: batch statistics, BN running statistics untouched), the
        clients vmapped in chunks of similar size padded and masked (at most ``GRADIENT_SAMPLES`` padded samples a
        chunk, or one client), where ``can_batch_gradients`` allows it."""
        sizes = [int(trainer.data.sizes[c]) for c in clients]
        offsets = trainer.data.offsets
        out = torch.empty((len(clients), w.numel()), dtype=w.dtype, device=w.device)
        self.module.train()
        for chunk in work_chunks(sizes, self.cohort_size, GRADIENT_SAMPLES):
            n = max(sizes[i] for i in chunk)
            idx = torch.zeros((len(chunk), n), dtype=torch.long, device=w.device)
            mask = torch.zeros((len(chunk), n), dtype=w.dtype, device=w.device)
            for row, i in enumerate(chunk):
                lo = int(offsets[clients[i]])
                idx[row, :sizes[i]] = torch.arange(lo, lo + sizes[i], device=w.device)
                mask[row, :sizes[i]] = 1.0
            data = trainer.data
            g, _ = self._step(w.expand(len(chunk), -1), data.x[idx], data.y[idx], mask, ())
            out[chunk] = g
        trainer.cost.gradients(sum(sizes))
        return out

    def can_batch_gradients(self, sizes: Sequence[int]) -> bool:
        """Whether ``gradients`` stands for ``ClientTrainer.gradient`` on clients of these sizes: not with dropout
        (the sequential gradient draws its masks chunk by chunk from its own stream), nor with BatchNorm on a client
        of more than ``GRADIENT_CHUNK`` samples (the sequential gradient's batch statistics are then per chunk)."""
        return not self.dropouts and (not self.norms or max(sizes, default=0) <= GRADIENT_CHUNK)

    def _cohort(self, jobs, items):
        entries = [entry for _, entry in items]
        owners = [(jobs[j][0], jobs[j][1]) for j, _ in items]
        spans = {}  # job -> (first, last + 1) of its entries in this chunk (a job's entries are adjacent)
        for i, (j, _) in enumerate(items):
            spans[j] = (spans.get(j, (i, i))[0], i + 1)
        runs: list = []
        for j, (a, b) in spans.items():
            trainer, rc = owners[a]
            runs += trainer.batch_indices_of(rc, [(c, steps, opts.get("batch_size")) for c, steps, opts, _ in
                                                  entries[a:b]])
        start = jobs[items[0][0]][3]
        lrs = torch.tensor([opts.get("lr", rc.lr) for (_, _, opts, _), (_, rc) in zip(entries, owners)],
                           dtype=start.dtype, device=start.device)
        C, T = len(entries), max(steps for _, steps, _, _ in entries)
        B = max(b for _, b in runs)
        device = start.device
        if all(b == B and steps == T for (_, b), (_, steps, _, _) in zip(runs, entries)):  # no padding: one gather
            idx = torch.stack([i for i, _ in runs]).view(C, T, B)
            M = torch.ones((C, T, B), dtype=start.dtype, device=device)
        else:  # pad each client's (steps, b) block into (T, B); padded samples get weight 0
            idx = torch.zeros((C, T, B), dtype=torch.long, device=device)
            M = torch.zeros((C, T, B), dtype=start.dtype, device=device)
            for i, ((ids, b), (_, steps, _, _)) in enumerate(zip(runs, entries)):
                idx[i, :steps, :b] = ids.view(steps, b)
                M[i, :steps, :b] = 1.0
        noise = [(i, *stream) for i, ((client, _, _, _), (trainer, rc)) in enumerate(zip(entries, owners))
                 if (stream := trainer.noise_stream(rc, client)) is not None]
        self.module.train()
        drops = self._keep_masks(owners, entries, runs, T, B, device)
        active = M[:, :, 0] > 0  # (C, T): client i takes step s
        P0 = P = torch.stack([jobs[j][3] for j, _ in items])
        R = torch.stack([trainer.buffers for trainer, _ in owners]) \
            if self.norms and owners[0][0].buffers.numel() else None
        buf = torch.zeros_like(P) if self.momentum else None
        hooks = _stack_affine([a for *_, a in entries], P0)
        losses = torch.zeros(C, T, dtype=start.dtype, device=start.device)
        for s in range(T):
            on = active[:, s]
            X, Y = _gather(jobs, spans, idx[:, s])  # one step's inputs at a time: they stay in cache
            g, (loss, stats) = self._step(P, X, Y, M[:, s] + (~on)[:, None].to(M.dtype),
                                          tuple(d[:, s] for d in drops))
            if R is not None:
                self._track(R, stats, on)
            if noise:
                g = g + _noise_rows(noise, on, g)
            if hooks is not None:
                scale, offset, mu, anchor = hooks
                g = scale[:, None] * g + offset + mu[:, None] * (P - anchor)
            losses[:, s] = torch.where(on, loss, torch.zeros_like(loss))
            if self.weight_decay:
                g = g + self.weight_decay * P
            if buf is not None:
                buf = torch.where(on[:, None], self.momentum * buf + g, buf)
                g = buf
            P = torch.addcmul(P, (lrs * on.to(P.dtype))[:, None], g, value=-1)  # one pass over (C, d)
        for j, (a, b) in spans.items():
            owners[a][0].cost.gradients(sum(run[1] * e[1] for run, e in zip(runs[a:b], entries[a:b])))
        steps_done = torch.tensor([steps for _, steps, _, _ in entries], dtype=losses.dtype, device=losses.device)
        mean_loss = (losses.sum(1) / steps_done.clamp_min(1)).tolist()
        D = P - P0
        return [ClientUpdate(delta=D[i], num_samples=int(trainer.data.sizes[client]), steps=steps,
                             loss=mean_loss[i] if steps else None, buffers=None if R is None else R[i])
                for i, ((client, steps, _, _), (trainer, _)) in enumerate(zip(entries, owners))]

    def _track(self, R: torch.Tensor, stats: dict, on: torch.Tensor) -> None:
        """Running statistics of the clients that took this step: r <- (1 - m) r + m s, per norm layer."""
        for k, (m, where) in enumerate(zip(self.norms, self._running)):
            if where is None or k not in stats:
                continue
            for sl, value in zip(where, stats[k]):
                new = (1 - m.momentum) * R[:, sl] + m.momentum * value
                R[:, sl] = torch.where(on[:, None], new, R[:, sl])


#: the most padded work a regrouped chunk may carry per unit of real work (measured on FedSRC's synthetic
#: federation, 150 clients of 33 to 7,244 samples, full-batch steps: 1.5, 2 and 3 train its oracle's 150 runs in
#: 0.26, 0.21 and 0.25 s on one AVX2 thread, the sequential runner in 0.50 s; docs/engine.md)
PAD_WASTE = 2.0
#: the most padded samples one chunk of ``CohortTrainer.gradients`` holds (a chunk of one client may hold more)
GRADIENT_SAMPLES = 65536


def work_chunks(work: Sequence[int], cap: int, budget: Optional[int] = None) -> List[List[int]]:
    """Indices of ``work`` in increasing work (ties in order), cut into chunks of at most ``cap`` where padding
    every member to the chunk's largest costs at most ``PAD_WASTE`` times the chunk's own work (and at most
    ``budget`` in all, where given, beyond a chunk's first member)."""
    chunks: List[List[int]] = []
    chunk: List[int] = []
    total = 0
    for i in sorted(range(len(work)), key=work.__getitem__):
        padded = (len(chunk) + 1) * work[i]
        if chunk and (len(chunk) == cap or padded > PAD_WASTE * (total + work[i])
                      or (budget is not None and padded > budget)):
            chunks.append(chunk)
            chunk, total = [], 0
        chunk.append(i)
        total += work[i]
    return chunks + [chunk] if chunk else chunks


def _masked_batch_norm(m, x: torch.Tensor, weight: torch.Tensor, stats: dict, k: int) -> torch.Tensor:
    """Training-mode batch norm of one client's batch ``x`` (N, C, ...) over its real samples (``weight`` (N,):
    1 real, 0 padding); ``stats[k]`` gets the batch mean and unbiased variance for the running statistics."""
    dims = [0] + list(range(2, x.dim()))
    shape = [1, -1] + [1] * (x.dim() - 2)
    w = weight.view([-1] + [1] * (x.dim() - 1))
    n = weight.sum() * (x[0, 0].numel())
    mean = (x * w).sum(dims) / n
    centred = x - mean.view(shape)
    var = (centred * centred * w).sum(dims) / n
    stats[k] = (mean.detach(), (var * n / (n - 1)).detach())
    out = centred * torch.rsqrt(var.view(shape) + m.eps)
    return out * m.weight.view(shape) + m.bias.view(shape) if m.affine else out


def _gather(jobs, spans: dict, idx: torch.Tensor) -> tuple:
    """The (C, B, ...) inputs and (C, B) labels of one step's indices ``idx`` (C, B), each entry's from its own
    job's data (``spans``: job -> its entries' range)."""
    if len(spans) == 1:
        data = jobs[next(iter(spans))][0].data
        return data.x[idx], data.y[idx]
    first = jobs[next(iter(spans))][0].data
    X = torch.empty(tuple(idx.shape) + tuple(first.x.shape[1:]), dtype=first.x.dtype, device=first.x.device)
    Y = torch.empty(tuple(idx.shape), dtype=first.y.dtype, device=first.y.device)
    for j, (a, b) in spans.items():
        data = jobs[j][0].data
        torch.index_select(data.x, 0, idx[a:b].reshape(-1), out=X[a:b].view((-1,) + tuple(first.x.shape[1:])))
        torch.index_select(data.y, 0, idx[a:b].reshape(-1), out=Y[a:b].view(-1))
    return X, Y


def _noise_rows(noise: list, on: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """One step's injected gradient noise (C, d): row i is std_i z, z ~ N(0, I) the next draw of client i's
    stream (``noise``: (row, std, generator) per noisy client), as the sequential runner draws it at that step;
    zero for clients without noise or past their last step (their streams do not advance). The draws are made
    where the streams live and moved to the gradients' device in one transfer."""
    z = torch.zeros(g.shape)
    std = torch.zeros(g.shape[0])
    active = on.tolist()
    for i, s, gen in noise:
        if active[i]:
            z[i] = torch.randn(g.shape[1:], generator=gen)
            std[i] = s
    return std.to(g.device, g.dtype)[:, None] * z.to(g.device, g.dtype)


def _stack_affine(maps: list, starts: torch.Tensor) -> Optional[tuple]:
    """Per-client (scale (C,), offset (C, d), mu (C,), anchor (C, d)) of the entries' hooks (an anchor defaults
    to the client's start point, the row of ``starts``); None when no entry has one (identity maps for those
    without)."""
    if all(a is None for a in maps):
        return None
    maps = [a or Affine() for a in maps]
    zeros = torch.zeros_like(starts[0])
    scale = torch.tensor([a.scale for a in maps], dtype=starts.dtype, device=starts.device)
    mu = torch.tensor([a.mu for a in maps], dtype=starts.dtype, device=starts.device)
    offset = torch.stack([zeros if a.offset is None else a.offset for a in maps])
    anchor = torch.stack([start if a.anchor is None else a.anchor for a, start in zip(maps, starts)])
    return scale, offset, mu, anchor
