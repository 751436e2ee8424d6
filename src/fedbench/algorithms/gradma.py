"""GradMA (Luo et al., CVPR 2023): QP-corrected local steps and a QP-corrected server momentum against a memory of
accumulated client updates (GradMA note §1; sign convention here: deltas y - x, x <- x + eta_g m~).

Worker (Alg. 2, Eq. 5), each local step tau on the step's minibatch xi:
    g~ = QP_l(g, [grad F(x_{tau-1}; xi), grad F(x_t; xi), x_tau - x_t]),   x_{tau+1} = x_tau - eta_l g~,
three gradient evaluations per step, two when x_{tau-1} = x_t (always at tau = 1, and at tau = 0 for a client
without a last local model or with ``prev_anchor=global_model``), all counted. x_{-1} is the client's last local
model (``prev_anchor=last_local``, paper; the current global model if it never trained) or x_t (``global_model``, the
official GradMA script).
Server (Alg. 3, Eqs. 6-8):  m = beta1 m~ + d,  D[i] <- d_i (new entry) | beta2 D[i] + d_i (participant) |
beta2 D[i] (absent),  m~ = QP_g(m, D),  x <- x + eta_g m~  (``server_lr`` = eta_g).
Memory reduction (Alg. 4): at most ``memory_size`` entries; a selected client not in memory evicts the absent entry
with the fewest participations since it entered (ties: the earliest inserted). memory_size = 0 is FedAvgM.
QP(p, M) = argmin ||v - p|| s.t. <v, M_j> >= rho ||p|| ||M_j|| (``fedbench.qp``): one problem over the whole model
(``qp_mode=flat``, paper) or one per parameter tensor (``layer``, the official code).

D is stored through the client-state store as a dense (m, d) table, one row per memory slot, holding R_i with
D[i] = s_i R_i for the slot's client: decaying an
absent entry multiplies the scalar s_i only, and since the QP's constraints are homogeneous the solution depends on
the directions R_i alone (an entry with s_i = 0, e.g. beta2 = 0, is no constraint). The Gram matrix of the R_i is
kept per segment and updated only for the rows that changed: O(S m d) per round instead of O(m^2 d).
``worker_qp=false`` is GradMA-S; ``server_qp=false`` a plain server x <- x + eta_g d (GradMA-W).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
import torch

from fedbench import qp
from fedbench.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm
from fedbench.errors import require
from fedbench.records import StepHook
from fedbench.options import option

CHUNK = 1 << 15  # entries per row in one block of the server's inner products
GRAM_TOL = 1e-6  # KKT tolerance of the server QP, whose Gram entries come from float32 products


class QPMode(Enum):
    flat = "flat"  # one QP over the whole parameter vector (paper)
    layer = "layer"  # one QP per parameter tensor (official code)


class PrevAnchor(Enum):
    last_local = "last_local"  # x_{-1} = the client's last local model of its previous round (paper, GradMA-W code)
    global_model = "global_model"  # x_{-1} = x_t: no correction at tau = 0 (official full-GradMA script)


class AuxStats(Enum):
    batch = "batch"  # extra gradients with batch statistics, BN running statistics untouched (official code)
    running = "running"  # extra gradients in eval mode (BN running statistics, no dropout)


class QPStats:
    """Per-round QP diagnostics (GradMA note §7.5): problems solved, active constraints, correction ratio, failures."""

    def __init__(self):
        self.problems = self.active = self.fallbacks = 0
        self.ratio_sum = 0.0
        self.calls = 0

    def add(self, p: torch.Tensor, p_new: torch.Tensor, proj: qp.Projection) -> None:
        self.calls += 1
        self.problems += int(proj.z.shape[0])
        self.active += int(proj.active.sum())
        self.fallbacks += int((~proj.converged).sum())
        norm = float(p.norm())
        self.ratio_sum += float((p_new - p).norm()) / norm if norm > 0 else 0.0

    def summary(self, prefix: str) -> dict:
        n = max(self.calls, 1)
        return {f"{prefix}_active": self.active / max(self.problems, 1), f"{prefix}_correction": self.ratio_sum / n,
                f"{prefix}_fallbacks": self.fallbacks}


class WorkerQP(StepHook):
    """Eq. 5 inside one client's local run."""

    def __init__(self, prev: torch.Tensor, sizes, rho: float, running_stats: bool, stats: QPStats):
        self.prev, self.sizes, self.rho, self.running, self.stats = prev, sizes, rho, running_stats, stats

    def grad(self, ctx):
        g = ctx.grad()
        current = ctx.params.detach().clone()
        at_start = ctx.grad_at(ctx.start, self.running)
        at_prev = at_start if self.prev is ctx.start else ctx.grad_at(self.prev, self.running)
        g_new, proj = qp.project(g, torch.stack([at_prev, at_start, current - ctx.start]), self.sizes, self.rho)
        self.stats.add(g, g_new, proj)
        ctx.set_grad(g_new)
        self.prev = ctx.start if ctx.step == 0 else current  # x_0 = x_t: step 1 reuses the gradient at x_t


