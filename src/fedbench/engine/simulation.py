"""The round loop: participation -> local updates (streamed into the aggregate) -> server update -> evaluation."""

from __future__ import annotations

import math
import os
import time
import weakref
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from fedbench.algorithms import ALGORITHMS, AlgoContext
from fedbench.checkpoint import Checkpointer
from fedbench.config.checks import validate
from fedbench.config.schema import NoiseSpread
from fedbench.data import FederatedData, build_federated
from fedbench.engine.client_state import ClientStateStore
from fedbench.engine.cohort import CohortTrainer, hooks_unsupported, unsupported
from fedbench.engine.numerics import Numerics
from fedbench.engine.workers import WorkerPool
from fedbench.engine.evaluation import evaluate
from fedbench.engine.schedule import lr_at
from fedbench.engine.local import LocalModule
from fedbench.engine.oracle import EngineOracle
from fedbench.engine.runners import make_runner
from fedbench.engine.trainer import ClientTrainer
from fedbench.errors import ConfigError, FedbenchError, require
from fedbench.logging import RunLogger
from fedbench.logging.plots import categories, heatmap, probability_histogram
from fedbench.models import build_model
from fedbench.participation import LayerContext, ParticipationProcess
from fedbench.records import Cost, RoundContext
from fedbench.rng import numpy_rng, torch_rng


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("engine.device", f"'{spec}' was asked for but no CUDA device is visible.",
                          "use engine.device=cpu (or auto).")
    if spec.startswith("cuda:") and int(spec[5:]) >= torch.cuda.device_count():
        raise ConfigError("engine.device", f"'{spec}' was asked for but only {torch.cuda.device_count()} CUDA "
                          "device(s) are visible.", "use cuda:0 .. cuda:N-1, or auto.")
    if spec == "mps" and not (torch.backends.mps.is_available()):
        raise ConfigError("engine.device", "'mps' was asked for but this machine has no Apple MPS device.",
                          "use engine.device=cpu (or auto).")
    try:
        return torch.device(spec)
    except RuntimeError:
        raise ConfigError("engine.device", f"'{spec}' is not a device.", "use cpu, cuda, cuda:N or auto.") from None


#: Local-step work (parameters x batch x clients stepped together) from which torch uses every core; below it one
#: thread is faster (measured on a 2-core machine: the W2 logistic regression, 7.8e4, is 7% faster on one thread;
#: the W1 CNN, 3.7e6, 1.65x faster on two; W2 under the cohort runner, 7.8e6, 1.2x faster on two).
THREADS_WORK = 2_000_000

#: ``engine.eval_batch_size=0``: evaluation batch by device. On CPU, evaluation of the W1 CNN on the 10k test images
#: took 4.0 s at 256 and 5.6 s at 2048 (one thread; two threads: 2.4 s vs 3.1 s); a GPU wants large batches.
EVAL_BATCH = {"cpu": 256, "cuda": 8192}


