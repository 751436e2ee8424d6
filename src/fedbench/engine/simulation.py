"""The round loop: participation -> local updates (streamed into the aggregate) -> server update. Everything that
observes a run (evaluation, divergence, checkpoints, logs, pictures, the summary) is a callback
(``fedbench.engine.callbacks``)."""

from __future__ import annotations

import math
import time
import weakref
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

import numpy as np
import torch
from omegaconf import DictConfig

from fedbench.algorithms import ALGORITHMS, AlgoContext
from fedbench.checkpoint import Checkpointer
from fedbench.config.checks import validate
from fedbench.training.client_state import ClientStateStore
from fedbench.training.cohort import CohortTrainer, unsupported
from fedbench.engine.stack import (EVAL_BATCH, auto_threads, clients_per_round, cpu_description, local_stack,
                                   resolve_device)
from fedbench.config.launchers import check_engine_here, cores
from fedbench.engine.workers import WorkerPool
from fedbench.training.evaluation import evaluate
from fedbench.training.schedule import lr_at
from fedbench.engine.oracle import EngineOracle
from fedbench.errors import ConfigError, require
from fedbench.options import typed
from fedbench.logging import RunLogger
from fedbench.participation import LayerContext, ParticipationProcess
from fedbench.records import Cost, RoundContext
from fedbench.engine.callbacks import AggregationAudit, Divergence, Evaluation, RoundLog, compose
from fedbench.engine.metrics import EvalRecord, RoundRecord

#: engine.client_runner=auto on a CPU keeps the thin runner when the largest client batch exceeds this many times
#: the median (FedSRC's synthetic federation, uniform selection, full-batch steps on 150 clients of 33 to 7,244
#: samples: 27 rounds/s thin against 19 under vmap; docs/engine.md)
RAGGED = 2.0


@dataclass
class CohortRequest:
    """A round's local runs to train as one batch: ``entries`` (client, local steps, ``local_options``, affine
    hook) of ``sim``'s round ``rc``, from ``sim.x`` with ``sim.trainer``'s streams and counters."""

    sim: "Simulation"
    rc: RoundContext
    entries: list

    def compute(self) -> list:
        """The entries' ``ClientUpdate``s, in order, from the simulation's own runner (cohort or workers)."""
        return self.sim.cohort.updates(self.sim.trainer, self.rc, self.entries, self.sim.x)


def drive(steps, compute: Callable[[CohortRequest], list] = CohortRequest.compute):
    """Run a generator of ``CohortRequest``s (``Simulation.round_steps`` / ``run_steps``, or a job of
    ``fedbench.cli.job_steps``) to its end, answering each request with ``compute``; return its value."""
    try:
        request = next(steps)
        while True:
            request = steps.send(compute(request))
    except StopIteration as done:
        return done.value


@dataclass
class RunControl:
    """How a run is checkpointed and stopped: ``stop()`` returns why the run must stop after the current round
    (e.g. "SIGTERM"), or None; ``config`` (the resolved config as JSON) is saved with each checkpoint."""

    checkpointer: Optional[Checkpointer] = None
    config: str = ""
    stop: Callable[[], Optional[str]] = lambda: None


