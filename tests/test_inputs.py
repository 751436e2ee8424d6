"""Hardened inputs: generated bad overrides across every group each end in one ``fedbench: error:`` paragraph that
names the key, exit status non-zero, no traceback and no output directory that looks like a successful run; a list
of valid-but-unusual overrides runs. The CLI is driven in-process (``fedbench.cli.main``), as run.py does."""

import dataclasses
import json

import numpy as np
from omegaconf import OmegaConf
import pytest

from conftest import call, compose

from fedbench.algorithms import ALGORITHMS
from fedbench.config import schema
from fedbench.data.partition import PARTITIONERS
from fedbench.data.sources import DATASETS
from fedbench.errors import ConfigError
from fedbench.models import MODELS
from fedbench.config.launchers import RULES, cores
from fedbench.options import declared_rules
from fedbench.participation import LAYERS

SMOKE = ["experiment=smoke", "logger=none", "rounds=2", "eval_every=1"]


def declared():
    """(the group choices under which the key exists, dotted key, rule, is a list) of every option declared with a
    range (``fedbench.options.option``), each key once."""
    from fedbench.training.schedule import LRScheduleConfig

    places = [([], "", schema.RootConfig), ([], "client.", schema.ClientConfig),
              ([], "client.lr_schedule.", LRScheduleConfig), ([], "data.", schema.DataConfig),
              ([], "engine.", schema.EngineConfig), ([], "participation.", schema.ParticipationConfig)]
    for group, registry in (("algo", ALGORITHMS), ("dataset", DATASETS), ("partition", PARTITIONERS),
                            ("model", MODELS)):
        for name, component in registry.items():
            extra = ["model=logreg"] if group == "dataset" else []
            places.append(([f"{group}={name}", *extra], f"{group}.", component.Config))
    for layer, registry in LAYERS.items():
        for name, cls in registry.items():
            places.append(([f"participation/{layer}={name}"], f"participation.{layer}.", cls.Config))
    seen = set()
    for ctx, prefix, cls in places:
        types = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        for name, rule in declared_rules(cls):
            key = prefix + name
            if key not in seen and (rule.low is not None or rule.high is not None):
                seen.add(key)
                yield ctx, key, rule, types[name].startswith("List")


def _value(v, is_list):
    return f"[{v}]" if is_list else str(v)