def auto_threads(dim: int, batch: int, cohort: int) -> int:
    """``engine.num_threads=0``: one thread for small local steps, every available core above ``THREADS_WORK``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores if dim * batch * cohort >= THREADS_WORK else 1


def _clients_per_round(cfg: DictConfig, n: int) -> int:
    s = OmegaConf.select(cfg, "participation.selection.clients_per_round")
    return int(s) if s else n


def noise_levels(cfg: DictConfig, n: int, data_seed: int):
    """Each client's injected gradient-noise std s_i (None without noise): grad_noise x u_i, u_i ~ U(0, 1) from
    the stream (data seed, "grad_noise/levels"), or grad_noise for all (``grad_noise_spread``)."""
    nu = cfg.client.grad_noise
    if nu == 0:
        return None
    if NoiseSpread(cfg.client.grad_noise_spread) == NoiseSpread.constant:
        return np.full(n, float(nu))
    return nu * numpy_rng(data_seed, "grad_noise/levels").random(n)


@dataclass
class RunControl:
    """How a run is checkpointed and stopped: ``stop()`` returns why the run must stop after the current round
    (e.g. "SIGTERM"), or None; ``config`` (the resolved config as JSON) is saved with each checkpoint."""

    checkpointer: Optional[Checkpointer] = None
    config: str = ""
    stop: Callable[[], Optional[str]] = lambda: None


def local_stack(cfg: DictConfig, root: Path, device: torch.device, warn: bool = False) -> tuple:
    """(federated data, ``LocalModule``, ``ClientTrainer``) of a run: what trains clients, built the same way in the
    main process and in each ``engine.workers`` process (same data, initial model and streams)."""
    data_seed = cfg.seed if cfg.data.seed is None else cfg.data.seed
    data: FederatedData = build_federated(cfg.dataset, cfg.partition, root, data_seed, cfg.data.cache)
    data.to(device)
    smallest = int(data.sizes.min())
    if warn and cfg.client.batch_size > smallest:
        print(f"fedbench: warning: client.batch_size={cfg.client.batch_size} exceeds the smallest client's "
              f"{smallest} samples; such clients use batches of all their data (full-batch steps)", flush=True)
    model = _checked_model(cfg, data, device)
    module = LocalModule(model, cfg.client.lr, cfg.client.momentum, cfg.client.weight_decay)
    require(cfg.engine.precision != "tf32" or device.type == "cuda", "engine.precision",
            f"tf32 is a CUDA tensor-core mode and this run is on {device}.", "use fp32 or bf16-mixed.")
    module.set_numerics(Numerics(device, cfg.engine.precision, cfg.engine.memory_format.value))
    kind = cfg.engine.client_runner.value
    runner = make_runner("thin" if kind in ("vmap", "auto") else kind, module, device)
    noise = noise_levels(cfg, data.num_clients, data_seed)
    trainer = ClientTrainer(data, runner, cfg.seed, cfg.client.batch_size, noise)
    return data, module, trainer


def _checked_model(cfg: DictConfig, data: FederatedData, device: torch.device) -> torch.nn.Module:
    """The model, checked on two training inputs (eval mode, no state changes): a model that cannot take the
    dataset's input shape is a config error named at start, not a crash in the first round."""
    try:
        model = build_model(cfg.model, data.input_shape, data.num_classes, torch_rng(cfg.seed, "init"))
        model.to(device).eval()
        with torch.no_grad():
            out = model(data.x[:2])
        model.train()
        ok = tuple(out.shape) == (min(2, len(data.x)), data.num_classes)
        problem = "" if ok else f"it outputs shape {tuple(out.shape)}"
    except FedbenchError:
        raise
    except Exception as exc:
        problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if problem:
        raise ConfigError("model", f"model={cfg.model.name} does not fit {data.name}'s inputs of shape "
                          f"{tuple(data.input_shape)} with {data.num_classes} classes ({problem}).",
                          "choose a model built for this input (README, Models).")
    return model


