"""The projection QP of GradMA (Luo et al., CVPR 2023, Eqs. 2-4), solved exactly in float64 with torch.

Primal:  p~ = argmin_v 1/2 ||v - p||^2  s.t.  <v, M_j> >= rho ||p|| ||M_j||   (j = 1..k; rho = 0 in the paper)
Dual:    z* = argmin_{z >= 0} 1/2 z^T (M^T M) z + (M^T p - rho ||p|| diag(M^T M)^(1/2))^T z,   p~ = p + M z*.

The dual is a non-negative least-squares problem on the k x k Gram matrix, solved by the Lawson-Hanson active-set
method for each independent problem (one per layer in the per-layer mode, whose Gram matrices are computed as one
batch). The constraints are homogeneous:
scaling a column M_j, or p, by a positive factor leaves the constrained direction unchanged, so each column and p
are normalised to unit length first. That makes the solve scale-free: vectors with norms of 1e-8 are solved as
accurately as unit ones (cvxopt's absolute tolerances are what fail there in GradMA's code). Zero columns carry no
constraint and get z = 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

TOL = 1e-10  # on the normalised problem: a multiplier or KKT residual below this counts as zero


@dataclass
class Projection:
    """A solved batch: ``z`` (B, k) multipliers in the original units, ``converged`` (B,) per problem."""

    z: torch.Tensor
    converged: torch.Tensor

    @property
    def active(self) -> torch.Tensor:
        """(B,) number of active constraints (z_j > 0) per problem."""
        return (self.z > 0).sum(1)


def _nnls_one(Q: np.ndarray, q: np.ndarray, usable: np.ndarray, tol: float) -> tuple[np.ndarray, bool]:
    k = len(q)
    z, passive, blocked = np.zeros(k), np.zeros(k, dtype=bool), np.zeros(k, dtype=bool)
    for _ in range(3 * k + 10):
        w = -(Q @ z) - q
        candidates = usable & ~passive & ~blocked & (w > tol)
        if not candidates.any():
            return z, True
        j = int(np.argmax(np.where(candidates, w, -np.inf)))
        passive[j] = True
        before = z.copy()
        for _ in range(k + 1):  # inner loop: keep the passive solution feasible
            idx = np.flatnonzero(passive)
            s = np.zeros(k)
            try:
                s[idx] = np.linalg.solve(Q[np.ix_(idx, idx)], -q[idx])
            except np.linalg.LinAlgError:
                s[idx] = np.linalg.lstsq(Q[np.ix_(idx, idx)], -q[idx], rcond=None)[0]
            bad = passive & (s <= 0)
            if not bad.any():
                z = s
                break
            z = z + min(1.0, max(0.0, float(np.min(z[bad] / (z[bad] - s[bad]))))) * (s - z)
            passive &= z > 1e-15
            z[~passive] = 0.0
        if not passive[j] and np.array_equal(z, before):
            blocked[j] = True  # dropped at once without moving z: a rounding-level residual, never re-added
    return z, not (usable & ~passive & ~blocked & (-(Q @ z) - q > tol)).any()


def nnls_gram(Q: torch.Tensor, q: torch.Tensor, usable: torch.Tensor, tol: float = TOL):
    """min_{z >= 0} 1/2 z^T Q z + q^T z for each problem of a batch (Q: (B,k,k) PSD, q: (B,k)), columns with
    ``usable`` False fixed at 0. Lawson-Hanson: add the column with the largest positive KKT residual -(Qz + q)_j to
    the passive set, solve the equality-constrained problem on it (LU; least squares if singular), and step back to
    feasibility when a multiplier turns negative. A column that the inner loop drops at once without moving z
    (possible only at rounding level: its residual exceeds ``tol`` but it cannot enter) is not tried again, which
    prevents the method's degenerate cycle. The k x k problems are solved one by one in NumPy float64 (for k <= 100
    several times faster than batched torch operations, whose per-call overhead dominates). Returns (z, converged)."""
    Qn, qn, un = Q.numpy(), q.numpy(), usable.numpy()
    out = [_nnls_one(Qn[b], qn[b], un[b], tol) for b in range(len(qn))]
    z = torch.from_numpy(np.stack([o[0] for o in out])).clamp_min(0)
    return z, torch.tensor([o[1] for o in out], dtype=torch.bool)


def solve(G: torch.Tensor, c: torch.Tensor, pp: torch.Tensor, rho: float = 0.0, tol: float = TOL) -> Projection:
    """Multipliers of the projection from Gram quantities: G (B,k,k) = M^T M, c (B,k) = M^T p, pp (B,) = ||p||^2.
    Solved on the CPU in float64 after normalising every column and p to unit length; ``tol`` is the KKT tolerance
    on that normalised problem (match it to the precision the Gram quantities were computed in). A problem that
    does not converge, or whose solution is not finite, gets z = 0: its p stays uncorrected."""
    G, c, pp = (t.detach().to("cpu", torch.float64) for t in (G, c, pp))
    if rho == 0 and bool((c >= 0).all()):  # no violated constraint: z = 0 satisfies the KKT conditions
        return Projection(torch.zeros_like(c), torch.ones(c.shape[0], dtype=torch.bool))
    norms = torch.diagonal(G, dim1=1, dim2=2).clamp_min(0).sqrt()
    pn = pp.clamp_min(0).sqrt()
    usable = (norms > 1e-150) & torch.isfinite(norms) & (pn > 1e-150).unsqueeze(1)
    safe = torch.where(usable, norms, torch.ones_like(norms))
    Q = G / (safe.unsqueeze(2) * safe.unsqueeze(1))
    q = c / (safe * torch.where(pn > 0, pn, torch.ones_like(pn)).unsqueeze(1)) - rho
    q = torch.where(usable, q, torch.ones_like(q))
    zn, ok = nnls_gram(Q, q, usable, tol)
    ok &= torch.isfinite(zn).all(1)
    z = torch.where(usable & ok.unsqueeze(1), zn * pn.unsqueeze(1) / safe, torch.zeros_like(zn))
    return Projection(z, ok)


def segment_bounds(sizes: Optional[Sequence[int]], d: int) -> list[tuple[int, int]]:
    """[(start, stop)] of each segment; one segment (the whole vector) when ``sizes`` is None."""
    if sizes is None:
        return [(0, d)]
    out, a = [], 0
    for n in sizes:
        out.append((a, a + n))
        a += n
    return out


def gram(V: torch.Tensor, bounds: list[tuple[int, int]]) -> torch.Tensor:
    """(B, r, r) float64 Gram matrices of the rows of V (r, d), one per segment."""
    V = V.double()
    return torch.stack([V[:, a:b] @ V[:, a:b].T for a, b in bounds])


def combine(p: torch.Tensor, M: torch.Tensor, z: torch.Tensor, bounds: list[tuple[int, int]]) -> torch.Tensor:
    """p + M z per segment: segment b of the result is p[b] + sum_j z[b, j] M_j[b]. Only the rows with a nonzero
    coefficient are read (M may be a large memory, on another device than p)."""
    out = p.clone()
    zt = z.to(device=p.device, dtype=p.dtype)
    for (a, b), zb in zip(bounds, zt):
        rows = zb.nonzero().flatten()
        if rows.numel():
            out[a:b].add_(zb[rows] @ M[rows.to(M.device), a:b].to(p.device))
    return out


def project(p: torch.Tensor, M: torch.Tensor, sizes: Optional[Sequence[int]] = None,
            rho: float = 0.0) -> tuple[torch.Tensor, Projection]:
    """Project p (d,) onto {v : <v, M_j> >= rho ||p|| ||M_j||} for the rows M_j of M (k, d): one QP over the whole
    vector, or one per segment of ``sizes`` (per layer). A problem that does not converge (or is not finite)
    leaves its segment of p uncorrected (``solve``; ``Projection.converged`` says which)."""
    bounds = segment_bounds(sizes, p.numel())
    G = gram(torch.cat([M, p.unsqueeze(0)]), bounds)
    k = M.shape[0]
    proj = solve(G[:, :k, :k], G[:, :k, k], G[:, k, k], rho)
    return combine(p, M, proj.z, bounds), proj
