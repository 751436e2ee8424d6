"""The run's files and W&B records: ``rounds.csv`` / ``metrics.csv`` rows, ``summary.json`` at each evaluation,
the console's progress lines, the partition picture and label histogram at the start, the participation trace and
selection-probability pictures at the end (through the ``RunLogger`` sink)."""

from __future__ import annotations

from typing import Any, Dict

import numpy as np

from fedbench.engine.callbacks.base import Callback
from fedbench.logging import RunLogger
from fedbench.logging.plots import categories, counts_over_time, heatmap, probability_histogram
from fedbench.storage import write_file


class RoundLog(Callback):
    """``rounds.csv`` and W&B ``round/*``; counts the rounds in which no client completed (summary)."""

    def __init__(self, logger: RunLogger):
        self.logger = logger
        self.empty_rounds = 0

    def on_round_end(self, sim, record) -> None:
        if record.completed == 0:
            self.empty_rounds += 1
            if self.empty_rounds == 1:
                self.logger.print(f"[{sim.cfg.algo.name}] warning: no client completed round {record.round}; such "
                                  "rounds are counted in summary.json (empty_rounds)")
        self.logger.log_round(record.row())

    def state_dict(self) -> Dict[str, Any]:
        return {"empty_rounds": self.empty_rounds}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.empty_rounds = int(state["empty_rounds"])


class MetricsLog(Callback):
    """``metrics.csv`` and W&B: one row per evaluation."""

    def __init__(self, logger: RunLogger):
        self.logger = logger

    def on_evaluate(self, sim, record) -> None:
        self.logger.log_eval(record.row())


class Progress(Callback):
    """``summary.json`` (status running, or diverged) and one console line per evaluation; the run's first and
    last lines."""

    def __init__(self, logger: RunLogger):
        self.logger = logger

    def on_run_start(self, sim) -> None:
        cfg = sim.cfg
        self.logger.print(f"[{cfg.algo.name}] {sim.data.name}: {sim.data.num_clients} clients, {sim.dim:,} parameters, "
                          f"{cfg.rounds} rounds, device {sim.device}, {sim.runner_kind} runner ({sim.runner_reason})"
                          + (f" (resumed at round {sim.next_round})" if sim.resumed else ""))

    def on_evaluate(self, sim, record) -> None:
        sim.elapsed_now()
        status = "diverged" if sim.stop_status == "diverged" else "running"
        self.logger.write_summary(sim.summary(status, sim.stop_reason if status == "diverged" else None))
        r, wall = record.round, record.wall_time
        val = "" if record.val_acc is None else f"val_acc {record.val_acc:.4f} | "
        self.logger.print(f"[{sim.cfg.algo.name}] round {r:>5}/{sim.cfg.rounds} | train_loss {record.train_loss:.4f} | "
                          f"{val}test_loss {record.test_loss:.4f} | test_acc {record.test_acc:.4f} | "
                          f"elapsed {wall:6.1f}s | {r / max(wall, 1e-9):6.2f} rounds/s")

    def on_run_end(self, sim) -> None:
        if sim.stop_status == "diverged":
            self.logger.print(f"[{sim.cfg.algo.name}] stopping: diverged ({sim.stop_reason})")


class Pictures(Callback):
    """``partition.png`` and ``label_hist.npy`` at the start; ``participation.npz`` / ``.png`` and
    ``probabilities.png`` (selection probabilities, where the rule has them) at the end."""

    def __init__(self, logger: RunLogger):
        self.logger = logger

    def on_run_start(self, sim) -> None:
        data, run_dir = sim.data, sim.run_dir
        png = heatmap(data.label_hist, run_dir / "partition.png", "label", "client",
                      f"{data.name} / {sim.cfg.partition.name}: samples per client and label", unit="samples")
        self.logger.log_image("partition/label_histogram", png)
        write_file(run_dir / "label_hist.npy", lambda f: np.save(f, data.label_hist))

    def on_run_end(self, sim) -> None:
        part, cfg, run_dir = sim.participation, sim.cfg.participation, sim.run_dir
        arrays = part.trace_arrays()
        write_file(run_dir / "participation.npz", lambda f: np.savez_compressed(f, **arrays))
        png = categories(part.trace_image(), run_dir / "participation.png", "client", "round",
                         f"participation={cfg.name}: each client's state per round",
                         ["unavailable", "available", "selected", "completed"])
        self.logger.log_image("participation/trace", png)
        if part.clocked and arrays["available"].shape[0]:
            start = np.concatenate([[0.0], arrays["sim_time_s"][:-1]]) / 3600  # each round at its start
            counts = {k: (arrays[k] > 0).sum(axis=1) for k in ("available", "selected", "completed")}
            png = counts_over_time(start, counts, run_dir / "participation_clock.png",
                                   f"participation={cfg.name}: clients per round on the simulated clock")
            self.logger.log_image("participation/clock", png)
        rounds, probs = part.probability_snapshots()
        if rounds.size:
            png = probability_histogram(rounds, probs, run_dir / "probabilities.png",
                                        f"{cfg.selection.kind}: selection probabilities")
            self.logger.log_image("participation/probabilities", png)
