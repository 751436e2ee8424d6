"""Packed sweeps (hydra/launcher=packed, fedbench.pack): each job of a pack equals the same job alone."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedbench.pack import Job, Packer, pack_key
from fedbench.runs import StopSignals

from conftest import ROOT, call, compose, csv_rows, make_sim

SMALL = ("dataset=digits", "partition=iid", "partition.num_clients=12", "rounds=5", "eval_every=5",
         "client.local_steps=3", "client.batch_size=8", "engine.client_runner=vmap")
#: one pack: six algorithms of the cohort-able family, two learning rates, three seeds
MIXED = [("algo=fedavg", "client.lr=0.1", "seed=0"), ("algo=fedavgm", "client.lr=0.05", "seed=1"),
         ("algo=scaffold", "client.lr=0.1", "seed=2"), ("algo=mifa", "client.lr=0.05", "seed=0"),
         ("algo=mimic", "client.lr=0.1", "seed=1"), ("algo=amplified_fedavg", "algo.period=2", "client.lr=0.05",
                                                     "seed=2")]
PARTICIPATION = {
    "bernoulli": ("participation=bernoulli", "participation.availability.prob=0.4"),
    "markov": ("participation=markov", "participation.selection.clients_per_round=4"),
    "periodic": ("participation=periodic", "participation.selection.clients_per_round=3",
                 "participation.availability.period=2"),
}


def _rounds(sim, rounds):
    for t in range(rounds):
        yield from sim.round_steps(t)


def _pack(sims, rounds):
    Packer(StopSignals()).run([Job(_rounds(sim, rounds), lambda value: None) for sim in sims])


@pytest.mark.parametrize("participation", sorted(PARTICIPATION))
@pytest.mark.parametrize("model", ["mlp", "mlp_bn"])
def test_a_packed_job_equals_the_job_alone(tmp_path, participation, model):
    """Six algorithms with mixed learning rates and seeds in one pack, under three availability processes, with
    and without BatchNorm: every job's model, buffers and costs equal its run alone."""
    arch = ("model=mlp", "model.batch_norm=true") if model == "mlp_bn" else ("model=mlp",)
    cfgs = [compose(*SMALL, *arch, *PARTICIPATION[participation], *job) for job in MIXED]
    alone = [make_sim(cfg, tmp_path / f"alone{i}") for i, cfg in enumerate(cfgs)]
    for sim in alone:
        for t in range(sim.cfg.rounds):
            sim.round(t)
    packed = [make_sim(cfg, tmp_path / f"packed{i}") for i, cfg in enumerate(cfgs)]
    assert len({pack_key(sim) for sim in packed}) == 1  # one pack for all
    _pack(packed, cfgs[0].rounds)
    for a, p in zip(alone, packed):
        assert p.packed_jobs == len(cfgs)
        torch.testing.assert_close(p.x, a.x, rtol=0, atol=1e-5)
        torch.testing.assert_close(p.buffers, a.buffers, rtol=0, atol=1e-5)
        assert p.trainer.cost.totals() == a.trainer.cost.totals()
        assert p.algo.state_dict().keys() == a.algo.state_dict().keys()
        for k, v in a.algo.state_dict().items():
            torch.testing.assert_close(p.algo.state_dict()[k], v, rtol=0, atol=1e-5)


def test_packed_jobs_of_ragged_clients_are_chunked_by_work_and_equal_their_runs_alone(tmp_path, monkeypatch):
    """FedSRC's synthetic task in small (clients of unequal sizes, full-data batches, injected noise): the pack
    trains its jobs' clients together in chunks of similar work, and each job equals its run alone."""
    from fedbench.training import cohort

    base = ("dataset=synthetic", "dataset.num_users=12", "partition=natural", "model=logreg",
            "client.batch_size=100000", "client.grad_noise=0.5", "participation.selection.clients_per_round=3",
            "rounds=3", "eval_every=3", "engine.client_runner=vmap")
    cfgs = [compose(*base, f"participation/selection={sel}", f"seed={seed}")
            for sel, seed in (("uniform", 0), ("md", 1), ("fedsrc_g_oracle", 0))]
    alone = [make_sim(cfg, tmp_path / f"alone{i}") for i, cfg in enumerate(cfgs)]
    for sim in alone:
        for t in range(3):
            sim.round(t)
    sizes, chunks_of = [], cohort.work_chunks
    monkeypatch.setattr(cohort, "work_chunks", lambda work, cap: sizes.append(len(work)) or chunks_of(work, cap))
    packed = [make_sim(cfg, tmp_path / f"packed{i}") for i, cfg in enumerate(cfgs)]
    _pack(packed, 3)
    assert 9 in sizes  # a pack's round: the three jobs' 3 clients each, regrouped together
    for a, p in zip(alone, packed):
        torch.testing.assert_close(p.x, a.x, rtol=0, atol=1e-5)
        assert p.trainer.cost.totals() == a.trainer.cost.totals()


def test_jobs_that_cannot_share_a_cohort_are_not_packed(tmp_path):
    """Another model, another local momentum, or the thin runner: another pack, or the job alone."""
    base = compose(*SMALL, "model=mlp")
    keys = [pack_key(make_sim(compose(*SMALL, *o), tmp_path / str(i)))
            for i, o in enumerate([("model=mlp",), ("model=mlp", "client.lr=0.3", "seed=4"), ("model=logreg",),
                                   ("model=mlp", "client.momentum=0.9"), ("model=mlp", "engine.pack_size=2")])]
    assert keys[0] == keys[1] and len(set(keys)) == 4
    thin = make_sim(compose(*SMALL[:-1], "model=mlp", "algo=gradma"), tmp_path / "thin")
    assert pack_key(thin) is None
    with pytest.raises(StopIteration):  # the thin runner never hands its local training out
        next(thin.round_steps(0))
    assert base.engine.pack_size == 16


