"""fedbench-tune: tune every algorithm with the same budget on a validation split, then run the final seeds.

    fedbench-tune experiment=mimic_fmnist_roundrobin_small --algos fedavg,scaffold,mifa,mimic \\
        --trials 8 --tune-seeds 100 --seeds 0,1,2 [--sampler grid|tpe] [--select final] \\
        [--space client.lr=0.1,0.01] [--val-fraction 0.1] [--dir DIR] [any Hydra override: hydra/launcher=joblib]
    fedbench-tune experiment=fedsrc_synthetic_small --compare participation/selection=uniform,md,fedsrc_d_oracle
    fedbench-tune <the same overrides> rounds=20000 --algos <the same> --from <its selection.json> --seeds 0,1,2
    fedbench-tune <the same> --tune-seeds 100,101,102 --dir NEW --reuse-runs <the directory tuned on 100,101>

The methods compared are algorithms (``--algos``) or the values of any other option (``--compare KEY=V1,V2``).
Everything is checked before the first job starts (the overrides for every method, every value of every searched
key, the seeds); then the plan runs as one Hydra multirun through ``hydra/sweeper=tune`` (``fedbench.tune.protocol``).
``--from`` runs an earlier tuning's choices on the final seeds under new overrides (a longer budget): no trials,
the earlier record carried into ``selection.json``. Rerun the same command with ``--dir <the tuning directory>``
to continue it: finished trials and finals are skipped. ``--reuse-runs <an earlier tuning directory>`` copies the
runs it finished of this command's jobs (the same overrides) instead of running them: a tuning extended by a tuning
seed or a method costs only its new jobs.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from fedbench.errors import FedbenchError
from fedbench.lock import LOCK_NAME, RunLock
from fedbench.tune.protocol import Plan, check_seeds
from fedbench.tune.select import RULES, Rule

#: keys the protocol sets on every job; the command line gives them through the options instead
OWN_KEYS = {"algo": "--algos (one algorithm's option: +algo_settings.<algorithm>.<option>=<value>)",
            "seed": "--seeds / --tune-seeds", "data.val_fraction": "--val-fraction",
            "resume": "--dir (rerun the command on the tuning directory)", "hydra.sweep.dir": "--dir",
            "hydra/sweeper": "nothing (fedbench-tune is the sweeper)", "hydra.sweeper": "the options"}


def _seeds(text: str) -> List[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers (e.g. 0,1,2)")
    if not seeds or any(not 0 <= s < 2**32 for s in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"'{text}': give distinct seeds in [0, 2^32), e.g. 0,1,2")
    return seeds


def _number(cast: type, allowed: Callable[[Any], bool], what: str) -> Callable[[str], Any]:
    """An argparse type: ``cast(text)`` if ``allowed`` holds, else an error saying the value is not ``what``."""

    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            value = None
        if value is None or not allowed(value):
            raise argparse.ArgumentTypeError(f"'{text}' is not {what}")
        return value

    return parse


_positive = _number(int, lambda v: v >= 1, "an integer >= 1")
_fraction = _number(float, lambda v: 0 < v < 1, "a fraction in (0, 1) (e.g. 0.1)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fedbench-tune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", help="Hydra overrides shared by every job (experiment=..., "
                                                "hydra/launcher=joblib, ...)")
    methods = p.add_mutually_exclusive_group(required=True)
    methods.add_argument("--algos", help="comma-separated algorithms (algo options) to compare")
    methods.add_argument("--compare", metavar="KEY=V1,V2", help="compare the values of another option instead, e.g. "
                                                                "participation/selection=uniform,md")
    p.add_argument("--trials", type=_positive, help="trials per method, the same for each (default 8)")
    p.add_argument("--tune-seeds", type=_seeds, help="seeds of the trials (default 100)")
    p.add_argument("--seeds", type=_seeds, default=[0, 1, 2], help="seeds of the final runs (default 0,1,2)")
    p.add_argument("--sampler", choices=("grid", "tpe"),
                   help="grid (default) or tpe (Optuna's TPE sampler)")
    p.add_argument("--select", help="selection rule on validation: " + "; ".join(
        f"{k}: {v}" for k, v in RULES.items()) + " (default final)")
    p.add_argument("--space", action="append", metavar="KEY=V1,V2",
                   help="replace the search space of KEY for every algorithm (repeatable)")
    p.add_argument("--val-fraction", type=_fraction,
                   help="the validation split held out of the training data (data.val_fraction; default 0.1)")
    p.add_argument("--batch", type=_positive, help="tpe: trials asked per algorithm between updates")
    p.add_argument("--from", dest="reuse", type=Path, metavar="SELECTION.json",
                   help="skip the trials: run the finals at the choices of an earlier tuning's selection.json, under "
                        "this command's overrides (e.g. a longer budget); its trials, seeds and rule are kept")
    p.add_argument("--dir", type=Path, help="the tuning directory (default outputs/tune/<date>/<time>); an "
                                            "existing one is continued")
    p.add_argument("--reuse-runs", action="append", type=Path, metavar="DIR",
                   help="an earlier tuning directory: its finished runs of this command's jobs (the same overrides) "
                        "are copied in, not rerun (repeatable; the first named wins)")
    p.add_argument("--config-dir", "-cd", action="append", default=[], metavar="DIR",
                   help="a folder of your own presets, searched after the package's")
    return p


#: the tuning's own options and their defaults; ``--from`` takes them from the earlier selection.json instead
TUNING_DEFAULTS = {"trials": 8, "tune_seeds": [100], "sampler": "grid", "select": "final", "space": [],
                   "val_fraction": 0.1, "batch": 4}


def _defaults(args: argparse.Namespace) -> None:
    """Fill the tuning options left out; with ``--from`` they must be left out (the earlier tuning set them)."""
    given = [k for k in TUNING_DEFAULTS if getattr(args, k) is not None]
    if args.reuse is not None and given:
        flag = "--" + given[0].replace("_", "-")
        raise FedbenchError(f"{flag} does not apply with --from: the trials, their seeds and the selection rule are "
                            f"those of {args.reuse}. Fix: leave out {flag}, or tune anew without --from.")
    for key, value in TUNING_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def _reused(path: Path, key: str, values: List[str]) -> dict:
    """The earlier selection.json of ``--from``, checked against the methods compared now."""
    try:
        selection = json.loads(Path(path).read_text())
        record, compared = selection["methods"], selection["compared"]
        kept = {k: selection[k] for k in ("budget", "tune_seeds", "select", "sampler", "val_fraction", "overrides")}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FedbenchError(f"Invalid --from {path}: not a readable selection.json of fedbench-tune ({exc}). Fix: "
                            "pass the selection.json of a tuning directory.") from None
    if compared != key:
        raise FedbenchError(f"Invalid --from {path}: it compared {compared}, this command compares {key}. Fix: "
                            f"compare the same option ({'--algos' if compared == 'algo' else '--compare ' + compared}"
                            "=...).")
    chosen = [m for m, r in record.items() if r.get("chosen")]
    missing = [m for m in values if m not in chosen]
    if missing:
        raise FedbenchError(f"Invalid --from {path}: no choice for {key}={missing[0]}. Allowed: {', '.join(chosen)}. "
                            "Fix: compare methods that tuning chose a configuration for.")
    where = Path(path).resolve()  # as the records show it: from the command's folder when it lies there
    shown = where.relative_to(Path.cwd()) if where.is_relative_to(Path.cwd()) else where
    return {"file": str(shown), **kept, "methods": {m: record[m] for m in values}}


def _split(overrides: Sequence[str], key: str) -> tuple:
    """(task overrides, hydra overrides), refusing the keys the protocol sets (``key`` names the methods) and sweeps
    of any key."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as exc:
        raise FedbenchError(f"Invalid override: {exc}".replace("\n", " ")) from None
    task, hydra_args = [], []
    for ov in parsed:
        name = ov.key_or_group
        for own, instead in {**OWN_KEYS, key.replace("/", "."): OWN_KEYS.get(key, "--algos / --compare")}.items():
            if name.replace("/", ".") == own or name.startswith((own + ".", own + "/")):
                raise FedbenchError(f"Override '{ov.input_line}' sets '{name}', which fedbench-tune sets for every "
                                    f"job. Fix: use {instead}.")
        if ov.is_sweep_override():
            raise FedbenchError(f"Override '{ov.input_line}' sweeps '{name}': fedbench-tune runs its own sweep. "
                                f"Fix: search it with --space {name}=<v1>,<v2>, or compare its values with --compare.")
        (hydra_args if name == "hydra" or name.startswith(("hydra.", "hydra/")) else task).append(ov.input_line)
    return task, hydra_args


