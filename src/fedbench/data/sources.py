"""Centralized datasets as in-memory tensors, before partitioning.

Each loader is registered in ``DATASETS`` with its Config beside it and returns a ``CentralData`` with float32 inputs
already normalized and int64 labels. File-based datasets look in ``data.root`` (and in ``dataset.system_dirs``, e.g.
Debian's ``/usr/share/datasets/fashion-mnist``), download only when ``dataset.download=true``, and otherwise fail
with a message naming the files and where to put them.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch
from omegaconf import MISSING

from fedbench.data.idx import read_idx
from fedbench.errors import DataUnavailableError, require
from fedbench.options import option
from fedbench.registry import Registry
from fedbench.rng import numpy_rng

MNIST_STATS = ((0.1307,), (0.3081,))
DATASETS = Registry("dataset")


class Normalization(Enum):
    own = "own"  # per-channel mean/std of the dataset's own training split (computed when loaded)
    mnist = "mnist"  # MNIST statistics (0.1307, 0.3081), as several papers did for FashionMNIST
    custom = "custom"  # the config's mean / std lists
    none = "none"


class Augment(Enum):
    none = "none"
    per_sample = "per_sample"  # random crop (zero padding 4) + horizontal flip, drawn per image
    batch_level = "batch_level"  # one crop offset and one flip per minibatch (Wang & Ji's code, torchvision 0.8)


@dataclass
class DatasetConfig:
    """The options of every dataset: how its inputs are normalized."""

    name: str = MISSING
    normalize: Normalization = Normalization.own
    mean: List[float] = field(default_factory=list)  # normalize=custom: one per channel
    std: List[float] = option(factory=list, gt=0)


@dataclass
class ImageConfig(DatasetConfig):
    """A dataset read from files (MNIST, FashionMNIST, CIFAR, SVHN, Tiny-ImageNet)."""

    download: bool = False
    augment: Augment = Augment.none  # train-time augmentation (CIFAR / SVHN / Tiny-ImageNet)
    system_dirs: List[str] = field(default_factory=list)  # read-only places searched after data.root


@dataclass
class EMNISTConfig(ImageConfig):
    writer_split: bool = False  # LEAF FEMNIST's per-writer split (its JSON files under <data.root>/femnist)


@dataclass
class DigitsConfig(DatasetConfig):
    test_fraction: float = option(0.2, gt=0, lt=1)


@dataclass
class SyntheticConfig(DatasetConfig):
    """LEAF / FedProx Synthetic(alpha, beta) (Li et al., 2020, Sec. 5.1)."""

    normalize: Normalization = Normalization.none
    alpha: float = 1.0
    beta: float = 1.0
    iid: bool = False  # Synthetic-IID: one shared model and input distribution
    dim: int = option(60, ge=1)
    num_classes: int = option(10, ge=2)
    num_users: int = option(30, ge=1)
    size_lognormal_mean: float = option(4.0, signed=True)
    size_lognormal_sigma: float = 2.0
    min_samples: int = option(50, ge=1)
    test_fraction: float = option(0.2, gt=0, lt=1)


@dataclass
class CentralData:
    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    #: per-sample client id of a natural split (LEAF-style), or None
    natural_clients: Optional[np.ndarray] = None
    #: value of a zero (black) input pixel after normalization, per channel: the padding of random crops
    pad_fill: Optional[torch.Tensor] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def input_shape(self) -> tuple:
        return tuple(self.x_train.shape[1:])


def _mode(cfg) -> str:
    return cfg.normalize.value if hasattr(cfg.normalize, "value") else str(cfg.normalize)


def channel_stats(x: torch.Tensor) -> tuple:
    """Per-channel mean and standard deviation of ``x`` (NCHW, or N x features: one channel), taken on one thread.
    torch splits a large reduction among its threads and the split changes the last bits of the sum, so on the
    process's threads the data would depend on the count a previous job of the process left (a launcher's reused
    worker, a pack) or the launcher's environment (loky's OMP_NUM_THREADS): the same job would not train the same."""
    dims = [0, 2, 3] if x.dim() == 4 else list(range(x.dim()))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return x.mean(dim=dims), x.std(dim=dims)
    finally:
        torch.set_num_threads(threads)


def normalized(name: str, x_train: torch.Tensor, y_train, x_test: torch.Tensor, y_test, num_classes: int, cfg,
               natural_clients=None) -> CentralData:
    """Per-channel normalization: ``own`` uses the training split's mean/std, ``mnist`` (0.1307, 0.3081),
    ``custom`` the config's ``mean``/``std``, ``none`` leaves the inputs as they are."""
    mode = _mode(cfg)
    channels = x_train.shape[1] if x_train.dim() == 4 else 1
    if mode == "own":
        mean, std = channel_stats(x_train)
    elif mode == "mnist":
        mean, std = torch.tensor(MNIST_STATS[0] * channels), torch.tensor(MNIST_STATS[1] * channels)
    elif mode == "custom":
        require(len(cfg.mean) == len(cfg.std) == channels, "dataset.mean",
                f"normalize=custom needs {channels} means and stds, got {len(cfg.mean)} and {len(cfg.std)}.",
                f"give dataset.mean and dataset.std with {channels} values each.")
        mean, std = torch.tensor(list(cfg.mean)), torch.tensor(list(cfg.std))
    else:
        mean, std = torch.zeros(channels), torch.ones(channels)
    shape = (1, -1, 1, 1) if x_train.dim() == 4 else (1, -1)
    mean, std = mean.reshape(shape).float(), std.reshape(shape).float()
    fill = (-mean / std).reshape(-1)
    return CentralData(name, (x_train - mean) / std, y_train, (x_test - mean) / std, y_test, num_classes,
                       natural_clients=natural_clients, pad_fill=fill)


