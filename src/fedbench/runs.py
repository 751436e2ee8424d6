"""Run directories: which earlier run a ``resume`` continues (decided under the directory's lock, ``claim``), a
run's status as its files and its lock tell it, config identity, and stopping on a signal."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml
from omegaconf import DictConfig

from fedbench.checkpoint import Checkpointer
from fedbench.tree import flatten, under
from fedbench.errors import FedbenchError
from fedbench.lock import RunLock, owner
from fedbench.logging.run_logger import plain_config

#: Keys that may differ between a checkpoint and the run that resumes it (they do not change the numbers).
RESUME_FREE = ("resume", "logger", "checkpoint_every", "checkpoint_keep", "engine.num_threads", "top_k")


def identity(config: Dict[str, Any]) -> Dict[str, Any]:
    """The dotted keys of a plain config that decide a run's numbers (``RESUME_FREE`` left out)."""
    return {k: v for k, v in flatten(config).items() if not under(k, RESUME_FREE)}


def config_diff(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    """'key: a -> b' for every deciding key that differs between two plain configs."""
    fa, fb = identity(a), identity(b)
    missing = object()
    return [f"{k}: {fa.get(k, '(absent)')!r} -> {fb.get(k, '(absent)')!r}" for k in sorted(set(fa) | set(fb))
            if fa.get(k, missing) != fb.get(k, missing)]


def read_summary(run_dir: Path) -> Optional[Dict[str, Any]]:
    """The run's ``summary.json``; None when it is missing or not a JSON object."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


#: The reason given for a run whose summary says ``running`` while no process owns its directory.
STOPPED = ("the job stopped without recording its end (killed, or its results could not be written: see error.log "
           "if there is one); resume=true continues from its latest checkpoint")


def summary_state(summary: Optional[Dict[str, Any]], held: Optional[Dict[str, Any]]
                  ) -> Tuple[Optional[str], Optional[str]]:
    """(status, reason) of a run from its summary and its directory's owner (``fedbench.lock.owner``): the
    summary's, except that one still saying ``running`` while no process owns the directory means the job died:
    ``failed`` with ``STOPPED``. (None, None) without a readable summary."""
    if summary is None:
        return None, None
    status = summary.get("status", "completed")
    if status == "running" and held is None:
        return "failed", STOPPED
    return status, summary.get("reason")


def run_state(run_dir: Path) -> Tuple[Optional[str], Optional[str]]:
    """``summary_state`` of a run directory."""
    return summary_state(read_summary(run_dir), owner(run_dir))


def read_status(run_dir: Path) -> Optional[str]:
    return run_state(run_dir)[0]


def _saved_config(run_dir: Path) -> Optional[Dict[str, Any]]:
    try:
        return yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None


class ResumePlan:
    """Where a job writes and what it continues: ``checkpoint`` (None: start at round 0); ``completed``: the run
    was already finished, nothing to do."""

    def __init__(self, run_dir: Path, checkpoint: Optional[Dict[str, Any]] = None, completed: bool = False,
                 note: str = ""):
        self.run_dir, self.checkpoint, self.completed, self.note = run_dir, checkpoint, completed, note


def _continue(run_dir: Path, config: Dict[str, Any], keep: int, explicit: bool) -> Optional[ResumePlan]:
    """A plan continuing ``run_dir``; None when it holds nothing to continue (and ``explicit`` is False)."""
    saved = _saved_config(run_dir)
    if saved is not None:
        diff = config_diff(saved, config)
        if diff:
            raise FedbenchError(f"Cannot resume {run_dir}: it was run with another config ({'; '.join(diff[:8])}"
                                f"{'; ...' if len(diff) > 8 else ''}). Fix: resume with the run's own overrides, "
                                "or start a new run without resume.")
    status = read_status(run_dir)
    if status == "completed":
        return ResumePlan(run_dir, completed=True, note=f"{run_dir} has already completed")
    found = Checkpointer(run_dir, keep).latest()
    if found is not None:
        path, state = found
        ckpt_config = json.loads(state.pop("config"))
        diff = config_diff(ckpt_config, config)
        if diff:
            raise FedbenchError(f"Checkpoint {path} belongs to another config ({'; '.join(diff[:8])}). "
                                "Fix: resume with the run's own overrides, or start a new run without resume.")
        return ResumePlan(run_dir, state, note=f"resuming {run_dir} at round {state['round']}")
    if explicit and (saved is not None or status == "failed"):  # e.g. a storage fault before the first checkpoint
        return ResumePlan(run_dir, note=f"{run_dir} has no checkpoint (status {status or 'unknown'}): starting it "
                                        "afresh in the same directory")
    if explicit:
        raise FedbenchError(f"Cannot resume {run_dir}: it has no checkpoint and no config.yaml. Fix: start the run "
                            "afresh (without resume).")
    return None


def plan(cfg: DictConfig, fresh_dir: Path, outputs: Path, requeued: bool = False) -> ResumePlan:
    """Decide the job's directory. ``resume`` unset: a fresh run in ``fresh_dir`` (refused if that directory
    already holds a run's results, unless the job was requeued by its scheduler, which continues it).
    ``resume=<dir>``: continue that run (its config must match). ``resume=true``: continue the newest run of the
    same config under ``outputs`` (or the job's own directory), skip it if it completed, else start afresh."""
    config = plain_config(cfg)
    keep = cfg.checkpoint_keep
    flag = resume_flag(cfg)
    if flag == "fresh":
        if requeued and (fresh_dir / "checkpoints").is_dir():
            return _continue(fresh_dir, config, keep, explicit=False) or ResumePlan(fresh_dir)
        if (fresh_dir / "summary.json").exists() or (fresh_dir / "checkpoints").is_dir():
            raise FedbenchError(f"{fresh_dir} already holds a run's results. Fix: pass resume=true to continue it, "
                                "or choose another output directory (hydra.run.dir).")
        return ResumePlan(fresh_dir)
    if flag != "true":
        return _continue(_resume_target(flag), config, keep, explicit=True)
    own = _continue(fresh_dir, config, keep, explicit=False) if (fresh_dir / "config.yaml").exists() else None
    if own is not None:
        return own
    for run_dir in _candidates(outputs, config, exclude=fresh_dir):
        found = _continue(run_dir, config, keep, explicit=False)
        if found is not None:
            return found
    return ResumePlan(fresh_dir, note="no earlier run of this config to resume: starting afresh")


def resume_flag(cfg: DictConfig) -> str:
    """'fresh', 'true', or the directory ``resume`` names."""
    flag = None if cfg.resume is None else str(cfg.resume).strip().lower()
    if flag in (None, "", "false", "no", "0", "none", "null"):
        return "fresh"
    return "true" if flag in ("true", "yes", "1") else str(cfg.resume)


REQUEUE_WAIT_S = 60.0

#: A directory holding one of these is a run's (``resume=<dir>`` locks and writes nowhere else).
RUN_FILES = ("config.yaml", "summary.json", "checkpoints", ".hydra")


def _resume_target(resume: str) -> Path:
    target = Path(resume).expanduser()
    if not target.is_dir() or not any((target / name).exists() for name in RUN_FILES):
        raise FedbenchError(f"Invalid config 'resume': {resume} is not a run directory. Fix: pass resume=true, "
                            "or the directory of the run to continue (it holds config.yaml and checkpoints/).")
    return target.resolve()


def claim(cfg: DictConfig, fresh_dir: Path, outputs: Path, requeued: bool = False) -> Tuple[ResumePlan, RunLock]:
    """The job's plan, decided while holding its run directory's lock (``fedbench.lock.RunLock``, raising
    ``RunLocked`` when another live process owns it): a fresh run or ``resume=<dir>`` locks its directory first;
    ``resume=true`` finds its run, locks it, and plans again, since another process may have advanced or finished
    the run in between."""
    flag = resume_flag(cfg)
    if flag != "true":
        # a requeued job waits a minute for its previous attempt, which may still be writing its checkpoint
        lock = RunLock(fresh_dir if flag == "fresh" else _resume_target(flag)).acquire(REQUEUE_WAIT_S * requeued)
        try:
            return plan(cfg, fresh_dir, outputs, requeued), lock
        except BaseException:
            lock.release()
            raise
    for _ in range(3):
        first = plan(cfg, fresh_dir, outputs, requeued)
        lock = RunLock(first.run_dir.resolve()).acquire()
        try:
            job = plan(cfg, fresh_dir, outputs, requeued)
        except BaseException:
            lock.release()
            raise
        if job.run_dir.resolve() == first.run_dir.resolve():
            return job, lock
        lock.release()
    raise FedbenchError(f"resume=true: the run to continue for {fresh_dir} kept changing while it was being "
                        "locked (other processes are resuming runs of this config). Fix: pass resume=<the run "
                        "directory> to continue one run.")


def _candidates(outputs: Path, config: Dict[str, Any], exclude: Path) -> List[Path]:
    """Run directories under ``outputs`` with the same deciding config, newest first."""
    found: List[Tuple[float, Path]] = []
    if not outputs.is_dir():
        return []
    for cfg_file in outputs.rglob("config.yaml"):
        run_dir = cfg_file.parent
        if run_dir.resolve() == exclude.resolve() or ".hydra" in run_dir.parts:
            continue
        saved = _saved_config(run_dir)
        if saved is not None and not config_diff(saved, config):
            found.append((cfg_file.stat().st_mtime, run_dir))
    return [d for _, d in sorted(found, reverse=True)]


class Interrupted(BaseException):
    """A second stop signal: stop now, mid-round (the latest checkpoint stays the resume point)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """SIGINT / SIGTERM ask the run to stop after the current round (``reason()`` then names the signal); a second
    one stops at once. Under a scheduler that pre-empts with SIGUSR2 (submitit on SLURM installs a handler that
    requeues the job), SIGUSR2 too stops the run after the round, with a checkpoint, and ``chain()`` then hands the
    signal to the scheduler's handler (requeue; the requeued job resumes). Installed in the main thread only
    (signals cannot be caught elsewhere).

    The main process of a multirun holds one too (``fedbench.cli.main``): there a signal lets the launcher wait for
    the jobs it runs in worker processes (joblib's get the signal from their process group, finish their round and
    write their checkpoint), ``stopped()`` then tells the sweep not to launch more, and a job that starts in this
    process after the signal (the basic launcher's next job) inherits it: it stops after its first round. A job
    that received the signal marks its sweep stopping (``mark_stopping``), so the jobs its launcher still hands
    out (a joblib worker's next queued job) do not start at all."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum: Optional[int] = None
        self._old: dict = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
            if callable(signal.getsignal(signal.SIGUSR2)):  # a scheduler's pre-emption handler
                self._old[signal.SIGUSR2] = signal.signal(signal.SIGUSR2, self._handle)
            outer = StopSignals.stopped()
            if outer is not None:
                self.signum = outer.signum
            _INSTALLED.append(self)
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
        if self in _INSTALLED:
            _INSTALLED.remove(self)

    @staticmethod
    def stopped() -> Optional["StopSignals"]:
        """The installed ``StopSignals`` (this one or an enclosing one) that has received a stop signal, if any."""
        return next((s for s in _INSTALLED if s.signum is not None), None)

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise Interrupted(signum)
        self.signum = signum
        print(f"fedbench: {signal.Signals(signum).name} received: stopping after this round with a checkpoint "
              "(send it again to stop at once)", flush=True)

    def reason(self) -> Optional[str]:
        return None if self.signum is None else signal.Signals(self.signum).name

    @property
    def preempted(self) -> bool:
        return self.signum == signal.SIGUSR2 and callable(self._old.get(signal.SIGUSR2))

    def chain(self) -> None:
        """Pass a pre-emption signal on to the scheduler's own handler (which requeues the job and exits)."""
        if self.preempted:
            self._old[signal.SIGUSR2](self.signum, None)

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or 0)


#: the ``StopSignals`` installed in this process, outermost first
_INSTALLED: List[StopSignals] = []

#: a stopped sweep's marker in its sweep directory: the process id of the sweep's main process
STOPPING = ".stopping"


def _sweep_id() -> str:
    """The process id of this job's sweep: the main process's (this one, or the parent of a launcher's worker)."""
    parent = multiprocessing.parent_process()
    return str(os.getpid() if parent is None else parent.pid)


def mark_stopping(sweep_dir: Path) -> None:
    """A job of this sweep received a stop signal: its sweep's later jobs must not start. joblib's workers take
    the sweep's queued jobs as theirs return (stopped, with a checkpoint), and a worker's next job would not know of
    the signal, which only the running jobs' process group received."""
    try:
        (Path(sweep_dir) / STOPPING).write_text(_sweep_id())
    except OSError:
        pass  # an unwritable sweep directory: the next jobs start, and a second signal stops them


def sweep_stopping(sweep_dir: Path) -> bool:
    """Whether a job of this sweep (the same main process) was stopped by a signal; a marker left by an earlier
    sweep of the directory is removed."""
    path = Path(sweep_dir) / STOPPING
    try:
        if path.read_text() == _sweep_id():
            return True
        path.unlink()
    except OSError:
        pass
    return False
