"""Shared fixtures and helpers of the test suite (no test module imports another)."""

import contextlib
import csv
import importlib.util
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedbench.cli import _compose  # noqa: E402
from fedbench.checkpoint import Checkpointer  # noqa: E402
from fedbench.config import register_configs  # noqa: E402
from fedbench.data.idx import write_idx  # noqa: E402
from fedbench.engine.simulation import RunControl, Simulation  # noqa: E402
from fedbench.logging import RunLogger  # noqa: E402
from fedbench.logging.run_logger import plain_config  # noqa: E402

register_configs()


def script(name: str):
    """``scripts/<name>.py`` as a module (once per session: both test files that read it get the same one)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def call(args, tmp_path: Path, name: str = "job"):
    """Run ``run.py args`` in-process (in ``tmp_path / name`` unless ``args`` set ``hydra.run.dir``); return (exit
    code, stdout + stderr, the job directory)."""
    from fedbench import cli

    job = tmp_path / name
    own = [] if any(a.startswith("hydra.run.dir=") for a in args) else [f"hydra.run.dir={job}"]
    sys.argv = ["run.py", *args, *own, f"data.root={tmp_path / 'data'}"]
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
        try:
            cli.main()
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), job


def option(registry, name: str, **values):
    """The config of component ``name`` of ``registry`` (a partition, model, dataset) with ``values`` set, as a
    run composes it."""
    from omegaconf import OmegaConf

    return OmegaConf.merge(OmegaConf.structured(registry.config(name)), values)


def compose(*overrides: str):
    """The composed config for ``overrides`` (as run.py would see it), with local-files-only logging."""
    return _compose(["logger=none", *overrides])


TINY = ("dataset=digits", "partition=iid", "partition.num_clients=10", "model=logreg", "rounds=4", "eval_every=2",
        "participation.selection.clients_per_round=4", "client.lr=0.1")


@pytest.fixture
def tiny_cfg():
    def make(*overrides):
        base = TINY
        if any(o.startswith("participation=") for o in overrides):  # presets bring their own selection
            base = tuple(o for o in TINY if not o.startswith("participation."))
        return compose(*base, *overrides)

    return make


def make_sim(cfg, tmp_path: Path, root: Path = None) -> Simulation:
    return Simulation(cfg, tmp_path / "run", root or tmp_path / "data")


def trained_sim(cfg, tmp_path: Path, root: Path = None) -> Simulation:
    """A simulation after its initialization and ``cfg.rounds`` rounds (no evaluation, no logging)."""
    sim = make_sim(cfg, tmp_path, root)
    sim.init_cost = sim.initialize()
    for t in range(cfg.rounds):
        sim.round(t)
    return sim


def write_fake_mnist(folder: Path, n_train=60, n_test=20, gz=True, seed=0) -> dict:
    """Write the four IDX files of an MNIST-layout dataset with random 28x28 images; return the arrays."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    for name, arr in arrays.items():
        write_idx(folder / (name + (".gz" if gz else "")), arr)
    return arrays


def write_fake_emnist(root: Path, split: str, n_train=300, n_test=40, classes=10, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    d = root / "EMNIST" / "raw"
    d.mkdir(parents=True, exist_ok=True)
    arrays = {
        f"emnist-{split}-train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        f"emnist-{split}-train-labels-idx1-ubyte": (np.arange(n_train) % classes).astype(np.uint8),
        f"emnist-{split}-test-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        f"emnist-{split}-test-labels-idx1-ubyte": (np.arange(n_test) % classes).astype(np.uint8),
    }
    for name, arr in arrays.items():
        write_idx(d / (name + ".gz"), arr)
    return arrays


def write_fake_cifar(root: Path, hundred=False, per_batch=60, n_test=40, seed=0) -> None:
    import pickle

    rng = np.random.default_rng(seed)
    classes = 100 if hundred else 10
    folder = root / ("cifar-100-python" if hundred else "cifar-10-batches-py")
    folder.mkdir(parents=True, exist_ok=True)
    key = b"fine_labels" if hundred else b"labels"
    names = ["train"] if hundred else [f"data_batch_{i}" for i in range(1, 6)]
    sizes = [per_batch * 5] if hundred else [per_batch] * 5
    for name, n in [*zip(names, sizes), ("test" if hundred else "test_batch", n_test)]:
        blob = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), key: list(np.arange(n) % classes)}
        (folder / name).write_bytes(pickle.dumps(blob))