def test_a_diverging_job_leaves_the_pack_and_the_others_go_on(tmp_path):
    cfgs = [compose(*SMALL, "model=mlp", f"client.lr={lr}", "rounds=6") for lr in (0.1, 1e6, 0.05)]
    alone = [make_sim(cfg, tmp_path / f"a{i}") for i, cfg in enumerate(cfgs)]
    for sim in alone:
        for t in range(6):
            sim.round(t)

    def until_nonfinite(sim):  # what the Divergence callback does: stop after a round with a NaN loss
        for t in range(6):
            yield from sim.round_steps(t)
            if sim.nonfinite_loss or not torch.isfinite(sim.x).all():
                return "diverged"
        return "completed"

    ends = {}
    packed = [make_sim(cfg, tmp_path / f"p{i}") for i, cfg in enumerate(cfgs)]
    Packer(StopSignals()).run([Job(until_nonfinite(sim), lambda v, i=i: ends.setdefault(i, v))
                               for i, sim in enumerate(packed)])
    assert ends == {0: "completed", 1: "diverged", 2: "completed"}
    for i in (0, 2):
        torch.testing.assert_close(packed[i].x, alone[i].x, rtol=0, atol=1e-5)


# -- the launcher --------------------------------------------------------------------------------------------------

SWEEP = ["-m", "hydra/launcher=packed", "dataset=digits", "partition=iid", "model=mlp", "partition.num_clients=12",
         "participation.selection.clients_per_round=4", "rounds=6", "eval_every=2", "logger=csv",
         "client.local_steps=3", "client.batch_size=8"]


def _metrics(job: Path) -> list:
    """metrics.csv without its wall-clock column (the only one a pack changes)."""
    rows = csv_rows(job / "metrics.csv")
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]


def test_the_packed_launcher_writes_every_job_as_if_it_ran_alone(tmp_path):
    """A sweep through hydra/launcher=packed: the same run directories and results as the basic launcher, the
    thin-runner algorithm run on its own, and the sweep table says which jobs were packed."""
    grid = ["algo=fedavg,gradma", "client.lr=0.05,0.1", "seed=0,1"]
    code, out, _ = call([*SWEEP, *grid, f"hydra.sweep.dir={tmp_path / 'packed'}"], tmp_path)
    assert code in (0, None), out
    basic = [a for a in SWEEP if a != "hydra/launcher=packed"]
    code, out_basic, _ = call([*basic, *grid, f"hydra.sweep.dir={tmp_path / 'basic'}"], tmp_path)
    assert code in (0, None), out_basic
    jobs = sorted(p.name for p in (tmp_path / "packed").iterdir() if p.is_dir())
    assert jobs == sorted(p.name for p in (tmp_path / "basic").iterdir() if p.is_dir()) and len(jobs) == 8
    for name in jobs:
        packed, alone = (json.loads((tmp_path / d / name / "summary.json").read_text()) for d in ("packed", "basic"))
        assert packed["packed_jobs"] == (4 if packed["algorithm"] == "fedavg" else 1)
        assert alone["packed_jobs"] == 1
        assert packed["final_test_acc"] == pytest.approx(alone["final_test_acc"], abs=1e-6)
        for a, b in zip(_metrics(tmp_path / "packed" / name), _metrics(tmp_path / "basic" / name)):
            assert a.keys() == b.keys()
            for k in a:
                assert float(a[k]) == pytest.approx(float(b[k]), abs=1e-5), (name, k)
        assert (tmp_path / "packed" / name / ".hydra" / "config.yaml").is_file()
    table = out[out.index("fedbench: sweep"):]
    assert table.count(" x4 ") == 4 and table.count(" alone ") == 4 and "Traceback" not in out


@pytest.mark.slow
def test_a_packed_sweep_killed_and_resumed_ends_as_the_uninterrupted_sweep(tmp_path):
    grid = ["client.lr=0.05,0.1", "seed=0,1", "rounds=40", "checkpoint_every=5", f"data.root={tmp_path / 'data'}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def sweep(where, *extra):
        return subprocess.Popen([sys.executable, str(ROOT / "run.py"), *SWEEP, *grid,
                                 f"hydra.sweep.dir={tmp_path / where}", *extra], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    full = sweep("full")
    assert full.wait(300) == 0, full.communicate()
    proc = sweep("killed")
    first = tmp_path / "killed" / "0_fedavg_seed0" / "checkpoints"
    start = time.time()
    while not (first.is_dir() and len(list(first.iterdir())) >= 2):
        assert proc.poll() is None and time.time() - start < 240, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    again = sweep("killed", "resume=true")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, out + err
    assert "resuming" in out + err
    for job in sorted(p.name for p in (tmp_path / "full").iterdir() if p.is_dir()):
        assert _metrics(tmp_path / "killed" / job) == _metrics(tmp_path / "full" / job), job
        a, b = (json.loads((tmp_path / d / job / "summary.json").read_text()) for d in ("killed", "full"))
        assert a["status"] == "completed" and a["final_test_acc"] == b["final_test_acc"]