def _to_float(images: np.ndarray) -> torch.Tensor:
    """uint8 images, (N, H, W) or (N, C, H, W), to float32 NCHW in [0, 1]."""
    x = torch.from_numpy(np.ascontiguousarray(images)).float().div_(255.0)
    return x.unsqueeze(1) if x.dim() == 3 else x


def _labels(a) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a).astype(np.int64).reshape(-1))


def _missing(name: str, looked: list, files: str, target: Path, downloadable: bool = True) -> DataUnavailableError:
    how = ", or pass dataset.download=true on a machine with network access" if downloadable else ""
    return DataUnavailableError(
        f"{name} files not found (looked in: {', '.join(str(d) for d in looked)}). "
        f"Fix: place {files} in {target}{how}."
    )


def _download(name: str, target: Path, fetch) -> None:
    try:
        fetch()
    except Exception as exc:  # network errors come in many types
        raise DataUnavailableError(
            f"{name}: download into {target} failed ({exc.__class__.__name__}: {exc}). "
            f"Fix: place the dataset's files in {target} yourself, or retry with network access."
        ) from None


IDX_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}


def _find_files(dirs: list[Path], names: Dict[str, str]) -> Optional[Dict[str, Path]]:
    """The first directory holding every file of ``names`` (each optionally .gz-compressed)."""
    for d in dirs:
        found = {}
        for key, stem in names.items():
            for cand in (d / stem, d / f"{stem}.gz"):
                if cand.is_file():
                    found[key] = cand
                    break
        if len(found) == len(names):
            return found
    return None


def load_idx_dataset(name: str, folder: str, root: Path, cfg, num_classes: int = 10, names=None, fetch=None,
                     transpose: bool = False) -> CentralData:
    """An MNIST-layout dataset of IDX files under ``root/<folder>/raw`` (torchvision's layout), ``root/<folder>``
    or ``dataset.system_dirs``. EMNIST stores images transposed (``transpose=True`` undoes it)."""
    names = names or IDX_FILES
    dirs = [root / folder / "raw", root / folder, *(Path(d) for d in cfg.system_dirs)]
    files = _find_files(dirs, names)
    if files is None and cfg.download and fetch is not None:
        _download(name, root / folder / "raw", fetch)
        files = _find_files(dirs, names)
    if files is None:
        err = _missing(name, dirs, f"the IDX files ({', '.join(names.values())}, optionally .gz)",
                       root / folder / "raw", downloadable=fetch is not None)
        if name == "FashionMNIST":
            err = DataUnavailableError(f"{err.args[0][:-1]}, or install the Debian package dataset-fashion-mnist.")
        raise err
    a = {k: read_idx(p) for k, p in files.items()}
    if transpose:
        a["train_x"], a["test_x"] = a["train_x"].transpose(0, 2, 1), a["test_x"].transpose(0, 2, 1)
    return normalized(name, _to_float(a["train_x"]), _labels(a["train_y"]), _to_float(a["test_x"]),
                      _labels(a["test_y"]), num_classes, cfg)


