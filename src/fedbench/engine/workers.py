"""``engine.workers=k``: a round's clients trained in k worker processes with one torch thread each.

Each worker builds the run's local stack (data, initial model, numerics, the thin runner and the counter-based
streams) from the config once, at start (``local_stack``), then serves rounds: it receives the round, the global
vector, the BN buffers and its share of the round's entries (client, local steps, ``local_options``, the step
hook's ``Affine`` map or None), trains them one after another exactly as the sequential runner does, and returns
each client's delta, loss, buffers and gradient count. The main process keeps the entries' order, so aggregation
and every algorithm's server state are those of a one-process run; parameters equal the thin runner's to
floating-point reassociation of affine hooks (bit-identical without hooks). Clients are dealt to workers by their
work (steps x batch), largest first; a client drawn twice stays on one worker, in order. What runs: the algorithms
the cohort runner runs (their local steps are plain SGD shaped by ``local_options``, ``finish_update`` and affine
hooks), on any model (BN, dropout, augmentation, gradient noise: the workers run the real thin runner). A round in
which a hooked client appears twice runs in the main process, as under the cohort runner.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import traceback
from pathlib import Path
from typing import List, Optional, Sequence

import torch

from fedbench.records import Affine, ClientUpdate, RoundContext, StepHook

POLL_S = 1.0  # how often a waiting main process checks that its workers are alive


class AffineHook(StepHook):
    """The thin runner's form of an ``Affine`` step map: g' = scale g + offset + mu (w - anchor)."""

    def __init__(self, a: Affine):
        self.a = a

    def grad(self, ctx) -> None:
        a = self.a
        g = ctx.grad() if a.scale == 1.0 else a.scale * ctx.grad()
        if a.offset is not None:
            g = g + a.offset
        if a.mu:
            g = g + a.mu * (ctx.params.detach() - (ctx.start if a.anchor is None else a.anchor))
        ctx.set_grad(g)

    def affine(self) -> Affine:
        return self.a


def _serve(cfg, root: str, device: str, inbox, outbox) -> None:
    """A worker's loop: build the local stack, then answer ("round", ...) messages until ("stop",)."""
    torch.set_num_threads(1)
    try:
        from fedbench.config import register_configs
        from fedbench.engine.stack import local_stack

        register_configs()
        _, module, trainer = local_stack(cfg, Path(root), torch.device(device))
        outbox.put(("ready", None))
    except Exception:
        outbox.put(("error", traceback.format_exc()))
        return
    while True:
        message = inbox.get()
        if message[0] == "stop":
            return
        _, t, lr, start, buffers, entries = message
        try:
            trainer.begin_round()
            trainer.buffers = buffers
            rc = RoundContext(round=t, lr=lr, part=None)
            out = []
            for index, client, steps, opts, affine in entries:
                before = trainer.cost.grad_evals
                u = trainer.train(rc, client, steps, start, None if affine is None else AffineHook(affine),
                                  lr=opts.get("lr"), batch_size=opts.get("batch_size"))
                out.append((index, u.delta.clone(), u.loss, u.buffers, trainer.cost.grad_evals - before))
            outbox.put(("done", out))
        except Exception:
            outbox.put(("error", traceback.format_exc()))


class WorkerPool:
    """k spawned worker processes (``_serve``) and the main process's side of the protocol; ``updates`` has the
    cohort runner's signature, so the round loop uses either the same way."""

    def __init__(self, cfg, root: Path, device: torch.device, k: int):
        ctx = mp.get_context("spawn")  # fork would copy the parent's OpenMP pool state
        self.inboxes = [ctx.Queue() for _ in range(k)]
        self.outbox = ctx.Queue()
        self.procs = [ctx.Process(target=_serve, args=(cfg, str(root), str(device), box, self.outbox), daemon=True)
                      for box in self.inboxes]
        for p in self.procs:
            p.start()
        try:
            self._collect(k, "ready")
        except Exception:
            self.close()
            raise

    def _collect(self, count: int, kind: str) -> list:
        got = []
        while len(got) < count:
            try:
                message = self.outbox.get(timeout=POLL_S)
            except queue.Empty:
                dead = [p for p in self.procs if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"engine.workers: a worker process exited (code {dead[0].exitcode})")
                continue
            if message[0] == "error":
                raise RuntimeError(f"engine.workers: a worker failed:\n{message[1]}")
            got.append(message[1])
        return got

    def can_batch_gradients(self, sizes: Sequence[int]) -> bool:
        """Never: the workers answer an oracle's local runs; its full gradients are computed in this process."""
        return False

    def updates(self, trainer, rc: RoundContext, entries: Sequence[tuple], start: torch.Tensor) -> List[ClientUpdate]:
        """The ``ClientUpdate`` of each entry (client, local steps, ``local_options``, ``Affine`` or None), in order."""
        by_client: dict = {}  # a client drawn twice stays on one worker, in order: its second run's streams
        for i, (client, steps, opts, _) in enumerate(entries):  # are the sequential runner's (occurrence counters)
            by_client.setdefault(client, []).append(i)
        shares: List[list] = [[] for _ in self.procs]
        work = [0] * len(self.procs)

        def cost(i):  # a client smaller than its batch trains on all its samples
            client, steps, opts, _ = entries[i]
            return steps * trainer.batch_of(client, opts.get("batch_size"))

        for group in sorted(by_client.values(), key=lambda g: -sum(map(cost, g))):  # largest first, least loaded
            w = min(range(len(work)), key=work.__getitem__)
            shares[w] += [(i, *entries[i]) for i in group]
            work[w] += sum(map(cost, group))
        busy = [w for w, share in enumerate(shares) if share]
        buffers = trainer.buffers if trainer.buffers is not None and trainer.buffers.numel() else None
        for w in busy:
            self.inboxes[w].put(("round", rc.round, rc.lr, start, buffers, shares[w]))
        out: List[Optional[ClientUpdate]] = [None] * len(entries)
        for results in self._collect(len(busy), "done"):
            for index, delta, loss, buffers_i, grads in results:
                client, steps = entries[index][0], entries[index][1]
                trainer.cost.gradients(grads)
                out[index] = ClientUpdate(delta=delta, num_samples=int(trainer.data.sizes[client]), steps=steps,
                                          loss=loss, buffers=buffers_i)
        return out  # type: ignore[return-value]

    def close(self) -> None:
        for box, p in zip(self.inboxes, self.procs):
            if p.is_alive():
                box.put(("stop",))
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