@ALGORITHMS.register("gradma")
class GradMA(Algorithm):
    batchable = False
    server_optimizers = False  # its server update is its own recursion

    @dataclass
    class Config(AlgoConfig):
        worker_qp: bool = True
        server_qp: bool = True
        beta1: float = option(0.5, ge=0, lt=1)  # server momentum (README example; the code's default is 0.9)
        beta2: float = option(0.5, ge=0, lt=1)  # memory decay (README example; the code's default is 0)
        memory_size: int = 100  # m, entries of D; 0 = no memory (FedAvgM)
        qp_mode: QPMode = QPMode.flat  # flat: the paper's QP; layer: the code's, which the published numbers use
        prev_anchor: PrevAnchor = PrevAnchor.last_local
        aux_stats: AuxStats = AuxStats.batch
        rho_l: float = 0.0  # QP margins (official code only; 0 = the paper's QP)
        rho_g: float = 0.0

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        s = ctx.clients_per_round
        require(not (cfg.server_qp and 0 < cfg.memory_size < s), "algo.memory_size",
                f"m = {cfg.memory_size} memory entries cannot hold a round's S = {s} updates (Alg. 4 needs S <= m).",
                f"use m >= {s} (the paper: m = 100 with S <= m <= N), or 0 for no memory (FedAvgM).")
        self.sizes = ctx.param_sizes if QPMode(cfg.qp_mode) == QPMode.layer else None
        self.bounds = qp.segment_bounds(self.sizes, ctx.dim)
        self.m = min(cfg.memory_size, ctx.num_clients) if cfg.server_qp else 0
        dev = ctx.device
        if cfg.server_qp:
            self.momentum = self.declare("momentum", torch.zeros(ctx.dim, device=dev))
        if self.m:
            self.rows = self.declare_table("memory", rows=self.m, dense=True)
            B = len(self.bounds)
            self.slot_client = self.declare("slot_client", torch.full((self.m,), -1, dtype=torch.int64))
            self.slot_time = self.declare("slot_time", torch.zeros(self.m, dtype=torch.int64))
            self.slot_scale = self.declare("slot_scale", torch.zeros(self.m, dtype=torch.float64))
            self.count = self.declare("participations", torch.zeros(ctx.num_clients, dtype=torch.int64))
            self.gram = self.declare("gram", torch.zeros(B, self.m, self.m, dtype=torch.float64))
            self.clock = self.declare("insertions", torch.zeros(1, dtype=torch.int64))
        self.keep_last = cfg.worker_qp and PrevAnchor(cfg.prev_anchor) == PrevAnchor.last_local
        if self.keep_last:
            self.last_local = self.declare_table("last_local")

    # ---- memory reduction (Alg. 4) ---------------------------------------------------------------------------
    def slot_of(self, client: int) -> int:
        hit = (self.slot_client == client).nonzero()
        return int(hit[0]) if hit.numel() else -1

    def _evict(self, slot: int) -> None:
        self.rows.discard(slot)
        self.count[int(self.slot_client[slot])] = 0
        self.slot_client[slot] = -1
        self.slot_scale[slot] = 0
        self.gram[:, slot, :] = 0
        self.gram[:, :, slot] = 0

    def memory_reduction(self, selected: np.ndarray) -> set:
        """Alg. 4 over the round's selected clients in sampled order; returns the newly inserted clients."""
        new, sampled = set(), set(selected.tolist())
        for i in selected.tolist():
            if self.slot_of(i) >= 0:
                self.count[i] += 1
                continue
            free = (self.slot_client < 0).nonzero()
            if free.numel():
                slot = int(free[0])
            else:
                absent = [s for s in range(self.m) if int(self.slot_client[s]) not in sampled]
                if not absent:  # more clients this round than memory entries: i is not memorised
                    continue
                slot = min(absent, key=lambda s: (int(self.count[int(self.slot_client[s])]), int(self.slot_time[s])))
                self._evict(slot)
            self.count[i] += 1
            self.slot_client[slot] = i
            self.slot_time[slot] = int(self.clock)
            self.clock += 1
            new.add(i)
        return new

    # ---- round hooks -----------------------------------------------------------------------------------------
    def begin_round(self, rc, x):
        super().begin_round(rc, x)
        rc.scratch.worker = QPStats()
        rc.scratch.server = QPStats()
        rc.scratch.new = self.memory_reduction(rc.part.selected) if self.m else set()
        rc.scratch.touched = set()

    def step_hook(self, rc, client, x, payload):
        if not self.cfg.worker_qp:
            return None
        prev = self.last_local.get(client) if self.keep_last and client in self.last_local else x
        return WorkerQP(prev, self.sizes, self.cfg.rho_l, AuxStats(self.cfg.aux_stats) == AuxStats.running,
                        rc.scratch.worker)

    def client_update(self, trainer, rc, client, steps, x, payload):
        update = super().client_update(trainer, rc, client, steps, x, payload)
        if self.keep_last:
            self.last_local.set(client, x + update.delta)
        return update

    def accumulate(self, rc, client, update, weight):
        super().accumulate(rc, client, update, weight)
        slot = self.slot_of(client) if self.m else -1
        if slot < 0:
            return
        if client in rc.scratch.touched:  # a second entry of the same client this round
            row = self.rows.get(slot) + update.delta
        elif client in rc.scratch.new:  # Eq. 7: D[i] <- d_i
            row = update.delta
        else:  # Eq. 7: D[i] <- beta2 D[i] + d_i
            row = self.rows.get(slot) * float(self.cfg.beta2 * self.slot_scale[slot]) + update.delta
        self.rows.set(slot, row)
        self.slot_scale[slot] = 1.0
        rc.scratch.touched.add(client)

    def _products(self, slots: list[int], targets: torch.Tensor) -> torch.Tensor:
        """(B, len(slots), r) inner products, per segment, of the memory rows of ``slots`` with the rows of
        ``targets`` (r, d): one pass over the (m, d) memory matrix in column chunks, each a float32 matrix product
        of at most ``CHUNK`` entries per row on views (no copies), accumulated in float64."""
        memory = self.rows.matrix()
        targets = targets.to(memory.device)
        out = torch.zeros(len(self.bounds), self.m, targets.shape[0], dtype=torch.float64)
        for b, (lo, hi) in enumerate(self.bounds):
            for a in range(lo, hi, CHUNK):
                out[b] += (memory[:, a: min(a + CHUNK, hi)] @ targets[:, a: min(a + CHUNK, hi)].T).double().cpu()
        return out[:, slots]

    def _corrected(self, rc, mom: torch.Tensor) -> torch.Tensor:
        """m~ = QP_g(m, D) (Eq. 8). The Gram entries of the rows written this round and M^T m come from one pass
        over the memory; the other Gram entries are unchanged since their rows are (decay only scales s_i)."""
        touched = torch.tensor([int(c) in rc.scratch.touched for c in self.slot_client.tolist()])
        occupied = self.slot_client >= 0
        self.slot_scale[occupied & ~touched] *= self.cfg.beta2  # Eq. 7 for absent entries
        slots = (occupied & (self.slot_scale > 0)).nonzero().flatten().tolist()
        if not slots:
            return mom
        changed = [s for s in slots if touched[s]]
        products = self._products(slots, torch.stack([*(self.rows.get(s) for s in changed), mom]))
        idx = torch.tensor(slots)
        if changed:
            cidx = torch.tensor(changed)
            self.gram[:, idx[:, None], cidx] = products[:, :, :-1]
            self.gram[:, cidx[:, None], idx] = products[:, :, :-1].transpose(1, 2)
        mom64 = mom.double()
        pp = torch.stack([mom64[lo:hi] @ mom64[lo:hi] for lo, hi in self.bounds]).cpu()
        proj = qp.solve(self.gram[:, idx][:, :, idx], products[:, :, -1], pp, self.cfg.rho_g, GRAM_TOL)
        z = torch.zeros(len(self.bounds), self.m, dtype=torch.float64)
        z[:, idx] = proj.z
        out = qp.combine(mom, self.rows.matrix(), z, self.bounds)
        rc.scratch.server.add(mom, out, proj)
        return out

    def server_update(self, rc, x):
        if not self.cfg.server_qp:  # GradMA-W: x <- x + eta_g d
            return super().server_update(rc, x)
        mom = self.momentum * self.cfg.beta1 + rc.acc  # Eq. 6, momentum on the corrected m~
        corrected = self._corrected(rc, mom) if self.m else mom
        self.momentum.copy_(corrected)
        x.add_(corrected, alpha=self.cfg.server_lr)

    def round_stats(self, rc):
        out = {}
        if self.cfg.worker_qp:
            out.update(rc.scratch.worker.summary("qp_worker"))
        if self.m:
            out.update(rc.scratch.server.summary("qp_server"))
            out["memory_entries"] = int((self.slot_client >= 0).sum())
        return out