def generated_bad():
    """(overrides, the key the message must name): out-of-range, non-finite and wrongly typed values of every key
    with a range rule, negative values of unruled numbers, unknown keys and options in every group, deletions,
    '+' additions, special keys, bad interpolations."""
    cases = []
    for i, (ctx, key, rule, is_list) in enumerate(declared()):
        if rule.low is not None:
            cases.append(([*ctx, f"{key}={_value(rule.low - 1 if rule.ge is not None else rule.low, is_list)}"], key))
        if rule.high is not None:
            cases.append(([*ctx, f"{key}={_value(rule.high + 1 if rule.le is not None else rule.high, is_list)}"],
                          key))
        if i % 4 == 0:  # non-finite values: a quarter of the keys (one rule checks them all)
            cases.append(([*ctx, f"{key}={_value('nan', is_list)}"], key))
    for ctx, key in (([], "client.weight_decay"), ([], "client.grad_noise"), (["partition=dirichlet"],
                     "partition.min_samples"), (["partition=dirichlet"], "partition.seed_samples"),
                     ([], "engine.num_threads"), ([], "participation.min_available"), (["algo=fedprox"], "algo.mu"),
                     (["algo=feddyn"], "algo.alpha"), (["algo=fedamd"], "algo.anchor_batch"),
                     (["algo=gradma"], "algo.rho_l")):
        cases.append(([*ctx, f"{key}=-0.5"], key))
    for ctx, key in (([], "client.lr"), ([], "algo.server_lr"), (["algo=amplified_fedavg"], "algo.eta"),
                     ([], "client.grad_noise")):
        cases.append(([*ctx, f"{key}=inf"], key))
    for key in ("rounds", "client.batch_size", "seed", "client.lr"):
        cases.append(([f"{key}=abc"], key))
    for group in ("algo", "dataset", "model", "partition", "participation", "engine", "logger", "experiment",
                  "participation/availability", "participation/selection", "participation/dropout"):
        cases.append(([f"{group}=nosuch"], group))
    for key in ("client.lrr", "algo.server_lrr", "partition.alphaa", "engine.devices", "participation.foo",
                "dataset.nme"):
        cases.append(([f"{key}=1"], key.rsplit(".", 1)[1]))
    for key in ("anything", "algo.extra", "client.new_key"):
        cases.append(([f"+{key}=1"], key))
    cases.append((["++client.lrr=3"], "lrr"))
    # a preset table's entries are added with '+' and checked as a preset's: an unknown algorithm or option, or
    # an entry set without the '+' (the error gives the '+' form)
    cases += [(["+algo_settings.fedavgg.server_lr=2"], "algo_settings.fedavgg"),
              (["+algo_settings.fedamd.nosuch=1"], "algo_settings.fedamd.nosuch"),
              (["algo_settings.fedamd.p=0.9"], "+algo_settings.fedamd.p=0.9")]
    for key in ("seed", "client.lr", "algo", "rounds"):
        cases.append(([f"~{key}"], key))
    for key in ("algo._target_", "_target_", "model._args_", "hydra.launcher._target_"):
        cases.append(([f"+{key}=os.system"], key))
    cases += [
        (["seed=${nosuch}"], "nosuch"),
        (["algo.weighting=heavy"], "algo.weighting"),
        (["engine.client_runner=warp"], "engine.client_runner"),
        (["engine.device=tpu"], "engine.device"),
        (["engine.device=cuda:7"], "engine.device"),
        (["engine.device=mps"], "engine.device"),
        (["engine.precision=fp16"], "engine.precision"),
        (["engine.precision=tf32"], "engine.precision"),  # a CUDA mode on a CPU run
        (["engine.memory_format=nchw"], "engine.memory_format"),
        (["engine.workers=-2"], "engine.workers"),
        (["engine.workers=2", "algo=gradma"], "engine.workers"),
        (["engine.workers=2", "engine.client_runner=lightning"], "engine.workers"),
        (["participation=dropout", "participation.dropout.prob=1"], "participation"),
        (["participation.selection.clients_per_round=50"], "participation.selection.clients_per_round"),
        (["targets=[1.5]"], "targets"),
        (["loss_targets=[0.5]"], "loss_targets"),
        (["top_k=[0]"], "top_k"),
        (["hydra.run.dir=/proc/fedbench"], "hydra.run.dir"),
        (["engine.client_state=memmap", "algo=mifa", "engine.client_state_dir=/proc/x"], "engine.client_state_dir"),
        (["resume=/nonexistent/run"], "resume"),
        (["model=lenet5"], "model"),  # 5x5 convolutions on 8x8 digits
        (["dataset=synthetic", "model=resnet20"], "model"),  # a CNN on 60-dimensional vectors
        (["partition.num_clients=2000"], "partition"),  # more clients than samples
        (["algo=gradma", "algo.memory_size=2"], "algo.memory_size"),  # S = 5 updates a round, m = 2 entries
        (["engine.workers=5", "participation.selection.clients_per_round=3"], "engine.workers"),  # idle workers
        ([f"engine.workers={cores() + 1}", "participation.selection.clients_per_round=20"], "engine.workers"),
        ([f"engine.num_threads={cores() + 1}"], "engine.num_threads"),
        (["logger.project=team/project"], "logger.project"),
        (["logger.entity=a b"], "logger.entity"),
        ([f"logger.tags=[{'t' * 65}]"], "logger.tags[0]"),
        (["hydra/launcher=joblib", "hydra.launcher.n_jobs=0"], "hydra.launcher.n_jobs"),
        (["hydra/launcher=joblib", f"hydra.launcher.n_jobs={cores() + 1}"], "hydra.launcher.n_jobs"),
        (["hydra/launcher=joblib", f"hydra.launcher.n_jobs=-{cores() + 1}"], "hydra.launcher.n_jobs"),
        (["hydra/launcher=joblib", "hydra.launcher.verbose=-1"], "hydra.launcher.verbose"),
        (["hydra/launcher=slurm", "hydra.launcher.signal_delay_s=100000"], "hydra.launcher.signal_delay_s"),
        (["hydra/launcher=ray", "hydra.launcher.ray.remote.num_cpus=100000"], "hydra.launcher.ray.remote.num_cpus"),
        (["hydra/launcher=ray", "hydra.launcher.ray.remote.num_gpus=100000"], "hydra.launcher.ray.remote.num_gpus"),
        (["hydra/launcher=submitit_local", "hydra.launcher.gpus_per_node=100000"], "hydra.launcher.gpus_per_node"),
    ]
    return cases + launcher_bad()


