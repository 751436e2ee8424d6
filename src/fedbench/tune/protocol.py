"""The tuning protocol: trials on the tuning seeds, selection on validation, the final seeds, the report.

A method is an algorithm (``--algos``) or any option compared across a preset (``--compare
participation/selection=uniform,md``). Phase 1 runs, for every method, the same number of trials (``--trials``; a
grid smaller than that is tried whole) on the tuning seeds; phase 2 runs each method's selected configuration on the
final seeds (disjoint from the tuning seeds); ``report/`` is ``fedbench-report`` of the final runs, grouped by
method with the chosen values shown. Jobs go through ``launch`` (the Hydra launcher, from the sweeper in
``hydra_plugins.fedbench_tune``), so joblib, SLURM and Ray run them unchanged. Everything lives under one
directory::

    tune.json        the plan (the command's arguments and each method's space): a rerun must match it
    trials/<method>/trials.json, trials/<method>/t<i>_seed<s>/    the trials and their runs
    selection.json   per method: the space, the budget, every trial's overrides and validation score, the choice
    final/<method>_seed<s>/    the final runs
    report/          fedbench-report of final/

With ``--from <an earlier selection.json>`` phase 1 is skipped: the finals run that tuning's choices under this
command's overrides (a longer budget, say), and ``selection.json`` is its record with both sets of overrides.

With ``--reuse-runs <an earlier tuning directory>`` a job that directory finished under the same overrides (the
same job: another tuning seed added, a method added, the same finals) is copied in instead of run, and
``copied.json`` (in ``selection.json`` as ``copied_runs``) names where each copy came from.

Rerunning the command on the same directory skips every finished job (completed or diverged), resumes interrupted
ones from their checkpoints and restarts failed ones.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence

import yaml

from fedbench.errors import FedbenchError
from fedbench.rng import derive_seed
from fedbench.checkpoint import Checkpointer
from fedbench.runs import read_status, read_summary
from fedbench.storage import write_text
from fedbench.tune.select import Rule, choose, mean_score, run_score
from fedbench.tune.space import Dimension, grid_points, grid_size

if TYPE_CHECKING:
    from fedbench.report import Written

FINISHED = ("completed", "diverged")


@dataclass
class Plan:
    """What a tuning directory runs: the arguments of ``fedbench-tune`` and each method's resolved space (a method
    is a value of ``key``: an algorithm, or a selection rule with ``--compare participation/selection=...``)."""

    overrides: List[str]
    key: str  # the override that names a method: method, or e.g. participation/selection
    methods: List[str]
    trials: int
    sampler: str
    select: str
    tune_seeds: List[int]
    seeds: List[int]
    val_fraction: float
    batch: int
    spaces: Dict[str, List[dict]] = field(default_factory=dict)
    #: ``--from``: the earlier selection.json whose choices the finals run ({"file", "overrides", "methods", ...});
    #: phase 1 is then skipped
    reused: Optional[dict] = None
    #: ``--reuse-runs``: earlier tuning directories whose finished runs of this plan's jobs are copied, not rerun
    reuse_runs: List[str] = field(default_factory=list)

    def save(self, path: Path) -> None:
        write_text(path, json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> "Plan":
        try:
            data = {"reused": None, "reuse_runs": [], **json.loads(Path(path).read_text())}  # older plans
            return cls(**{f.name: data[f.name] for f in fields(cls)})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise FedbenchError(f"Cannot read the tuning plan {path} ({exc}). Fix: start a new tuning directory "
                                "(leave out --dir), or restore the file.") from None

    def differences(self, other: "Plan") -> List[str]:
        """``key: old -> new`` for each setting that differs, down to the differing entries of a nested one (a
        carried selection record's ``methods.fedavg``, not the whole record)."""
        out: List[str] = []
        _differences("", asdict(self), asdict(other), out)
        return out

    def dims(self, method: str) -> List[Dimension]:
        return [Dimension(**d) for d in self.spaces[method]]


def _differences(path: str, a: Any, b: Any, out: List[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in [*a, *(k for k in b if k not in a)]:
            if a.get(k, _ABSENT) != b.get(k, _ABSENT):
                _differences(f"{path}.{k}" if path else str(k), a.get(k, _ABSENT), b.get(k, _ABSENT), out)
    else:
        out.append(f"{path}: {_brief(a)} -> {_brief(b)}")


class _Absent:
    """A key that one of the two plans lacks (a sentinel no saved value can equal)."""

    def __repr__(self) -> str:
        return "(absent)"


_ABSENT = _Absent()


def _brief(v: Any, width: int = 80) -> str:
    text = repr(v)
    return text if len(text) <= width else text[:width - 3] + "..."


@dataclass
class Job:
    name: str  # the run directory, relative to the tuning directory
    overrides: List[str]


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def _json_score(score) -> List[Optional[float]]:
    return [x if math.isfinite(x) else None for x in score]


class Tuning:
    """Runs a ``Plan`` in ``root`` with ``launch(jobs)``; ``run`` returns the names of the jobs that failed (not
    diverged) and of the methods with no usable trial."""

    def __init__(self, plan: Plan, root: Path, launch: Callable[[List[Job]], None],
                 echo: Callable[[str], None] = lambda s: print(s, flush=True)):
        self.plan, self.root, self._launch, self.echo = plan, Path(root), launch, echo
        self.rule = Rule.parse(plan.select)
        self.failed: List[str] = []
        self._sources: Optional[Dict[tuple, Path]] = None  # --reuse-runs: finished runs by the overrides they ran

    # -- jobs ---------------------------------------------------------------------------------------------------
    def _job(self, name: str, method: str, params: Dict[str, Any], seed: int) -> Job:
        overrides = [*self.plan.overrides, f"{self.plan.key}={method}",
                     *(f"{k}={_value(v)}" for k, v in params.items()), f"seed={seed}",
                     f"data.val_fraction={self.plan.val_fraction!r}"]
        return Job(name, overrides)

    def _trial_jobs(self, method: str, index: int, params: Dict[str, Any]) -> List[Job]:
        return [self._job(f"trials/{method}/t{index:02d}_seed{s}", method, params, s) for s in self.plan.tune_seeds]

    def launch(self, jobs: List[Job]) -> None:
        """Launch the jobs not finished yet: interrupted ones resume from their checkpoint, failed ones restart."""
        pending = []
        self._copy_finished(jobs)
        for job in jobs:
            run_dir = self.root / job.name
            if read_status(run_dir) in FINISHED:
                self._check_ran(job, run_dir)
                continue
            if Checkpointer(run_dir).paths():
                job = Job(job.name, [*job.overrides, f"resume={run_dir.resolve()}"])
            elif run_dir.exists():
                shutil.rmtree(run_dir)  # a failed or killed attempt with nothing to continue
            pending.append(job)
        if pending:
            self.echo(f"fedbench-tune: launching {len(pending)} job(s)"
                      + (f" ({len(jobs) - len(pending)} already finished)" if len(pending) < len(jobs) else ""))
            self._launch(pending)
        for job in jobs:
            status = read_status(self.root / job.name)
            if status not in FINISHED and job.name not in self.failed:
                reason = (read_summary(self.root / job.name) or {}).get("reason")
                self.failed.append(job.name)
                self.echo(f"fedbench-tune: job {job.name} {status or 'wrote no summary'}"
                          + (f": {reason}" if reason else ""))

    def _copy_finished(self, jobs: List[Job]) -> None:
        """``--reuse-runs``: copy in each job that has no run here and that an earlier tuning directory finished
        under the same overrides (the same job, so the same numbers on the same kind of machine). A copy goes
        through ``.copying/`` and is renamed into place, so an interrupted one leaves no half run; ``copied.json``
        records its source, relative to this directory (a committed record names no machine's paths)."""
        if not self.plan.reuse_runs:
            return
        staging = self.root / ".copying"
        shutil.rmtree(staging, ignore_errors=True)
        copied: Dict[str, str] = {}
        for job in jobs:
            run_dir = self.root / job.name
            source = self._reusable().get(tuple(job.overrides))
            if source is None or run_dir.exists():
                continue
            shutil.copytree(source, staging / job.name)
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            (staging / job.name).rename(run_dir)
            copied[job.name] = os.path.relpath(source, self.root)
        shutil.rmtree(staging, ignore_errors=True)
        if copied:
            record = {**self.copied_runs(), **copied}
            write_text(self.root / "copied.json", json.dumps(record, indent=2) + "\n")
            self.echo(f"fedbench-tune: copied {len(copied)} finished run(s) of the same jobs from "
                      f"{', '.join(self.plan.reuse_runs)} (copied.json names each source)")

    def _copies(self) -> Dict[str, Any]:
        """selection.json's ``copied_runs`` entry (with its note), or nothing when no run was copied."""
        copies = self.copied_runs()
        return {"copied_runs": copies, "copied_note": "these jobs were not run here: each is a copy of a run that "
                "finished under the same overrides in an earlier tuning directory (--reuse-runs)"} if copies else {}

    def copied_runs(self) -> Dict[str, str]:
        """Job name -> the run it was copied from (``--reuse-runs``), for every copy made in this directory."""
        path = self.root / "copied.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def _reusable(self) -> Dict[tuple, Path]:
        """The finished runs (trials and finals) of the ``--reuse-runs`` directories, by the overrides they ran;
        the first directory named wins a job both hold."""
        if self._sources is None:
            self._sources = {}
            for source in map(Path, self.plan.reuse_runs):
                for record in sorted([*source.glob("trials/*/*/.hydra/overrides.yaml"),
                                      *source.glob("final/*/.hydra/overrides.yaml")]):
                    run_dir = record.parents[1]
                    if read_status(run_dir) not in FINISHED:
                        continue
                    try:
                        self._sources.setdefault(tuple(_ran(record)), run_dir)
                    except (OSError, yaml.YAMLError):  # an unreadable record: that run is not reused
                        continue
        return self._sources

    def _check_ran(self, job: Job, run_dir: Path) -> None:
        """A finished run stands for its job only if it ran the job's overrides (Hydra's record of them,
        ``.hydra/overrides.yaml``, less the ``resume=`` of a continued run): one left by another plan, or copied
        from another directory with other values, would put another configuration's numbers under this one's."""
        path = run_dir / ".hydra" / "overrides.yaml"
        if not path.is_file():  # a launcher that keeps no Hydra record: nothing to compare
            return
        try:
            ran = _ran(path)
        except (OSError, yaml.YAMLError) as exc:
            raise FedbenchError(f"Cannot read {path} ({exc}). Fix: move {run_dir} out of the tuning directory "
                                "(its job then runs again).") from None
        if ran != job.overrides:
            extra = [o for o in ran if o not in job.overrides]
            missing = [o for o in job.overrides if o not in ran]
            detail = "; ".join([*([f"it ran {' '.join(extra)}"] if extra else []),
                                *([f"the job has {' '.join(missing)}"] if missing else [])])
            raise FedbenchError(f"{run_dir} finished under other overrides than its job: "
                                f"{detail or 'the same ones in another order'}. It was left by another plan or "
                                f"copied from another directory. Fix: move it out of {self.root} (its job then runs "
                                "again), or pass --dir a new folder.")

    # -- phase 1 ------------------------------------------------------------------------------------------------
    def _stored(self, method: str) -> List[Dict[str, Any]]:
        path = self.root / "trials" / method / "trials.json"
        return json.loads(path.read_text()) if path.is_file() else []

    def _store(self, method: str, params: List[Dict[str, Any]]) -> None:
        path = self.root / "trials" / method / "trials.json"
        write_text(path, json.dumps(params, indent=2) + "\n")

    def _score(self, method: str, index: int, params: Dict[str, Any]) -> dict:
        runs, scores = {}, []
        for job in self._trial_jobs(method, index, params):
            score, status = run_score(self.rule, self.root / job.name)
            runs[job.name.rsplit("_seed", 1)[1]] = {"status": status, "score": _json_score(score)}
            scores.append(score)
        score = mean_score(scores)
        return {"index": index, "params": params, "overrides": [f"{k}={_value(v)}" for k, v in params.items()],
                "runs": runs, "score": score}

    def _grid(self) -> Dict[str, List[dict]]:
        points = {}
        for method in self.plan.methods:
            points[method] = grid_points(self.plan.dims(method), self.plan.trials, self.plan.tune_seeds[0], method)
            self._store(method, points[method])
        self.launch([j for method in self.plan.methods for i, p in enumerate(points[method])
                     for j in self._trial_jobs(method, i, p)])
        return {m: [self._score(m, i, p) for i, p in enumerate(points[m])] for m in self.plan.methods}

    def _tpe(self) -> Dict[str, List[dict]]:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        studies, stored, done, asked = {}, {}, {a: [] for a in self.plan.methods}, {}
        for method in self.plan.methods:
            seed = derive_seed(self.plan.tune_seeds[0], f"tune/tpe/{method}") % 2**32
            sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(1, min(10, self.plan.trials // 3)),
                                                 constant_liar=True)
            studies[method] = optuna.create_study(direction="maximize", sampler=sampler)
            stored[method] = self._stored(method)
        dists = {a: {d.key: d.distribution() for d in self.plan.dims(a)} for a in self.plan.methods}
        while any(len(done[a]) < self.plan.trials for a in self.plan.methods):
            batch: Dict[str, List[int]] = {}
            for method in self.plan.methods:
                start = len(done[method])
                batch[method] = list(range(start, min(start + self.plan.batch, self.plan.trials)))
                for i in batch[method]:
                    if i >= len(stored[method]):
                        trial = studies[method].ask(dists[method])
                        asked[method, i] = trial
                        stored[method].append(dict(trial.params))
                self._store(method, stored[method])
            self.launch([j for a, idx in batch.items() for i in idx for j in self._trial_jobs(a, i, stored[a][i])])
            for method, idx in batch.items():
                for i in idx:
                    result = self._score(method, i, stored[method][i])
                    value = result["score"][0] if math.isfinite(result["score"][0]) else -1e9
                    if (method, i) in asked:
                        studies[method].tell(asked[method, i], value)
                    else:
                        studies[method].add_trial(optuna.trial.create_trial(
                            params=stored[method][i], distributions=dists[method], value=value))
                    done[method].append(result)
        return done

    def reuse(self) -> Dict[str, Optional[dict]]:
        """``--from``: the choices of an earlier tuning, its record copied into ``selection.json`` with the
        overrides its trials ran under (``selected_under``) beside the finals' own (``overrides``)."""
        reused = self.plan.reused
        record = reused["methods"]  # the methods of this plan, as fedbench-tune --from checked them
        self.echo(f"fedbench-tune: phase 1 skipped: the choices of {reused['file']} ({self.plan.trials} trial(s) "
                  f"per method on seed(s) {', '.join(map(str, self.plan.tune_seeds))}, under "
                  f"{' '.join(reused['overrides'])})")
        self._write_selection(record, selected_under={
            "file": reused["file"], "overrides": reused["overrides"],
            "note": "the trials ran under these overrides; the finals under 'overrides'"})
        return {m: r["chosen"] for m, r in record.items()}

    def select(self) -> Dict[str, Optional[dict]]:
        """Phase 1 and the choice; writes ``selection.json``."""
        self.echo(f"fedbench-tune: phase 1: {', '.join(self.plan.methods)} x up to {self.plan.trials} trial(s) x "
                  f"tuning seed(s) {', '.join(map(str, self.plan.tune_seeds))} ({self.plan.sampler})")
        results = self._tpe() if self.plan.sampler == "tpe" else self._grid()
        chosen, record = {}, {}
        for method in self.plan.methods:
            dims = self.plan.dims(method)
            trials = results[method]
            pick = choose(trials, [d.key for d in dims if d.step])
            chosen[method] = pick
            record[method] = {
                "space": [d.to_json() for d in dims], "budget": self.plan.trials, "grid_size": grid_size(dims),
                "trials_run": len(trials),
                "trials": [{**t, "score": _json_score(t["score"])} for t in trials],
                "chosen": None if pick is None else {"index": pick["index"], "params": pick["params"],
                                                     "overrides": pick["overrides"],
                                                     "score": _json_score(pick["score"])}}
            if pick is None:
                self.failed.append(f"method {method} (no trial completed)")
            scores = {tuple(t["score"]) for t in trials}
            if len(trials) > 1 and len(scores) == 1 and pick is not None:
                record[method]["warning"] = (f"all {len(trials)} trials scored the same: the searched keys "
                                             f"({', '.join(d.key for d in dims)}) may not reach {method}")
                self.echo(f"fedbench-tune: warning: {method}: {record[method]['warning']}; check its space "
                          "(tune_space in the preset, or --space)")
        self._write_selection(record)
        return chosen

    def _write_selection(self, record: Dict[str, dict], **extra: Any) -> None:
        selection = {"select": str(self.rule), "selects": self.rule.describe(), "sampler": self.plan.sampler,
                     "budget": self.plan.trials, "tune_seeds": self.plan.tune_seeds, "seeds": self.plan.seeds,
                     "val_fraction": self.plan.val_fraction, "overrides": self.plan.overrides,
                     "compared": self.plan.key, **extra, **self._copies(),
                     "note": "selection reads only the validation columns (round, val_acc, val_loss) of the "
                             "tuning runs' metrics.csv; the test set is never used",
                     "methods": record}
        write_text(self.root / "selection.json", json.dumps(selection, indent=2) + "\n")
        self._print_selection(record)

    def _print_selection(self, record: Dict[str, dict]) -> None:
        self.echo(f"fedbench-tune: selection ({self.rule.describe()}, mean over the tuning seeds):")
        width = max(len(a) for a in record)
        for method, r in record.items():
            c = r["chosen"]
            what = "no trial completed" if c is None else (
                f"{' '.join(c['overrides']) or '(nothing to tune)'}  score {self._fmt(c['score'])}")
            self.echo(f"  {method:<{width}}  {r['trials_run']}/{r['budget']} trials  {what}")

    @staticmethod
    def _fmt(score: Sequence[Optional[float]]) -> str:
        return "-" if score[0] is None else f"{score[0]:.4g}"

    # -- phase 2 ------------------------------------------------------------------------------------------------
    def finals(self, chosen: Dict[str, Optional[dict]]) -> List[Job]:
        jobs = [self._job(_final(method, s), method, pick["params"], s)
                for method, pick in chosen.items() if pick is not None for s in self.plan.seeds]
        self.echo(f"fedbench-tune: phase 2: the chosen configurations on seed(s) "
                  f"{', '.join(map(str, self.plan.seeds))}")
        self.launch(jobs)
        self._flag_unstable(chosen)
        return jobs

    def _flag_unstable(self, chosen: Dict[str, Optional[dict]]) -> None:
        """A choice that diverged on final seeds trained on the tuning seed(s) at the edge of its stability, and
        the method's comparisons rest on the seeds that completed. Recorded in selection.json (the method's
        ``finals_diverged``: those seeds) and said with the remedy: more tuning seeds, on any of which a diverged
        run makes its configuration score worst."""
        path = self.root / "selection.json"
        selection = {**json.loads(path.read_text()), **self._copies()}
        for method, pick in chosen.items():
            entry = selection["methods"][method]
            entry.pop("finals_diverged", None)
            seeds = [] if pick is None else [s for s in self.plan.seeds
                                             if read_status(self.root / _final(method, s)) == "diverged"]
            if seeds:
                entry["finals_diverged"] = seeds
                n = len(self.plan.seeds)
                self.echo(f"fedbench-tune: warning: {method}: its choice ({' '.join(pick['overrides'])}) diverged "
                          f"on final seed(s) {', '.join(map(str, seeds))} of {n}: it trained on the tuning seed(s) "
                          f"at the edge of stability, and its comparisons rest on the {n - len(seeds)} seed(s) that "
                          "completed. For a choice that trains on every seed, tune on more seeds (e.g. --tune-seeds "
                          f"{','.join(map(str, self._more_tune_seeds()))} with another --dir and --reuse-runs "
                          f"{self.root}, which copies the runs of the same jobs: a configuration that diverges on "
                          "any of the seeds scores worst)")
        write_text(path, json.dumps(selection, indent=2) + "\n")

    def _more_tune_seeds(self) -> List[int]:
        """The tuning seeds and one more, disjoint from the final seeds: the remedy's example."""
        extra = max(self.plan.tune_seeds) + 1
        while extra in self.plan.seeds:
            extra += 1
        return [*self.plan.tune_seeds, extra]

    def report(self) -> Optional[Written]:
        """``fedbench-report`` of the final runs: one group per method; the chosen values and every other setting
        that differs between methods (a preset's per-method weighting, say) in brackets."""
        from fedbench.report import report, scan

        final = self.root / "final"
        runs, unreadable = scan([final]) if final.is_dir() else ([], [])
        if not runs:
            return None
        key = self.plan.key
        method = "algo.name" if key == "algo" else next(
            (k for k in (f"choice.{key}", key) if any(k in r.config for r in runs)), key)
        tuned = sorted({d["key"] for dims in self.plan.spaces.values() for d in dims})
        return report([final], out=self.root / "report", group_by=[method], tuned=tuned, runs=runs,
                      unreadable=unreadable)

    def run(self) -> List[str]:
        chosen = self.reuse() if self.plan.reused else self.select()
        self.finals(chosen)
        written = self.report()
        self.echo(f"fedbench-tune: results in {self.root} (selection.json"
                  + (f", {written.folder / 'index.html'}" if written else "") + ")")
        left_out = written.left_out("fedbench-tune") if written else ""
        if left_out:
            print(left_out, file=sys.stderr, flush=True)
        return self.failed


def _ran(path: Path) -> List[str]:
    """The overrides a run ran: its ``.hydra/overrides.yaml``, less a continued run's ``resume=``."""
    return [str(o) for o in yaml.safe_load(path.read_text()) or [] if not str(o).startswith("resume=")]


def _final(method: str, seed: int) -> str:
    """The run directory of a method's final run on ``seed``, under the tuning directory."""
    return f"final/{method}_seed{seed}"


def check_seeds(tune_seeds: Sequence[int], seeds: Sequence[int]) -> None:
    shared = sorted(set(tune_seeds) & set(seeds))
    if shared:
        raise FedbenchError(f"Invalid seeds: {', '.join(map(str, shared))} in both --tune-seeds and --seeds; the "
                            "final runs must not reuse the runs selection saw. Fix: pass disjoint seed lists "
                            "(e.g. --tune-seeds 100 --seeds 0,1,2).")

