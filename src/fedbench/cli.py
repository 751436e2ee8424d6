"""Command-line entry point (``run.py``): preflight check of the overrides, then the Hydra app.

The preflight composes the config once per sweep value before Hydra starts, so a bad group option, an unknown key
or an invalid value ends the command with one paragraph naming the problem and the fix (exit status 2), never a
traceback. Errors found once a job runs (``FedbenchError``: impossible values, missing data) are reported the same
way.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any, List, Optional

import hydra
from hydra import compose, initialize_config_dir
from hydra.experimental.callback import Callback
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from fedbench.config import CONF_DIR, group_options, groups, register_configs
from fedbench.config.presets import TABLES
from fedbench.errors import FedbenchError

# conf/hydra/launcher/{joblib,ray}.yaml spell a plugin's config out under the plugin's own name, which Hydra warns
# about in every process that composes (launcher workers import this module too)
warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/\w+' is validated against ConfigStore schema")

CONFIG_NAME = "config"
_SKIP_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc",
               "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--resolve", "-p", "--package"}


def _compose(overrides: List[str], hydra_node: bool = False) -> DictConfig:
    """The job config for ``overrides`` as a run sees it: composed, then the preset's run-dependent settings
    applied (``fedbench.config.presets``; keys set in ``overrides`` win)."""
    from fedbench.config.presets import apply_presets, user_keys

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
            cfg = compose(config_name=CONFIG_NAME, overrides=overrides, return_hydra_config=hydra_node)
    finally:
        GlobalHydra.instance().clear()
    return apply_presets(cfg, user_keys(overrides))


def _override_problem(ov: Any, groups: List[str]) -> Optional[str]:
    """A one-paragraph error for an override no fedbench run accepts, whatever else is on the command line."""
    key, line = ov.key_or_group, ov.input_line
    if any(re.fullmatch(r"_\w+_", part) for part in re.split(r"[./]", key)):
        return (f"Override '{line}' sets the special key '{key}': keys such as _target_ would make the config "
                "import and instantiate arbitrary objects, and no fedbench option takes one. Fix: remove it.")
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        return None
    group = key.replace(".", "/")
    if ov.is_delete():
        return (f"Override '{line}' deletes '{key}', but every fedbench key needs a value. "
                f"Fix: set it instead ({key}=<value>), or leave it at its default.")
    if group in groups and not ov.is_delete():
        if "/" not in key and "." in key:
            return None
        options = group_options(group, USER_DIRS)
        values = list(ov.sweep_string_iterator()) if ov.is_sweep_override() else [ov.value()]
        for v in values:
            if not isinstance(v, str) or v not in options:
                return (f"Unknown option '{v}' for config group '{group}'. Allowed: {', '.join(options)}. "
                        f"Fix: pass {group}=<one of these>.")
        return None
    if ov.is_add() and key.split(".")[0] not in TABLES:
        return (f"Unknown key '{key}' (override '{line}'): '+' adds a key, and fedbench accepts only the keys "
                "its schemas define. Fix: drop the '+' to set an existing key, and check its spelling with "
                "'python run.py --cfg job'.")
    return None


def _expand(args: List[str]) -> List[List[str]]:
    """Override lists to compose: the first value of every sweep, then each sweep value in turn."""
    parsed = OverridesParser.create().parse_overrides(args)
    base, sweeps = [], []
    for ov in parsed:
        if ov.key_or_group.startswith("hydra"):
            continue
        if ov.is_sweep_override():
            key = ov.input_line.split("=", 1)[0]
            values = [f"{key}={v}" for v in ov.sweep_string_iterator()]
            base.append(values[0])
            sweeps.append((len(base) - 1, values[1:]))
        else:
            base.append(ov.input_line)
    variants = [base]
    for pos, rest in sweeps:
        for v in rest:
            variants.append(base[:pos] + [v] + base[pos + 1:])
    return variants


def _text(exc: BaseException) -> str:
    parts = []
    while exc is not None:
        parts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def _friendly(exc: Exception, overrides: List[str]) -> str:
    text = _text(exc)
    m = re.search(r"Could not find '([^']+)/([^'/]+)'", text)
    if m:
        group, option = m.group(1), m.group(2)
        options = re.findall(r"^\t(\S+)$", text, flags=re.M)
        allowed = ", ".join(options) if options else "(see the option tables in docs/reference/options.md)"
        return (f"Unknown option '{option}' for config group '{group}'. Allowed: {allowed}. "
                f"Fix: pass {group}=<one of these>.")
    m = re.search(r"Could not load '([^']+)'", text) or re.search(r"Could not find '([^']+)'", text)
    if m and "/" not in m.group(1):
        return f"Unknown config '{m.group(1)}'. Fix: check the option name against 'fedbench --help' (the config groups and their options)."
    m = re.search(r"Key '([^']+)' not in '[^']*'\s+full_key: (\S+)", text) or re.search(
        r"Key '([^']+)' is not in struct\s+full_key: (\S+)", text)
    if m:
        key, full = m.group(1), m.group(2)
        parent = full.rsplit(".", 1)[0] if "." in full else ""
        allowed = _allowed_keys(parent, [o for o in overrides if not o.lstrip("+~").startswith(full)])
        where = f"'{parent}'" if parent else "the top level"
        table = full.split(".")[0]
        if table in TABLES:
            given = next((o for o in overrides if o.split("=", 1)[0].startswith(full)), f"{full}=<value>")
            return (f"Unknown key '{key}' in {where} (override '{given}'): the preset table {table} "
                    f"has no entry '{key}' yet{f' (it has: {allowed})' if allowed else ''}. "
                    f"Fix: add it with '+' (+{given}).")
        return (f"Unknown key '{key}' in {where} (override '{full}'). Allowed keys: {allowed}. "
                f"Fix: use one of these keys (run 'python run.py --cfg job' to see the composed config).")
    m = re.search(r"Could not override '([^']+)'", text)
    if m:
        full = m.group(1)
        parent, _, key = full.rpartition(".")
        allowed = _allowed_keys(parent, [o for o in overrides if not o.lstrip("+~").startswith(full)])
        where = f"'{parent}'" if parent else "the top level"
        return (f"Unknown key '{key}' in {where} (override '{full}'). Allowed keys: {allowed}. "
                f"Fix: use one of these keys (run 'python run.py --cfg job' to see the composed config).")
    m = re.search(r"Invalid value '([^']*)', expected one of \[([^\]]*)\]\s+full_key: (\S+)", text)
    if m:
        return (f"Invalid value '{m.group(1)}' for '{m.group(3)}'. Allowed: {m.group(2)}. "
                f"Fix: pass {m.group(3)}=<one of these>.")
    m = re.search(r"Value '([^']*)' (?:of type '[^']*' )?could not be converted to (\w+)\s+full_key: (\S+)", text)
    if m:
        return (f"Invalid value '{m.group(1)}' for '{m.group(3)}': expected {m.group(2)}. "
                f"Fix: pass a value of type {m.group(2)}.")
    flat = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return f"Invalid configuration: {flat} Fix: correct the override named above."


def _allowed_keys(parent: str, overrides: List[str]) -> str:
    try:
        cfg = _compose(overrides)
        node = OmegaConf.select(cfg, parent) if parent else cfg
        return ", ".join(str(k) for k in node.keys())
    except Exception:
        return "(see 'python run.py --cfg job')"


def _unwritable(path: str) -> Optional[str]:
    """Why no run could write under ``path`` (its nearest existing ancestor must be a writable folder)."""
    p = Path(to_absolute_path(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        return f"{p} is a file, not a folder"
    try:  # os.access trusts permission bits, which root and special file systems ignore: try for real
        Path(tempfile.mkdtemp(prefix=".fedbench-probe-", dir=p)).rmdir()
    except OSError as exc:
        return f"{p} is not writable: {exc.strerror}"
    return None


def _check_variant(variant: List[str], multirun: bool) -> Optional[str]:
    from fedbench.config.checks import validate
    from fedbench.config.launchers import check_engine_here, check_launcher, runs_here

    try:
        cfg = _compose([o[2:] if o.startswith("++") else o for o in variant], hydra_node=True)
        job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        OmegaConf.to_container(job, resolve=True)  # bad interpolations fail here, not in a job
        validate(job)
        check_launcher(cfg.hydra)
        if runs_here(cfg.hydra):
            check_engine_here(job)
        out = ("hydra.sweep.dir", cfg.hydra.sweep.dir) if multirun else ("hydra.run.dir", cfg.hydra.run.dir)
    except FedbenchError as exc:
        return str(exc)
    except Exception as exc:
        return _friendly(exc, variant)
    outputs = [out]
    if cfg.engine.client_state_dir:
        outputs.append(("engine.client_state_dir", cfg.engine.client_state_dir))
    for key, path in outputs:
        problem = _unwritable(str(path))
        if problem:
            return f"Invalid config '{key}': cannot write results under {path} ({problem}). Fix: pass {key}=" \
                   "<a folder you can write to>."
    return None


def preflight(args: List[str]) -> Optional[str]:
    """Check every override and compose every variant of the command's sweep; return a one-paragraph error, or
    None when each variant composes and passes the config checks."""
    if any(a.split("=")[0] in _SKIP_FLAGS for a in args):
        return None
    multirun = any(a in ("-m", "--multirun") for a in args)
    overrides = [a for a in args if not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        variants = _expand(overrides)
    except Exception as exc:  # a syntax error in an override
        return _friendly(exc, [])
    known = groups()
    for ov in parsed:
        problem = _override_problem(ov, known)
        if problem:
            return problem
    hydra_args = [o for o in overrides if o.lstrip("+").startswith("hydra")]
    for variant in variants:
        problem = _check_variant(variant + hydra_args, multirun)
        if problem:
            return problem
    return None


def fail(message: str) -> None:
    print(f"fedbench: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _record_failure(run_dir: Path, cfg: DictConfig, reason: str, summary: Optional[dict],
                    trace: Optional[str] = None) -> str:
    """Leave a failed job's state where it can be written: ``summary.json`` (status failed, the reason, the
    progress in ``summary``) and, given ``trace``, ``error.log``. Without a ``summary`` of this job's own progress,
    an existing ``summary.json`` (another run's results) is left alone. Returns the sentences that end the job's
    error message: where the traceback is, and what could not be written (a failed rewrite of ``summary.json``
    leaves its last good version)."""
    from fedbench.logging.run_logger import write_json
    from fedbench.storage import StorageFault, write_text

    notes: List[str] = []
    if summary is not None or not (run_dir / "summary.json").exists():
        record = summary or {"algorithm": cfg.algo.name, "seed": int(cfg.seed), "rounds": 0}
        try:
            write_json(run_dir / "summary.json", {**record, "status": "failed", "reason": reason})
        except StorageFault as exc:
            notes.append(f"Note: summary.json could not be updated ({exc.error.strerror or exc}); its last good version "
                         "is kept")
    if trace is not None:
        try:
            write_text(run_dir / "error.log", trace)
            notes.append(f"The traceback is in {run_dir / 'error.log'}")
        except StorageFault as exc:
            notes.append(f"Note: error.log could not be written ({exc.error.strerror or exc})")
    return "".join(f" {n}." for n in notes)


def _drop_if_empty(fresh_dir: Path, run_dir: Path) -> None:
    """Remove the directory Hydra made for this job when the job continued another run's directory."""
    if fresh_dir.resolve() == run_dir.resolve() or not fresh_dir.is_dir():
        return
    if all(p.name in (".hydra", ".lock") or p.suffix == ".log" for p in fresh_dir.iterdir()):
        shutil.rmtree(fresh_dir, ignore_errors=True)


def _report(message: str, multirun: bool, run_dir: Path, code: int) -> None:
    """Print a job's failure as one paragraph; a single run then exits with ``code``, a sweep goes on."""
    if not multirun:
        print(f"fedbench: error: {message}", file=sys.stderr, flush=True)
        raise SystemExit(code)
    print(f"fedbench: error: job {run_dir.name}: {message}", file=sys.stderr, flush=True)


def _resume_point(run_dir: Path) -> str:
    from fedbench.checkpoint import Checkpointer

    found = Checkpointer(run_dir).paths()
    if found:
        return f"a resume continues exactly from its latest checkpoint (round {found[-1][0]})"
    return "it has no checkpoint yet, so a resume starts it afresh in the same directory"


def run_job(cfg: DictConfig) -> Optional[float]:
    """One Hydra job: claim its directory (fresh or resumed, under the directory's lock), build the simulation,
    run it under the stop signals, write results. A failure is recorded in ``summary.json`` (status failed, the
    reason) and ``error.log``, printed as one paragraph, and, in a multirun, does not stop the sweep; W&B is always
    finished and the lock released."""
    from fedbench.engine.simulation import drive

    return drive(job_steps(cfg, HydraConfig.get()))


def job_steps(cfg: DictConfig, hydra_cfg: DictConfig, signals: Any = None):
    """``run_job`` as a generator of the run's ``CohortRequest``s (``fedbench.engine.simulation.drive``): the
    packed launcher (``fedbench.pack``) answers several jobs' requests as one cohort. ``hydra_cfg`` is the
    job's Hydra node; ``signals`` a ``StopSignals`` shared by a pack, whose driver installs them and hands a
    pre-emption on once every job of the pack has stopped (None: the job installs its own)."""
    from fedbench.checkpoint import Checkpointer
    from fedbench.engine.simulation import RunControl, Simulation
    from fedbench.lock import RunLocked, describe
    from fedbench.logging import RunLogger
    from fedbench.logging.run_logger import plain_config
    from fedbench.runs import Interrupted, StopSignals, claim, mark_stopping, resume_flag, sweep_stopping
    from fedbench.storage import Reserve, StorageFault

    from fedbench.config.presets import apply_presets, user_keys

    logging.raiseExceptions = False  # a log file on a full disk must not print tracebacks (Hydra logs to the job dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    sweep_dir = Path(to_absolute_path(hydra_cfg.sweep.dir)) if multirun else None
    if sweep_dir is not None and sweep_stopping(sweep_dir):  # a worker's next job after a stop signal
        print(f"fedbench: not starting {hydra_cfg.runtime.output_dir}: its sweep is stopping (a signal stopped "
              "another of its jobs); the rerun that continues the sweep runs it", flush=True)
        return None
    cfg = apply_presets(cfg, user_keys(list(hydra_cfg.overrides.task)))
    fresh_dir = run_dir = Path(hydra_cfg.runtime.output_dir)
    root = Path(to_absolute_path(cfg.data.root))
    own_signals = signals is None
    logger, sim, lock, reserve, code, signals = None, None, None, None, 1, signals or StopSignals()
    try:
        if own_signals:
            signals.__enter__()  # from here on, SIGINT / SIGTERM end the job cleanly (checkpoint, status)
        job, lock = claim(cfg, fresh_dir, Path(to_absolute_path("outputs")),
                          requeued=int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0)
        run_dir = job.run_dir
        reserve = Reserve(run_dir)
        reserve.hold()
        _drop_if_empty(fresh_dir, run_dir)
        if job.note:
            print(f"fedbench: {job.note}", flush=True)
        if job.completed:
            code = 0
            return None
        ckpt = job.checkpoint
        sim = Simulation(cfg, run_dir, root, resume=ckpt is not None)
        if ckpt is not None:
            sim.load_state_dict(ckpt)
        logger = RunLogger(run_dir, cfg, resume_round=None if ckpt is None else ckpt["round"],
                           wandb_id=None if ckpt is None else ckpt.get("wandb_id"))
        control = RunControl(Checkpointer(run_dir, cfg.checkpoint_keep), json.dumps(plain_config(cfg)),
                             signals.reason)
        summary = yield from sim.run_steps(logger, control)
        logger.close_files()  # the CSVs' last rows are on disk before the summary that counts them
        logger.write_summary(summary)
        logger.print(f"[{cfg.algo.name}] {summary['status']}"
                     + (f" ({summary['reason']})" if summary["reason"] else "") + f": results in {run_dir}")
        code = 0
        if summary["status"] == "interrupted" and own_signals:  # (a pack's driver does this once for all its jobs)
            _finish(logger, 0)
            logger = None
            signals.chain()  # pre-empted under a scheduler: its handler requeues the job (which then resumes)
            if multiprocessing.parent_process() is None:  # a launcher's worker (joblib) returns: an exception
                raise SystemExit(signals.exit_code)      # would make its parent stop the others mid-round
        return summary["final_test_acc"]
    except Interrupted as stop:
        reason = f"{stop} (second signal) during round {sim.next_round + 1 if sim else 0}; resume=true restarts " \
                 "from the latest checkpoint"
        if logger is not None:
            try:
                logger.write_summary(sim.summary("interrupted", reason))
            except StorageFault:
                pass  # the last good summary stays; the message below says what happened
        print(f"fedbench: stopped at once: {reason}", file=sys.stderr, flush=True)
        raise SystemExit(128 + stop.signum) from None
    except RunLocked as exc:
        if multirun and resume_flag(cfg) == "true":
            print(f"fedbench: skipping job {fresh_dir.name}: {exc.run_dir} is being run by another process "
                  f"({describe(exc.owner)}); resume=true leaves it to that process", flush=True)
            code = 0
            return None
        _report(str(exc), multirun, fresh_dir, 2)  # nothing is written: the directory is another process's
    except FedbenchError as exc:
        _record_failure(run_dir, cfg, str(exc), sim.summary() if logger is not None else None)
        _report(str(exc), multirun, run_dir, 2)
    except StorageFault as exc:  # no space, read-only, quota, I/O error: the run stops where it is, resumable
        if reserve is not None:
            reserve.free()  # room for the failure record on a disk the run has just filled
        tail = _record_failure(run_dir, cfg, f"storage fault: {exc}", sim.summary() if logger is not None else None,
                               traceback.format_exc())
        _report(f"job stopped by a storage fault: {exc}. Its results so far are in {run_dir}; "
                f"{_resume_point(run_dir)}. Fix: {exc.fix}; then rerun with resume={run_dir}.{tail}",
                multirun, run_dir, 1)
    except Exception as exc:  # a bug or a runtime failure: recorded with its traceback, the sweep goes on
        reason = f"{type(exc).__name__}: {exc}"
        tail = _record_failure(run_dir, cfg, reason, sim.summary() if logger is not None else None,
                               traceback.format_exc())
        _report(f"job failed: {reason.rstrip('.')}.{tail}", multirun, run_dir, 1)
    finally:
        if sweep_dir is not None and signals.signum is not None:
            mark_stopping(sweep_dir)
        if own_signals:
            signals.__exit__()
        if sim is not None:
            sim.close()
        if logger is not None:
            _finish(logger, code)
        if reserve is not None:
            reserve.free()
        if lock is not None:
            lock.release()
    return None


def _finish(logger: Any, code: int) -> None:
    """Close a run's files and finish its W&B run on the way out; a failure here is one warning line."""
    try:
        logger.finish(code)
    except Exception as exc:
        print(f"fedbench: warning: could not close the run's files or W&B run: {exc}", file=sys.stderr, flush=True)


class SweepTable(Callback):
    """At the end of a multirun: one line per job (status, final accuracy, reason), from the jobs' summaries and
    locks (a job that died is failed; one that another process runs, skipped under resume=true, is running);
    ``SWEEP_FAILED`` then says whether a job failed or stopped for a reason other than divergence."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from fedbench.lock import describe, owner
        from fedbench.runs import read_summary, summary_state

        if "fedbench_tune" in str(config.hydra.sweeper.get("_target_", "")):
            return  # fedbench-tune prints its own selection and job statuses
        sweep = Path(to_absolute_path(config.hydra.sweep.dir))
        jobs = sorted((d for d in sweep.iterdir() if d.is_dir() and (d / ".hydra").is_dir()),
                      key=lambda d: (len(d.name), d.name)) if sweep.is_dir() else []
        rows = []
        for job in jobs:
            summary, held = read_summary(job), owner(job)
            status, reason = summary_state(summary, held)
            if status is None:
                status, reason = "failed", ("summary.json is damaged (not a JSON object)" if (job / "summary.json")
                                            .exists() else "no summary.json (the job died before writing one)")
            if held:  # skipped by this sweep (resume=true): another process runs it
                status, reason = "running", f"in another process ({describe(held)})"
            reason = reason or ""
            packed = (summary or {}).get("packed_jobs")  # hydra/launcher=packed: the jobs of its pack
            rows.append((job.name, status, (summary or {}).get("final_test_acc"),
                         f"x{packed}" if isinstance(packed, int) and packed > 1 else "alone" if packed else "-",
                         reason if len(reason) <= 120 else reason[:117] + "..."))
        SWEEP_FAILED[:] = [row[0] for row in rows if row[1] not in ("completed", "diverged", "running")]
        width = max([len(r[0]) for r in rows] + [3])
        print(f"\nfedbench: sweep {sweep}: {len(rows)} jobs", flush=True)
        print(f"  {'job':<{width}}  {'status':<11}  {'test_acc':>8}  {'packed':<6}  reason")
        for name, status, acc, packed, reason in rows:
            acc = f"{acc:.4f}" if isinstance(acc, (int, float)) else "-"
            print(f"  {name:<{width}}  {status:<11}  {acc:>8}  {packed:<6}  {reason}", flush=True)


#: Jobs of the last multirun that failed (not diverged); ``main`` exits non-zero when there are any.
SWEEP_FAILED: list = []


#: The user's config folders (``--config-dir``), searched after the package's own configs.
USER_DIRS: List[Path] = []


def _user_config_dirs(args: List[str]) -> List[str]:
    """``args`` with ``--config-dir DIR`` / ``-cd DIR`` turned into ``hydra.searchpath=[file://DIR]``, so that the
    preflight checks and the jobs see the user's presets (added to the package's, not replacing them)."""
    USER_DIRS.clear()  # main() may run more than once in a process (tests)
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a in ("--config-dir", "-cd") and i + 1 < len(args):
            USER_DIRS.append(Path(args[i + 1]).resolve())
            i += 2
            continue
        if a.startswith(("--config-dir=", "-cd=")):
            USER_DIRS.append(Path(a.split("=", 1)[1]).resolve())
        else:
            out.append(a)
        i += 1
    if USER_DIRS:
        out.append("hydra.searchpath=[" + ",".join(f"file://{d}" for d in USER_DIRS) + "]")
    return out


def main() -> None:
    """The ``fedbench`` command (and ``run.py``): check every override, then run the Hydra app."""
    register_configs()
    sys.argv[1:] = _user_config_dirs(sys.argv[1:])
    # ``+group=x`` (Hydra's "append" form) for a group of the primary defaults list (a conf/ folder) is ``group=x``
    top = {g for g in groups() if "/" not in g}
    sys.argv[1:] = [a[1:] if a.startswith("+") and a[1:].split("=")[0] in top else a for a in sys.argv[1:]]
    try:
        message = preflight(sys.argv[1:])
    except KeyboardInterrupt:
        print("fedbench: interrupted before any job started", file=sys.stderr)
        raise SystemExit(130) from None
    if message:
        fail(message)
    from fedbench.runs import StopSignals

    multirun = any(a in ("-m", "--multirun") for a in sys.argv[1:])
    with StopSignals() if multirun else contextlib.nullcontext() as sweep:  # runs.StopSignals: waits for the jobs
        hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=CONFIG_NAME)(run_job)()
    if sweep is not None and sweep.signum is not None:
        print(f"fedbench: sweep stopped by {sweep.reason()}: its running jobs stopped after their round with a "
              "checkpoint, no other job started. Rerun the same command with resume=true to continue it.",
              file=sys.stderr, flush=True)
        raise SystemExit(sweep.exit_code)
    if SWEEP_FAILED:
        print(f"fedbench: error: {len(SWEEP_FAILED)} job(s) failed: {', '.join(SWEEP_FAILED)}", file=sys.stderr)
        raise SystemExit(1)
