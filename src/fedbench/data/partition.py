"""Partitioners: assign every training sample to at most one client.

A partitioner, registered with its Config beside it, maps (labels, config, rng, natural split) to ``(owner, attrs)``: a per-sample client id array (-1:
the sample is not used, e.g. beyond a per-client cap) and
per-client attributes (e.g. ``majority_label``) that participation processes may use. Results are cached on disk
under a hash of their inputs, so every algorithm and every job of a sweep reuses the same split.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, Optional, Tuple

import numpy as np
from omegaconf import MISSING

from fedbench.errors import ConfigError, require
from fedbench.options import option
from fedbench.registry import Registry

Result = Tuple[np.ndarray, Dict[str, np.ndarray]]
PARTITIONERS = Registry("partition")


@dataclass
class PartitionConfig:
    """The options of every partition (``iid`` has no others)."""

    name: str = MISSING
    num_clients: int = option(100, ge=1)


@dataclass
class DirichletConfig(PartitionConfig):
    alpha: float = option(0.3, gt=0)  # concentration of the per-class client proportions
    min_samples: int = 10  # every client gets at least this many samples
    max_tries: int = option(1000, ge=1)  # re-draws allowed to satisfy min_samples
    equal_sizes: bool = False  # FedSRC-D code's per-client q_i ~ Dir(alpha * prior), floor(n/N) each
    seed_samples: int = 0  # every client first gets this many random samples (GradMA's code: 2)


@dataclass
class ShardsConfig(PartitionConfig):
    shards_per_client: int = option(2, ge=1)


class ClassesScheme(Enum):
    balanced = "balanced"  # FedAMD: every label held by the same number of clients, equal shares
    mimic = "mimic"  # MimiC / NIID-Bench #C=k: client i holds label i mod C plus k-1 random others


@dataclass
class ClassesPerClientConfig(PartitionConfig):
    classes_per_client: int = option(2, ge=1)  # k
    scheme: ClassesScheme = ClassesScheme.balanced
    max_per_client: int = 0  # scheme=mimic: cap on a client's samples (2000 in MimiC), 0 = none


@dataclass
class MajorityClassConfig(PartitionConfig):
    num_clients: int = option(250, ge=1)  # Wang & Ji (2022)
    similarity: float = option(0.05, ge=0, le=1)  # fraction of samples sent to a uniformly random client


@dataclass
class QuantitySkewConfig(PartitionConfig):
    sigma: float = option(1.0, gt=0)  # log-normal sigma of client sizes
    min_samples: int = 10  # every client gets at least this many samples


@dataclass
class NaturalConfig(PartitionConfig):
    num_clients: int = option(0, ge=0)  # 0 = the dataset's own user count


def _from_lists(parts: list, num: int) -> np.ndarray:
    owner = np.full(num, -1, dtype=np.int64)
    for k, idx in enumerate(parts):
        owner[np.asarray(idx, dtype=np.int64)] = k
    return owner


def _require_room(cfg: Any, num: int) -> None:
    """``min_samples`` for each of ``num_clients`` clients must fit the ``num`` training samples."""
    require(cfg.min_samples * cfg.num_clients <= num, "partition.min_samples",
            f"{cfg.min_samples} samples for each of {cfg.num_clients} clients exceeds the {num} training samples.",
            "lower partition.min_samples or partition.num_clients.")


@PARTITIONERS.register("iid", config=PartitionConfig)
def iid(labels: np.ndarray, cfg: Any, rng: np.random.Generator, natural: Optional[np.ndarray]) -> Result:
    """Uniformly shuffled, near-equal client sizes."""
    return _from_lists(np.array_split(rng.permutation(len(labels)), cfg.num_clients), len(labels)), {}


@PARTITIONERS.register("dirichlet", config=DirichletConfig)
def dirichlet(labels: np.ndarray, cfg: Any, rng: np.random.Generator, natural: Optional[np.ndarray]) -> Result:
    """Label skew by Dirichlet proportions.

    Default (Hsu et al., 2019; NIID-Bench): for each class c, q_c ~ Dir(alpha 1_N) splits the class over clients;
    a client already holding >= n/N samples gets no more; the draw is repeated until every client holds at least
    ``min_samples`` (at most ``max_tries`` draws).
    ``seed_samples=k`` (GradMA's code, note §3.2, k = 2): draw q_c ~ Dir(alpha 1_N) per class, give every client k
    samples first (each from a uniformly random class), then split each class's rest by q_c, without a cap; this
    is what makes alpha = 0.01 feasible.
    ``equal_sizes=true`` (FedSRC-D's code): each client i draws q_i ~ Dir(alpha * class prior) and takes samples
    class by class from the pools until it holds floor(n/N); an emptied class is removed from q_i.
    """
    n, num = cfg.num_clients, len(labels)
    require(0 <= cfg.seed_samples * n <= num, "partition.seed_samples", f"{cfg.seed_samples} per client.",
            f"use 0 (off) or k >= 1 with k x {n} clients <= {num} samples (GradMA's code: 2).")
    _require_room(cfg, num)
    classes = np.unique(labels)
    if cfg.equal_sizes:
        return _dirichlet_equal(labels, classes, n, cfg.alpha, rng), {}
    if cfg.seed_samples:
        return _dirichlet_seeded(labels, classes, n, cfg.alpha, cfg.seed_samples, rng), {}
    by_class = [np.flatnonzero(labels == c) for c in classes]
    for _ in range(cfg.max_tries):
        owner = np.empty(num, dtype=np.int64)
        counts = np.zeros(n, dtype=np.int64)
        for idx in by_class:
            idx = rng.permutation(idx)
            q = rng.dirichlet(np.full(n, cfg.alpha))
            q = q * (counts < num / n)
            q = q / q.sum()
            cuts = (np.cumsum(q) * len(idx)).astype(np.int64)[:-1]
            for k, part in enumerate(np.split(idx, cuts)):
                owner[part] = k
                counts[k] += len(part)
        if counts.min() >= cfg.min_samples:
            return owner, {}
    raise ConfigError(
        "partition.min_samples",
        f"no Dirichlet(alpha={cfg.alpha}) draw gave every one of {n} clients {cfg.min_samples} samples "
        f"in {cfg.max_tries} tries.",
        "lower partition.min_samples, raise partition.alpha, or raise partition.max_tries.",
    )


def _dirichlet_seeded(labels, classes, n, alpha, k, rng) -> np.ndarray:
    q = rng.dirichlet(np.full(n, alpha), size=len(classes))
    pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in classes]
    owner = np.full(len(labels), -1, dtype=np.int64)
    for _ in range(k):
        for i in range(n):
            nonempty = [c for c, p in enumerate(pools) if p]
            owner[pools[nonempty[rng.integers(len(nonempty))]].pop()] = i
    for c, pool in enumerate(pools):
        idx = rng.permutation(np.array(pool, dtype=np.int64))
        cuts = (np.cumsum(q[c]) * len(idx)).astype(np.int64)[:-1]
        for i, part in enumerate(np.split(idx, cuts)):
            owner[part] = i
    return owner


def _dirichlet_equal(labels, classes, n, alpha, rng) -> np.ndarray:
    pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in classes]
    prior = np.array([len(p) for p in pools], dtype=np.float64) / len(labels)
    size = len(labels) // n
    owner = np.full(len(labels), -1, dtype=np.int64)
    for i in range(n):
        q = rng.dirichlet(alpha * prior)
        taken = 0
        while taken < size:
            q = np.where([len(p) > 0 for p in pools], q, 0.0)
            if q.sum() <= 0:  # the classes this client wanted are exhausted: fall back to the remaining prior
                q = np.array([len(p) for p in pools], dtype=np.float64)
            c = rng.choice(len(pools), p=q / q.sum())
            owner[pools[c].pop()] = i
            taken += 1
    return owner  # the n mod N samples left over stay unassigned (-1), as in the code


@PARTITIONERS.register("shards", config=ShardsConfig)
def shards(labels: np.ndarray, cfg: Any, rng: np.random.Generator, natural: Optional[np.ndarray]) -> Result:
    """McMahan et al. (2017): sort by label, cut into N * shards_per_client equal shards, deal them at random."""
    n, k = cfg.num_clients, cfg.shards_per_client
    require(n * k <= len(labels), "partition.shards_per_client",
            f"{n} clients x {k} shards does not fit {len(labels)} samples.", "use fewer shards or clients.")
    order = np.argsort(labels, kind="stable")
    pieces = np.array_split(order, n * k)
    deal = rng.permutation(n * k)
    return _from_lists([np.concatenate([pieces[s] for s in deal[i * k:(i + 1) * k]]) for i in range(n)],
                       len(labels)), {}


@PARTITIONERS.register("classes_per_client", config=ClassesPerClientConfig)
def classes_per_client(labels: np.ndarray, cfg: Any, rng: np.random.Generator, natural: Optional[np.ndarray]) -> Result:
    """Each client holds k distinct classes.

    scheme=balanced (FedAMD's code, generalized): ceil(N k / C) random permutations of the labels are concatenated
    and cut into N groups of k (re-drawn while a group repeats a label), so each label is held by ~N k / C clients;
    each class is split equally among its holders. scheme=mimic (NIID-Bench #C=k, MimiC): client i holds label
    i mod C plus k-1 distinct others drawn uniformly; each class is split into one chunk per holder, each holder
    taking at most ``max_per_client / k`` samples of it (0 = no cap). Samples beyond the caps are left out.
    """
    n, k = cfg.num_clients, cfg.classes_per_client
    classes = np.unique(labels)
    c = len(classes)
    require(1 <= k <= c, "partition.classes_per_client", f"{k} is not between 1 and the {c} classes.",
            f"use 1 <= k <= {c}.")
    scheme = cfg.scheme.value if hasattr(cfg.scheme, "value") else str(cfg.scheme)
    if scheme == "balanced":
        for _ in range(1000):
            seq = np.concatenate([rng.permutation(classes) for _ in range(-(-n * k // c))])[: n * k]
            held = seq.reshape(n, k)
            if all(len(set(row)) == k for row in held):
                break
        else:
            raise ConfigError("partition.classes_per_client", f"could not give {n} clients {k} distinct classes.",
                              "change partition.num_clients or partition.classes_per_client.")
    else:
        held = np.array([[classes[i % c], *rng.choice(np.delete(classes, i % c), k - 1, replace=False)]
                         for i in range(n)])
    parts = [[] for _ in range(n)]
    cap = cfg.max_per_client // k if scheme == "mimic" and cfg.max_per_client > 0 else None
    for cls in classes:
        holders = np.flatnonzero((held == cls).any(axis=1))
        if holders.size == 0:
            continue
        idx = rng.permutation(np.flatnonzero(labels == cls))
        for h, chunk in zip(holders, np.array_split(idx, holders.size)):
            parts[h].append(chunk[:cap] if cap else chunk)
    owner = _from_lists([np.concatenate(p) for p in parts], len(labels))
    return owner, {"majority_label": held[:, 0].astype(np.int64)}


@PARTITIONERS.register("majority_class", config=MajorityClassConfig)
def majority_class(labels: np.ndarray, cfg: Any, rng: np.random.Generator, natural: Optional[np.ndarray]) -> Result:
    """Wang & Ji (2022, App. D): client n's majority label is the i with round(iN/C) <= n < round((i+1)N/C).
    Samples are assigned in dataset order: with probability ``similarity`` to a uniformly random client, else to
    the client of label y holding the fewest samples so far (ties to the lowest id)."""
    n, num = cfg.num_clients, len(labels)
    classes = np.unique(labels)
    c = len(classes)
    require(n >= c, "partition.num_clients", f"{n} clients cannot each have one of {c} majority labels.",
            f"use partition.num_clients >= {c}.")
    bounds = np.round(np.arange(c + 1) * n / c).astype(np.int64)
    major = np.searchsorted(bounds, np.arange(n), side="right") - 1
    members = [np.arange(bounds[i], bounds[i + 1]) for i in range(c)]
    label_pos = np.searchsorted(classes, labels)
    rand = rng.random(num)
    random_client = rng.integers(0, n, num)
    counts = np.zeros(n, dtype=np.int64)
    owner = np.empty(num, dtype=np.int64)
    for j in range(num):
        if rand[j] <= cfg.similarity:
            k = random_client[j]
        else:
            group = members[label_pos[j]]
            k = group[np.argmin(counts[group])]
        owner[j] = k
        counts[k] += 1
    return owner, {"majority_label": classes[major].astype(np.int64)}


@PARTITIONERS.register("quantity_skew", config=QuantitySkewConfig)
def quantity_skew(labels: np.ndarray, cfg: Any, rng: np.random.Generator, natural: Optional[np.ndarray]) -> Result:
    """Quantity skew: client sizes proportional to LogNormal(0, sigma) draws (at least ``min_samples``), samples
    drawn IID."""
    n, num = cfg.num_clients, len(labels)
    _require_room(cfg, num)
    w = rng.lognormal(0.0, cfg.sigma, n)
    extra = num - cfg.min_samples * n
    sizes = cfg.min_samples + np.floor(w / w.sum() * extra).astype(np.int64)
    sizes[: num - sizes.sum()] += 1  # hand out the rounding remainder
    return _from_lists(np.split(rng.permutation(num), np.cumsum(sizes)[:-1]), num), {}


@PARTITIONERS.register("natural", config=NaturalConfig)
def natural(labels: np.ndarray, cfg: Any, rng: np.random.Generator, natural: Optional[np.ndarray]) -> Result:
    """The dataset's own per-user split (LEAF-style: Synthetic(alpha, beta), FEMNIST writers)."""
    if natural is None:
        raise ConfigError(
            "partition", "partition=natural needs a dataset with a natural per-user split.",
            "use dataset=synthetic or dataset.writer_split=true (FEMNIST), or a split such as partition=dirichlet.",
        )
    users = int(natural.max()) + 1
    require(cfg.num_clients in (users, 0), "partition.num_clients",
            f"{cfg.num_clients} does not match the dataset's {users} natural users.",
            f"set partition.num_clients={users} (or 0 to take the dataset's count).")
    return natural.astype(np.int64), {}

