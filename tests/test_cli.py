"""End-to-end runs of run.py (subprocess), as a user would type them."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conftest import ROOT, TINY

from fedbench.logging import sweep_group
from conftest import compose


def run(args, tmp_path, check=True):
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "run.py"), *args, f"data.root={tmp_path / 'data'}"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(proc.stdout + proc.stderr)
    return proc


def _rows(path):
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_time"} for r in csv.DictReader(f)]


def test_same_seed_same_metrics(tmp_path):
    for name in ("a", "b"):
        run([*TINY, "logger=csv", f"hydra.run.dir={tmp_path / name}"], tmp_path)
    a, b = _rows(tmp_path / "a" / "metrics.csv"), _rows(tmp_path / "b" / "metrics.csv")
    assert a == b and len(a) == 2
    assert list(a[0]) == ["round", "selected", "completed", "train_loss", "test_loss", "test_acc", "grad_evals",
                          "floats_up", "floats_down", "bytes_up", "bytes_down"]
    assert [int(r["grad_evals"]) for r in a] == [2 * 4 * 5 * 16, 4 * 4 * 5 * 16]  # rounds x S x I x batch
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["rounds"] == 4 and summary["final_test_acc"] == float(a[-1]["test_acc"])
    assert {"best_test_acc", "targets", "wall_time_s", "bytes_up", "floats_up", "init_cost"} <= set(summary)
    assert summary["cpu"]["capability"] == torch.backends.cpu.get_cpu_capability() and summary["cpu"]["model"]
    for name in ("config.yaml", "participation.npz", "participation.png", "rounds.csv"):
        assert (tmp_path / "a" / name).is_file(), name
    rounds = list(csv.DictReader(open(tmp_path / "a" / "rounds.csv")))
    assert [r["round"] for r in rounds] == ["1", "2", "3", "4"] and {r["selected"] for r in rounds} == {"4"}
    for key in ("grad_evals", "floats_up", "floats_down"):  # metrics.csv: the running sums of rounds.csv
        per_round = np.cumsum([int(r[key]) for r in rounds])
        assert [int(r[key]) for r in a] == [per_round[1], per_round[3]], key


def test_sweep_gradma_fedamd_costs_to_target(tmp_path):
    run(["-m", *TINY, "algo=gradma,fedamd", "targets=[0.3,0.99]", "logger=csv",
         f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    jobs = {json.loads((j / "summary.json").read_text())["algorithm"]: j for j in (tmp_path / "sweep").iterdir()
            if (j / "summary.json").exists()}
    assert set(jobs) == {"gradma", "fedamd"}
    for name, job in jobs.items():
        summary = json.loads((job / "summary.json").read_text())
        rows = _rows(job / "metrics.csv")
        hit = next(r for r in rows if float(r["test_acc"]) >= 0.3)
        assert summary["targets"]["0.3"] == {"round": int(hit["round"]), "grad_evals": int(hit["grad_evals"]),
                                             "floats_up": int(hit["floats_up"]),
                                             "floats_down": int(hit["floats_down"]),
                                             "floats": int(hit["floats_up"]) + int(hit["floats_down"])}
        assert summary["targets"]["0.99"] is None
        assert (summary["init_cost"]["grad_evals"] > 0) == (name == "fedamd")


def test_multirun_four_jobs_with_wandb_offline_share_the_participation_trace(tmp_path):
    proc = run(["-m", *TINY, "participation=markov", "algo=fedavg,fedavgm", "seed=0,1", "logger=wandb",
                f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    jobs = sorted(p for p in (tmp_path / "sweep").iterdir() if p.is_dir() and (p / "summary.json").exists())
    assert len(jobs) == 4, proc.stdout
    for job in jobs:
        assert list((job / "wandb").glob("offline-run-*")), f"no offline W&B run in {job}"
    names = {json.loads((j / "summary.json").read_text())["algorithm"] for j in jobs}
    assert names == {"fedavg", "fedavgm"}
    traces = {}
    for job in jobs:
        summary = json.loads((job / "summary.json").read_text())
        with np.load(job / "participation.npz") as z:
            traces.setdefault(summary["seed"], []).append({k: z[k] for k in z.files})
    for seed, (a, b) in traces.items():  # same seed: the same trace for both algorithms
        assert all(np.array_equal(a[k], b[k]) for k in a), seed
    assert not np.array_equal(traces[0][0]["selected"], traces[1][0]["selected"])


def test_multirun_of_dropout_algorithms_under_round_robin_dropout(tmp_path):
    base = [a for a in TINY if not a.startswith("participation.")]
    run(["-m", *base, "algo=fedavg,fedprox,scaffold,mifa,mimic", "participation=round_robin_dropout", "rounds=3",
         "eval_every=3", "logger=csv", f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/summary.json")]
    assert sorted(s["algorithm"] for s in summaries) == ["fedavg", "fedprox", "mifa", "mimic", "scaffold"]
    assert all(s["final_test_acc"] > 0.3 for s in summaries)
    up = {s["algorithm"]: s["bytes_up"] for s in summaries}
    assert up["scaffold"] == 2 * up["fedavg"]


def test_sweep_group_ignores_seed():
    a, b = compose(*TINY, "seed=0"), compose(*TINY, "seed=3")
    assert sweep_group(a) == sweep_group(b)
    assert sweep_group(a) != sweep_group(compose(*TINY, "algo=fedavgm"))


@pytest.mark.parametrize("args, expected", [
    (["algo=nope"], "Unknown option 'nope' for config group 'algo'. Allowed: amplified_fedavg, bvr_l_sgd, fedadagrad, "
                    "fedadam, fedamd, fedamd_sequential, fedamd_sequential3, fedavg, fedavgm"),
    (["algo.server_lrr=2"], "Unknown key 'server_lrr' in 'algo'"),
    (["-m", "algo=fedavg,nope"], "Unknown option 'nope'"),
    (["algo.weighting=foo"], "Allowed: uniform, samples"),
    (["participation.selection.clients_per_round=11"], "participation.selection.clients_per_round"),
    (["participation=periodic", "participation.availability.group_by=colour"],
     "participation.availability.group_by': 'colour' is not an attribute"),
    (["dataset=fmnist", "model=cnn_fmnist", "dataset.system_dirs=[]"], "FashionMNIST files not found"),
])
def test_bad_input_one_paragraph_no_traceback(tmp_path, args, expected):
    base = [a for a in TINY if not any(a.startswith(x.split("=")[0] + "=") for x in args if "=" in x)]
    proc = run([*base, "logger=none", *args], tmp_path, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert expected in out, out
    assert "Traceback" not in out
    message = [line for line in proc.stderr.splitlines() if line.startswith("fedbench: error:")]
    assert len(message) == 1 and "Fix:" in message[0], out


def test_multirun_over_the_gradma_table_algorithms(tmp_path):
    algos = "gradma,moon,feddyn,mimelite,fedmlb"
    run(["-m", *TINY, "model=mlp", "model.hidden=[8]", "rounds=2", "eval_every=2", "logger=csv", f"algo={algos}",
         f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    jobs = {json.loads(p.read_text())["algorithm"]: p.parent for p in (tmp_path / "sweep").glob("*/summary.json")}
    assert set(jobs) == set(algos.split(","))
    rounds = list(csv.DictReader(open(jobs["gradma"] / "rounds.csv")))
    assert {"grad_evals", "qp_worker_active", "qp_server_correction", "memory_entries"} <= set(rounds[0])
    moon = next(csv.DictReader(open(jobs["moon"] / "rounds.csv")))
    assert int(rounds[0]["grad_evals"]) > 2 * int(moon["grad_evals"])  # three gradients a step against one


def test_sweep_over_the_selection_rules_with_fedavg_and_mifa(tmp_path):
    rules = "uniform,md,fedsrc_g,fedsrc_d,cluster,power_of_choice"
    run(["-m", *TINY, "rounds=2", "eval_every=2", "logger=csv", "algo=fedavg,mifa", f"participation/selection={rules}",
         "engine.eval_train=true", "loss_targets=[5.0]", f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    jobs = {}
    for summary in (tmp_path / "sweep").glob("*/summary.json"):
        kind = OmegaConf.load(summary.parent / "config.yaml").participation.selection.kind
        jobs[json.loads(summary.read_text())["algorithm"], kind] = summary.parent
    assert set(jobs) == {(a, r) for a in ("fedavg", "mifa") for r in rules.split(",")}
    for (algo, rule), job in jobs.items():
        rounds = list(csv.DictReader(open(job / "rounds.csv")))
        probabilistic = rule in ("md", "fedsrc_g", "fedsrc_d")
        assert ("p_entropy" in rounds[0]) == probabilistic, (algo, rule)
        assert (job / "probabilities.png").exists() == probabilistic
        if probabilistic:
            assert "probabilities" in np.load(job / "participation.npz")
        summary = json.loads((job / "summary.json").read_text())
        assert summary["loss_targets"]["5"]["round"] == 2 and summary["final_global_train_loss"] < 5