def write_fake_svhn(root: Path, n_train=300, n_test=40, seed=0) -> None:
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    (root / "svhn").mkdir(parents=True, exist_ok=True)
    for name, n in (("train_32x32.mat", n_train), ("test_32x32.mat", n_test)):
        savemat(str(root / "svhn" / name), {"X": rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8),
                                             "y": (np.arange(n) % 10 + 1).reshape(-1, 1).astype(np.uint8)})


def write_fake_tiny_imagenet(root: Path, classes=4, per_class=30, original=True, seed=0) -> None:
    from PIL import Image

    rng = np.random.default_rng(seed)
    wnids = [f"n{i:08d}" for i in range(classes)]

    def img(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path)

    if original:
        base = root / "tiny-imagenet-200"
        lines = []
        for w in wnids:
            for j in range(per_class):
                img(base / "train" / w / "images" / f"{w}_{j}.JPEG")
            for j in range(3):
                img(base / "val" / "images" / f"val_{w}_{j}.JPEG")
                lines.append(f"val_{w}_{j}.JPEG\t{w}\t0\t0\t63\t63")
        (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    else:
        base = root / "tiny_imagenet"
        for w in wnids:
            for split, n in (("train", per_class), ("val", 3)):
                for j in range(n):
                    img(base / split / w / f"{j}.png")


def write_fake_leaf_femnist(root: Path, writers=6, per_writer=20, seed=0) -> None:
    import json

    rng = np.random.default_rng(seed)
    for split, n in (("train", per_writer), ("test", 4)):
        d = root / "femnist" / "data" / split
        d.mkdir(parents=True, exist_ok=True)
        users = [f"f{i:04d}" for i in range(writers)]
        blob = {"users": users, "num_samples": [n] * writers, "user_data": {
            u: {"x": rng.random((n, 784)).round(3).tolist(), "y": rng.integers(0, 62, n).tolist()} for u in users}}
        (d / "all_data_0.json").write_text(json.dumps(blob))


def write_fake_dataset(name: str, root: Path) -> None:
    """Tiny files in the dataset's real on-disk format."""
    if name in ("mnist", "fmnist"):
        write_fake_mnist(root / ("MNIST" if name == "mnist" else "FashionMNIST") / "raw", n_train=300, n_test=40)
    elif name == "emnist_digits":
        write_fake_emnist(root, "digits")
    elif name == "emnist_balanced":
        write_fake_leaf_femnist(root)
    elif name in ("cifar10", "cifar100"):
        write_fake_cifar(root, hundred=name == "cifar100")
    elif name == "svhn":
        write_fake_svhn(root)
    elif name == "tiny_imagenet":
        write_fake_tiny_imagenet(root)


def participation_trace(sim: Simulation, rounds: int) -> list:
    """The first ``rounds`` draws of ``sim``'s participation process, from a fresh copy (the same streams)."""
    from fedbench.participation import LayerContext, ParticipationProcess

    cfg, data = sim.cfg, sim.data
    process = ParticipationProcess(cfg.participation, LayerContext(
        data.num_clients, cfg.seed, cfg.rounds, cfg.client.local_steps, data.sizes, data.attrs))
    return [process.round(t) for t in range(rounds)]


R = 4
BASE = (*[o for o in TINY if not o.startswith("rounds=")], f"rounds={2 * R}", "eval_every=2", "logger=csv",
        "checkpoint_every=1")


def csv_rows(path):
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_time"} for r in csv.DictReader(f)]


def run_resumable(cfg, run_dir, data, stop_at=None, resume=False):
    """Run ``cfg`` in ``run_dir`` (continuing its latest checkpoint when ``resume``); stop after ``stop_at``."""
    sim = Simulation(cfg, run_dir, data, resume=resume)
    ckpt = None
    if resume:
        _, ckpt = Checkpointer(run_dir).latest()
        sim.load_state_dict(ckpt)
    logger = RunLogger(run_dir, cfg, resume_round=None if ckpt is None else ckpt["round"])
    stop = (lambda: "SIGTERM" if sim.next_round == stop_at else None) if stop_at else (lambda: None)
    summary = sim.run(logger, RunControl(Checkpointer(run_dir, cfg.checkpoint_keep),
                                         json.dumps(plain_config(cfg)), stop))
    logger.write_summary(summary)
    logger.finish()
    return sim, summary


def check_evaluation(sim):
    """``sim.evaluate()`` against the global model's cross-entropy and accuracy on the test set computed here."""
    loss, acc = sim.evaluate()
    sim.trainer.runner.load(sim.x, sim.buffers)
    sim.module.eval()
    with torch.no_grad():
        logits = torch.cat([sim.module(xb) for xb in sim.data.x_test.split(256)])
    y = sim.data.y_test
    assert acc == float((logits.argmax(1) == y).sum()) / len(y)
    assert loss == pytest.approx(float(F.cross_entropy(logits, y)), rel=1e-5)
    return loss, acc


ROUNDS = [10, 20, 30, 40]  # the evaluations of a fake run


def write_fake_run(folder, algo, seed, acc, status="completed", reason=None, error=None, lr=0.1, global_loss=None,
                   config=None, val=None):
    """A run directory as fedbench writes it (config.yaml, metrics.csv at ROUNDS, rounds.csv, summary.json), or
    one that failed with ``error``: for the report's tests. ``global_loss``: a global_train_loss column (a run with
    ``engine.eval_train``); ``config``: more top-level config keys; ``val``: a val_acc column (a validation split)."""
    folder.mkdir(parents=True)
    config = {"seed": seed, "rounds": 40, "targets": [0.5, 0.7], "algo": {"name": algo, "kind": algo, "mu": 0.1 if algo ==
              "fedprox" else None}, "client": {"lr": lr}, "logger": {"wandb": False},
              "data": {"root": f"/somewhere/{seed}"}, "participation": {"name": "markov"}, **(config or {})}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    if error:
        (folder / "error.log").write_text(f"Traceback ...\n{error}\n")
        return
    with open(folder / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "test_acc", "test_loss", "train_loss", "wall_time", "grad_evals", "floats_up",
                    "floats_down"] + (["global_train_loss"] if global_loss else []) + (["val_acc"] if val else []))
        for i, (r, a) in enumerate(zip(ROUNDS, acc)):
            w.writerow([r, a, 2 - a, 2.1 - a, 1.5 * r, 160 * r, 1000 * r, 1000 * r]
                       + ([global_loss[i]] if global_loss else []) + ([val[i]] if val else []))
    with open(folder / "rounds.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "available", "selected", "completed", "train_loss"])
        for r in range(1, 41):
            w.writerow([r, 20 + seed, 10, 9 + (r % 2), 1.0])
    (folder / "summary.json").write_text(json.dumps({"status": status, "reason": reason, "wall_time": 60.0 + seed}))


def write_fake_sweep(root, runs, **common):
    """A sweep of ``write_fake_run``s under ``root/0``, ``root/1``, ...: ``runs`` maps each algorithm to its seeds'
    test-accuracy curves (seed 0 first), each a list, or a dict of ``write_fake_run``'s arguments with ``acc``;
    ``common``: arguments for every run."""
    k = 0
    for algo, seeds in runs.items():
        for seed, run in enumerate(seeds):
            args = run if isinstance(run, dict) else {"acc": run}
            write_fake_run(root / str(k), algo, seed, **{**common, **args})
            k += 1