def _space(items: Sequence[str]) -> Dict[str, List[Any]]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    space: Dict[str, List[Any]] = {}
    for item in items:
        try:
            ov = OverridesParser.create().parse_overrides([item])[0]
            values = list(ov.sweep_iterator()) if ov.is_sweep_override() else [ov.value()]
        except Exception:
            raise FedbenchError(f"Invalid --space '{item}'. Fix: write KEY=V1,V2 (e.g. client.lr=0.1,0.03,0.01).") \
                from None
        space[ov.key_or_group] = values
    return space


def methods(args: argparse.Namespace) -> tuple:
    """(key, values) of the methods compared: ``--algos a,b`` or ``--compare KEY=a,b``."""
    from fedbench.config import group_options, groups

    text = f"algo={args.algos}" if args.algos is not None else args.compare
    key, sep, listed = text.partition("=")
    values = [v.strip() for v in listed.split(",") if v.strip()]
    flag = "--algos" if args.algos is not None else "--compare"
    if not sep or not key or len(values) < 1 or len(set(values)) != len(values):
        raise FedbenchError(f"Invalid {flag} '{args.algos or args.compare}'. Fix: name distinct methods, e.g. "
                            "--algos fedavg,scaffold or --compare participation/selection=uniform,md.")
    if key.replace(".", "/") in groups():
        key = key.replace(".", "/")
        known = group_options(key)
        bad = [v for v in values if v not in known]
        if bad:
            raise FedbenchError(f"Invalid {flag}: unknown '{bad[0]}' for {key}. Allowed: {', '.join(known)}. "
                                "Fix: pass options of that group.")
    return key, values