class Simulation:
    """One federated training run. ``run()`` returns the summary dict (also written to ``summary.json``);
    ``resume=True`` opens existing memmap client-state files for ``load_state_dict`` instead of zeroing them."""

    def __init__(self, cfg: DictConfig, run_dir: Path, root: Path, resume: bool = False):
        validate(cfg)
        check_engine_here(cfg)  # the cores this job has where it runs (a cluster node's, say)
        require(not Path(root).exists() or Path(root).is_dir(), "data.root", f"{root} is a file.",
                "give a folder (datasets are looked for, downloaded and cached there).")
        self.cfg = cfg
        self.client = typed(cfg.client)  # read every round (lr, local_steps): the Config instance
        self.rounds = int(cfg.rounds)
        self.run_dir = Path(run_dir)
        self.device = resolve_device(cfg.engine.device)
        seed = cfg.seed
        # the set-up runs at this job's thread count, never at the one its process's previous job left
        torch.set_num_threads(cfg.engine.num_threads or cores())
        self.data, self.module, self.trainer = local_stack(cfg, root, self.device, warn=True)
        model = self.module.model
        kind = cfg.engine.client_runner.value
        self.eval_batch = cfg.engine.eval_batch_size or EVAL_BATCH.get(self.device.type, 1024)
        self.x = self.module.flat.params.detach().clone()
        self.buffers = self.module.flat.buffers.detach().clone()
        self.trainer.buffers = self.buffers
        n = self.data.num_clients
        self.participation = ParticipationProcess(cfg.participation, LayerContext(
            n, seed, cfg.rounds, cfg.client.local_steps, self.data.sizes, self.data.attrs,
            model_bytes=self.x.numel() * self.x.element_size(), batch_size=cfg.client.batch_size))
        self._refuse_degenerate()
        state_dir = cfg.engine.client_state_dir
        self.store = ClientStateStore(n, self.device, cfg.engine.client_state.value,
                                      Path(state_dir) if state_dir else self.run_dir / "client_state", reuse=resume)
        algo_cls = ALGORITHMS.get_class(cfg.algo.kind)
        if algo_cls.plain_sgd:
            for key in ("momentum", "weight_decay"):
                require(cfg.client[key] == 0, f"client.{key}", f"{cfg.client[key]} with algo={cfg.algo.name}, whose "
                        "local steps follow its own recursion (the local optimizer must be plain SGD).",
                        f"use client.{key}=0.")
        self.algo = algo_cls(
            cfg.algo, AlgoContext(self.x.numel(), n, self.data.sizes, self.device, seed, self.store,
                                  cfg.client.local_steps, cfg.client.batch_size, self.module.flat.sizes,
                                  [sum(p.numel() for p in b.parameters()) for b in model.blocks()],
                                  clients_per_round(cfg, n))
        )
        self.cohort = None
        why = self._batch_unsupported() or unsupported(self.module, self.data.augment != "none") \
            if kind in ("vmap", "auto") else "not asked for"
        if kind == "auto" and why is None and self.device.type == "cpu" \
                and any(isinstance(m, torch.nn.Conv2d) for m in model.modules()):
            why = "a convolutional model is compute-bound: batching its clients does not pay on a CPU (docs/engine.md)"
        ragged = self._ragged_batches(cfg.client.batch_size) \
            if kind == "auto" and why is None and self.device.type == "cpu" else None
        why = why or ragged
        self.runner_kind = "vmap" if why is None else ("thin" if kind == "auto" else kind)
        self.runner_reason = (f"engine.client_runner={kind}" if kind != "auto" else f"auto: {why}" if why else
                              "auto: nothing in this configuration keeps its clients from batching")
        # the start-up line and summary.json say why
        if kind == "vmap":
            require(why is None, "engine.client_runner", f"vmap cannot run this configuration: {why}.",
                    "use engine.client_runner=thin.")
        if self.runner_kind == "vmap":
            self.cohort = CohortTrainer(self.module, cfg.engine.cohort_size, cfg.client.momentum,
                                        cfg.client.weight_decay)
        #: what answers an oracle's questions about every client: the run's batched runner, or under auto a cohort
        #: runner of its own where only the clients' raggedness kept the rounds on the thin runner
        self.oracle_runner = self.cohort
        if kind == "auto" and ragged and self.participation.selection.asks_every_client:
            self.oracle_runner = CohortTrainer(self.module, cfg.engine.cohort_size, cfg.client.momentum,
                                               cfg.client.weight_decay)
            self.runner_reason += ("; the selection's questions to every available client each round are batched "
                                   "(vmap, in chunks of similar size)")
        cohort = 1 if self.cohort is None else min(cfg.engine.cohort_size, clients_per_round(cfg, n))
        self.num_threads = cfg.engine.num_threads or auto_threads(self.dim, cfg.client.batch_size, cohort)
        if cfg.engine.workers > 1:
            self._start_workers(root)
        torch.set_num_threads(self.num_threads)
        self.init_cost = Cost().totals()
        self.next_round = 0  # rounds done
        self.elapsed = 0.0  # seconds spent in the rounds so far
        self._clock = time.perf_counter()
        self.nonfinite_loss = False  # a client's training loss in the last round was NaN or infinite
        self.callbacks: list = []  # composed by ``run``
        self._loaded: Optional[Dict[str, Any]] = None  # a loaded checkpoint, for the callbacks ``run`` composes
        self.resumed = False
        self.packed_jobs = 1  # the jobs of its pack under hydra/launcher=packed (fedbench.pack); 1: alone
        self.stop_status: Optional[str] = None  # diverged | interrupted, once a callback asked to stop
        self.stop_reason: Optional[str] = None

    def _start_workers(self, root: Path) -> None:
        """``engine.workers=k``: the round's clients go to k one-thread worker processes (``WorkerPool``)."""
        cfg, k = self.cfg, self.cfg.engine.workers
        require(cfg.engine.client_runner.value in ("thin", "auto"), "engine.workers",
                f"{k} worker processes run the thin runner; engine.client_runner={cfg.engine.client_runner.value} "
                "was asked for.", "use engine.client_runner=thin (or auto), or engine.workers=0.")
        require(self.device.type == "cpu", "engine.workers", f"worker processes are for CPU runs; this run is on "
                f"{self.device}.", "use engine.workers=0 on a GPU (the cohort runner batches clients there).")
        why = self._batch_unsupported()
        require(why is None, "engine.workers", f"{k} worker processes cannot run this configuration: {why}.",
                "use engine.workers=0.")
        self.cohort = self.oracle_runner = WorkerPool(cfg, root, self.device, k)
        self._finalizer = weakref.finalize(self, self.cohort.close)
        self.runner_kind = f"thin x {k} workers"  # the main process keeps its threads for evaluation
        self.runner_reason = f"engine.workers={k}"

    def _ragged_batches(self, batch_size: int) -> Optional[str]:
        """Why batching a round's clients does not pay on a CPU when their batches differ widely (full-data batches
        of clients of unequal sizes: padding, or chunks of a few clients each), or None (docs/engine.md)."""
        b = np.minimum(batch_size, self.data.sizes)
        if b.max() <= RAGGED * np.median(b):
            return None
        return (f"the clients' batches range from {b.min()} to {b.max()} samples (median {np.median(b):g}): padding "
                "a round's clients to its largest does not pay on a CPU (docs/engine.md)")

    def _batch_unsupported(self):
        """Why the algorithm's local runs cannot be batched (its declared ``batchable``), or None."""
        if type(self.algo).batchable:
            return None
        return (f"algo={self.cfg.algo.name} drives its local runs itself or shapes its local steps with hooks that "
                "are not affine maps of the gradient (it declares batchable = False)")

    def close(self) -> None:
        """Stop the worker processes, if any (also done when the simulation is garbage-collected)."""
        if getattr(self, "_finalizer", None) is not None:
            self._finalizer()

    def _refuse_degenerate(self) -> None:
        """Refuse a participation process under which no client can ever complete a round (never available, or
        always dropping out); a process that merely has empty rounds is run, and they are counted."""
        part, cfg = self.participation, self.cfg.participation
        available = part.ctx.long_run_availability > 0
        if cfg.min_available > 0:
            available[:] = True
        if cfg.first_round_full:
            return
        if not bool((available & (part.dropout.p_complete > 0)).any()):
            why = ("no client is ever available" if not available.any()
                   else "every available client drops out with probability 1")
            raise ConfigError("participation", f"{why} under participation={cfg.name}, so no client can ever "
                              "complete a round.", "give some clients availability > 0 and a dropout "
                              "probability < 1.")

    @property
    def dim(self) -> int:
        return self.x.numel()

    def lr(self, t: int) -> float:
        """The client learning rate of round t under ``client.lr_schedule``."""
        return lr_at(self.client.lr_schedule, self.client.lr, t, self.rounds)

    def round(self, t: int) -> RoundRecord:
        """Run round t: participation, local updates streamed into the aggregate, the server update; return its
        record (costs: this round's increase of the counters)."""
        return drive(self.round_steps(t))

    def round_steps(self, t: int):
        """Round t as a generator: it yields the round's ``CohortRequest`` (when a batched runner trains its
        clients) and takes the requested updates back (``drive`` computes them here; a packed sweep,
        ``fedbench.pack``, computes several jobs' requests as one cohort); it returns the ``RoundRecord``."""
        cost = self.trainer.cost
        before = cost.totals()
        oracle = EngineOracle(self.trainer, t, self.lr(t), self.x, self.algo.cfg.server_lr, self.client.local_steps,
                              self.oracle_runner)
        # the round's streams start at their first occurrence twice: for an oracle's probes, and again for the
        # local runs they predict, so a probed client trains on exactly the minibatches it was probed on
        self.trainer.begin_round()
        part = self.algo.plan_round(self.participation.round(t, oracle))
        rc = RoundContext(round=t, lr=self.lr(t), part=part)
        self.algo.begin_round(rc, self.x)
        self.trainer.begin_round()
        model = [self.x, self.buffers] if self.buffers.numel() else [self.x]
        weights = self.algo.entry_weights(rc)
        completed = iter(weights)
        new_buffers = torch.zeros_like(self.buffers) if self.buffers.numel() else None
        buffer_weight = 0.0
        losses = []
        request = self._cohort_request(rc) if self.cohort is not None else None
        batched = iter((yield request)) if request is not None else None
        for client, done, steps in zip(part.selected.tolist(), part.completed.tolist(), part.local_steps.tolist()):
            payload = self.algo.payload(rc, client)
            cost.download(*model, *payload.values())
            if not done:
                continue
            w = float(next(completed))
            if batched is not None:
                update = self.algo.finish_update(self.trainer, rc, client, self.x, next(batched))
            else:
                update = self.algo.client_update(self.trainer, rc, client, steps, self.x, payload)
            self.algo.accumulate(rc, client, update, w)
            self.participation.observe(t, client, update, w)
            if new_buffers is not None and update.buffers is not None and w > 0:
                new_buffers.add_(update.buffers, alpha=w)
                buffer_weight += w
            cost.upload(*update.uploads())
            losses.append(update.loss)
        for update in self.algo.after_clients(self.trainer, rc, self.x):
            cost.upload(*update.uploads())
            losses.append(update.loss)
        self.algo.server_update(rc, self.x)
        self.participation.end_round(t)
        if buffer_weight > 0:
            self.buffers.copy_(new_buffers.div_(buffer_weight))
        losses = [v for v in losses if v is not None]
        self.nonfinite_loss = not all(math.isfinite(v) for v in losses)
        return RoundRecord(round=t + 1, available=int(part.available.sum()), selected=int(part.selected.size),
                           completed=int(part.completed.sum()), train_loss=float(np.mean(losses)) if losses else math.nan,
                           lr=rc.lr, **{k: v for k, v in cost.since(before).items() if not k.startswith("bytes")},
                           weight_sum=float(np.sum(weights)), contributors=int(len(weights)),
                           extra={**self.participation.round_stats(), **self.algo.round_stats(rc)})

    def _cohort_request(self, rc: RoundContext) -> Optional["CohortRequest"]:
        """The round's completed entries to train together (engine.client_runner=vmap, engine.workers), in the
        loop's order; None for a round the loop must run sequentially (a client with a step hook drawn twice)."""
        part, algo = rc.part, self.algo
        ids = part.completed_ids.tolist()
        hooks = [algo.step_hook(rc, c, self.x, algo.payload(rc, c)) for c in ids]
        if len(set(ids)) < len(ids) and any(h is not None for h in hooks):
            return None
        entries = [(c, int(s), algo.local_options(rc, c), None if h is None else h.affine())
                   for c, s, h in zip(ids, part.completed_steps.tolist(), hooks)]
        if any(h is not None and e[3] is None for h, e in zip(hooks, entries)):
            raise RuntimeError(f"algo={algo.cfg.name} declares affine_steps but a step hook has no affine form")
        return CohortRequest(self, rc, entries)

    def initialize(self) -> Dict[str, int]:
        """The algorithm's initialization exchange at x_0 (e.g. FedAMD's cache of full gradients), counted apart
        from the rounds: its costs are returned (summary ``init_cost``) and not included in the run's counters."""
        main = self.trainer.cost
        self.trainer.cost = init = Cost()
        try:
            self.algo.initialize(self.trainer, self.x)
        finally:
            self.trainer.cost = main
        return init.totals()

    def evaluate(self) -> tuple[float, float]:
        self.trainer.runner.load(self.x, self.buffers)
        return evaluate(self.module, self.data.x_test, self.data.y_test, self.eval_batch)

    def evaluate_val(self) -> tuple[float, float]:
        """The global model on the server's validation set (``data.val_fraction``)."""
        self.trainer.runner.load(self.x, self.buffers)
        return evaluate(self.module, self.data.x_val, self.data.y_val, self.eval_batch)

    def evaluate_train(self) -> tuple[float, float]:
        """The global model on the whole training set: f(x) = sum_i (n_i / n) F_i(x), and its accuracy."""
        self.trainer.runner.load(self.x, self.buffers)
        return evaluate(self.module, self.data.x, self.data.y, self.eval_batch)

    # ---- checkpoint ----------------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Everything the rest of the run depends on (the streams are counter-based: the round number is their
        state), the callbacks' declared state included. Client tables are saved through the store (memmap tables
        by reference)."""
        out = {
            "round": self.next_round, "x": self.x, "buffers": self.buffers,
            "algorithm": self.algo.state_dict(tables=False), "client_state": self.store.snapshot(self.next_round),
            "participation": self.participation.state_dict(), "cost": self.trainer.cost.totals(),
            "init_cost": self.init_cost, "elapsed": self.elapsed,
        }
        for cb in self.callbacks:
            out.update(cb.state_dict())
        return out

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.next_round = int(state["round"])
        self.x.copy_(state["x"])
        self.buffers.copy_(state["buffers"])
        self.algo.load_state_dict(state["algorithm"], tables=False)
        self.store.restore(state["client_state"])
        self.participation.load_state_dict(state["participation"])
        for k, v in state["cost"].items():
            setattr(self.trainer.cost, k, int(v))
        self.init_cost, self.elapsed = state["init_cost"], float(state["elapsed"])
        self._loaded = state  # the callbacks' part is loaded when ``run`` composes them

    # ---- the run --------------------------------------------------------------------------------------------
    def request_stop(self, status: str, reason: str) -> None:
        """End the run after the current round with ``status`` (diverged, interrupted); the first request wins."""
        if self.stop_status is None:
            self.stop_status, self.stop_reason = status, reason

    def emit_evaluate(self, record: EvalRecord) -> None:
        for cb in self.callbacks:
            cb.on_evaluate(self, record)

    def elapsed_now(self) -> float:
        """Seconds spent in this run's rounds so far (continued across a resume)."""
        self.elapsed = time.perf_counter() - self._clock
        return self.elapsed

    def run(self, logger: RunLogger, control: Optional[RunControl] = None) -> Dict[str, Any]:
        """Rounds ``next_round`` .. ``rounds`` - 1 (all of them unless a checkpoint was loaded), observed by the
        callbacks of ``fedbench.engine.callbacks.compose``; returns the summary, whose ``status`` is completed,
        diverged or interrupted (``reason`` says why)."""
        return drive(self.run_steps(logger, control))

    def run_steps(self, logger: RunLogger, control: Optional[RunControl] = None):
        """``run`` as a generator of the rounds' ``CohortRequest``s (see ``round_steps``); returns the summary."""
        cfg, control = self.cfg, control or RunControl()
        self.callbacks = compose(cfg, logger, control.checkpointer, control.config, control.stop)
        if self._loaded is not None:
            for cb in self.callbacks:
                cb.load_state_dict(self._loaded)
        self.resumed = self.next_round > 0
        if not self.resumed:
            self._initialize(logger)
        self._clock = time.perf_counter() - self.elapsed
        for cb in self.callbacks:
            cb.on_run_start(self)
        for t in range(self.next_round, self.rounds):
            if self.stop_status is not None:
                break
            record = yield from self.round_steps(t)
            self.next_round = t + 1
            for cb in self.callbacks:
                cb.on_round_end(self, record)
        self.elapsed_now()
        for cb in self.callbacks:
            cb.on_run_end(self)
        return self.summary(self.stop_status or "completed", self.stop_reason)

    def _initialize(self, logger: RunLogger) -> None:
        """Before round 0: the algorithm's initialization exchange, its costs reported apart."""
        start = time.perf_counter()
        self.init_cost = self.initialize()
        if any(self.init_cost.values()):
            self.init_cost["wall_time_s"] = time.perf_counter() - start
            logger.print(f"[{self.cfg.algo.name}] initialization (not counted in the rounds): "
                         f"{self.init_cost['grad_evals']:,} gradient evaluations, {self.init_cost['floats_up']:,} "
                         f"floats up, {self.init_cost['floats_down']:,} floats down, "
                         f"{self.init_cost['wall_time_s']:.1f}s")

    def _observer(self, kind: type):
        return next((cb for cb in self.callbacks if isinstance(cb, kind)), None)

    @staticmethod
    def _val_summary(history: list) -> Dict[str, Any]:
        """Final and best validation accuracy (null without a validation set): what tuning selects on."""
        vals = [h.val_acc for h in history if h.val_acc is not None]
        return {"final_val_acc": vals[-1] if vals else None, "best_val_acc": max(vals) if vals else None,
                "final_val_loss": history[-1].val_loss if history else None}

    def summary(self, status: str = "completed", reason: Optional[str] = None) -> Dict[str, Any]:
        """The run's summary (``summary.json``) from the evaluations so far."""
        evaluation, divergence, rounds = self._observer(Evaluation), self._observer(Divergence), self._observer(RoundLog)
        audit = self._observer(AggregationAudit)
        history = evaluation.history if evaluation else []
        accs = [h.test_acc for h in history]
        best = int(np.argmax(accs)) if accs else None

        def reached(hit):
            return None if hit is None else {
                "round": hit.round, "grad_evals": hit.grad_evals, "floats_up": hit.floats_up,
                "floats_down": hit.floats_down, "floats": hit.floats_up + hit.floats_down,
                **({"sim_time_s": hit.sim_time_s} if hit.sim_time_s is not None else {})}

        targets = {f"{v:g}": reached(next((h for h in history if h.test_acc >= v), None)) for v in self.cfg.targets}
        loss_targets = {f"{v:g}": reached(next((h for h in history if h.global_train_loss <= v), None))
                        for v in self.cfg.loss_targets}
        rounds_done, wall = self.next_round, self.elapsed
        return {
            "status": status,
            "reason": reason,
            "rounds_planned": self.rounds,
            "empty_rounds": rounds.empty_rounds if rounds else 0,
            "initial_test_loss": divergence.initial_test_loss if divergence else None,
            "algorithm": self.cfg.algo.name,
            "dataset": self.data.name,
            "seed": int(self.cfg.seed),
            "rounds": rounds_done,
            "final_test_acc": accs[-1] if accs else None,
            "final_test_loss": history[-1].test_loss if history else None,
            "best_test_acc": accs[best] if best is not None else None,
            "best_round": history[best].round if best is not None else None,
            "targets": targets,
            "loss_targets": loss_targets,
            "final_global_train_loss": history[-1].global_train_loss if history else None,
            **self._val_summary(history),
            "aggregation": audit.summary(self) if audit else None,
            "wall_time_s": wall,
            "rounds_per_s": rounds_done / wall if wall > 0 else None,
            "sim_time_s": self.participation.clock.now if self.participation.clocked else None,
            **self.trainer.cost.totals(),
            "init_cost": self.init_cost,
            "num_parameters": self.dim,
            "device": str(self.device),
            "cpu": cpu_description(),
            "precision": self.cfg.engine.precision,
            "client_runner": self.runner_kind,
            "client_runner_reason": self.runner_reason,
            "packed_jobs": self.packed_jobs,
            "num_threads": self.num_threads,
            "memory_format": self.module.numerics.memory_format,
            "num_clients": self.data.num_clients,
            "partition_hash": self.data.partition_hash,
            "algorithm_state_bytes": self.algo.server_state_bytes(),
            "client_state": self.store.report(),
        }
