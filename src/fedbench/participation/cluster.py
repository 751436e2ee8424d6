"""Clustered sampling (Fraboni et al., ICML 2021; FedSRC note §1.3): S distributions r_k over the clients with
sum_i r_{k,i} = 1 and sum_k r_{k,i} = S q_i; one client is drawn from each (independently), so client i's expected
count is S q_i as under MD sampling (unbiased with the same weights) with a lower variance of the aggregate.

* ``scheme=samples`` (Alg. 1): clients sorted by q_i (largest first) fill the distributions in turn, a client's
  mass S q_i split across consecutive distributions where one fills up.
* ``scheme=similarity`` (Alg. 2): each client's representative gradient is its last update (zero before its first
  participation); Ward linkage on their ``distance`` (arccos of the cosine, or L2) merges similar clients bottom-up
  while a group's mass stays <= 1; the groups, largest first, fill the distributions as in Alg. 1. Rebuilt after
  every round. Representatives are kept as count sketches of ``sketch_dim`` floats (0: the full vectors), so the
  memory is N x sketch_dim.

Given the available set A, each distribution is restricted to A and renormalized (one with no mass on A draws
nobody): E[m_i | A] = sum_k r_{k,i} 1[i in A] / sum_{j in A} r_{k,j}, exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
import torch

from fedbench.participation.base import SELECTION, LayerConfig
from fedbench.participation.sampling import Weights, client_weights
from fedbench.participation.selection import _FixedSize
from fedbench.options import option


class ClusterScheme(Enum):
    samples = "samples"  # Alg. 1: by sample size
    similarity = "similarity"  # Alg. 2: by the similarity of the clients' representative gradients


class Distance(Enum):
    arccos = "arccos"
    l2 = "l2"


def fill(groups: list, mass: np.ndarray, s: int) -> np.ndarray:
    """(s, N) distributions filled in turn by ``groups`` (lists of client ids, in order) with masses ``mass``
    (summing to s): each distribution takes mass until it holds 1, a client's remainder going to the next."""
    r = np.zeros((s, mass.size))
    k, room = 0, 1.0
    for group in groups:
        for i in group:
            left = mass[i]
            while left > 1e-12 and k < s:
                take = min(left, room)
                r[k, i] += take
                left -= take
                room -= take
                if room <= 1e-12:
                    k, room = k + 1, 1.0
    return r / r.sum(axis=1, keepdims=True)


@SELECTION.register("cluster")
class Cluster(_FixedSize):
    """Clustered sampling, one draw from each of S distributions (see the module docstring)."""

    rao_blackwell = False
    state_attrs = ("r", "reps")

    @dataclass
    class Config(LayerConfig):
        clients_per_round: int = option(10, ge=1)
        scheme: ClusterScheme = ClusterScheme.samples
        weights: Weights = Weights.samples
        distance: Distance = Distance.arccos
        sketch_dim: int = 1024

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.scheme, self.distance = ClusterScheme(cfg.scheme), Distance(cfg.distance)
        self.adaptive = self.scheme == ClusterScheme.similarity
        self.q = client_weights(cfg.weights, ctx.sizes)
        self.mass = self.s * self.q
        self.r = fill([np.argsort(-self.q, kind="stable").tolist()], self.mass, self.s)
        self.reps = None  # (N, k) representative gradients (sketched)
        self._hash = None

    def select(self, t, available, rng):
        r = self.r * available[None, :]
        total = r.sum(axis=1)
        picks = [rng.choice(self.num_clients, p=row / tot) for row, tot in zip(r, total) if tot > 0]
        return np.sort(np.asarray(picks, dtype=np.int64))

    def expected(self, masks):
        r = self.r[None, :, :] * masks[:, None, :]  # (rows, S, N)
        total = r.sum(axis=2, keepdims=True)
        return (r / np.where(total > 0, total, 1.0)).sum(axis=1)

    def _sketch(self, delta: torch.Tensor) -> np.ndarray:
        d, k = delta.numel(), self.cfg.sketch_dim
        if k == 0 or k >= d:
            return delta.detach().double().cpu().numpy()
        if self._hash is None:
            gen = torch.Generator().manual_seed(int(self.ctx.rng("cluster/sketch").integers(2 ** 62)))
            self._hash = (torch.randint(k, (d,), generator=gen).to(delta.device),
                          (torch.randint(2, (d,), generator=gen) * 2 - 1).to(delta.device, delta.dtype))
        idx, sign = self._hash
        return torch.zeros(k, device=delta.device, dtype=delta.dtype).index_add_(0, idx, sign * delta) \
            .double().cpu().numpy()

    def observe(self, t, client, update, weight):
        if self.scheme == ClusterScheme.similarity and update.delta is not None:
            v = self._sketch(update.delta.reshape(-1))
            if self.reps is None:
                self.reps = np.zeros((self.num_clients, v.size))
            self.reps[client] = v

    def end_round(self, t, updates):
        if self.scheme == ClusterScheme.similarity and self.reps is not None:
            self.r = fill(self.similarity_groups(), self.mass, self.s)

    def similarity_groups(self) -> list:
        """Groups of similar clients of mass <= 1 each, from the Ward dendrogram of the representatives."""
        from scipy.cluster.hierarchy import linkage
        from scipy.spatial.distance import squareform

        n = self.num_clients
        if n == 1:
            return [[0]]
        v = self.reps
        if self.distance == Distance.arccos:
            norms = np.linalg.norm(v, axis=1)
            unit = v / np.where(norms > 0, norms, 1.0)[:, None]
            dist = np.arccos(np.clip(unit @ unit.T, -1.0, 1.0))
            dist[(norms == 0)[:, None] | (norms == 0)[None, :]] = np.pi / 2
        else:
            sq = (v ** 2).sum(axis=1)
            dist = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * v @ v.T, 0.0))
        np.fill_diagonal(dist, 0.0)
        z = linkage(squareform((dist + dist.T) / 2, checks=False), method="ward")
        members = {i: [i] for i in range(n)}
        groups = []
        for step, (a, b, _, _) in enumerate(z):
            a, b = members.pop(int(a)), members.pop(int(b))
            if a is not None and b is not None and self.mass[a].sum() + self.mass[b].sum() <= 1 + 1e-12:
                members[n + step] = a + b
            else:
                groups += [g for g in (a, b) if g is not None]
                members[n + step] = None
        groups += [g for g in members.values() if g is not None]
        return sorted(groups, key=lambda g: -self.mass[g].sum())