@DATASETS.register("mnist", config=ImageConfig)
def load_mnist(cfg, root: Path, seed: int) -> CentralData:
    import torchvision

    fetch = lambda: [torchvision.datasets.MNIST(str(root), train=t, download=True) for t in (True, False)]  # noqa: E731
    return load_idx_dataset("MNIST", "MNIST", root, cfg, fetch=fetch)


@DATASETS.register("fmnist", config=ImageConfig, system_dirs=["/usr/share/datasets/fashion-mnist"])  # Debian's
def load_fmnist(cfg, root: Path, seed: int) -> CentralData:
    import torchvision

    fetch = lambda: [torchvision.datasets.FashionMNIST(str(root), train=t, download=True)  # noqa: E731
                     for t in (True, False)]
    return load_idx_dataset("FashionMNIST", "FashionMNIST", root, cfg, fetch=fetch)


def _emnist(split: str, num_classes: int):
    def load(cfg, root: Path, seed: int) -> CentralData:
        if cfg.writer_split:
            return load_leaf_femnist(cfg, root)
        import torchvision

        names = {"train_x": f"emnist-{split}-train-images-idx3-ubyte",
                 "train_y": f"emnist-{split}-train-labels-idx1-ubyte",
                 "test_x": f"emnist-{split}-test-images-idx3-ubyte",
                 "test_y": f"emnist-{split}-test-labels-idx1-ubyte"}
        fetch = lambda: torchvision.datasets.EMNIST(str(root), split=split, download=True)  # noqa: E731
        return load_idx_dataset(f"EMNIST-{split}", "EMNIST", root, cfg, num_classes, names, fetch, transpose=True)

    return load


def load_leaf_femnist(cfg, root: Path) -> CentralData:
    """LEAF's FEMNIST (Caldas et al., 2018): 62 classes, one client per writer. Reads the JSON files of LEAF's
    ``data/train`` and ``data/test`` folders under ``<data.root>/femnist``; the test set is the writers' union."""
    base = root / "femnist" / "data"
    parts = {}
    for split in ("train", "test"):
        files = sorted((base / split).glob("*.json"))
        if not files:
            raise _missing("FEMNIST (LEAF writer split)", [base / split], "LEAF's femnist JSON files",
                           base / split, downloadable=False)
        xs, ys, owner, users = [], [], [], {}
        for f in files:
            blob = json.loads(f.read_text())
            for user in blob["users"]:
                d = blob["user_data"][user]
                uid = users.setdefault(user, len(users))
                xs.append(np.asarray(d["x"], dtype=np.float32).reshape(-1, 1, 28, 28))
                ys.append(np.asarray(d["y"], dtype=np.int64))
                owner.append(np.full(len(d["y"]), uid))
        parts[split] = (np.concatenate(xs), np.concatenate(ys), np.concatenate(owner))
    (xtr, ytr, otr), (xte, yte, _) = parts["train"], parts["test"]
    return normalized("FEMNIST", torch.from_numpy(xtr), torch.from_numpy(ytr), torch.from_numpy(xte),
                      torch.from_numpy(yte), 62, cfg, natural_clients=otr)


def _cifar(name: str, folder: str, train_files: list, test_file: str, label_key: bytes, num_classes: int, tv):
    def load(cfg, root: Path, seed: int) -> CentralData:
        d = root / folder
        paths = [d / f for f in [*train_files, test_file]]
        if not all(p.is_file() for p in paths) and cfg.download:
            import torchvision

            cls = getattr(torchvision.datasets, tv)
            _download(name, root, lambda: cls(str(root), train=True, download=True))
        if not all(p.is_file() for p in paths):
            raise _missing(name, [d], f"the python-pickle batches ({', '.join(train_files + [test_file])})", d)

        def read(files):
            blobs = [pickle.loads((d / f).read_bytes(), encoding="bytes") for f in files]
            x = np.concatenate([b[b"data"] for b in blobs]).reshape(-1, 3, 32, 32)
            y = np.concatenate([np.asarray(b[label_key]) for b in blobs])
            return _to_float(x), _labels(y)

        (xtr, ytr), (xte, yte) = read(train_files), read([test_file])
        return normalized(name, xtr, ytr, xte, yte, num_classes, cfg)

    return load