def make_plan(args: argparse.Namespace, key: str, values: List[str], task: List[str],
              hydra_args: List[str]) -> Plan:
    """The plan of the command: every method (``key=value`` for each of ``values``) composed with the overrides
    and checked, its space resolved."""
    from fedbench.cli import _compose, preflight
    from fedbench.errors import ConfigError
    from fedbench.tune.space import resolve

    _defaults(args)
    reused = _reused(args.reuse, key, values) if args.reuse is not None else None
    if reused:
        args.trials, args.tune_seeds, args.select = reused["budget"], reused["tune_seeds"], reused["select"]
        args.sampler, args.val_fraction = reused["sampler"], reused["val_fraction"]
    check_seeds(args.tune_seeds, args.seeds)
    rule = Rule.parse(args.select)
    cli_space = _space(args.space)
    spaces = {}
    for method in values:
        common = [*task, f"{key}={method}", f"data.val_fraction={args.val_fraction!r}"]
        chosen = reused["methods"][method]["chosen"]["overrides"] if reused else []
        problem = preflight(["-m", *common, *chosen, *hydra_args])
        if problem:
            raise FedbenchError(f"{key}={method}" + (f" at its choice ({' '.join(chosen)})" if chosen else "")
                                + f": {problem}")
        if reused:
            spaces[method] = reused["methods"][method]["space"]
            continue
        try:
            dims = resolve(_compose([*common, *[h for h in hydra_args if h.startswith("hydra.searchpath")]]),
                           cli_space)
        except ConfigError as exc:
            raise FedbenchError(f"{key}={method}: {exc}") from None
        spaces[method] = [d.to_json() for d in dims]
    return Plan(overrides=task, key=key, methods=values, trials=args.trials, sampler=args.sampler, select=str(rule),
                tune_seeds=args.tune_seeds, seeds=args.seeds, val_fraction=args.val_fraction, batch=args.batch,
                spaces=spaces, reused=reused, reuse_runs=_reuse_runs(args.reuse_runs or []))


def _reuse_runs(paths: Sequence[Path]) -> List[str]:
    """The ``--reuse-runs`` directories, resolved: each must be a tuning directory (it holds tune.json)."""
    for path in paths:
        if not (Path(path) / "tune.json").is_file():
            raise FedbenchError(f"Invalid --reuse-runs {path}: not a tuning directory (no tune.json"
                                + ("" if Path(path).is_dir() else "; no such folder") + "). Fix: pass the --dir of an "
                                "earlier fedbench-tune, or leave out --reuse-runs.")
    return [str(Path(p).resolve()) for p in paths]