def launcher_bad():
    """A value outside every rule of ``fedbench.config.launchers.RULES``, for each launcher's options."""
    from fedbench.cli import _compose

    option = {"JoblibLauncher": "joblib", "RayLauncher": "ray", "SlurmLauncher": "slurm",
              "LocalLauncher": "submitit_local"}
    cases = []
    for kind, rules in RULES.items():
        ctx = [f"hydra/launcher={option[kind]}"]
        node = _compose([*SMOKE, *ctx], hydra_node=True).hydra.launcher
        for key, rule in rules.items():
            if OmegaConf.select(node, key, default="absent") == "absent":
                continue  # not in this preset (the plugin's key exists, fedbench's yaml leaves it out)
            full = f"hydra.launcher.{key}"
            if rule.choices:
                cases.append(([*ctx, f"{full}=nosuch"], full))
            elif rule.pattern is not None:
                cases.append(([*ctx, f"{full}=sharedmem-or-__import__"], full))
            if rule.low is not None:
                cases.append(([*ctx, f"{full}={rule.low - 1 if rule.ge is not None else rule.low}"], full))
            if rule.high is not None:
                cases.append(([*ctx, f"{full}={rule.high + 1 if rule.le is not None else rule.high}"], full))
    return cases


BAD = generated_bad()


def test_at_least_eighty_generated_bad_overrides():
    assert len(BAD) >= 80, len(BAD)


@pytest.mark.parametrize("overrides, key", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_override_one_paragraph_naming_the_key(tmp_path, overrides, key):
    base = [o for o in SMOKE if not any(o.split("=")[0] == x.split("=")[0].lstrip("+~") for x in overrides)]
    code, out, job = call([*base, *overrides], tmp_path)
    assert code not in (0, None), out
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("fedbench: error:")]
    assert len(errors) == 1 and "Fix:" in errors[0], out
    assert key in errors[0], out
    if (job / "summary.json").exists():
        assert json.loads((job / "summary.json").read_text())["status"] == "failed"


UNUSUAL = [
    ["client.batch_size=100000"],  # clipped to each client's data, with a warning
    ["participation.selection.clients_per_round=20"],  # S = N
    ["rounds=1", "eval_every=7"],
    ["seed=4294967295", "data.seed=0"],
    ["client.lr=1e-9", "divergence_factor=null"],
    ["checkpoint_every=0", "checkpoint_keep=1"],
    ["participation=bernoulli", "participation.availability.prob=0.02", "participation.first_round_full=false"],
    ["participation=full"],  # the preset's S does not apply to selection=all
    ["algo=amplified_fedavg", "algo.period=1"],
    ["participation.availability.kind=always"],
    ["data.cache=false", "engine.num_threads=1"],
    ["++client.lr=0.2"],
    ["engine.workers=1", "engine.memory_format=channels_last"],  # one worker = in-process; NHWC without convolutions
]


@pytest.mark.parametrize("overrides", UNUSUAL, ids=[" ".join(o) for o in UNUSUAL])
def test_valid_but_unusual_overrides_run(tmp_path, overrides):
    code, out, job = call([*SMOKE, *overrides], tmp_path)
    assert code in (0, None), out
    assert json.loads((job / "summary.json").read_text())["status"] == "completed"


def test_a_command_line_adds_per_algorithm_settings_to_a_preset(tmp_path):
    """``+algo_settings.<algorithm>.<key>`` applies to that algorithm only, as a preset's own entry would."""
    extra = "+algo_settings.fedavgm.server_momentum=0.5"
    code, out, job = call([*SMOKE, "algo=fedavgm", extra], tmp_path)
    assert code in (0, None), out
    assert OmegaConf.load(job / "config.yaml").algo.server_momentum == 0.5
    code, out, job = call([*SMOKE, "algo=fedavg", extra], tmp_path, "other")
    assert code in (0, None), out
    assert OmegaConf.load(job / "config.yaml").algo.server_momentum == 0.9  # not fedavgm: its default


