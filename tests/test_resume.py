"""Exact resume: R rounds + checkpoint + resume + R rounds equals 2R uninterrupted rounds, for stateful algorithms
and participation processes; a run killed between checkpoints resumes to the same end; statuses and strict JSON."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from conftest import BASE, R, ROOT, TINY, csv_rows, compose, run_resumable

from fedbench.checkpoint import Checkpointer, pack, unpack
from fedbench.training.client_state import ClientStateStore
from fedbench.engine.simulation import RunControl, Simulation
from fedbench.logging import RunLogger
from fedbench.logging.run_logger import plain_config

CASES = [
    ("algo=fedavg", "participation=markov"),
    ("algo=scaffold", "participation=markov"),
    ("algo=mifa", "participation=markov"),
    ("algo=mimic", "participation=round_robin_dropout"),
    ("algo=amplified_fedavg", "algo.period=3", "algo.eta=2", "participation=periodic",
     "participation.availability.period=2"),
    ("algo=gradma", "participation=markov"),
    ("algo=fedamd", "participation=markov"),
    ("algo=fedavg", "participation=adaptive"),
    ("algo=fedvarp", "participation/selection=fedsrc_d"),
    ("algo=fedavg", "participation/selection=cluster", "participation.selection.scheme=similarity"),
    ("algo=fedavg", "participation=regularized"),
    ("algo=feddyn", "participation=bernoulli"),
    ("algo=mifa", "participation=fedscale", "participation.selection.clients_per_round=4"),  # the clock is state
]


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: "-".join(x.split("=")[-1] for x in o[:2]))
def test_resume_equals_uninterrupted(tmp_path, overrides):
    base = [o for o in BASE if not (o.startswith("participation.") and any(x.startswith("participation=")
                                                                            for x in overrides))]
    cfg = compose(*base, *overrides)
    data = tmp_path / "data"
    full, full_summary = run_resumable(cfg, tmp_path / "full", data)
    part, first = run_resumable(cfg, tmp_path / "part", data, stop_at=R)
    assert first["status"] == "interrupted" and first["rounds"] == R
    resumed, summary = run_resumable(cfg, tmp_path / "part", data, resume=True)
    assert summary["status"] == "completed" and summary["rounds"] == 2 * R
    assert torch.equal(resumed.x, full.x)
    assert torch.equal(resumed.buffers, full.buffers)
    for name in ("metrics.csv", "rounds.csv"):
        assert csv_rows(tmp_path / "part" / name) == csv_rows(tmp_path / "full" / name), name
    a, b = np.load(tmp_path / "part" / "participation.npz"), np.load(tmp_path / "full" / "participation.npz")
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    for s in (summary, full_summary):
        s["init_cost"].pop("wall_time_s", None)
    same = {k for k in full_summary if k not in ("wall_time_s", "rounds_per_s")}
    assert {k: summary[k] for k in same} == {k: full_summary[k] for k in same}
    for k, v in full.algo.state_dict().items():
        assert torch.equal(resumed.algo.state_dict()[k], v), k


def test_memmap_tables_roll_back_to_the_latest_checkpoint(tmp_path):
    """Rows written after a checkpoint (a run killed between checkpoints) are undone from the undo log."""
    store = ClientStateStore(5, torch.device("cpu"), "memmap", tmp_path)
    table = store.table("mifa/latest_update", 3)
    table.set(1, torch.tensor([1.0, 2.0, 3.0]))
    snap = store.snapshot(7)
    store.commit(7)
    table.set(1, torch.tensor([9.0, 9.0, 9.0]))
    table.set(4, torch.tensor([5.0, 5.0, 5.0]))
    table.set(1, torch.tensor([8.0, 8.0, 8.0]))
    reopened = ClientStateStore(5, torch.device("cpu"), "memmap", tmp_path, reuse=True)
    t2 = reopened.table("mifa/latest_update", 3)
    reopened.restore(unpack(pack(snap)))
    assert torch.equal(t2.get(1), torch.tensor([1.0, 2.0, 3.0]))
    assert 4 not in t2 and torch.equal(t2.get(4), torch.zeros(3)) and float(t2.array[4].sum()) == 0
    with pytest.raises(ValueError, match="latest checkpoint"):
        reopened.restore({"mifa/latest_update": {**snap["mifa/latest_update"], "round": 3}})


def test_memmap_resume_equals_uninterrupted(tmp_path):
    cfg = compose(*BASE, "algo=mifa", "participation=markov", "engine.client_state=memmap")
    data = tmp_path / "data"
    full, _ = run_resumable(cfg, tmp_path / "full", data)
    run_resumable(cfg, tmp_path / "part", data, stop_at=R)
    resumed, _ = run_resumable(cfg, tmp_path / "part", data, resume=True)
    assert torch.equal(resumed.x, full.x)


def test_checkpoint_is_weights_only_and_keeps_the_newest(tmp_path):
    cfg = compose(*BASE)
    run_resumable(cfg, tmp_path / "run", tmp_path / "data")
    ckpts = Checkpointer(tmp_path / "run").paths()
    assert [r for r, _ in ckpts] == [2 * R - 1, 2 * R]  # checkpoint_keep=2
    raw = torch.load(ckpts[-1][1], weights_only=True)  # no code can run while loading
    assert raw["round"] == 2 * R
    ckpts[-1][1].write_bytes(b"not a checkpoint")  # a corrupted newest one is skipped with a warning
    path, state = Checkpointer(tmp_path / "run").latest()
    assert path == ckpts[0][1] and state["round"] == 2 * R - 1


def _cli(args, cwd, **kw):
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


SLOW_RUN = ("dataset=digits", "partition=iid", "partition.num_clients=10", "model=mlp", "rounds=150",
            "eval_every=10", "participation=markov", "algo=mifa", "client.lr=0.05", "logger=csv",
            "checkpoint_every=7")  # the kill falls between checkpoints


def _wait_for_round(run_dir, r, proc, timeout=120):
    start = time.time()
    while time.time() - start < timeout:
        rows = (run_dir / "rounds.csv").read_text().count("\n") if (run_dir / "rounds.csv").exists() else 0
        if rows > r and (run_dir / "checkpoints").is_dir():
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the run did not get going")


@pytest.mark.slow
def test_sigterm_sigint_sigkill_then_resume_equal_an_uninterruptedrun_resumable(tmp_path):
    data = f"data.root={tmp_path / 'data'}"
    full = _cli([*SLOW_RUN, data, f"hydra.run.dir={tmp_path / 'full'}"], tmp_path)
    assert full.wait(300) == 0, full.communicate()
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGKILL, -9)):
        run_dir = tmp_path / sig.name
        proc = _cli([*SLOW_RUN, data, f"hydra.run.dir={run_dir}"], tmp_path)
        _wait_for_round(run_dir, 30, proc)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == code, out + err
        assert "Traceback" not in out + err
        if sig != signal.SIGKILL:
            summary = json.loads((run_dir / "summary.json").read_text())
            assert summary["status"] == "interrupted" and sig.name in summary["reason"]
        again = _cli([*SLOW_RUN, data, f"hydra.run.dir={run_dir}", "resume=true"], tmp_path)
        out, err = again.communicate(timeout=300)
        assert again.returncode == 0, out + err
        assert "resuming" in out + err
        assert csv_rows(run_dir / "metrics.csv") == csv_rows(tmp_path / "full" / "metrics.csv")
        assert csv_rows(run_dir / "rounds.csv") == csv_rows(tmp_path / "full" / "rounds.csv")
        a = json.loads((run_dir / "summary.json").read_text())
        b = json.loads((tmp_path / "full" / "summary.json").read_text())
        assert a["status"] == "completed" and a["final_test_acc"] == b["final_test_acc"]
        assert a["grad_evals"] == b["grad_evals"]


@pytest.mark.slow
def test_a_joblib_sweep_stopped_through_its_process_group_returns_after_its_jobs_checkpoints(tmp_path):
    """Ctrl-C, GNU timeout and schedulers signal the process group: the joblib workers stop after their round and
    the main process waits for them (before, it died at once and its caller went on while they were writing)."""
    sweep = tmp_path / "sweep"
    args = [*(o for o in SLOW_RUN if not o.startswith(("rounds=", "checkpoint_every="))), "rounds=5000",
            "checkpoint_every=0", f"data.root={tmp_path / 'data'}", "seed=0,1", "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2", "engine.num_threads=1", f"hydra.sweep.dir={sweep}"]
    proc = _cli(["-m", *args], tmp_path, start_new_session=True)
    deadline = time.time() + 300
    while len([f for f in sweep.glob("*/rounds.csv") if f.read_text().count("\n") > 5]) < 2:
        assert time.time() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=120)
    jobs = sorted(d for d in sweep.iterdir() if (d / ".hydra").is_dir())
    assert len(jobs) == 2
    for job in jobs:  # read the moment the main process has ended
        assert json.loads((job / "summary.json").read_text())["status"] == "interrupted", job
        assert any((job / "checkpoints").iterdir()), job
    out, err = proc.communicate()
    assert proc.returncode == 143, out + err
    assert "sweep stopped by SIGTERM" in err and "resume=true" in err and "Traceback" not in out + err


@pytest.mark.slow
def test_resume_refuses_another_config_naming_the_keys(tmp_path):
    data = f"data.root={tmp_path / 'data'}"
    args = [*TINY, "logger=csv", data, f"hydra.run.dir={tmp_path / 'a'}"]
    proc = _cli(args, tmp_path)
    assert proc.wait(300) == 0
    again = _cli([*args, "top_k=[3]", "resume=true"], tmp_path)  # what only the report reads may differ
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0 and "already completed" in out + err
    other = _cli([*TINY, "logger=csv", data, "client.lr=0.2", f"resume={tmp_path / 'a'}"], tmp_path)
    out, err = other.communicate(timeout=300)
    assert other.returncode != 0 and "client.lr: 0.1 -> 0.2" in err and "Traceback" not in out + err
    fresh = _cli(args, tmp_path)  # the same directory without resume: refused, its results are kept
    out, err = fresh.communicate(timeout=300)
    assert fresh.returncode != 0 and "already holds" in err
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["status"] == "completed"


def test_divergence_stops_with_status_and_strict_json(tmp_path):
    cfg = compose(*TINY, "client.lr=1e6", "rounds=20", "eval_every=5")
    sim, summary = run_resumable(cfg, tmp_path / "run", tmp_path / "data")
    assert summary["status"] == "diverged" and summary["rounds"] < 20, summary
    text = (tmp_path / "run" / "summary.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert json.loads(text)["status"] == "diverged"


def test_rounds_with_nobody_completing_are_counted(tmp_path):
    cfg = compose(*[o for o in TINY if not o.startswith("participation.")], "participation=bernoulli",
                  "participation.availability.prob=0.05", "participation.first_round_full=false")
    _, summary = run_resumable(cfg, tmp_path / "run", tmp_path / "data")
    assert summary["empty_rounds"] > 0 and summary["status"] == "completed"


def test_resume_true_finds_the_latest_run_of_the_same_config_under_outputs(tmp_path):
    from fedbench.runs import plan

    outputs = tmp_path / "outputs"
    cfg = compose(*BASE, "resume=true")
    run_resumable(cfg, outputs / "runs" / "d" / "old", tmp_path / "data", stop_at=R)
    run_resumable(compose(*BASE, "seed=1"), outputs / "runs" / "d" / "other", tmp_path / "data", stop_at=R)
    found = plan(cfg, outputs / "runs" / "d" / "new", outputs)
    assert found.run_dir == outputs / "runs" / "d" / "old" and found.checkpoint["round"] == R
    fresh = plan(compose(*BASE, "resume=true", "seed=2"), outputs / "runs" / "d" / "new2", outputs)
    assert fresh.checkpoint is None and "afresh" in fresh.note


def test_wandb_run_id_is_checkpointed_and_resumed(tmp_path):
    pytest.importorskip("wandb")
    os.environ["WANDB_SILENT"] = "true"
    cfg = compose(*BASE, "logger=wandb")
    sim = Simulation(cfg, tmp_path / "run", tmp_path / "data")
    logger = RunLogger(tmp_path / "run", cfg)
    run_id = logger.run_id
    sim.run(logger, RunControl(Checkpointer(tmp_path / "run"), json.dumps(plain_config(cfg)),
                               lambda: "SIGTERM" if sim.next_round == R else None))
    logger.finish()
    _, state = Checkpointer(tmp_path / "run").latest()
    assert state["wandb_id"] == run_id
    again = RunLogger(tmp_path / "run", cfg, resume_round=R, wandb_id=state["wandb_id"])
    assert again.run_id == run_id
    again.finish()
