"""Checkpoints and stop requests (signals): a checkpoint every ``checkpoint_every`` rounds (null: at each
evaluation, 0: only at stops), when a stop is asked for (the run ends interrupted, resumable) and when the run
completes. The rounds' CSV rows up to a checkpoint are flushed before it is written."""

from __future__ import annotations

from typing import Callable, Optional

from fedbench.checkpoint import Checkpointer
from fedbench.engine.callbacks.base import Callback
from fedbench.logging import RunLogger


class Checkpointing(Callback):
    def __init__(self, checkpointer: Optional[Checkpointer], every: int, rounds: int, config: str,
                 stop: Callable[[], Optional[str]], logger: RunLogger):
        self.checkpointer, self.every, self.rounds, self.config = checkpointer, every, rounds, config
        self.stop, self.logger = stop, logger
        self.stopped_early = False  # a stop was asked for before the first round: saved at the end

    def save(self, sim) -> None:
        if self.checkpointer is None:
            return
        self.logger.flush()  # the CSV rows up to this round are on disk before the checkpoint that keeps them
        self.checkpointer.save(sim.next_round, {**sim.state_dict(), "config": self.config,
                                                "wandb_id": self.logger.run_id})
        sim.store.commit(sim.next_round)

    def on_run_start(self, sim) -> None:
        stop = self.stop()  # a stop asked for while the run was being built
        if stop:
            self.stopped_early = True
            sim.request_stop("interrupted", f"{stop} before round {sim.next_round + 1}; resume with resume=true")

    def on_round_end(self, sim, record) -> None:
        if sim.stop_status is not None:  # diverged: nothing to resume from
            return
        r = record.round
        stop = self.stop() if r < self.rounds else None
        sim.elapsed_now()
        if stop or (self.every and r % self.every == 0 and r < self.rounds):
            self.save(sim)
        if stop:
            sim.request_stop("interrupted", f"{stop} at round {r}; resume with resume=true")
            self.logger.print(f"[{sim.cfg.algo.name}] {stop}: stopped after round {r}, checkpoint written")

    def on_run_end(self, sim) -> None:
        if sim.stop_status in (None, "completed") or self.stopped_early:  # completed: a budget was reached
            self.save(sim)