def test_presets_compose_with_sweeps_over_algorithms_and_selections():
    cfg = compose("experiment=wang22_fmnist_periodic", "algo=fedavg")
    assert cfg.algo.name == "fedavg" and "eta" not in cfg.algo
    amp = compose("experiment=wang22_fmnist_periodic")
    assert (amp.algo.eta, amp.algo.period, amp.algo.warmup_rounds) == (10.0, 500, 2000)
    assert compose("experiment=wang22_fmnist_periodic", "algo.period=7").algo.period == 7  # the command line wins
    assert compose("experiment=smoke").participation.selection.clients_per_round == 5
    assert compose("experiment=smoke", "participation.selection.clients_per_round=3") \
        .participation.selection.clients_per_round == 3
    assert compose("experiment=smoke", "participation=full").participation.selection.kind == "all"
    for name, cls in ALGORITHMS.items():  # one sweep can set the common keys for every algorithm
        assert {"weighting", "aggregation", "server_lr"} <= {f.name for f in dataclasses.fields(cls.Config)}, name


@pytest.mark.parametrize("overrides, key", [
    (["++algo_settings.fedavgg.server_lr=2"], "algo_settings.fedavgg"),
    (["++algo_settings.fedavg.eta=2"], "algo_settings.fedavg.eta"),
    (["++where_supported.participation.selection.clients_per_rnd=2"], "clients_per_rnd"),
    (["++where_supported.clientt.lr=2"], "clientt"),
])
def test_preset_settings_typos_are_errors(overrides, key):
    """(As a preset would set them; ``++`` stands in for a preset file here.)"""
    with pytest.raises(ConfigError, match=key):
        compose(*SMOKE, *overrides)


def test_preset_algo_settings_apply_only_to_their_algorithm():
    extra = "++algo_settings.fedavgm.server_momentum=0.5"
    assert compose(*SMOKE, "algo=fedavgm", extra).algo.server_momentum == 0.5
    assert compose(*SMOKE, "algo=fedavgm", extra, "algo.server_momentum=0.7").algo.server_momentum == 0.7
    assert compose(*SMOKE, "algo=fedavg", extra).algo.server_momentum == 0.9  # the default: not fedavgm's setting


def test_corrupted_partition_cache_is_detected_and_rebuilt(tmp_path, capsys):
    from fedbench.data import build_federated

    cfg = compose(*SMOKE)
    root = tmp_path / "data"
    first = build_federated(cfg.dataset, cfg.partition, root, 0, True)
    cache = next((root / "cache" / "partitions").glob("*.npz"))
    with np.load(cache) as z:
        arrays = dict(z)
    arrays["owner"] = np.roll(arrays["owner"], 1)  # a tampered cache: valid file, wrong contents
    np.savez(cache, **arrays)
    second = build_federated(cfg.dataset, cfg.partition, root, 0, True)
    assert "do not match their stored hash" in capsys.readouterr().out
    assert np.array_equal(second.sizes, first.sizes) and np.array_equal(second.y.numpy(), first.y.numpy())
    cache.write_bytes(b"garbage")
    third = build_federated(cfg.dataset, cfg.partition, root, 0, True)
    assert "unreadable" in capsys.readouterr().out and np.array_equal(third.y.numpy(), first.y.numpy())


@pytest.mark.parametrize("content, suffix", [(b"", ".csv"), (b"\x00\x01garbage\xff", ".npy"), (b"1,0\n1\n", ".csv"),
                                            (b"a,b\n", ".txt"), (b"PK\x03\x04zip", ".npy")])
def test_disguised_or_broken_trace_files_are_refused(tmp_path, content, suffix):
    path = tmp_path / f"trace{suffix}"
    path.write_bytes(content)
    code, out, _ = call([*SMOKE, "participation=trace", f"participation.availability.path={path}"], tmp_path)
    assert code == 2 and "participation.availability.path" in out and "Traceback" not in out, out


def test_trace_file_of_any_extension_with_valid_content_runs(tmp_path):
    path = tmp_path / "trace.dat"
    np.save(tmp_path / "t.npy", (np.arange(20 * 20).reshape(20, 20) % 3 == 0).astype(np.int8))
    (tmp_path / "t.npy").rename(path)
    code, out, job = call([*SMOKE, "participation=trace", f"participation.availability.path={path}"], tmp_path)
    assert code in (0, None), out


def test_appending_a_default_group_means_choosing_it(tmp_path):
    code, out, job = call(["+experiment=smoke", "logger=none", "rounds=2", "eval_every=1"], tmp_path)
    assert code == 0, out
    assert json.loads((job / "summary.json").read_text())["status"] == "completed"
