"""fedbench-report: read a sweep's run directories and write curves, tables and one HTML page.

    python -m fedbench.report outputs/multirun/<date>/<time> [more dirs] [--group-by algo.name ...]
        [--targets 0.7 0.8] [--loss-targets 0.6 0.5] [--top-k 5 10] [--out DIR]

A run is a directory holding ``config.yaml`` (outside ``.hydra``) and ``metrics.csv`` / ``summary.json`` /
``error.log``. Runs are grouped by every config difference except the seed (``IGNORED``: seeds, logging, resume and
paths), or by the ``--group-by`` keys. Every number is recomputed from ``metrics.csv`` (``rounds.csv`` for
participation): a run's final accuracy is its last evaluation, its best the maximum over evaluations, its top-k accuracy
(``--top-k``, by default the runs' ``top_k``) the mean of its k highest evaluations, where it held out a validation
split its accuracy at best validation the test accuracy at its evaluation of highest ``val_acc`` (the round picked on
validation, not on the test curve as the best and top-k are), its cost to a target the counters of the first
evaluation at or above it (at or below it for a loss target: the global training loss). Means and standard deviations
(sample std, ddof=1) are over the group's completed runs (a cost's over those that reached the target, so where only
some did, the tables add the Kaplan-Meier median cost, the others censored at their budgets:
``fedbench.stats.km_median``); diverged, failed and interrupted runs are listed with their reasons and left out of the
means. Writes into ``<first dir>/report/`` (or ``--out``):
``curves_<axis>.png/.pdf`` (test accuracy, test loss and training loss against rounds, gradient evaluations and floats
communicated; mean line and a shaded band of ±1 std, distinct line styles and markers for black-and-white print; where
runs evaluated it (``engine.eval_train``), a fourth panel, the global training loss, which the tables and paired
comparisons give too: the training loss above is the participants' own during their local steps), ``results.md``,
``results.tex``, ``participation.md`` with each group's seed-0 trace image, ``comparisons.md`` (groups that differ in
one key, compared seed by seed on each score, and on each cost to each target with a run that missed it censored at its
budget: ``fedbench.stats``), ``report.json`` and ``index.html``.

A damaged run (a file missing, truncated, not UTF-8, or not what it claims: ``load_run``) is left out and listed
under "Unreadable runs" with the reason, in every file and on stderr; the exit status is then 1 (0: every run read;
2: no report: an option outside its domain, such as a target outside (0, 1], a loss target no run can reach or a key
no run has, or no readable run). A run with the configuration and seed of another in its group (a
``fedbench-tune --reuse-runs`` copy beside its original, a rerun) is left out and listed under "Repeated seeds":
a seed counts once.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import functools
import html
import io
import json
import math
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from fedbench import stats
from fedbench.engine.metrics import COST_AXES, CURVES, DERIVED, label
from fedbench.errors import FedbenchError
from fedbench.runs import RESUME_FREE
from fedbench.tree import flatten, strict_json, under

#: config keys (with the keys below them) that never separate groups: the seeds, where the data and the clients'
#: states live, Hydra's own, and every key a resume may change (``RESUME_FREE``: logging, checkpoints, threads, top_k)
IGNORED = ("seed", "data.seed", "data.root", "data.cache", "engine.client_state_dir", "hydra", "choice", *RESUME_FREE)
#: ``choice.<group>``: the option Hydra composed for a config group (``choice.participation/selection``:
#: ``fedsrc_d_oracle``), read from the run's ``.hydra/hydra.yaml``; a ``--group-by`` key, never a default one
METRICS = tuple((c, label(c)) for c in CURVES)
AXES = tuple((c, label(c)) for c in COST_AXES)
STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1)), "v"), ((0, (3, 1, 1, 1, 1, 1)), "x")]


@dataclass
class Run:
    path: Path
    config: Dict[str, object]
    metrics: Dict[str, np.ndarray]
    rounds: Dict[str, np.ndarray]
    status: str
    reason: Optional[str]
    wall: Optional[float]

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    @property
    def completed(self) -> bool:
        """Completed with at least one evaluation: a run the tables and comparisons use."""
        return self.status == "completed" and len(self.metrics.get("round", ())) > 0


@dataclass
class Group:
    label: str
    runs: List[Run] = field(default_factory=list)  # one per configuration and seed (``group_runs``)
    values: Dict[str, object] = field(default_factory=dict)  # the label keys' values
    repeats: List[Tuple[Run, Run]] = field(default_factory=list)  # (a run left out, the one kept in its stead)

    def by_seed(self, score) -> Dict[int, object]:
        """{seed: score(run)} over the completed runs (in a ``--group-by`` group that pools configurations, the first
        run of a seed by path)."""
        out: Dict[int, object] = {}
        for r in self.completed:
            out.setdefault(r.seed, score(r))
        return out

    @property
    def completed(self) -> List[Run]:
        return [r for r in self.runs if r.completed]


class Unreadable(Exception):
    """A run directory the report cannot use; the message says which file and why."""


class ReportError(FedbenchError):
    """A report option outside its domain, or nothing to report."""


#: the statuses a fedbench run's summary.json can hold
STATUSES = ("completed", "diverged", "failed", "interrupted", "running")


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise Unreadable(f"{path.name} cannot be read ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"{path.name} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") \
            from None


def _read_csv(path: Path) -> Dict[str, np.ndarray]:
    """The numeric columns of a fedbench CSV (``round`` first, increasing); a torn last line (a run stopped while
    writing it) is dropped. ``Unreadable`` for anything else: no header, no ``round`` column, a short or long row
    before the last, a value that is not a number, rounds out of order."""
    if not path.is_file():
        return {}
    reader = csv.reader(io.StringIO(_read_text(path), newline=""))
    lines = list(reader)
    if not lines or not lines[0]:
        raise Unreadable(f"{path.name} is empty (truncated?)")
    header, rows = lines[0], lines[1:]
    if "round" not in header:
        raise Unreadable(f"{path.name} has no 'round' column: not a fedbench {path.name}")
    if rows and len(rows[-1]) != len(header):
        rows = rows[:-1]  # a torn last line
    out: Dict[str, np.ndarray] = {}
    for n, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise Unreadable(f"{path.name} line {n} has {len(row)} fields, its header {len(header)}")
    for i, key in enumerate(header):
        try:
            out[key] = np.array([float(r[i]) if r[i] != "" else math.nan for r in rows])
        except ValueError:
            n, bad = next((n, r[i]) for n, r in enumerate(rows, start=2) if not _is_number(r[i]))
            raise Unreadable(f"{path.name} line {n}: {key}={bad[:40]!r} is not a number") from None
    if len(rows) and not np.all(np.diff(out["round"]) > 0):
        raise Unreadable(f"{path.name}: its rounds are not increasing (not a fedbench {path.name})")
    for name, (_, parts, scale) in DERIVED.items():
        if all(p in out for p in parts):
            out[name] = sum(out[p] for p in parts) * scale
    return out if rows else {}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text == ""
    return True


def _choices(path: Path) -> Dict[str, object]:
    """``choice.<group>`` for every config group of the run (Hydra's ``runtime.choices``), if recorded."""
    try:
        hydra_cfg = yaml.safe_load((path / ".hydra" / "hydra.yaml").read_text()) or {}
        choices = hydra_cfg["hydra"]["runtime"]["choices"] or {}
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError):
        return {}
    return {f"choice.{g}": v for g, v in choices.items() if not str(g).startswith("hydra/")}


