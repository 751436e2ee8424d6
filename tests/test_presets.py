"""The papers' experiments as presets: every preset composes with each algorithm (and sampler) its own "Compare:"
line sweeps, and every ``_small`` twin runs end to end (a few rounds at tiny scale on files the test writes)."""

import re

import pytest
import torch

from conftest import compose
from fedbench.config import CONF_DIR
from conftest import check_evaluation, make_sim, write_fake_cifar, write_fake_mnist

PRESETS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml") if p.stem != "smoke")


def _sweeps(name: str) -> list:
    """The overrides of each job the preset's "Compare:" comment sweeps (one value list per key)."""
    text = (CONF_DIR / "experiment" / f"{name}.yaml").read_text()
    jobs = []
    for key, values in re.findall(r"((?:algo|participation/selection))=([\w.,]+)", text.split("Compare")[-1]):
        jobs += [f"{key}={v}" for v in values.split(",")]
    return jobs


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_composes_with_the_algorithms_its_comparison_sweeps(name):
    jobs = _sweeps(name)
    assert jobs or name.startswith("fedsrc"), f"{name}: no Compare line"
    for job in jobs or [""]:
        cfg = compose(f"experiment={name}", *([job] if job else []))
        key, _, value = job.partition("=")
        if key == "algo":  # the preset keeps the algorithm the sweep asks for
            assert cfg.algo.name == value, (name, job)
        elif key:  # and the selection rule
            assert cfg.participation.selection.kind == compose(job).participation.selection.kind, (name, job)


def test_the_wait_baselines_get_the_papers_warm_up_in_the_periodic_preset():
    cfg = compose("experiment=wang22_fmnist_periodic", "algo=wait_full")
    assert (cfg.algo.mode.value, cfg.algo.period, cfg.algo.warmup_rounds, cfg.algo.warmup_lr) == ("wait_full", 500, 2000, 0.1)


@pytest.mark.parametrize("name", [p for p in PRESETS if p.endswith("_small")])
def test_small_twins_run_end_to_end_at_tiny_scale(name, tmp_path):
    data = tmp_path / "data"
    write_fake_mnist(data / "FashionMNIST" / "raw", n_train=400, n_test=50)
    write_fake_cifar(data, per_batch=80, n_test=40)
    base = compose(f"experiment={name}")
    tiny = ["rounds=2", "eval_every=1", "client.local_steps=2", "partition.num_clients=10"]
    if base.dataset.name == "fmnist":
        tiny.append("dataset.system_dirs=[]")  # the files written here, not the system's
    if base.partition.name == "classes_per_client":
        tiny.append("partition.max_per_client=0")
    if base.dataset.name == "synthetic":
        tiny = ["rounds=2", "eval_every=1", "client.local_steps=2", "dataset.num_users=10"]
    if "clients_per_round" in str(base.where_supported) or "clients_per_round" in base.participation.selection:
        tiny.append("participation.selection.clients_per_round=4")
    if base.algo.name == "amplified_fedavg":
        tiny.append("algo_settings.amplified_fedavg.warmup_rounds=1")
    sim = make_sim(compose(f"experiment={name}", *tiny), tmp_path, data)
    sim.initialize()
    before = sim.x.clone()
    for t in range(2):
        sim.round(t)
    assert torch.isfinite(sim.x).all() and not torch.equal(before, sim.x)
    check_evaluation(sim)