class Simulation:
    """One federated training run. ``run()`` returns the summary dict (also written to ``summary.json``);
    ``resume=True`` opens existing memmap client-state files for ``load_state_dict`` instead of zeroing them."""

    def __init__(self, cfg: DictConfig, run_dir: Path, root: Path, resume: bool = False):
        validate(cfg)
        require(not Path(root).exists() or Path(root).is_dir(), "data.root", f"{root} is a file.",
                "give a folder (datasets are looked for, downloaded and cached there).")
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.device = resolve_device(cfg.engine.device)
        seed = cfg.seed
        self.data, self.module, self.trainer = local_stack(cfg, root, self.device, warn=True)
        model = self.module.model
        kind = cfg.engine.client_runner.value
        self.eval_batch = cfg.engine.eval_batch_size or EVAL_BATCH.get(self.device.type, 1024)
        self.x = self.module.flat.params.detach().clone()
        self.buffers = self.module.flat.buffers.detach().clone()
        self.trainer.buffers = self.buffers
        n = self.data.num_clients
        self.participation = ParticipationProcess(cfg.participation, LayerContext(
            n, seed, cfg.rounds, cfg.client.local_steps, self.data.sizes, self.data.attrs))
        self._refuse_degenerate()
        state_dir = cfg.engine.client_state_dir
        self.store = ClientStateStore(n, self.device, cfg.engine.client_state.value,
                                      Path(state_dir) if state_dir else self.run_dir / "client_state", reuse=resume)
        algo_cls = ALGORITHMS.get_class(cfg.algo.name)
        if algo_cls.plain_sgd:
            for key in ("momentum", "weight_decay"):
                require(cfg.client[key] == 0, f"client.{key}", f"{cfg.client[key]} with algo={cfg.algo.name}, whose "
                        "local steps follow its own recursion (the local optimizer must be plain SGD).",
                        f"use client.{key}=0.")
        self.algo = algo_cls(
            cfg.algo, AlgoContext(self.x.numel(), n, self.data.sizes, self.device, seed, self.store,
                                  cfg.client.local_steps, cfg.client.batch_size, self.module.flat.sizes,
                                  [sum(p.numel() for p in b.parameters()) for b in model.blocks()])
        )
        self.cohort = None
        why = unsupported(self.algo, self.module, self.trainer.noise_std is not None, self.data.augment != "none") \
            if kind in ("vmap", "auto") else "not asked for"
        if kind == "auto" and why is None and any(isinstance(m, torch.nn.Conv2d) for m in model.modules()):
            why = "a convolutional model is compute-bound: batching its clients does not pay on a CPU (README)"
        self.runner_kind = "vmap" if why is None else ("thin" if kind == "auto" else kind)
        if kind == "vmap":
            require(why is None, "engine.client_runner", f"vmap cannot run this configuration: {why}.",
                    "use engine.client_runner=thin.")
        if self.runner_kind == "vmap":
            self.cohort = CohortTrainer(self.module, cfg.engine.cohort_size, cfg.client.momentum,
                                        cfg.client.weight_decay)
        cohort = 1 if self.cohort is None else min(cfg.engine.cohort_size, _clients_per_round(cfg, n))
        self.num_threads = cfg.engine.num_threads or auto_threads(self.dim, cfg.client.batch_size, cohort)
        if cfg.engine.workers > 1:
            self._start_workers(root)
        torch.set_num_threads(self.num_threads)
        self.init_cost = Cost().totals()
        self.next_round = 0  # rounds done
        self.history: list = []  # metrics.csv rows
        self.window_losses: list = []  # training losses since the last evaluation
        self.elapsed = 0.0  # seconds spent in the rounds so far
        self.empty_rounds = 0  # rounds in which no client completed
        self.initial_test_loss: Optional[float] = None
        self.nonfinite_loss = False  # a client's training loss in the last round was NaN or infinite

    def _start_workers(self, root: Path) -> None:
        """``engine.workers=k``: the round's clients go to k one-thread worker processes (``WorkerPool``)."""
        cfg, k = self.cfg, self.cfg.engine.workers
        require(cfg.engine.client_runner.value in ("thin", "auto"), "engine.workers",
                f"{k} worker processes run the thin runner; engine.client_runner={cfg.engine.client_runner.value} "
                "was asked for.", "use engine.client_runner=thin (or auto), or engine.workers=0.")
        require(self.device.type == "cpu", "engine.workers", f"worker processes are for CPU runs; this run is on "
                f"{self.device}.", "use engine.workers=0 on a GPU (the cohort runner batches clients there).")
        why = hooks_unsupported(self.algo)
        require(why is None, "engine.workers", f"{k} worker processes cannot run this configuration: {why}.",
                "use engine.workers=0.")
        self.cohort = WorkerPool(cfg, root, self.device, k)
        self._finalizer = weakref.finalize(self, self.cohort.close)
        self.runner_kind = f"thin x {k} workers"  # the main process keeps its threads for evaluation

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
        return lr_at(self.cfg.client.lr_schedule, self.cfg.client.lr, t, self.cfg.rounds)

    def round(self, t: int) -> Dict[str, Any]:
        """Run round t; return its statistics (costs: this round's increase of the counters)."""
        cost = self.trainer.cost
        before = cost.totals()
        oracle = EngineOracle(self.trainer, t, self.lr(t), self.x, self.cfg.algo.server_lr, self.cfg.client.local_steps)
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
        cohort = self._cohort_updates(rc) if self.cohort is not None else None
        batched = iter(cohort) if cohort is not None else None
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
        return {"round": t + 1, "available": int(part.available.sum()), "selected": int(part.selected.size),
                "completed": int(part.completed.sum()), "train_loss": float(np.mean(losses)) if losses else math.nan,
                "lr": rc.lr, **{k: v for k, v in cost.since(before).items() if not k.startswith("bytes")},
                **self.participation.round_stats(), **self.algo.round_stats(rc)}

    def _cohort_updates(self, rc: RoundContext) -> Optional[list]:
        """The round's completed entries trained together (engine.client_runner=vmap), in the loop's order; None
        for a round the loop must run sequentially (a client with a step hook drawn twice)."""
        part, algo = rc.part, self.algo
        ids = part.completed_ids.tolist()
        hooks = [algo.step_hook(rc, c, self.x, algo.payload(rc, c)) for c in ids]
        if len(set(ids)) < len(ids) and any(h is not None for h in hooks):
            return None
        entries = [(c, int(s), algo.local_options(rc, c), None if h is None else h.affine())
                   for c, s, h in zip(ids, part.completed_steps.tolist(), hooks)]
        if any(h is not None and e[3] is None for h, e in zip(hooks, entries)):
            raise RuntimeError(f"algo={algo.cfg.name} declares affine_steps but a step hook has no affine form")
        return self.cohort.updates(self.trainer, rc, entries, self.x)

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

    def evaluate_train(self) -> tuple[float, float]:
        """The global model on the whole training set: f(x) = sum_i (n_i / n) F_i(x), and its accuracy."""
        self.trainer.runner.load(self.x, self.buffers)
        return evaluate(self.module, self.data.x, self.data.y, self.eval_batch)

    # ---- checkpoint ----------------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Everything the rest of the run depends on (the streams are counter-based: the round number is their
        state). Client tables are saved through the store (memmap tables by reference)."""
        r = self.next_round
        return {
            "round": r, "x": self.x, "buffers": self.buffers,
            "algorithm": self.algo.state_dict(tables=False), "client_state": self.store.snapshot(r),
            "participation": self.participation.state_dict(), "cost": self.trainer.cost.totals(),
            "history": self.history, "window_losses": self.window_losses, "init_cost": self.init_cost,
            "elapsed": self.elapsed, "empty_rounds": self.empty_rounds, "initial_test_loss": self.initial_test_loss,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.next_round = int(state["round"])
        self.x.copy_(state["x"])
        self.buffers.copy_(state["buffers"])
        self.algo.load_state_dict(state["algorithm"], tables=False)
        self.store.restore(state["client_state"])
        self.participation.load_state_dict(state["participation"])
        for k, v in state["cost"].items():
            setattr(self.trainer.cost, k, int(v))
        self.history, self.window_losses = list(state["history"]), list(state["window_losses"])
        self.init_cost, self.elapsed = state["init_cost"], float(state["elapsed"])
        self.empty_rounds, self.initial_test_loss = int(state["empty_rounds"]), state["initial_test_loss"]

    def checkpoint(self, control: "RunControl", logger: RunLogger) -> None:
        if control.checkpointer is None:
            return
        logger.flush()  # the CSV rows up to this round are on disk before the checkpoint that keeps them
        control.checkpointer.save(self.next_round, {**self.state_dict(), "config": control.config,
                                                    "wandb_id": logger.run_id})
        self.store.commit(self.next_round)

    # ---- the run --------------------------------------------------------------------------------------------
    def _divergence(self, stats: Dict[str, Any]) -> Optional[str]:
        r = stats["round"]
        if self.nonfinite_loss:
            return f"the training loss of round {r} is not finite"
        if not bool(torch.isfinite(self.x).all()):
            return f"the global model has non-finite parameters after round {r}"
        return None

    def _test_divergence(self, test_loss: float, r: int) -> Optional[str]:
        if not math.isfinite(test_loss):
            return f"the test loss at round {r} is not finite"
        factor = self.cfg.divergence_factor
        if factor is not None and self.initial_test_loss is not None and test_loss > factor * self.initial_test_loss:
            return (f"the test loss at round {r} ({test_loss:.4g}) exceeds divergence_factor={factor:g} x the "
                    f"initial test loss ({self.initial_test_loss:.4g})")
        return None

    def run(self, logger: RunLogger, control: Optional["RunControl"] = None) -> Dict[str, Any]:
        """Rounds ``next_round`` .. ``rounds`` - 1 (all of them unless a checkpoint was loaded); returns the summary,
        whose ``status`` is completed, diverged (``reason`` says what) or interrupted (a stop request)."""
        cfg, control = self.cfg, control or RunControl()
        name = cfg.algo.name
        resumed = self.next_round > 0
        logger.print(f"[{name}] {self.data.name}: {self.data.num_clients} clients, {self.dim:,} parameters, "
                     f"{cfg.rounds} rounds, device {self.device}, {self.runner_kind} runner"
                     + (f" (resumed at round {self.next_round})" if resumed else ""))
        png = heatmap(self.data.label_hist, self.run_dir / "partition.png", "label", "client",
                      f"{self.data.name} / {cfg.partition.name}: samples per client and label", unit="samples")
        logger.log_image("partition/label_histogram", png)
        np.save(self.run_dir / "label_hist.npy", self.data.label_hist)
        if not resumed:
            self._start(logger)
        every = cfg.eval_every if cfg.checkpoint_every is None else cfg.checkpoint_every
        status, reason = "completed", None
        clock = time.perf_counter() - self.elapsed  # the rounds' clock, continued across a resume
        stop = control.stop()  # a stop asked for while the run was being built
        for t in range(self.next_round, cfg.rounds if not stop else self.next_round):
            stats = self.round(t)
            self.next_round = r = t + 1
            if stats["completed"] == 0:
                self.empty_rounds += 1
                if self.empty_rounds == 1:
                    logger.print(f"[{name}] warning: no client completed round {r}; such rounds are counted in "
                                 "summary.json (empty_rounds)")
            logger.log_round(stats)
            self.window_losses.append(stats["train_loss"])
            reason = self._divergence(stats)
            if r % cfg.eval_every == 0 or r == cfg.rounds or reason:
                row = self._evaluate_row(stats, r, time.perf_counter() - clock)
                logger.log_eval(row)
                reason = reason or self._test_divergence(row["test_loss"], r)
                self.elapsed = time.perf_counter() - clock
                logger.write_summary(self.summary(self.elapsed, "diverged" if reason else "running", reason))
                logger.print(f"[{name}] round {r:>5}/{cfg.rounds} | train_loss {row['train_loss']:.4f} | "
                             f"test_loss {row['test_loss']:.4f} | test_acc {row['test_acc']:.4f} | "
                             f"elapsed {row['wall_time']:6.1f}s | {r / max(row['wall_time'], 1e-9):6.2f} rounds/s")
            if reason:
                status = "diverged"
                logger.print(f"[{name}] stopping: diverged ({reason})")
                break
            stop = control.stop() if r < cfg.rounds else None
            self.elapsed = time.perf_counter() - clock
            if stop or (every and r % every == 0 and r < cfg.rounds):
                self.checkpoint(control, logger)
            if stop:
                status, reason = "interrupted", f"{stop} at round {r}; resume with resume=true"
                logger.print(f"[{name}] {stop}: stopped after round {r}, checkpoint written")
                break
        self.elapsed = time.perf_counter() - clock
        if stop and status == "completed":
            self.checkpoint(control, logger)
            status, reason = "interrupted", f"{stop} before round {self.next_round + 1}; resume with resume=true"
        elif status == "completed":
            self.checkpoint(control, logger)
        self._write_participation(logger)
        return self.summary(self.elapsed, status, reason)

    def _start(self, logger: RunLogger) -> None:
        """Before round 0: the algorithm's initialization and, for the divergence test, the initial test loss."""
        name = self.cfg.algo.name
        init_start = time.perf_counter()
        self.init_cost = self.initialize()
        if any(self.init_cost.values()):
            self.init_cost["wall_time_s"] = time.perf_counter() - init_start
            logger.print(f"[{name}] initialization (not counted in the rounds): {self.init_cost['grad_evals']:,} "
                         f"gradient evaluations, {self.init_cost['floats_up']:,} floats up, "
                         f"{self.init_cost['floats_down']:,} floats down, {self.init_cost['wall_time_s']:.1f}s")
        if self.cfg.divergence_factor is not None:
            self.initial_test_loss = self.evaluate()[0]

    def _evaluate_row(self, stats: Dict[str, Any], r: int, elapsed: float) -> Dict[str, Any]:
        test_loss, test_acc = self.evaluate()
        finite = [v for v in self.window_losses if not math.isnan(v)]
        row = {
            "round": r,
            "selected": stats["selected"],
            "completed": stats["completed"],
            "train_loss": float(np.mean(finite)) if finite else math.nan,
            "test_loss": test_loss,
            "test_acc": test_acc,
            "wall_time": elapsed,
            **self.trainer.cost.totals(),
        }
        if self.cfg.engine.eval_train:
            row["global_train_loss"], row["global_train_acc"] = self.evaluate_train()
        self.window_losses = []
        self.history.append(row)
        return row

    def _write_participation(self, logger: RunLogger) -> None:
        cfg = self.cfg
        np.savez_compressed(self.run_dir / "participation.npz", **self.participation.trace_arrays())
        png = categories(self.participation.trace_image(), self.run_dir / "participation.png", "client", "round",
                         f"participation={cfg.participation.name}: each client's state per round",
                         ["unavailable", "available", "selected", "completed"])
        logger.log_image("participation/trace", png)
        rounds, probs = self.participation.probability_snapshots()
        if rounds.size:
            png = probability_histogram(rounds, probs, self.run_dir / "probabilities.png",
                                        f"{cfg.participation.selection.kind}: selection probabilities")
            logger.log_image("participation/probabilities", png)

    def summary(self, wall: float, status: str = "completed", reason: Optional[str] = None) -> Dict[str, Any]:
        history = self.history
        accs = [h["test_acc"] for h in history]
        best = int(np.argmax(accs)) if accs else None
        def reached(hit):
            return None if hit is None else {
                "round": hit["round"], "grad_evals": hit["grad_evals"], "floats_up": hit["floats_up"],
                "floats_down": hit["floats_down"], "floats": hit["floats_up"] + hit["floats_down"]}

        targets = {f"{v:g}": reached(next((h for h in history if h["test_acc"] >= v), None))
                   for v in self.cfg.targets}
        loss_targets = {f"{v:g}": reached(next((h for h in history if h["global_train_loss"] <= v), None))
                        for v in self.cfg.loss_targets}
        rounds_done = self.next_round
        return {
            "status": status,
            "reason": reason,
            "rounds_planned": int(self.cfg.rounds),
            "empty_rounds": self.empty_rounds,
            "initial_test_loss": self.initial_test_loss,
            "algorithm": self.cfg.algo.name,
            "dataset": self.data.name,
            "seed": int(self.cfg.seed),
            "rounds": rounds_done,
            "final_test_acc": accs[-1] if accs else None,
            "final_test_loss": history[-1]["test_loss"] if history else None,
            "best_test_acc": accs[best] if best is not None else None,
            "best_round": history[best]["round"] if best is not None else None,
            "targets": targets,
            "loss_targets": loss_targets,
            "final_global_train_loss": history[-1].get("global_train_loss") if history else None,
            "wall_time_s": wall,
            "rounds_per_s": rounds_done / wall if wall > 0 else None,
            **self.trainer.cost.totals(),
            "init_cost": self.init_cost,
            "num_parameters": self.dim,
            "device": str(self.device),
            "precision": self.cfg.engine.precision,
            "client_runner": self.runner_kind,
            "num_threads": self.num_threads,
            "memory_format": self.module.numerics.memory_format,
            "num_clients": self.data.num_clients,
            "partition_hash": self.data.partition_hash,
            "algorithm_state_bytes": self.algo.server_state_bytes(),
            "client_state": self.store.report(),
        }