def _config(path: Path) -> Dict[str, object]:
    if not (path / "config.yaml").is_file():
        raise Unreadable("config.yaml is missing")
    try:
        config = yaml.safe_load(_read_text(path / "config.yaml"))
    except yaml.YAMLError as exc:
        raise Unreadable(f"config.yaml is not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(config, dict) or not {"seed", "algo"} <= set(config):
        raise Unreadable("config.yaml is not a fedbench run's config (no seed and algo keys)")
    return flatten(config)


def _summary(path: Path) -> Dict[str, object]:
    if not (path / "summary.json").is_file():
        return {}
    try:
        summary = json.loads(_read_text(path / "summary.json"))
    except ValueError as exc:
        raise Unreadable(f"summary.json is not valid JSON ({exc}; truncated?)") from None
    if not isinstance(summary, dict):
        raise Unreadable("summary.json is not a JSON object")
    if summary.get("status", "completed") not in STATUSES:
        raise Unreadable(f"summary.json has status {summary.get('status')!r}, not one of {', '.join(STATUSES)}")
    return summary


def load_run(path: Path) -> Run:
    """The run in ``path``; ``Unreadable`` when a file is missing, truncated, not UTF-8 or not what it claims to
    be (a completed run's metrics must reach the rounds its summary counts)."""
    config = _config(path)
    config.update(_choices(path))
    summary = _summary(path)
    metrics = _read_csv(path / "metrics.csv")
    rounds = _read_csv(path / "rounds.csv")
    status, reason = summary.get("status", "completed" if summary else None), summary.get("reason")
    if status is None and metrics:
        raise Unreadable("summary.json is missing, though metrics.csv has rows")
    if (path / "error.log").is_file() and status in (None, "running"):
        lines = [ln for ln in (path / "error.log").read_text(errors="replace").splitlines() if ln.strip()]
        status, reason = "failed", (lines[-1] if lines else "error.log")
    if status == "completed":
        if not metrics:
            raise Unreadable("summary.json says completed, but metrics.csv is missing or has no rows")
        done = summary.get("rounds")
        if isinstance(done, (int, float)) and done and int(metrics["round"][-1]) != int(done):
            raise Unreadable(f"metrics.csv ends at round {int(metrics['round'][-1])}, but summary.json says the run "
                             f"completed {int(done)} rounds (truncated?)")
    wall = summary.get("wall_time")
    if wall is None and len(metrics.get("wall_time", ())):
        wall = float(metrics["wall_time"][-1])
    return Run(path, config, metrics, rounds, status or "unknown", reason, wall)


#: the files that make a folder a run directory (any one of them)
RUN_FILES = ("config.yaml", "summary.json", "metrics.csv")


def scan(dirs: Sequence[Path]) -> Tuple[List[Run], List[Tuple[Path, str]]]:
    """The runs under ``dirs`` (folders holding one of ``RUN_FILES``, outside ``.hydra`` and ``report``), and the
    unreadable ones with their reasons."""
    found = set()
    for d in dirs:
        for name in RUN_FILES:
            for f in Path(d).rglob(name):
                run = f.parent
                if ".hydra" in run.parts or "report" in run.relative_to(d).parts:
                    continue
                if name != "config.yaml" or any((run / x).is_file() for x in ("metrics.csv", "summary.json",
                                                                             "error.log")):
                    found.add(run.resolve())
    runs, unreadable = [], []
    for p in sorted(found):
        try:
            runs.append(load_run(p))
        except Unreadable as exc:
            unreadable.append((p, str(exc)))
    return runs, unreadable


def group_runs(runs: List[Run], keys: Optional[Sequence[str]] = None, tuned: Sequence[str] = ()) -> List[Group]:
    """Groups of runs equal in every key but the ignored ones (or equal in ``keys``), labelled by the keys that
    vary; a sub-key of a group option that only varies with the option itself (``algo.mu`` with ``algo.name``) is
    left out of the label. ``tuned`` keys (chosen per algorithm by ``fedbench-tune``) do not separate groups: their
    values are appended to the label in brackets, and with ``keys`` so are those of every other key that differs
    between the groups but not within one (``_settings``: a sampler's weighting, so a comparison shows it)."""
    configuration = sorted({k for r in runs for k in r.config if not under(k, IGNORED)})
    given = keys is not None
    if keys is None:
        keys = [k for k in varying_keys(runs) if k not in tuned]
        keys = [k for k in keys if not _explained(k, keys, runs)]
        identity = [k for k in configuration if k not in tuned]
    else:
        identity = list(keys)
    groups: Dict[str, Group] = {}
    for run in sorted(runs, key=lambda r: (str(r.path))):
        ident = json.dumps([repr(run.config.get(k)) for k in identity])
        if ident not in groups:
            label = ", ".join(f"{_short(k)}={run.config.get(k)}" for k in keys) or "all runs"
            groups[ident] = Group(label, values={k: run.config.get(k) for k in keys})
        groups[ident].runs.append(run)
    shown = sorted({*tuned, *_settings(list(groups.values()), keys)}) if given else tuned
    for g in groups.values():
        _one_per_seed(g, configuration)
        chosen = [f"{k}={'/'.join(sorted({str(r.config.get(k)) for r in g.runs}))}" for k in shown
                  if any(k in r.config for r in g.runs)]
        if chosen:
            g.label = f"{g.label} [{', '.join(chosen)}]"
    labels = [g.label for g in groups.values()]
    for i, g in enumerate(groups.values()):  # configurations that differ only in explained keys
        if labels.count(g.label) > 1:
            g.label = f"{g.label} #{i + 1}"
    return list(groups.values())


def _settings(groups: List[Group], keys: Sequence[str]) -> List[str]:
    """The keys, other than ``keys`` and the options of a chosen group they name (``participation.selection.*`` under
    ``choice.participation/selection``, ``algo.*`` under ``algo.name``), whose value is one within each group and
    differs between groups: settings that come with a group's method."""
    runs = [r for g in groups for r in g.runs]
    own = tuple(k[len("choice."):].replace("/", ".") if k.startswith("choice.") else k.rsplit(".", 1)[0]
                for k in keys if k.startswith("choice.") or k.endswith(".name"))
    return [k for k in varying_keys(runs) if k not in keys and not under(k, own)
            and all(len({repr(r.config.get(k)) for r in g.runs}) == 1 for g in groups)]


def _one_per_seed(group: Group, configuration: Sequence[str]) -> None:
    """Keep one run per configuration (its values of the keys ``configuration``) and seed in ``group`` (a completed
    one if any, then the first by path): a seed counted twice would weigh twice in every mean and interval. The
    others (a copy from ``fedbench-tune --reuse-runs`` reported beside its original, a rerun of the same
    configuration) go to ``group.repeats``, which the report lists. A ``--group-by`` group that pools several
    configurations keeps each one's seeds."""
    kept: Dict[str, Run] = {}

    def key(run: Run) -> str:
        return json.dumps([repr(run.config.get(k)) for k in configuration] + [run.seed])

    for run in sorted(group.runs, key=lambda r: (not r.completed, str(r.path))):
        kept.setdefault(key(run), run)
    group.repeats = [(r, kept[key(r)]) for r in group.runs if kept[key(r)] is not r]
    group.runs = [r for r in group.runs if kept[key(r)] is r]


def repeated_runs(groups: Sequence[Group]) -> List[Tuple[Path, str]]:
    """(path, why it was left out) for each run that repeats a seed of its group."""
    out = []
    for g in groups:
        for run, kept in g.repeats:
            same = run.metrics.keys() == kept.metrics.keys() and all(
                np.array_equal(run.metrics[k], kept.metrics[k], equal_nan=True) for k in run.metrics)
            how = "the same metrics as" if same else "metrics differ from"
            out.append((run.path, f"seed {run.seed} of group {g.label} again ({how} {kept.path}, kept); "
                                  "--group-by a key that tells them apart compares them"))
    return out


def _short(key: str) -> str:
    """A key as a label names it: ``algo.name`` as ``algo``, ``choice.participation/selection`` as
    ``participation/selection``."""
    return re.sub(r"[.](name|kind)$", "", key.removeprefix("choice."))


def varying_keys(runs: List[Run]) -> List[str]:
    """The config keys (not ignored) whose value differs between runs, sorted."""
    keys = sorted({k for r in runs for k in r.config if not under(k, IGNORED)})
    return [k for k in keys if len({repr(r.config.get(k)) for r in runs}) > 1]


def _explained(key: str, varying: Sequence[str], runs: List[Run]) -> bool:
    """Whether ``key`` varies only with a varying option above it (``<prefix>.name`` or ``<prefix>.kind``: ``algo.mu``
    with ``algo.name``, ``participation.selection.mode`` with ``participation.selection.kind``). An option's
    ``name`` is its label and never explained (``algo.kind`` is, by ``algo.name``)."""
    if key.endswith(".name"):
        return False
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        for option in (".".join(parts[:i]) + ".name", ".".join(parts[:i]) + ".kind"):
            if option == key or option not in varying:
                continue
            by_option: Dict[str, set] = {}
            for r in runs:
                by_option.setdefault(repr(r.config.get(option)), set()).add(repr(r.config.get(key)))
            if all(len(v) == 1 for v in by_option.values()):
                return True
    return False


def mean_std(values: Sequence[float]) -> tuple:
    """(mean, sample std with ddof=1 (nan for one value), n) of the finite values."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not v.size:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else math.nan, int(v.size)


@dataclass(frozen=True)
class Target:
    """A level a run reaches at its first evaluation with test accuracy at or above ``value`` (``--targets``) or,
    with ``loss``, with the global training loss at or below it (``--loss-targets``, ``engine.eval_train``)."""
    value: float
    loss: bool = False

    @property
    def key(self) -> str:
        """How the tables and ``report.json`` name it: "0.7", or "loss 0.7"."""
        return f"loss {self.value:g}" if self.loss else f"{self.value:g}"


def first_reaching(run: Run, target: Target) -> Optional[int]:
    """Row index of the first evaluation that reaches ``target``, or None."""
    if target.loss:
        hits = np.nonzero(run.metrics.get("global_train_loss", np.array([])) <= target.value)[0]
    else:
        hits = np.nonzero(run.metrics.get("test_acc", np.array([])) >= target.value)[0]
    return int(hits[0]) if hits.size else None


def final_acc(run: Run) -> float:
    return float(run.metrics["test_acc"][-1])


def best_acc(run: Run) -> float:
    return float(np.nanmax(run.metrics["test_acc"]))


def val_chosen_acc(run: Run) -> float:
    """The test accuracy at the run's evaluation of highest validation accuracy (the earliest of ties): the round
    picked on validation, as early stopping picks it, where ``best_acc`` picks it on the test curve itself (a
    maximum over every evaluation, which favours the noisier curve). nan where the run has no validation accuracy
    (``data.val_fraction`` = 0)."""
    val, acc = run.metrics.get("val_acc"), run.metrics["test_acc"]
    if val is None:
        return math.nan
    rows = np.flatnonzero(np.isfinite(val) & np.isfinite(acc))
    return float(acc[rows[np.argmax(val[rows])]]) if rows.size else math.nan


def evaluations(run: Run) -> np.ndarray:
    """The run's test accuracies, one per evaluation that has one."""
    acc = run.metrics["test_acc"]
    return acc[np.isfinite(acc)]


def top_acc(run: Run, k: int) -> float:
    """The mean of the run's ``k`` highest test accuracies over its evaluations: the statistic of FedSRC's tables,
    "the mean of maximum 5 accuracies" (k = 5; its CIFAR-10 appendix says 10). ``check_options`` makes every
    completed run have at least ``k`` evaluations."""
    return float(np.sort(evaluations(run))[-k:].mean())


def final_global_loss(run: Run) -> float:
    """The global training loss (``engine.eval_train``: the global model on the whole training set, the loss the
    FedSRC and Wang-Ji papers plot) at the run's last evaluation that has one; nan where the run has none."""
    loss = run.metrics.get("global_train_loss", np.array([]))
    loss = loss[np.isfinite(loss)]
    return float(loss[-1]) if loss.size else math.nan


def has_global_loss(run: Run) -> bool:
    return math.isfinite(final_global_loss(run))


#: the scores compared seed by seed (``comparisons``; higher is better unless flagged) and aggregated
#: (``aggregate``: the first); an optional one (``OPTIONAL_SCORES``) only between groups whose runs all have it
VAL_CHOSEN, GLOBAL_LOSS = "test acc at best val acc", "final global train loss"
SCORES = (("final test acc", final_acc, True), ("best test acc", best_acc, True),
          (VAL_CHOSEN, val_chosen_acc, True), (GLOBAL_LOSS, final_global_loss, False))
LOWER_IS_BETTER = {score for score, _, higher in SCORES if not higher}
#: the scores a run may lack (no validation split, no ``engine.eval_train``): compared only where every run has it
OPTIONAL_SCORES = {VAL_CHOSEN, GLOBAL_LOSS}


def scores(top_k: Sequence[int] = ()) -> tuple:
    """``SCORES`` with a "top-k mean test acc" (``top_acc``) after the best accuracy for each k of ``top_k``."""
    top = tuple((f"top-{k} mean test acc", functools.partial(top_acc, k=k), True) for k in top_k)
    return SCORES[:2] + top + SCORES[2:]


def group_table(group: Group, targets: Sequence[Target], top_k: Sequence[int] = ()) -> dict:
    done = group.completed
    row = {"group": group.label, "runs": len(group.runs), "completed": len(done),
           "final_acc": mean_std([final_acc(r) for r in done]),
           "best_acc": mean_std([best_acc(r) for r in done]),
           "top_acc": {str(k): mean_std([top_acc(r, k) for r in done]) for k in top_k},
           "val_chosen_acc": mean_std([val_chosen_acc(r) for r in done]),  # nan (left out) without validation
           "global_loss": mean_std([final_global_loss(r) for r in done]),  # nan (left out) without eval_train
           "wall_time": mean_std([r.wall for r in done]),
           "flags": [f"{r.status} (seed {r.seed}): {r.reason or 'no reason recorded'}" for r in group.runs
                     if r not in done], "targets": {}, "timed": any("sim_hours" in r.metrics for r in done)}
    for t in targets:
        # (cost, budget) of each run recording the axis (``cost_to``): the mean over the runs that reached the
        # target (a finite cost), the Kaplan-Meier median over all where every run recorded it
        spent = {axis: [cost_to(r, t, axis) for r in done if axis in r.metrics] for axis, _ in AXES}
        row["targets"][t.key] = {axis: mean_std([c for c, _ in pairs]) for axis, pairs in spent.items()} | {
            "reached": sum(first_reaching(r, t) is not None for r in done),
            "median": {axis: stats.km_median(*zip(*pairs)) for axis, pairs in spent.items()
                       if pairs and len(pairs) == len(done)}}
    return row


def _num(v: float, digits: int) -> str:
    """``digits`` significant digits; thousands separators instead of exponents between 1e3 and 1e7."""
    if 1e3 <= abs(v) < 1e7:
        return f"{float(f'{v:.{max(digits, 2)}g}'):,.0f}"
    return f"{v:.{digits}g}"


def _fmt(ms: tuple, digits: int = 4) -> str:
    """"mean ± std" of a ``mean_std`` triple ("—" when empty; the mean alone for one value)."""
    m, s, n = ms
    if n == 0:
        return "—"
    return _num(m, digits) if math.isnan(s) else f"{_num(m, digits)} ± {_num(s, 2)}"


def _tops(rows: List[dict]) -> List[str]:
    """The k of each top-k accuracy the rows give (``--top-k``), in order."""
    return list(rows[0]["top_acc"]) if rows else []


def _shape(rows: List[dict]) -> dict:
    """The optional columns the rows call for, as ``_columns`` and ``_cells`` take them: ``timed`` where a group ran
    on the simulated clock (simulated hours to each target), ``lossy`` where one evaluated the global training loss
    (its final value), ``validated`` where one's runs held out a validation split (the test accuracy at the
    evaluation of best validation accuracy)."""
    return {"timed": any(r.get("timed") for r in rows), "lossy": any(r["global_loss"][2] for r in rows),
            "validated": any(r["val_chosen_acc"][2] for r in rows)}


def _columns(targets: Sequence[Target], timed: bool = False, lossy: bool = False,
             tops: Sequence[str] = (), validated: bool = False) -> List[str]:
    cols = ["group", "seeds", "final acc", "best acc", *(f"top-{k} acc" for k in tops)]
    cols += ["acc at best val"] if validated else []
    cols += ["final global train loss"] if lossy else []
    for t in targets:
        cols += [f"rounds to {t.key}", f"grads to {t.key}", f"floats to {t.key}"]
        cols += [f"sim hours to {t.key}"] if timed else []
    return cols + ["wall s", "flags"]


def _cells(row: dict, targets: Sequence[Target], timed: bool = False, lossy: bool = False,
           validated: bool = False) -> List[str]:
    cells = [row["group"], f"{row['completed']}/{row['runs']}", _fmt(row["final_acc"]), _fmt(row["best_acc"]),
             *(_fmt(v) for v in row["top_acc"].values())]
    cells += [_fmt(row["val_chosen_acc"])] if validated else []
    cells += [_fmt(row["global_loss"])] if lossy else []
    for t in targets:
        hit, n = row["targets"][t.key], row["completed"]
        reach = f"{hit['reached']}/{n}" if hit["reached"] < n else ""
        cells += [_fmt(hit["round"]) + _notes(reach, _median(hit, "round", n, 4)),
                  *(_fmt(hit[axis], 3) + _notes(_median(hit, axis, n, 3))
                    for axis in ("grad_evals", "floats", *(("sim_hours",) if timed else ())))]
    return cells + [_fmt(row["wall_time"], 3), "; ".join(row["flags"])]


def _median(hit: dict, axis: str, runs: int, digits: int) -> str:
    """The Kaplan-Meier median cost on ``axis`` (``stats.km_median``) where some but not all of a group's ``runs``
    reached the target: there the mean over those that did counts only the fast ones ("median > B" where at most
    half did, B the largest cost or budget observed); "" otherwise."""
    value, exact = hit["median"].get(axis, (math.nan, False))
    if not 0 < hit["reached"] < runs or not math.isfinite(value):
        return ""
    return f"median {'' if exact else '> '}{_num(value, digits)}"


def _notes(*notes: str) -> str:
    """" (a; b)" of the non-empty notes, "" without one."""
    notes = [n for n in notes if n]
    return f" ({'; '.join(notes)})" if notes else ""


def markdown(rows: List[dict], targets: Sequence[Target]) -> str:
    shape = _shape(rows)
    cols = _columns(targets, tops=_tops(rows), **shape)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r, targets, **shape)) + " |"
              for r in rows]
    return "\n".join(lines) + "\n"


