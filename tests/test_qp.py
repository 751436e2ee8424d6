"""The projection QP (GradMA Eqs. 2-4): KKT conditions, brute force on small instances, per-layer batching."""

import itertools

import pytest
import torch

from fedbench import qp


def kkt_residuals(p, M, p_new, z, rho=0.0):
    """Relative violations of primal feasibility and complementary slackness (stationarity holds by construction:
    p_new = p + M^T z)."""
    scale = p.norm() * M.norm(dim=1).clamp_min(1e-300)
    slack = (M @ p_new) / scale - rho
    feasibility = float((-slack).clamp_min(0).max())
    complementarity = float((z * M.norm(dim=1) / p.norm() * slack).abs().max())
    return feasibility, complementarity


def brute_force(p, M):
    """Enumerate active sets: the feasible equality-constrained solution nearest to p."""
    best = p.clone() if bool((M @ p >= 0).all()) else None
    for r in range(1, M.shape[0] + 1):
        for subset in itertools.combinations(range(M.shape[0]), r):
            A = M[list(subset)]
            z = torch.linalg.lstsq(A @ A.T, -(A @ p)).solution
            v = p + z @ A
            if bool((z >= -1e-12).all()) and bool((M @ v >= -1e-9 * p.norm() * M.norm(dim=1)).all()):
                if best is None or (v - p).norm() < (best - p).norm() - 1e-12:
                    best = v
    return best


@pytest.mark.parametrize("scale", [1.0, 1e-8, 1e4])
def test_kkt_on_random_instances_with_active_and_inactive_constraints(scale):
    gen = torch.Generator().manual_seed(0)
    active_counts = set()
    for trial in range(60):
        k = 1 + trial % 12
        M = torch.randn(k, 40, generator=gen, dtype=torch.float64) * scale
        M *= 10.0 ** torch.randint(-2, 3, (k, 1), generator=gen)  # columns of different magnitudes
        p = torch.randn(40, generator=gen, dtype=torch.float64) * scale
        p_new, proj = qp.project(p, M)
        z = proj.z[0]
        assert bool(proj.converged.all()) and bool((z >= 0).all())
        feas, comp = kkt_residuals(p, M, p_new, z)
        assert feas < 1e-6 and comp < 1e-6, (trial, feas, comp)
        active_counts.add((int(proj.active[0]) > 0, int(proj.active[0]) < k))
    assert (True, True) in active_counts  # some instances mix active and inactive constraints


@pytest.mark.parametrize("k", [2, 3])
def test_equals_brute_force_enumeration(k):
    gen = torch.Generator().manual_seed(k)
    for _ in range(50):
        M = torch.randn(k, 6, generator=gen, dtype=torch.float64)
        p = torch.randn(6, generator=gen, dtype=torch.float64)
        torch.testing.assert_close(qp.project(p, M)[0], brute_force(p, M), rtol=0, atol=1e-9)


def test_closed_forms_zero_columns_and_scale_invariance():
    p = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    M = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)  # one violated constraint: p~ = p - <p,M>/|M|^2 M
    torch.testing.assert_close(qp.project(p, M)[0], torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64))
    satisfied = torch.tensor([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0]], dtype=torch.float64)
    assert torch.equal(qp.project(p, satisfied)[0], p)  # no violation: unchanged
    with_zero = torch.cat([M, torch.zeros(1, 3, dtype=torch.float64)])
    torch.testing.assert_close(qp.project(p, with_zero)[0], qp.project(p, M)[0])
    a, proj_a = qp.project(p, M)
    b, proj_b = qp.project(3e-9 * p, 7e5 * M)
    torch.testing.assert_close(b, 3e-9 * a)
    torch.testing.assert_close(proj_b.z * 7e5 / 3e-9, proj_a.z)


def test_margin_constraints_hold():
    gen = torch.Generator().manual_seed(3)
    M = torch.randn(4, 20, generator=gen, dtype=torch.float64)
    p = torch.randn(20, generator=gen, dtype=torch.float64)
    p_new, proj = qp.project(p, M, rho=0.1)
    feas, comp = kkt_residuals(p, M, p_new, proj.z[0], rho=0.1)
    assert feas < 1e-8 and comp < 1e-8


def test_per_layer_batched_equals_layers_one_by_one():
    gen = torch.Generator().manual_seed(4)
    sizes = [7, 1, 12, 3, 9]
    M = torch.randn(5, sum(sizes), generator=gen)
    p = torch.randn(sum(sizes), generator=gen)
    batched, proj = qp.project(p, M, sizes)
    assert proj.z.shape == (len(sizes), 5)
    parts, a = [], 0
    for n in sizes:
        parts.append(qp.project(p[a:a + n], M[:, a:a + n])[0])
        a += n
    torch.testing.assert_close(batched, torch.cat(parts), rtol=0, atol=1e-6)
    assert not torch.allclose(batched, qp.project(p, M)[0])  # per layer differs from one whole-vector QP


def test_rounding_level_gram_noise_does_not_make_the_active_set_cycle():
    """A Gram matrix computed in float32 is inconsistent at ~1e-7; with a tighter tolerance Lawson-Hanson can re-add
    a column it just dropped forever. The solver must still converge, to a point that is KKT at that noise level."""
    gen = torch.Generator().manual_seed(5)
    for _ in range(40):
        M = torch.randn(30, 200, generator=gen, dtype=torch.float64)
        M[10:] = M[:20] + 1e-4 * torch.randn(20, 200, generator=gen, dtype=torch.float64)  # near-parallel columns
        p = -M[:15].sum(0) + 0.5 * torch.randn(200, generator=gen, dtype=torch.float64)
        G = qp.gram(torch.cat([M, p.unsqueeze(0)]), [(0, 200)])
        noise = 1e-7 * torch.randn(G.shape, generator=gen, dtype=torch.float64) * G.abs()
        G = G + (noise + noise.transpose(1, 2)) / 2
        proj = qp.solve(G[:, :30, :30], G[:, :30, 30], G[:, 30, 30], tol=1e-12)
        assert bool(proj.converged.all())
        feas, _ = kkt_residuals(p, M, p + proj.z[0] @ M, proj.z[0])
        assert feas < 1e-4


def test_a_problem_that_does_not_converge_leaves_its_segment_uncorrected(monkeypatch):
    """The fallback is the solver's own: every caller (GradMA's worker and server) gets p back for that segment."""
    sizes = [3, 3]
    M = torch.tensor([[0.0, 1.0, 0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    p = torch.tensor([1.0, -2.0, 0.5, 1.0, -2.0, 0.5], dtype=torch.float64)
    exact, _ = qp.project(p, M, sizes)
    real = qp.nnls_gram

    def second_fails(Q, q, usable, tol=qp.TOL):
        z, ok = real(Q, q, usable, tol)
        return z, torch.tensor([True, False])

    monkeypatch.setattr(qp, "nnls_gram", second_fails)
    p_new, proj = qp.project(p, M, sizes)
    assert proj.converged.tolist() == [True, False] and float(proj.z[1].abs().sum()) == 0
    torch.testing.assert_close(p_new[:3], exact[:3])
    assert torch.equal(p_new[3:], p[3:]) and not torch.equal(exact[3:], p[3:])
