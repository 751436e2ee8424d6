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
    """The overrides of each job the preset's "Compare:" comment sweeps (one value list per key; fedbench-tune's
    ``--algos a,b`` as ``algo=a,b``)."""
    text = (CONF_DIR / "experiment" / f"{name}.yaml").read_text()
    jobs = []
    for key, values in re.findall(r"(algo|participation/selection|--algos)[= ]([\w.,]+)", text.split("Compare")[-1]):
        jobs += [f"{key.replace('--algos', 'algo')}={v}" for v in values.split(",")]
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


MIMIC = {algo: ("uniform", "normalized") for algo in ("fedavg", "fedprox", "scaffold", "mimic")}
FEDSRC = {**{sel: ("samples", "unbiased") for sel in ("uniform", "md", "fedsrc_g", "fedsrc_d", "fedsrc_g_oracle",
                                                      "fedsrc_d_oracle")},
          "power_of_choice": ("uniform", "normalized")}
PAPER_WEIGHTS = [  # (preset, the group its comparison sweeps, {option: (weighting, aggregation) as its paper uses})
    *[(p, "algo", MIMIC) for p in ("mimic_fmnist_roundrobin", "mimic_fmnist_roundrobin_small",
                                    "mimic_fmnist_timevarying", "mimic_fmnist_timevarying_small",
                                    "mimic_cifar10_static", "mimic_cifar10_static_small")],
    *[(p, "participation/selection", FEDSRC) for p in ("fedsrc_synthetic", "fedsrc_synthetic_small")],
    *[(p, "participation/selection", {k: v for k, v in FEDSRC.items() if "oracle" not in k})
      for p in ("fedsrc_fmnist", "fedsrc_cifar10")],
]


@pytest.mark.parametrize("preset, group, expected", PAPER_WEIGHTS, ids=[p for p, _, _ in PAPER_WEIGHTS])
def test_each_compared_method_is_weighted_as_its_paper_does(preset, group, expected):
    for option, (weighting, aggregation) in expected.items():
        algo = compose(f"experiment={preset}", f"{group}={option}").algo
        assert (algo.weighting.value, algo.aggregation.value) == (weighting, aggregation), option
    # the command line still wins over the preset's paper weighting
    first = next(iter(expected))
    assert compose(f"experiment={preset}", f"{group}={first}", "algo.aggregation=unbiased",
                   "algo.weighting=samples").algo.aggregation.value == "unbiased"


def test_when_settings_apply_only_under_their_condition_and_typos_are_errors():
    from omegaconf import OmegaConf

    from fedbench.config.presets import apply_presets
    from fedbench.errors import ConfigError

    def with_when(selection, when, explicit=()):
        cfg = compose("experiment=smoke", f"participation/selection={selection}")  # as a preset file would set it
        OmegaConf.update(cfg, "when", when, merge=False)
        return apply_presets(cfg, set(explicit))

    half = {"participation.selection.kind=uniform": {"algo.server_lr": 0.5}}
    assert with_when("uniform", half).algo.server_lr == 0.5
    assert with_when("md", half).algo.server_lr == 1.0  # condition false: untouched
    assert with_when("uniform", half, {"algo.server_lr"}).algo.server_lr == 1.0  # the command line wins
    for bad in ({"participation.selection.kindd=uniform": {"algo.server_lr": 0.5}},
                {"participation.selection.kind=uniform": {"algo.server_lrr": 0.5}},
                {"nocondition": {"algo.server_lr": 0.5}}):
        with pytest.raises(ConfigError, match="when"):
            with_when("uniform", bad)


@pytest.mark.parametrize("preset", ["gradma_cifar10_dir0.01", "gradma_cifar10_dir0.01_small"])
def test_the_gradma_preset_uses_the_per_tensor_qps_its_published_numbers_come_from(preset):
    for algo in ("gradma", "gradma_w", "gradma_s"):
        assert compose(f"experiment={preset}", f"algo={algo}").algo.qp_mode.value == "layer"
    assert compose("algo=gradma").algo.qp_mode.value == "flat"  # the paper's QP stays the default