@DATASETS.register("svhn", config=ImageConfig)
def load_svhn(cfg, root: Path, seed: int) -> CentralData:
    """SVHN cropped digits (``train_32x32.mat``, ``test_32x32.mat``); label 10 stands for digit 0."""
    from scipy.io import loadmat

    dirs = [root / "svhn", root / "SVHN", root]
    names = ("train_32x32.mat", "test_32x32.mat")
    found = next((d for d in dirs if all((d / n).is_file() for n in names)), None)
    if found is None and cfg.download:
        import torchvision

        _download("SVHN", root / "svhn", lambda: [torchvision.datasets.SVHN(str(root / "svhn"), split=s, download=True)
                                                   for s in ("train", "test")])
        found = next((d for d in dirs if all((d / n).is_file() for n in names)), None)
    if found is None:
        raise _missing("SVHN", dirs, "train_32x32.mat and test_32x32.mat", root / "svhn")

    def read(n):
        m = loadmat(str(found / n))
        y = m["y"].astype(np.int64).reshape(-1) % 10
        return _to_float(m["X"].transpose(3, 2, 0, 1)), torch.from_numpy(y)

    (xtr, ytr), (xte, yte) = read(names[0]), read(names[1])
    return normalized("SVHN", xtr, ytr, xte, yte, 10, cfg)


_IMAGE_EXT = {".jpeg", ".jpg", ".png"}


def _read_images(paths: list[Path], size: int) -> np.ndarray:
    from PIL import Image

    out = np.empty((len(paths), 3, size, size), dtype=np.uint8)
    for i, p in enumerate(paths):
        with Image.open(p) as im:
            im = im.convert("RGB")
            if im.size != (size, size):
                im = im.resize((size, size))
            out[i] = np.asarray(im).transpose(2, 0, 1)
    return out


@DATASETS.register("tiny_imagenet", config=ImageConfig, augment=Augment.per_sample)
def load_tiny_imagenet(cfg, root: Path, seed: int) -> CentralData:
    """Tiny-ImageNet (200 classes, 64x64). Either the original ``tiny-imagenet-200`` folder (train/<wnid>/images,
    val/images + val_annotations.txt; the val split is the test set) or an ImageFolder layout
    ``tiny_imagenet/{train,val}/<class>/<image>``."""
    orig, plain = root / "tiny-imagenet-200", root / "tiny_imagenet"
    if (orig / "train").is_dir() and (orig / "val" / "val_annotations.txt").is_file():
        classes = sorted(p.name for p in (orig / "train").iterdir() if p.is_dir())
        train = [(p, c) for c in classes for p in sorted((orig / "train" / c).rglob("*"))
                 if p.suffix.lower() in _IMAGE_EXT]
        ann = [line.split("\t")[:2] for line in (orig / "val" / "val_annotations.txt").read_text().splitlines() if line]
        test = [(orig / "val" / "images" / f, c) for f, c in ann]
    elif (plain / "train").is_dir() and (plain / "val").is_dir():
        classes = sorted(p.name for p in (plain / "train").iterdir() if p.is_dir())
        train, test = ([(p, c) for c in classes for p in sorted((plain / split / c).glob("*"))
                        if p.suffix.lower() in _IMAGE_EXT] for split in ("train", "val"))
    else:
        raise _missing("Tiny-ImageNet", [orig, plain], "the tiny-imagenet-200 folder (or an ImageFolder layout "
                       "tiny_imagenet/train/<class>/*.JPEG and tiny_imagenet/val/<class>/*.JPEG)", root,
                       downloadable=False)
    index = {c: i for i, c in enumerate(classes)}

    def read(items):
        x = _read_images([p for p, _ in items], 64)
        return _to_float(x), torch.tensor([index[c] for _, c in items], dtype=torch.int64)

    (xtr, ytr), (xte, yte) = read(train), read(test)
    return normalized("TinyImageNet", xtr, ytr, xte, yte, len(classes), cfg)