def latex(rows: List[dict], targets: Sequence[Target]) -> str:
    def esc(s: str) -> str:
        return re.sub(r"([_%&#$])", r"\\\1", s).replace("±", r"$\pm$").replace("—", "--")

    shape = _shape(rows)
    cols = _columns(targets, tops=_tops(rows), **shape)
    out = [r"\begin{tabular}{l" + "r" * (len(cols) - 2) + "l}", r"\toprule",
           " & ".join(esc(c) for c in cols) + r" \\", r"\midrule"]
    out += [" & ".join(esc(c) for c in _cells(r, targets, **shape)) + r" \\" for r in rows]
    return "\n".join(out + [r"\bottomrule", r"\end{tabular}"]) + "\n"


def _curve(runs: List[Run], axis: str, metric: str) -> Optional[tuple]:
    """(x, mean, std) over the runs, evaluation by evaluation (x: the runs' mean of ``axis`` at that row)."""
    series = [(r.metrics[axis], r.metrics[metric]) for r in runs if axis in r.metrics and metric in r.metrics]
    if not series:
        return None
    length = max(len(x) for x, _ in series)
    xs, ms, ss = [], [], []
    for i in range(length):
        at = [(x[i], y[i]) for x, y in series if i < len(x) and math.isfinite(y[i])]
        if not at:
            continue
        ys = np.array([y for _, y in at])
        xs.append(float(np.mean([x for x, _ in at])))
        ms.append(float(ys.mean()))
        ss.append(float(ys.std(ddof=1)) if len(ys) > 1 else 0.0)
    return np.array(xs), np.array(ms), np.array(ss)


