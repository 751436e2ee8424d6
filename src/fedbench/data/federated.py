"""The federated dataset: all clients' data as tensors in memory, each client a contiguous slice."""

from __future__ import annotations

import dataclasses

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import torch
from omegaconf import OmegaConf

from fedbench.data.augment import crop_flip
from fedbench.data.partition import PARTITIONERS
from fedbench.data.sources import DATASETS, CentralData
from fedbench.errors import require
from fedbench.rng import numpy_rng


@dataclass
class FederatedData:
    """Training data sorted by client: client i owns rows ``offsets[i]:offsets[i+1]`` of ``x``/``y``."""

    name: str
    x: torch.Tensor
    y: torch.Tensor
    offsets: torch.Tensor  # (N+1,) int64
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    label_hist: np.ndarray  # (N, C) samples per client and label
    attrs: Dict[str, np.ndarray]
    partition_hash: str
    augment: str = "none"  # none | per_sample | batch_level
    pad_fill: Optional[torch.Tensor] = None
    x_val: Optional[torch.Tensor] = None  # the server's validation set (data.val_fraction of the training data)
    y_val: Optional[torch.Tensor] = None

    @property
    def num_clients(self) -> int:
        return len(self.offsets) - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets.numpy())

    @property
    def input_shape(self) -> tuple:
        return tuple(self.x.shape[1:])

    def to(self, device: torch.device) -> "FederatedData":
        for name in ("x", "y", "x_test", "y_test", "x_val", "y_val"):
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name).to(device))
        return self

    def client_indices(self, client: int, steps: int, batch_size: int, gen: torch.Generator) -> tuple:
        """(indices into ``x`` of the ``steps`` minibatches, concatenated; the batch size, clipped to n_i)."""
        lo = int(self.offsets[client])
        n = int(self.offsets[client + 1]) - lo
        batch_size = min(batch_size, n)
        need = steps * batch_size
        perms = [torch.randperm(n, generator=gen) for _ in range(-(-need // n))]
        return (torch.cat(perms)[:need] + lo).to(self.x.device), batch_size

    def client_batches(self, client: int, steps: int, batch_size: int, gen: torch.Generator) -> list:
        """``steps`` minibatches of client ``client``: sampling without replacement within an epoch, epochs
        chained (a fresh permutation each), all drawn from the per-(seed, round, client) generator ``gen``. A batch
        size above the client's number of samples n_i is clipped to n_i (each step then sees all its data)."""
        idx, batch_size = self.client_indices(client, steps, batch_size, gen)
        xb, yb = self.x[idx], self.y[idx]
        batches = list(zip(xb.split(batch_size), yb.split(batch_size)))
        if self.augment != "none":
            per_sample = self.augment == "per_sample"
            batches = [(crop_flip(x, gen, self.pad_fill, per_sample), y) for x, y in batches]
        return batches


def split_validation(central: CentralData, fraction: float, seed: int) -> tuple:
    """(the training data without a validation set, x_val, y_val): from every class c, round(fraction * n_c) of its
    training samples, drawn from the stream (seed, "data/validation"), become the server's validation set before
    the data is partitioned (stratified, so the validation set has the training set's label distribution). The
    test set is never touched; a natural per-user split loses the same samples."""
    labels = central.y_train.numpy()
    rng = numpy_rng(seed, "data/validation")
    held = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        held.append(rng.permutation(members)[: int(round(fraction * members.size))])
    val = np.sort(np.concatenate(held))
    require(val.size > 0, "data.val_fraction", f"{fraction} of {labels.size} training samples is no sample.",
            "use a larger fraction, or 0 for no validation set.")
    keep = np.ones(labels.size, dtype=bool)
    keep[val] = False
    train = dataclasses.replace(central, x_train=central.x_train[keep], y_train=central.y_train[keep],
                                natural_clients=None if central.natural_clients is None
                                else central.natural_clients[keep])
    return train, central.x_train[val], central.y_train[val]


def _fingerprint(central: CentralData) -> str:
    h = hashlib.sha256()
    h.update(central.name.encode())
    h.update(central.y_train.numpy().tobytes())
    h.update(str(tuple(central.x_train.shape)).encode())
    return h.hexdigest()[:16]


def _checksum(owner: np.ndarray, attrs: dict) -> str:
    h = hashlib.sha256(np.ascontiguousarray(owner, dtype=np.int64).tobytes())
    for k in sorted(attrs):
        h.update(k.encode())
        h.update(np.ascontiguousarray(attrs[k]).tobytes())
    return h.hexdigest()


def _read_cache(path: Path, num_samples: int):
    """A cached partition (owner, attrs), or None when absent; a corrupted or tampered file (unreadable, wrong
    shape, ids out of range, contents not matching their stored hash) is reported, and rebuilt by the caller."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            owner = z["owner"].astype(np.int64)
            attrs = {k[5:]: z[k] for k in z.files if k.startswith("attr_")}
            stored = str(z["checksum"])
        problem = None
        if owner.shape != (num_samples,):
            problem = f"it assigns {owner.size} samples, the dataset has {num_samples}"
        elif owner.size and owner.min() < -1:
            problem = "negative client ids"
        elif stored != _checksum(owner, attrs):
            problem = "its contents do not match their stored hash"
    except Exception as exc:  # any unreadable file: a truncated zip, another format, a missing array
        problem = f"unreadable ({type(exc).__name__})"
    if problem is None:
        return owner, attrs
    print(f"fedbench: warning: partition cache {path} is corrupted ({problem}); rebuilding it", flush=True)
    return None


def _write_cache(path: Path, owner: np.ndarray, attrs: dict) -> None:
    """Write atomically (a per-process temporary file, renamed); an unwritable cache folder only warns."""
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(tmp, owner=owner, checksum=np.array(_checksum(owner, attrs)),
                 **{f"attr_{k}": v for k, v in attrs.items()})
        tmp.replace(path)
    except OSError as exc:
        print(f"fedbench: warning: cannot write the partition cache under {path.parent} ({exc.strerror}); "
              "continuing without it (data.cache=false silences this)", flush=True)


def build_federated(dataset_cfg: Any, partition_cfg: Any, root: Path, seed: int, cache: bool,
                    val_fraction: float = 0.0) -> FederatedData:
    """Load the dataset, set the validation share aside (``split_validation``), partition the rest (or reuse a
    cached partition with the same inputs), sort by client."""
    central = DATASETS.get_class(dataset_cfg.name)(dataset_cfg, root, seed)
    x_val = y_val = None
    if val_fraction > 0:
        central, x_val, y_val = split_validation(central, val_fraction, seed)
    labels = central.y_train.numpy()
    part_dict = OmegaConf.to_container(partition_cfg, resolve=True, enum_to_str=True)
    key = json.dumps({"data": _fingerprint(central), "partition": part_dict, "seed": seed}, sort_keys=True)
    phash = hashlib.sha256(key.encode()).hexdigest()[:16]
    cache_file = root / "cache" / "partitions" / f"{phash}.npz"
    cached = _read_cache(cache_file, labels.size) if cache else None
    if cached is not None:
        owner, attrs = cached
    else:
        partitioner = PARTITIONERS.get_class(partition_cfg.name)
        owner, attrs = partitioner(labels, partition_cfg, numpy_rng(seed, f"partition/{partition_cfg.name}"),
                                   central.natural_clients)
        if cache:
            _write_cache(cache_file, owner, attrs)
    used = np.flatnonzero(owner >= 0)
    owner_used = owner[used]
    num_clients = max(int(owner_used.max()) + 1, partition_cfg.num_clients)
    order = torch.from_numpy(used[np.argsort(owner_used, kind="stable")])
    counts = np.bincount(owner_used, minlength=num_clients)
    empty = np.flatnonzero(counts == 0)
    require(empty.size == 0, "partition", f"{empty.size} of {num_clients} clients received no samples "
            f"(e.g. client {empty[:1].tolist()}).", "use fewer clients or a less extreme split.")
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    hist = np.zeros((num_clients, central.num_classes), dtype=np.int64)
    np.add.at(hist, (owner_used, labels[used]), 1)
    attrs = {"size": counts, "majority_label": hist.argmax(axis=1), **attrs}
    return FederatedData(
        name=central.name,
        x=central.x_train[order].contiguous(),
        y=central.y_train[order].contiguous(),
        offsets=offsets,
        x_test=central.x_test,
        y_test=central.y_test,
        num_classes=central.num_classes,
        label_hist=hist,
        attrs=attrs,
        partition_hash=phash,
        augment=dataset_cfg.augment.value if "augment" in dataset_cfg else "none",
        pad_fill=central.pad_fill,
        x_val=x_val,
        y_val=y_val,
    )