def _directory(args: argparse.Namespace, plan: Plan) -> Tuple[Path, RunLock]:
    """The tuning directory, new or continued, and its lock (one fedbench-tune process per directory)."""
    root = (args.dir or Path("outputs") / "tune" / datetime.now().strftime("%Y-%m-%d") /
            datetime.now().strftime("%H-%M-%S")).resolve()
    path = root / "tune.json"
    if not path.is_file() and root.exists() and any(p.name != LOCK_NAME for p in root.iterdir()):
        raise FedbenchError(f"{root} is not empty and holds no tune.json. Fix: pass --dir a new folder or a "
                            "tuning directory.")
    if str(root) in plan.reuse_runs:
        raise FedbenchError(f"Invalid --reuse-runs {root}: it is this tuning's own --dir, whose finished runs are "
                            "skipped anyway. Fix: name an earlier tuning directory.")
    lock = RunLock(root).acquire()
    try:
        _plan_directory(root, path, plan)
    except BaseException:
        lock.release()
        raise
    return root, lock


def _plan_directory(root: Path, path: Path, plan: Plan) -> None:
    if path.is_file():
        old = Plan.load(path)
        added = [m for m in plan.methods if m not in old.methods]
        differences = old.differences(plan)
        diff = [d for d in differences if not _may_change(d, old, plan)]
        if diff:
            raise FedbenchError(f"{root} was started with another plan ({'; '.join(diff)}). Fix: rerun with the "
                                "arguments it was started with (only --seeds may change, and methods may be added "
                                "to --algos/--compare: neither changes another method's trials or choice), or "
                                f"start a new tuning with another --dir and --reuse-runs {root}: its finished runs "
                                "of the new plan's jobs are copied, not rerun.")
        news = ([f"final seeds now {','.join(map(str, plan.seeds))}"] if old.seeds != plan.seeds else []) + (
            [f"methods added: {', '.join(added)}"] if added else [])
        if differences:
            plan.save(path)
        print(f"fedbench-tune: continuing {root} (finished jobs are skipped{''.join(f'; {n}' for n in news)})",
              flush=True)
    else:
        plan.save(path)
        print(f"fedbench-tune: tuning in {root} (rerun with --dir {root} to continue it)", flush=True)


def _may_change(difference: str, old: Plan, new: Plan) -> bool:
    """Whether a rerun may continue a directory despite this difference of plans: the final seeds (they do not
    enter the selection), the ``--reuse-runs`` directories (a copy is a run of the same job), how ``--from``'s file
    is spelled (relative to the folder a command runs in, so the same file reads otherwise from another folder; what
    it carries, the choices and settings, is compared entry by entry), or methods added to the old ones, with their
    spaces (a method's trials and choice depend only on its own name and space and the shared settings, so the old
    methods' results stand)."""
    if difference.startswith(("seeds:", "reuse_runs", "reused.file:")):
        return True
    if not set(old.methods) <= set(new.methods):
        return False
    added = [m for m in new.methods if m not in old.methods]
    return difference.startswith(("methods:", *(f"{part}.{m}:" for m in added
                                                 for part in ("spaces", "reused.methods"))))


def main(argv: Optional[Sequence[str]] = None) -> None:
    from fedbench import cli
    from fedbench.config import register_configs

    args = parser().parse_intermixed_args(argv)
    register_configs()
    try:
        key, values = methods(args)
        task, hydra_args = _split(args.overrides, key)
        hydra_args += cli._user_config_dirs([a for d in args.config_dir for a in ("--config-dir", d)])
        plan = make_plan(args, key, values, task, hydra_args)
        root, lock = _directory(args, plan)
    except FedbenchError as exc:
        cli.fail(str(exc))
    config_dirs = [a for d in args.config_dir for a in ("--config-dir", str(Path(d).resolve()))]
    sys.argv = ["fedbench-tune", "-m", *task, *[h for h in hydra_args if not h.startswith("hydra.searchpath")],
                *config_dirs, "hydra/sweeper=tune", f"hydra.sweeper.plan={root / 'tune.json'}",
                f"hydra.sweep.dir={root}"]
    try:
        cli.main()
    finally:
        lock.release()


if __name__ == "__main__":
    main()
