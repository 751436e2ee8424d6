"""Bounds for what the launcher plugins and the machine leave unchecked: the ``hydra.launcher.*`` options (declared by
the plugins without ranges) and the engine's process and thread counts against the cores a job will have.

Checked with the rest of the config before any job starts (``fedbench.cli.preflight``), so a value with no meaning
is one paragraph naming the key, the allowed values and why, never the launcher's own exception from inside a sweep.
Every number under ``hydra.launcher`` also gets the default rule (finite, >= 0). Checks against this machine's cores
and GPUs apply where jobs run here (the basic, joblib and submitit-local launchers, a local Ray); a job on a cluster
node checks its engine counts again where it runs (``Simulation``).
"""

from __future__ import annotations

import os
from typing import Dict

from omegaconf import DictConfig, OmegaConf

from fedbench.errors import require
from fedbench.options import Rule, check_values


def cores() -> int:
    """The cores this process may run on (its affinity mask: a scheduler's allocation, not the machine's size)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def gpus() -> int:
    import torch

    return torch.cuda.device_count()


ONE_PROCESS = "a fedbench job is one process: more would run the same job twice over one run directory"
SIZE = dict(pattern=r"\d+[KMGT]?", describe="a size such as 8G")
#: rules by launcher class and dotted key under ``hydra.launcher``
RULES: Dict[str, Dict[str, Rule]] = {
    "JoblibLauncher": {
        "backend": Rule(choices=("loky", "multiprocessing"), why="each job needs a process of its own: signal "
                        "handlers, torch's thread count and the working directory are per process"),
        "prefer": Rule(choices=("processes", "threads")),
        "require": Rule(pattern="(?!)", describe="null", why="'sharedmem' would run the jobs as threads of one "
                        "process"),
        "timeout": Rule(gt=0),
        "pre_dispatch": Rule(pattern=r"all|[1-9]\d*|([1-9]\d*\s*\*\s*)?n_jobs",
                             describe="'all', a count, or k*n_jobs", why="joblib evaluates it as an expression"),
        "batch_size": Rule(pattern=r"auto|[1-9]\d*", describe="'auto' or a count >= 1"),
        "max_nbytes": Rule(pattern=r"\d+[KMG]?", describe="a size such as 1M"),
        "mmap_mode": Rule(choices=("r", "r+", "w+", "c")),
    },
    "RayLauncher": {
        "ray.init.num_cpus": Rule(ge=1),
        "ray.init.num_gpus": Rule(ge=0),
        "ray.remote.num_cpus": Rule(gt=0, why="a job needs a share of a CPU"),
        "ray.remote.num_gpus": Rule(ge=0),
        "ray.remote.max_calls": Rule(ge=0),
    },
    "SlurmLauncher": {
        "timeout_min": Rule(ge=1), "cpus_per_task": Rule(ge=1), "gpus_per_node": Rule(ge=0),
        "tasks_per_node": Rule(ge=1, le=1, why=ONE_PROCESS), "nodes": Rule(ge=1, le=1, why=ONE_PROCESS),
        "mem_gb": Rule(gt=0), "array_parallelism": Rule(ge=1), "signal_delay_s": Rule(ge=0),
        "max_num_timeout": Rule(ge=0), "cpus_per_gpu": Rule(ge=1), "gpus_per_task": Rule(ge=0),
        "mem_per_gpu": Rule(**SIZE), "mem_per_cpu": Rule(**SIZE),
    },
    "LocalLauncher": {
        "timeout_min": Rule(ge=1), "cpus_per_task": Rule(ge=1), "gpus_per_node": Rule(ge=0),
        "tasks_per_node": Rule(ge=1, le=1, why=ONE_PROCESS), "nodes": Rule(ge=1, le=1, why=ONE_PROCESS),
        "mem_gb": Rule(gt=0),
    },
}


def launcher_kind(hydra: DictConfig) -> str:
    """The launcher's class name (``BasicLauncher``, ``JoblibLauncher``, ...)."""
    return str(OmegaConf.select(hydra, "launcher._target_", default="") or "").rsplit(".", 1)[-1]


def runs_here(hydra: DictConfig) -> bool:
    """Whether the jobs run on this machine (so its cores and GPUs are theirs)."""
    kind = launcher_kind(hydra)
    if kind == "RayLauncher":
        return OmegaConf.select(hydra, "launcher.ray.init.address") in (None, "", "local")
    return kind != "SlurmLauncher"


def check_launcher(hydra: DictConfig) -> None:
    """The launcher's options: its rules, the default rule for every other number, and the relations."""
    kind = launcher_kind(hydra)
    node = hydra.launcher
    check_values(node, "hydra.launcher", {f"hydra.launcher.{k}": r for k, r in RULES.get(kind, {}).items()})
    n = cores()
    if kind == "JoblibLauncher":
        jobs = node.n_jobs
        require(isinstance(jobs, int) and jobs != 0 and -n <= jobs <= n, "hydra.launcher.n_jobs",
                f"{jobs} has no meaning here: joblib runs n_jobs processes (-1: one per core, -k: all cores but "
                f"k - 1), and this machine gives its jobs {n} core(s); more processes than cores only slow every "
                "job down.", f"use a value in [1, {n}] (or in [-{n}, -1]).")
    if kind == "SlurmLauncher":
        require(node.signal_delay_s < 60 * node.timeout_min, "hydra.launcher.signal_delay_s",
                f"{node.signal_delay_s} s before the end of a {node.timeout_min}-minute job is before it starts.",
                "use a delay shorter than the time limit (hydra.launcher.timeout_min x 60).")
    if kind == "LocalLauncher" and node.gpus_per_node:
        require(node.gpus_per_node <= gpus(), "hydra.launcher.gpus_per_node",
                f"{node.gpus_per_node} GPU(s) per job, and this machine has {gpus()}.", f"use at most {gpus()}.")
    if kind == "RayLauncher" and runs_here(hydra):
        have = node.ray.init.num_cpus or n
        require(node.ray.remote.num_cpus <= have, "hydra.launcher.ray.remote.num_cpus",
                f"a job asking for {node.ray.remote.num_cpus} CPUs never starts on a local Ray with {have}.",
                f"use at most {have}.")
        require(node.ray.remote.num_gpus <= gpus(), "hydra.launcher.ray.remote.num_gpus",
                f"a job asking for {node.ray.remote.num_gpus} GPU(s) never starts on a local Ray on this machine, "
                f"which has {gpus()}.", f"use at most {gpus()} (or pass ray.init.address of a cluster).")


def check_engine_here(cfg: DictConfig) -> None:
    """``engine.workers`` and ``engine.num_threads`` against the cores a job has where it runs."""
    n = cores()
    workers, threads = cfg.engine.workers, cfg.engine.num_threads
    require(workers <= n, "engine.workers", f"{workers} worker processes, and a job here has {n} core(s): each "
            "worker is a process with one thread (and its own open files), so more than the cores only contend.",
            f"use at most {n} (or 0: train in the main process).")
    require(threads <= n, "engine.num_threads", f"{threads} torch threads, and a job here has {n} core(s); more "
            "threads than cores only contend.", f"use at most {n} (or 0: chosen by the run's size).")
