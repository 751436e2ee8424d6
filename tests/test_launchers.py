"""Sweeps: failure isolation and the status table, the joblib / submitit / Ray launchers, unique output directories,
and pre-emption under a scheduler (SIGUSR2 handed on to submitit's handler after a checkpoint)."""

import csv
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, TINY, call, compose, write_fake_mnist

from fedbench.checkpoint import Checkpointer
from fedbench.engine.simulation import RunControl, Simulation
from fedbench.logging import RunLogger
from fedbench.runs import StopSignals

SMOKE = ["experiment=smoke", "logger=none", "rounds=4", "eval_every=2"]


def sweep(args, tmp_path, name="sweep"):
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "run.py"), "-m", *args, f"data.root={tmp_path / 'data'}",
                           f"hydra.sweep.dir={tmp_path / name}"], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=600)
    statuses = {}
    for job in (tmp_path / name).iterdir() if (tmp_path / name).is_dir() else []:
        if (job / "summary.json").exists():
            statuses[job.name] = json.loads((job / "summary.json").read_text())["status"]
    return proc, statuses


def test_one_failing_and_one_diverging_job_do_not_stop_the_sweep(tmp_path):
    proc, statuses = sweep([*SMOKE, "client.lr=0.1,1e9", "dataset=digits,mnist"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert sorted(statuses.values()) == ["completed", "diverged", "failed", "failed"], statuses
    assert "Traceback" not in out
    table = out[out.index("fedbench: sweep"):]
    assert all(s in table for s in ("completed", "diverged", "failed", "MNIST files not found"))
    assert "2 job(s) failed" in out


@pytest.mark.slow
def test_a_diverging_job_alone_leaves_the_exit_status_zero(tmp_path):
    proc, statuses = sweep([*SMOKE, "client.lr=0.1,1e9"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(statuses.values()) == ["completed", "diverged"]


@pytest.mark.parametrize("launcher", ["joblib", pytest.param("submitit_local", marks=pytest.mark.slow)])
def test_process_launchers_run_a_sweep_with_the_numbers_of_a_single_run(tmp_path, launcher):
    """joblib (loky processes) and submitit's local executor run the sweep's jobs in their own processes."""
    accs = {}
    for launcher in (launcher,):
        proc, statuses = sweep([*SMOKE, f"hydra/launcher={launcher}", "seed=0,1", "engine.num_threads=1"],
                               tmp_path, launcher)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert list(statuses.values()) == ["completed", "completed"]
        accs = {j: json.loads((tmp_path / launcher / j / "summary.json").read_text())["final_test_acc"]
                for j in statuses}
    from conftest import run_resumable  # job 1 (seed 1) in this process gives the same number

    _, single = run_resumable(compose(*SMOKE, "seed=1", "engine.num_threads=1"), tmp_path / "single", tmp_path / "data")
    assert accs["1_fedavg_seed1"] == single["final_test_acc"]


def test_a_job_gives_the_same_numbers_whatever_ran_before_it_in_its_process(tmp_path):
    """A sweep runs jobs one after another in one process (the basic launcher, a reused loky worker, a pack), each
    leaving its engine.num_threads behind: the next job's numbers, every metric of every evaluation, are those of
    the job alone. FashionMNIST-format files of 1,000 images make normalize=own's reduction large enough to split."""
    write_fake_mnist(tmp_path / "data" / "FashionMNIST" / "raw", n_train=1000, n_test=50)
    args = ["dataset=fmnist", "dataset.system_dirs=[]", "partition=iid", "partition.num_clients=10", "model=logreg",
            "logger=none", "rounds=4", "eval_every=2", "participation.selection.clients_per_round=4",
            "client.lr=0.1", "engine.num_threads=1"]
    before, metrics = torch.get_num_threads(), []
    try:
        for threads in (1, 2):  # what the previous job (or loky's OMP_NUM_THREADS) left
            torch.set_num_threads(threads)
            code, out, job = call(args, tmp_path, f"after_{threads}")
            assert code == 0, out
            rows = list(csv.DictReader((job / "metrics.csv").open()))
            metrics.append([{k: v for k, v in row.items() if k != "wall_time"} for row in rows])
    finally:
        torch.set_num_threads(before)
    assert len(metrics[0]) == 2 and metrics[0] == metrics[1]


def test_ray_preset_composes():
    from fedbench.cli import _compose

    cfg = _compose([*SMOKE, "hydra/launcher=ray", "hydra.launcher.ray.remote.num_gpus=1"], hydra_node=True)
    assert cfg.hydra.launcher._target_.endswith("RayLauncher") and cfg.hydra.launcher.ray.remote.num_gpus == 1
    slurm = _compose([*SMOKE, "hydra/launcher=slurm", "hydra.launcher.partition=gpu"], hydra_node=True)
    assert slurm.hydra.launcher.partition == "gpu" and slurm.hydra.launcher.max_num_timeout == 5


@pytest.mark.slow
def test_ray_runs_two_jobs_locally(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    proc, statuses = sweep([*SMOKE, "hydra/launcher=ray", "seed=0,1"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(statuses.values()) == ["completed", "completed"]


@pytest.mark.slow
def test_identical_jobs_started_together_get_their_own_directories(tmp_path):
    env = {**os.environ, "WANDB_SILENT": "true"}
    args = [sys.executable, str(ROOT / "run.py"), *SMOKE, f"data.root={tmp_path / 'data'}"]
    procs = [subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    assert [p.wait(300) for p in procs] == [0, 0]
    runs = [d for day in (tmp_path / "outputs" / "runs").iterdir() for d in day.iterdir()]
    assert len(runs) == 2 and all((d / "summary.json").exists() for d in runs)


def test_a_job_started_after_its_sweep_was_stopped_inherits_the_stop():
    previous = signal.getsignal(signal.SIGTERM)
    with StopSignals() as sweep:  # a multirun's main process (fedbench.cli.main)
        assert StopSignals.stopped() is None
        os.kill(os.getpid(), signal.SIGTERM)  # between two of the basic launcher's jobs
        assert sweep.reason() == "SIGTERM" and StopSignals.stopped() is sweep
        with StopSignals() as job:  # the next job stops after its first round, with a checkpoint
            assert job.reason() == "SIGTERM"
        assert StopSignals.stopped() is sweep
    assert StopSignals.stopped() is None and signal.getsignal(signal.SIGTERM) is previous
    with StopSignals() as fresh:
        assert fresh.reason() is None


@pytest.mark.slow
def test_a_stopped_joblib_sweep_starts_none_of_its_queued_jobs(tmp_path):
    """Four jobs on two joblib workers: a SIGTERM to the sweep's process group while the first two run stops them
    with a checkpoint, and the two queued jobs the workers are handed next do not start."""
    import time

    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    out = tmp_path / "sweep"
    with (tmp_path / "log").open("w") as sink:
        proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "-m", "experiment=smoke", "logger=csv",
                                 "rounds=100000", "eval_every=1000", "checkpoint_every=1000", "seed=0,1,2,3",
                                 "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "engine.num_threads=1",
                                 f"data.root={tmp_path / 'data'}", f"hydra.sweep.dir={out}"],
                                cwd=tmp_path, env=env, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT)
    started = lambda: [d for d in out.iterdir() if (d / "rounds.csv").is_file()] if out.is_dir() else []  # noqa
    deadline = time.time() + 300
    while len(started()) < 2 or any(len((d / "rounds.csv").read_text().splitlines()) < 3 for d in started()):
        assert time.time() < deadline and proc.poll() is None, (tmp_path / "log").read_text()[-3000:]
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=300) == 128 + signal.SIGTERM
    log = (tmp_path / "log").read_text()
    statuses = {d.name: json.loads((d / "summary.json").read_text())["status"]
                for d in out.iterdir() if (d / "summary.json").is_file()}
    assert sorted(statuses.values()) == ["interrupted", "interrupted"], (statuses, log[-3000:])
    assert log.count("its sweep is stopping") == 2 and len(started()) == 2, log[-3000:]


def test_a_sweep_stopping_marker_belongs_to_its_sweep_only(tmp_path):
    from fedbench.runs import STOPPING, mark_stopping, sweep_stopping

    assert not sweep_stopping(tmp_path)
    mark_stopping(tmp_path)
    assert sweep_stopping(tmp_path) and sweep_stopping(tmp_path)  # every later job of this sweep
    (tmp_path / STOPPING).write_text("1")  # left by an earlier sweep of the directory (another main process)
    assert not sweep_stopping(tmp_path) and not (tmp_path / STOPPING).exists()


def test_fedbench_tune_launches_nothing_more_once_stopped(tmp_path, capsys):
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from hydra_plugins.fedbench_tune.tune_sweeper import TuneSweeper

    launched = []

    class Launcher:  # joblib's, as the main process sees it: the jobs end (their checkpoints written), it returns
        def launch(self, batch, initial_job_idx):
            launched.append(batch)
            os.kill(os.getpid(), signal.SIGTERM)

    sweeper = TuneSweeper(plan="tune.json")
    sweeper.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}})
    sweeper.launcher = Launcher()
    with StopSignals():
        with pytest.raises(SystemExit) as stopped:
            sweeper._launch([SimpleNamespace(overrides=["algo=fedavg"], name="trials/fedavg/t00_seed100")])
    assert stopped.value.code == 143 and len(launched) == 1
    assert f"Rerun with --dir {tmp_path} to continue" in capsys.readouterr().err


def test_sigusr2_preemption_checkpoints_then_hands_the_signal_to_the_scheduler(tmp_path):
    cfg = compose(*TINY, "rounds=8", "logger=csv")
    sim = Simulation(cfg, tmp_path / "run", tmp_path / "data")
    logger = RunLogger(tmp_path / "run", cfg)
    requeued = []
    previous = signal.signal(signal.SIGUSR2, lambda s, f: requeued.append(s))  # stands in for submitit's handler
    try:
        signals = StopSignals()
        with signals:
            def stop():
                if sim.next_round == 3 and signals.signum is None:
                    os.kill(os.getpid(), signal.SIGUSR2)  # the scheduler's notice, mid-run
                return signals.reason()

            summary = sim.run(logger, RunControl(Checkpointer(tmp_path / "run"), "{}", stop))
            assert requeued == []  # not before the checkpoint
        assert summary["status"] == "interrupted" and "SIGUSR2" in summary["reason"]
        assert [r for r, _ in Checkpointer(tmp_path / "run").paths()][-1] == 3
        signals.chain()
        assert requeued == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, previous)
        logger.finish()