@DATASETS.register("digits", config=DigitsConfig)
def load_digits(cfg, root: Path, seed: int) -> CentralData:
    """scikit-learn's bundled 8x8 digits (1,797 images); a fixed stratification-free split by ``test_fraction``."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    x = torch.from_numpy((d.images / 16.0).astype(np.float32)).unsqueeze(1)
    y = torch.from_numpy(d.target.astype(np.int64))
    perm = numpy_rng(0, "digits/split").permutation(len(y))
    n_test = int(round(cfg.test_fraction * len(y)))
    test, train = perm[:n_test], perm[n_test:]
    return normalized("digits", x[train], y[train], x[test], y[test], 10, cfg)


@DATASETS.register("synthetic", config=SyntheticConfig)
def load_synthetic(cfg, root: Path, seed: int) -> CentralData:
    """Synthetic(alpha, beta) of LEAF / FedProx (Li et al., 2020, Sec. 5.1), a natural per-user split.

    For user k: u_k ~ N(0, alpha), B_k ~ N(0, beta); W_k ~ N(u_k, 1) (dim x classes), b_k ~ N(u_k, 1);
    v_k ~ N(B_k, 1) per coordinate; x ~ N(v_k, Sigma) with Sigma = diag(j^-1.2); y = argmax softmax(W_k^T x + b_k).
    Sizes are log-normal(mean, sigma) + min_samples. ``iid=true`` shares W, b and v across users.
    """
    rng = numpy_rng(seed, "synthetic")
    d, c, n_users = cfg.dim, cfg.num_classes, cfg.num_users
    sizes = rng.lognormal(cfg.size_lognormal_mean, cfg.size_lognormal_sigma, n_users).astype(np.int64)
    sizes = np.minimum(sizes, 10_000) + cfg.min_samples
    cov = np.power(np.arange(1, d + 1, dtype=np.float64), -1.2)
    shared_w, shared_b = rng.normal(0, 1, (d, c)), rng.normal(0, 1, c)
    xs, ys, owners = [], [], []
    for k in range(n_users):
        if cfg.iid:
            w, b, v = shared_w, shared_b, np.zeros(d)
        else:
            u = rng.normal(0, np.sqrt(cfg.alpha))
            big_b = rng.normal(0, np.sqrt(cfg.beta))
            w, b = rng.normal(u, 1, (d, c)), rng.normal(u, 1, c)
            v = rng.normal(big_b, 1, d)
        x = rng.normal(v, np.sqrt(cov), (sizes[k], d))
        y = np.argmax(x @ w + b, axis=1)
        xs.append(x)
        ys.append(y)
        owners.append(np.full(sizes[k], k))
    x_all = np.concatenate(xs).astype(np.float32)
    y_all = np.concatenate(ys).astype(np.int64)
    owner = np.concatenate(owners)
    # per-user train/test split; the test set is the union of the users' held-out parts
    is_test = np.zeros(len(y_all), dtype=bool)
    for k in range(n_users):
        idx = np.flatnonzero(owner == k)
        n_test = int(round(cfg.test_fraction * idx.size))
        is_test[rng.permutation(idx)[:n_test]] = True
    tr, te = ~is_test, is_test
    return normalized("synthetic", torch.from_numpy(x_all[tr]), torch.from_numpy(y_all[tr]),
                      torch.from_numpy(x_all[te]), torch.from_numpy(y_all[te]), c, cfg, natural_clients=owner[tr])


DATASETS.register("emnist_digits", config=EMNISTConfig)(_emnist("digits", 10))
DATASETS.register("emnist_balanced", config=EMNISTConfig)(_emnist("balanced", 47))
DATASETS.register("cifar10", config=ImageConfig, augment=Augment.per_sample)(
    _cifar("CIFAR-10", "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], "test_batch", b"labels", 10,
           "CIFAR10"))
DATASETS.register("cifar100", config=ImageConfig, augment=Augment.per_sample)(
    _cifar("CIFAR-100", "cifar-100-python", ["train"], "test", b"fine_labels", 100, "CIFAR100"))
