"""Packed sweeps (``hydra/launcher=packed``): the jobs of one multirun that share a model and data shapes train
together, one batched program in one process.

Every job is the generator ``fedbench.cli.job_steps``: it claims its run directory, builds its ``Simulation`` and
runs its rounds exactly as a job alone does, but each round's local training is handed out as a
``CohortRequest`` instead of computed. ``run_packed`` starts the jobs in sweep order; a job whose first request
comes from the cohort runner joins the open pack of its ``pack_key`` (at most ``engine.pack_size`` jobs); every
other job -- thin-runner algorithms, worker processes, a completed or failing job -- runs to its end on its own as
soon as it starts. A pack then trains: each step, the requests of all its jobs (each at its own round: resumed jobs
need not be aligned) are trained as one cohort (``CohortTrainer.updates_of``: per-client start points, learning
rates, streams and buffers), and each job takes its updates back to aggregate, update its server, evaluate, log
and checkpoint as it always does. A job that ends (completed, diverged, failed) leaves the pack; the others go on.

Per job, a packed run equals the run alone up to floating-point reassociation: the same streams and traces, the
same operations per client, but the batched kernels run over a larger cohort, whose blocking may change the last
bits of a row (tests/test_pack.py bounds the difference at 1e-5; on the CPU it is usually 0).

Stop signals are shared by the pack (``StopSignals``): the first asks every job to stop after its round, with a
checkpoint; no further job starts; once all have stopped, a scheduler's pre-emption handler runs once. A second
signal stops every job at once, each recording ``interrupted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from omegaconf import OmegaConf

from fedbench.engine.simulation import CohortRequest, Simulation
from fedbench.runs import Interrupted, StopSignals
from fedbench.training.cohort import CohortTrainer


def pack_key(sim: Simulation) -> Optional[tuple]:
    """What the jobs of one pack share (the model and its numerics, the data's shapes, the local optimizer's
    momentum and weight decay, the cohort and pack sizes); None for a job the cohort runner does not run."""
    if not isinstance(sim.cohort, CohortTrainer):
        return None
    cfg, data = sim.cfg, sim.data
    return (OmegaConf.to_yaml(cfg.model), tuple(data.x.shape[1:]), str(data.x.dtype), tuple(sim.module.flat.sizes),
            sim.buffers.numel(), str(sim.device), cfg.engine.precision, sim.module.numerics.memory_format,
            float(cfg.client.momentum), float(cfg.client.weight_decay), int(cfg.engine.cohort_size),
            int(cfg.engine.pack_size))


@dataclass
class Job:
    """One job of the sweep: its generator, what to do with its result (``done(value)``), its pending request."""

    steps: Any
    done: Callable[[Any], None]
    request: Optional[CohortRequest] = None


def compute(requests: List[CohortRequest]) -> List[list]:
    """The updates of a pack's requests, trained as one cohort by the first job's cohort runner."""
    cohort = requests[0].sim.cohort
    return cohort.updates_of([(r.sim.trainer, r.rc, r.entries, r.sim.x) for r in requests])


class Packer:
    """Drives a sweep's jobs (``Job``s, in order) as packs; ``signals`` are installed by the caller."""

    def __init__(self, signals: StopSignals):
        self.signals = signals
        self.open: Dict[tuple, List[Job]] = {}
        self.live: List[Job] = []  # jobs started and not ended (their generators hold run directories and locks)

    def run(self, jobs: List[Job]) -> None:
        """Start each job in turn, packing those that can be packed; no new job starts after a stop signal."""
        for job in jobs:
            if self.signals.reason() is not None:
                break
            if not self._advance(job, None, first=True):
                continue
            key = pack_key(job.request.sim)
            if key is None:  # another runner (worker processes): on its own, to its end
                while self._advance(job, job.request.compute()):
                    pass
                continue
            pack = self.open.setdefault(key, [])
            pack.append(job)
            if len(pack) >= key[-1]:  # the key ends with engine.pack_size
                self._train(self.open.pop(key))
        while self.open:
            self._train(self.open.pop(next(iter(self.open))))
        if self.signals.reason() is not None:
            self.signals.chain()  # a scheduler's pre-emption: its handler requeues the sweep, which resumes
            raise SystemExit(self.signals.exit_code)

    def _train(self, pack: List[Job]) -> None:
        """Step the pack's jobs together until every one has ended."""
        for job in pack:
            job.request.sim.packed_jobs = len(pack)
        while pack:
            try:
                answers = compute([job.request for job in pack])
            except Interrupted as stop:
                self._interrupt(stop)
            except Exception as exc:  # a failure of the batched step is every job's: each records it
                for job in pack:
                    self._advance(job, exc, throw=True)
                return
            pack = [job for job, answer in zip(pack, answers) if self._advance(job, answer)]

    def _advance(self, job: Job, answer: Any, first: bool = False, throw: bool = False) -> bool:
        """Send ``answer`` (or throw it) into the job; True while it has a next request, else it has ended."""
        if first:
            self.live.append(job)
        try:
            if first:
                job.request = next(job.steps)
            elif throw:
                job.request = job.steps.throw(answer)
            else:
                job.request = job.steps.send(answer)
            return True
        except StopIteration as end:
            self.live.remove(job)
            job.done(end.value)
            return False
        except Interrupted as stop:  # a second signal while this job's own code ran: it is past recording
            self.live.remove(job)
            self._interrupt(stop)
        except SystemExit as stop:  # a second signal: this job recorded it; stop every other job the same way
            self.live.remove(job)
            self._interrupt(Interrupted(stop.code - 128) if isinstance(stop.code, int) and stop.code > 128
                            else None, stop.code)
        return False

    def _interrupt(self, stop: Optional[Interrupted], code: Any = None) -> None:
        """Stop every live job at once (each records ``interrupted``), then the process."""
        for job in list(self.live):
            self.live.remove(job)
            try:
                job.steps.throw(stop or Interrupted(self.signals.signum or 2))
            except BaseException:
                pass
        raise SystemExit(code if code is not None else 128 + (stop.signum if stop else 2))