def drawn_axes(groups: List[Group]) -> List[tuple]:
    """The cost axes some run has (simulated time only under a participation process on the clock)."""
    return [(axis, lb) for axis, lb in AXES if any(axis in r.metrics for g in groups for r in g.runs)]


def plot_curves(groups: List[Group], out: Path) -> List[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    lossy = any(has_global_loss(r) for g in groups for r in g.runs)
    metrics = METRICS + ((("global_train_loss", label("global_train_loss")),) if lossy else ())
    for axis, axis_label in drawn_axes(groups):
        fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.8), dpi=110)
        for ax, (metric, metric_label) in zip(axes, metrics):
            for k, g in enumerate(groups):
                runs = g.completed or g.runs
                curve = _curve(runs, axis, metric)
                if curve is None:
                    continue
                x, m, s = curve
                style, marker = STYLES[k % len(STYLES)]
                ax.plot(x, m, linestyle=style, marker=marker, markevery=max(1, len(x) // 8), markersize=4,
                        color=f"C{k % 10}", label=f"{g.label} (n={len(runs)})")
                ax.fill_between(x, m - s, m + s, color=f"C{k % 10}", alpha=0.18, linewidth=0)
            ax.set_xlabel(axis_label)
            ax.set_ylabel(metric_label)
            ax.grid(alpha=0.3)
        handles, labels = axes[0].get_legend_handles_labels()
        longest = max((len(lb) for lb in labels), default=0)
        ncol = min(3 if longest <= 45 else 2 if longest <= 75 else 1, max(1, len(labels)))
        fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0.06 + 0.035 * math.ceil(len(labels) / ncol), 1, 1))
        for ext in ("png", "pdf"):
            path = out / f"curves_{axis}.{ext}"
            fig.savefig(path)
            written.append(path)
        plt.close(fig)
    return written


def participation_rows(groups: List[Group], out: Path) -> List[dict]:
    rows = []
    for k, g in enumerate(groups):
        stats = {c: mean_std([float(np.mean(r.rounds[c])) for r in g.runs if len(r.rounds.get(c, ()))])
                 for c in ("available", "selected", "completed")}
        seed0 = min(g.runs, key=lambda r: r.seed)
        image = None
        if (seed0.path / "participation.png").is_file():
            image = f"trace_{k + 1}.png"
            shutil.copyfile(seed0.path / "participation.png", out / image)
        rows.append({"group": g.label, **stats, "trace": image, "trace_seed": seed0.seed})
    return rows


def _participation_md(rows: List[dict]) -> str:
    lines = ["| group | available / round | selected / round | completed / round | trace |", "|---|---|---|---|---|"]
    for r in rows:
        trace = f"![seed {r['trace_seed']}]({r['trace']})" if r["trace"] else "—"
        lines.append(f"| {r['group']} | {_fmt(r['available'], 3)} | {_fmt(r['selected'], 3)} | "
                     f"{_fmt(r['completed'], 3)} | {trace} |")
    return "\n".join(lines) + "\n"


def _html_table(header: List[str], rows: List[List[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


#: an image that fails to load is replaced by a visible note (the page is also checked this way in the tests)
_MISSING = ' onerror="this.replaceWith(\'image missing: \' + this.getAttribute(\'src\'))"'


def _pairs(groups: List[Group]):
    """(A, B, the key they differ in, their names) for every pair of groups whose labels differ in exactly one key."""
    for i, a in enumerate(groups):
        for b in groups[i + 1:]:
            differ = [k for k in a.values if a.values.get(k) != b.values.get(k)]
            if len(differ) == 1:
                key = differ[0]
                yield a, b, key, (f"{_short(key)}={a.values[key]}", f"{_short(key)}={b.values[key]}")


def comparisons(groups: List[Group], top_k: Sequence[int] = ()) -> List[dict]:
    """Every pair of groups whose labels differ in exactly one key, compared on each score (``scores``) over the
    seeds both completed (``fedbench.stats.paired``)."""
    rows = []
    for a, b, key, names in _pairs(groups):
        for score, fn, higher_better in scores(top_k):
            if score in OPTIONAL_SCORES and not all(math.isfinite(fn(r)) for r in a.completed + b.completed):
                continue
            seeds, x, y = stats.shared_seeds(a.by_seed(fn), b.by_seed(fn))
            # a loss: the verdict names the group whose loss is lower (A - B stays the raw difference)
            result = stats.paired(x, y, names if higher_better else names[::-1])
            rows.append({"a": a.label, "b": b.label, "differ": key, "score": score, "seeds": seeds,
                         **result.row(), "ci": stats.fmt_ci(result)})
    return rows


def cost_to(run: Run, target: Target, axis: str) -> Tuple[float, float]:
    """(what ``run`` had spent on ``axis`` at its first evaluation at or above ``target``, nan if none; what it
    had spent at its last evaluation: the budget beyond which an unreached target's cost is censored)."""
    i = first_reaching(run, target)
    values = run.metrics[axis]
    return (math.nan if i is None else float(values[i])), float(values[-1])


def cost_comparisons(groups: List[Group], targets: Sequence[Target]) -> List[dict]:
    """The pairs of ``comparisons`` on each cost to each target (lower is better) where a run of either group
    reached it, over the seeds both completed (``fedbench.stats.paired_costs``: a run that never reached the
    target is censored at its budget)."""
    rows = []
    for a, b, key, names in _pairs(groups):
        for t in targets:
            if not any(first_reaching(r, t) is not None for r in a.completed + b.completed):
                continue
            for axis, axis_label in AXES:
                if not all(axis in r.metrics for r in a.completed + b.completed):
                    continue
                seeds, x, y = stats.shared_seeds(*(g.by_seed(lambda r: cost_to(r, t, axis)) for g in (a, b)))
                result = stats.paired_costs([c for c, _ in x], [L for _, L in x], [c for c, _ in y],
                                            [L for _, L in y], names)
                rows.append({"a": a.label, "b": b.label, "differ": key, "score": f"{axis_label} to {t.key}",
                             "target": t.value, "loss_target": t.loss, "axis": axis, "seeds": seeds, **result.row(),
                             "ci": _cost_ci(result.paired)})
    return rows


def _cost_ci(p: stats.Paired) -> str:
    """A cost difference and its interval with ``_num``'s digits ("—" without a decided seed)."""
    if p.n == 0:
        return "—"
    num = lambda v: ("+" if v >= 0 else "−") + _num(abs(v), 3)  # noqa: E731
    return num(p.mean) if math.isnan(p.low) else f"{num(p.mean)} [{num(p.low)}, {num(p.high)}]"


def aggregate(groups: List[Group], key: Optional[str]) -> List[dict]:
    """Per value of ``key`` (e.g. algo.name) over all groups (experiments, participation processes...): the
    interquartile mean of the final test accuracy of every completed run, with a bootstrap CI."""
    if not key:
        return []
    values: Dict[str, List[float]] = {}
    for g in groups:
        values.setdefault(str(g.values.get(key)), []).extend(final_acc(r) for r in g.completed)
    return [{"key": key, "value": v, **dict(zip(("iqm", "ci_low", "ci_high", "n"), stats.iqm(xs))), "scores": xs}
            for v, xs in values.items()]


#: how the cost comparisons read (comparisons.md and index.html)
COSTS_NOTE = ("The same pairs on the cost to each target a run of either group reached (lower is better; the verdict "
              "names the cheaper). A run that never reached the target is censored at its budget, what it had spent "
              "at its last evaluation: on a seed where the other run reached the target within that budget the "
              "difference enters at its bound (it understates the advantage of the run that reached it); on a seed "
              "where neither did, or the censored run stopped first, the sign is unknown and the seed is left out "
              "(undecided). A verdict against a censored seed is withheld. P(A > B): the share of seeds where A "
              "cost more.")
COST_COLUMNS = ["A", "B", "cost", "seeds", "censored A / B", "undecided", "A − B [95% CI]", "P(A > B)", "verdict"]


def _p_cell(r: dict) -> str:
    """A comparison's P(A > B) ("—" without a shared seed)."""
    return "—" if r["n"] == 0 else f"{r['p_improvement']:.2f}"


def _cost_cells(r: dict) -> List[str]:
    return [r["a"], r["b"], r["score"], str(r["n"]), f"{r['censored_a']} / {r['censored_b']}", str(r["undecided"]),
            r["ci"], _p_cell(r), r["verdict"]]


def _comparisons_md(rows: List[dict], agg: List[dict], costs: Sequence[dict] = ()) -> str:
    lines = ["# Paired comparisons", "",
             "Groups that differ in one key, compared seed by seed (the same seed: the same partition and "
             "participation trace). Mean paired difference A − B with its 95 % bootstrap CI over the shared seeds, "
             "P(A > B) over those seeds, and a verdict that names a winner only when the CI excludes 0 and so does "
             "the paired Student-t interval (the bootstrap is too narrow with few seeds).", "",
             "| A | B | score | seeds | A − B [95% CI] | P(A > B) | verdict |", "|---|---|---|---|---|---|---|"]
    if any(r["score"] == VAL_CHOSEN for r in rows):
        lines[2] += (" The best and top-k test accuracies pick each run's round on the test curve itself and favour "
                     "the noisier curve; the test accuracy at best val acc picks it on validation.")
    if any(r["score"] in LOWER_IS_BETTER for r in rows):
        lines[2] += (" On the final global training loss lower is better: the verdict names the group with the "
                     "lower loss, and P(A > B) is the share of seeds where A's loss is the higher.")
    for r in rows:
        lines.append(f"| {r['a']} | {r['b']} | {r['score']} | {r['n']} | {r['ci']} | {_p_cell(r)} | {r['verdict']} |")
    if not rows:
        lines.append("| — | — | — | — | — | — | no two groups differ in exactly one key |")
    if costs:
        lines += ["", "## Cost to a target", "", COSTS_NOTE, "", "| " + " | ".join(COST_COLUMNS) + " |",
                  "|" + "---|" * len(COST_COLUMNS)]
        lines += ["| " + " | ".join(_cost_cells(r)) + " |" for r in costs]
    if agg:
        lines += ["", f"## Aggregate over all groups, by {agg[0]['key']}", "",
                  "Interquartile mean of the final test accuracy over every completed run (95 % bootstrap CI); "
                  "the performance profile is `profile.png`.", "", "| value | runs | IQM [95% CI] |", "|---|---|---|"]
        for a in agg:
            ci = "—" if a["n"] < 2 else f"{a['iqm']:.4f} [{a['ci_low']:.4f}, {a['ci_high']:.4f}]"
            lines.append(f"| {a['value']} | {a['n']} | {ci} |")
    return "\n".join(lines) + "\n"


def plot_profile(agg: List[dict], out: Path) -> None:
    """The performance profile of ``aggregate``: fraction of runs with final test accuracy > tau."""
    if not agg:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    taus = np.linspace(0, 1, 101)
    fig, ax = plt.subplots(figsize=(5, 3.8), dpi=110)
    for k, a in enumerate(agg):
        style, marker = STYLES[k % len(STYLES)]
        ax.plot(taus, stats.profile(a["scores"], taus), linestyle=style, marker=marker, markevery=10,
                label=f"{a['value']} ({a['n']} runs)")
    ax.set_xlabel("final test accuracy threshold τ")
    ax.set_ylabel("fraction of runs > τ")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "profile.png")
    plt.close(fig)


def index_html(title: str, rows: List[dict], part: List[dict], targets: Sequence[Target], n_runs: int,
               compared: str = "", axes: Sequence[tuple] = AXES) -> str:
    shape = _shape(rows)
    results = _html_table(_columns(targets, tops=_tops(rows), **shape),
                          [[html.escape(c) for c in _cells(r, targets, **shape)] for r in rows])
    part_rows = [[html.escape(r["group"]), _fmt(r["available"], 3), _fmt(r["selected"], 3), _fmt(r["completed"], 3),
                  f'<img src="{r["trace"]}" alt="participation trace, seed {r["trace_seed"]}" width="360"{_MISSING}>'
                  if r["trace"] else "—"] for r in part]
    parts = _html_table(["group", "available / round", "selected / round", "completed / round", "trace (first seed)"],
                        part_rows)
    curves = "".join(f'<h3>against {label}</h3><img src="curves_{axis}.png" alt="curves against {label}" '
                     f'style="max-width:100%"{_MISSING}>' for axis, label in axes)
    style = ("body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #999;padding:4px 8px;text-align:right}td:first-child,th:first-child"
             "{text-align:left}td:last-child{text-align:left;color:#a00}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{n_runs} runs in {len(rows)} groups; mean ± sample std over completed seeds "
            f"(files: results.md, results.tex, report.json).</p><h2>Results</h2>{results}"
            f"<h2>Learning curves</h2>{curves}{compared}<h2>Participation</h2>{parts}</body></html>\n")


def _compared_html(pairs: List[dict], agg: List[dict], costs: Sequence[dict] = ()) -> str:
    if not pairs and not agg:
        return ""
    table = _html_table(["A", "B", "score", "seeds", "A − B [95% CI]", "P(A > B)", "verdict"],
                        [[html.escape(r["a"]), html.escape(r["b"]), r["score"], str(r["n"]), r["ci"],
                          _p_cell(r), html.escape(r["verdict"])]
                         for r in pairs])
    profile = (f'<img src="profile.png" alt="performance profile" style="max-width:100%"{_MISSING}>' if agg else "")
    cost_table = (f"<h3>Cost to a target</h3><p>{html.escape(COSTS_NOTE)}</p>"
                  + _html_table(COST_COLUMNS, [[html.escape(c) for c in _cost_cells(r)] for r in costs])
                  if costs else "")
    return (f"<h2>Paired comparisons</h2><p>Seed by seed (same partition and trace); 95 % bootstrap CIs over the "
            f"shared seeds; a verdict also needs the paired t-interval to exclude 0 (comparisons.md).</p>"
            f"{table}{cost_table}{profile}")


def fewest_evaluations(runs: List[Run]) -> Tuple[float, Optional[Path]]:
    """The smallest number of evaluations with a test accuracy among the completed runs, and that run's path
    (``inf`` and None when none completed): the largest k a top-k accuracy may take."""
    return min(((evaluations(r).size, r.path) for r in runs if r.completed), default=(math.inf, None))


def declared_top_k(runs: List[Run]) -> Tuple[List[int], List[str]]:
    """The top-k accuracies the runs' configs declare (``top_k``, e.g. FedSRC's presets: 5), each k at most
    ``fewest_evaluations``; and, for each k left out, why (a short run, such as a smoke test of the preset)."""
    declared = sorted({int(k) for r in runs for k in (r.config.get("top_k") or [])})
    if not declared:
        return [], []
    n, short = fewest_evaluations(runs)
    return ([k for k in declared if k <= n],
            [f"top-{k} (the runs' top_k): the completed run {short} has only {n} evaluations with a test accuracy"
             for k in declared if k > n])


def check_options(runs: List[Run], group_by: Optional[Sequence[str]], targets: Optional[Sequence[float]],
                  tuned: Sequence[str], loss_targets: Optional[Sequence[float]] = None,
                  top_k: Sequence[int] = ()) -> None:
    """``ReportError`` for a target outside (0, 1] or not finite, a loss target not positive and finite or that no
    run can reach (none evaluated the global training loss), a top-k below 1 or above a completed run's number of
    evaluations, or a key that no run's config has."""
    for k in top_k:
        if k < 1:
            raise ReportError(f"--top-k {k}: k is a number of evaluations, at least 1. Fix: pass values such as "
                              "--top-k 5 (FedSRC's tables) or --top-k 5 10.")
    if top_k:
        n, short = fewest_evaluations(runs)
        if n < max(top_k):
            raise ReportError(f"--top-k {max(top_k)}: the completed run {short} has only {n} evaluations with a "
                              f"test accuracy, so its top-{max(top_k)} mean is undefined. Fix: pass a k of at most "
                              f"{n}, or evaluate more often (eval_every).")
    for t in targets or ():
        if not (math.isfinite(t) and 0 < t <= 1):
            raise ReportError(f"--targets {t:g}: a target is a test accuracy, a fraction in (0, 1]. Fix: pass "
                              "values such as --targets 0.7 0.8.")
    for t in loss_targets or ():
        if not (math.isfinite(t) and t > 0):
            raise ReportError(f"--loss-targets {t:g}: a loss target is a global training loss, a positive number. "
                              "Fix: pass values such as --loss-targets 0.7 0.6.")
    if loss_targets and not any(has_global_loss(r) for r in runs):
        raise ReportError("--loss-targets: no run evaluated the global training loss, so none can reach a loss "
                          "target. Fix: run with engine.eval_train=true, or leave --loss-targets out.")
    keys = sorted({k for r in runs for k in r.config})
    for option, given in (("--group-by", group_by or ()), ("--tuned", tuned)):
        for key in given:
            if not any(key in r.config for r in runs):
                close = difflib.get_close_matches(key, keys, n=3)
                raise ReportError(f"{option} {key} is not a key of any run's config"
                                  + (f" (did you mean {', '.join(close)}?)" if close else "")
                                  + ". Fix: use dotted config keys such as algo.name, participation.name, "
                                  "client.lr, or choice.<group> for the option Hydra chose.")


def report(dirs: Sequence[Path], out: Optional[Path] = None, group_by: Optional[Sequence[str]] = None,
           targets: Optional[Sequence[float]] = None, tuned: Sequence[str] = (),
           runs: Optional[List[Run]] = None, unreadable: Sequence[Tuple[Path, str]] = (),
           loss_targets: Optional[Sequence[float]] = None, top_k: Optional[Sequence[int]] = None) -> Written:
    """Write the report of the runs under ``dirs`` (``runs`` and ``unreadable``: already ``scan``-ned from them);
    return its folder and the runs it left out. ``tuned``: keys chosen per group by ``fedbench-tune`` (shown in
    the labels, not separating groups). ``targets`` (test accuracies) and ``loss_targets`` (global training losses):
    by default the runs' ``targets`` and ``loss_targets``. ``top_k``: a top-k mean accuracy (``top_acc``) in the
    tables and comparisons for each k, by default the runs' ``top_k`` (``declared_top_k``). Unreadable runs are
    listed in every file of the report; ``ReportError`` for bad options, no readable run, or a report folder that
    cannot be written."""
    dirs = [Path(d) for d in dirs]
    for d in dirs:
        if not d.is_dir():
            raise ReportError(f"{d} is not a directory. Fix: pass a sweep's (or a run's) output directory.")
    if runs is None:
        runs, unreadable = scan(dirs)
    if not runs:
        damaged = f" ({len(unreadable)} unreadable: {unreadable[0][0]}: {unreadable[0][1]})" if unreadable else ""
        raise ReportError(f"no runs (folders with config.yaml and metrics.csv or summary.json) under "
                          f"{', '.join(map(str, dirs))}{damaged}. Fix: pass a sweep's output directory.")
    top_k, dropped = declared_top_k(runs) if top_k is None else (sorted({int(k) for k in top_k}), [])
    check_options(runs, group_by, targets, tuned, loss_targets, top_k)
    if targets is None:
        targets = sorted({float(t) for r in runs for t in (r.config.get("targets") or [])
                          if isinstance(t, (int, float)) and 0 < t <= 1})
    if loss_targets is None:  # highest first: the order a falling loss reaches them in
        loss_targets = sorted({float(t) for r in runs if has_global_loss(r)
                               for t in (r.config.get("loss_targets") or [])
                               if isinstance(t, (int, float)) and 0 < t < math.inf}, reverse=True)
    levels = [Target(float(t)) for t in targets] + [Target(float(t), loss=True) for t in loss_targets]
    out = Path(out) if out else dirs[0] / "report"
    try:
        repeated = _write_report(dirs, out, runs, unreadable, group_by, levels, tuned, top_k)
    except OSError as exc:
        raise ReportError(f"cannot write the report in {out}: {exc.strerror or exc}. Fix: pass --out <a folder "
                          "you can write to>.") from None
    return Written(out, tuple(unreadable), tuple(repeated), tuple(dropped))


@dataclass(frozen=True)
class Written:
    """What ``report`` wrote: its ``folder``, the runs it left out of every table and curve, each (path, why):
    ``unreadable`` ones and ``repeated`` seeds (listed in every file of the report too), and the top-k accuracies
    the runs declare that it left out (``declared_top_k``), each with why."""
    folder: Path
    unreadable: Tuple[Tuple[Path, str], ...] = ()
    repeated: Tuple[Tuple[Path, str], ...] = ()
    top_k_left_out: Tuple[str, ...] = ()

    def left_out(self, prog: str) -> str:
        """The left-out runs and top-k accuracies as lines for stderr, each group headed by ``prog``; empty when
        none was."""
        lines = []
        for left, what in ((self.repeated, "run(s) repeat a seed of their group,"),
                           (self.unreadable, "unreadable run(s)")):
            if left:
                lines += [f"{prog}: {len(left)} {what} left out (listed in the report):",
                          *(f"  {p}: {why}" for p, why in left)]
        if self.top_k_left_out:
            lines += [f"{prog}: {len(self.top_k_left_out)} top-k accuracies left out (pass --top-k to choose k):",
                      *(f"  {why}" for why in self.top_k_left_out)]
        return "\n".join(lines)


def _write_report(dirs: List[Path], out: Path, runs: List[Run], unreadable: Sequence[Tuple[Path, str]],
                  group_by: Optional[Sequence[str]], targets: Sequence[Target],
                  tuned: Sequence[str], top_k: Sequence[int] = ()) -> List[Tuple[Path, str]]:
    """Write every file of the report into ``out``; return the runs left out as repeated seeds."""
    out.mkdir(parents=True, exist_ok=True)
    groups = group_runs(runs, group_by, tuned)
    repeated = repeated_runs(groups)
    rows = [group_table(g, targets, top_k) for g in groups]
    (out / "results.md").write_text(markdown(rows, targets) + _left_out_md(UNREADABLE, unreadable)
                                    + _left_out_md(REPEATED, repeated))
    (out / "results.tex").write_text(latex(rows, targets))
    plot_curves(groups, out)
    part = participation_rows(groups, out)
    (out / "participation.md").write_text(_participation_md(part))
    pairs, costs = comparisons(groups, top_k), cost_comparisons(groups, targets)
    varying = [k for k in (groups[0].values if groups else {}) if len({repr(g.values.get(k)) for g in groups}) > 1]
    agg = aggregate(groups, "algo.name" if "algo.name" in varying else (varying[0] if varying else None))
    (out / "comparisons.md").write_text(_comparisons_md(pairs, agg, costs))
    plot_profile(agg, out)
    (out / "report.json").write_text(json.dumps(strict_json(
        {"targets": [t.value for t in targets if not t.loss], "loss_targets": [t.value for t in targets if t.loss],
         "top_k": list(top_k),
         "groups": [{**r, "members": [str(run.path) for run in g.runs]} for r, g in zip(rows, groups)],
         "comparisons": pairs, "cost_comparisons": costs,
         "aggregate": [{k: v for k, v in a.items() if k != "scores"} for a in agg],
         "unreadable": [{"path": str(p), "reason": why} for p, why in unreadable],
         "repeated": [{"path": str(p), "reason": why} for p, why in repeated]}), indent=2, allow_nan=False,
        default=str))
    compared = (_compared_html(pairs, agg, costs) + _left_out_html(UNREADABLE, unreadable)
                + _left_out_html(REPEATED, repeated))
    (out / "index.html").write_text(index_html(f"fedbench report: {', '.join(d.name for d in dirs)}",
                                               rows, part, targets, sum(len(g.runs) for g in groups), compared,
                                               drawn_axes(groups)))
    return repeated


#: the headings of the runs a report leaves out: unreadable ones, and those that repeat a seed of their group
UNREADABLE, REPEATED = "Unreadable runs", "Repeated seeds"


def _left_out_md(title: str, runs: Sequence[Tuple[Path, str]]) -> str:
    if not runs:
        return ""
    return (f"\n## {title} (left out)\n\n" + "".join(f"- `{p}`: {why}\n" for p, why in runs))


def _left_out_html(title: str, runs: Sequence[Tuple[Path, str]]) -> str:
    if not runs:
        return ""
    table = _html_table(["run", "why it was left out"], [[html.escape(str(p)), html.escape(why)] for p, why in runs])
    return f"<h2>{title}</h2><p>{len(runs)} run(s) left out of every table and curve.</p>{table}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit status: 0, the report is written from every readable run found, each configuration's seed once (a
    run that repeats one is left out, listed in the report and on stderr); 1, written, but some runs were
    unreadable (listed alike); 2, no report (bad options, no readable run)."""
    parser = argparse.ArgumentParser(prog="fedbench-report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="multirun (or run) directories")
    parser.add_argument("--group-by", nargs="+", metavar="KEY", help="config keys that define a group")
    parser.add_argument("--targets", nargs="+", type=float, help="test-accuracy targets in (0, 1] (default: the runs')")
    parser.add_argument("--loss-targets", nargs="+", type=float, metavar="LOSS",
                        help="global-training-loss targets > 0, reached at or below (default: the runs' loss_targets)")
    parser.add_argument("--top-k", nargs="+", type=int, metavar="K",
                        help="also the mean of each run's K highest test accuracies (FedSRC's tables: 5; default: "
                             "the runs' top_k)")
    parser.add_argument("--out", type=Path, help="report folder (default: <first dir>/report)")
    parser.add_argument("--tuned", nargs="+", default=(), metavar="KEY",
                        help="keys tuned per group (fedbench-tune): shown in the labels, not separating groups")
    args = parser.parse_args(argv)
    try:
        runs, unreadable = scan([d for d in args.dirs if d.is_dir()])
        written = report(args.dirs, args.out, args.group_by, args.targets, args.tuned, runs=runs,
                         unreadable=unreadable, loss_targets=args.loss_targets, top_k=args.top_k)
    except FedbenchError as exc:
        print(f"fedbench-report: error: {exc}", file=sys.stderr)
        return 2
    print(f"fedbench-report: wrote {written.folder}/index.html")
    left_out = written.left_out("fedbench-report")
    if left_out:
        print(left_out, file=sys.stderr)
    return 1 if written.unreadable else 0


if __name__ == "__main__":
    sys.exit(main())
