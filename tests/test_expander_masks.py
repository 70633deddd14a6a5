"""Expander masks: exact density, balanced degrees, σ₂ against networkx and numpy, overlap avoidance
and its fallback when the matrix is full."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from clbench_plugins._shared.masked import masks as M
from clbench_plugins._shared.masked.masks import MaskError, MaskSpec, make_mask

from clbench.errors import ConfigError


def _degrees(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return mask.sum(axis=1), mask.sum(axis=0)


def _sigma2_networkx(mask: np.ndarray) -> float:
    """σ₂ of D_L^{-1/2} A D_R^{-1/2} from networkx's normalised Laplacian of the bipartite graph:
    its eigenvalues are 1 ∓ σ_i, so σ₂ = 1 − (second smallest eigenvalue)."""
    g = nx.bipartite.from_biadjacency_matrix(sp.csr_matrix(mask.astype(float)))
    g.remove_nodes_from([v for v in list(g.nodes) if g.degree(v) == 0])
    eig = np.sort(nx.normalized_laplacian_spectrum(g))
    return float(1.0 - eig[1])


@pytest.mark.parametrize("shape,density", [((64, 224), 0.1), ((224, 64), 0.1), ((100, 37), 0.23),
                                           ((300, 300), 0.01), ((48, 48), 0.5),
                                           ((256, 64), 0.01), ((64, 256), 0.01)])  # < 1 edge per row/col: degrees 0/1
def test_random_mask_exact_density_and_balanced_degrees(shape, density):
    mask, stats = make_mask(shape, MaskSpec(density), np.random.default_rng(1))
    rows, cols = shape
    nnz = round(density * rows * cols)
    assert mask.sum() == nnz == stats.nnz
    dl, dr = _degrees(mask)
    assert dl.min() >= math.floor(nnz / rows) and dl.max() <= math.ceil(nnz / rows)
    assert dr.min() >= math.floor(nnz / cols) and dr.max() <= math.ceil(nnz / cols)
    assert stats.sigma2 is not None and stats.sigma2 <= 1.1 * stats.bound


def test_sigma2_matches_networkx_and_numpy():
    rng = np.random.default_rng(3)
    a = M.random_biregular(60, 150, 900, rng)  # degrees 15 and 6
    mask = M.to_dense(a)
    ours = M.second_singular_value(a)
    assert ours == pytest.approx(_sigma2_networkx(mask), abs=1e-4)
    n = mask / np.sqrt(np.outer(mask.sum(1), mask.sum(0)))
    assert ours == pytest.approx(np.linalg.svd(n, compute_uv=False)[1], abs=1e-4)


def test_sigma2_of_networkx_regular_graph_is_its_second_eigenvalue():
    # The adjacency of nx.random_regular_graph is the biadjacency of its double cover (docs/reference-code.md §4).
    g = nx.random_regular_graph(8, 200, seed=5)
    adj = nx.to_numpy_array(g, nodelist=range(200))
    lam = np.sort(np.abs(np.linalg.eigvalsh(adj)))[::-1]
    assert M.second_singular_value(sp.csr_matrix(adj)) == pytest.approx(lam[1] / 8, abs=1e-4)


def test_structured_graph_fails_the_spectral_check(monkeypatch):
    # Havel–Hakimi gives exact degrees but a banded, badly expanding graph (docs/reference-code.md §4).
    g = nx.bipartite.havel_hakimi_graph([4] * 80, [4] * 80)
    band = sp.csr_matrix(nx.bipartite.biadjacency_matrix(g, row_order=range(80), column_order=range(80, 160)),
                         dtype=np.float32)
    assert M.second_singular_value(band) > 1.1 * M.ramanujan_bound(4, 4)  # here: disconnected, σ₂ = 1
    monkeypatch.setattr(M, "sample", lambda rows, cols, spec, rng, used: (band, band, "ramanujan"))
    with pytest.raises(MaskError, match="σ₂"):
        make_mask((80, 80), MaskSpec(0.05, max_tries=3), np.random.default_rng(0))


def _jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.logical_and(a, b).sum() / np.logical_or(a, b).sum())


def test_independent_policy_overlaps_by_chance_and_fails_a_tight_budget():
    # Before issue 15 (kept as overlap_policy="independent"): masks are independent, so two density-p
    # masks overlap by p/(2−p) in expectation (≈ 0.0526 at 10 %), and δ below that is a MaskError.
    rng = np.random.default_rng(0)
    spec = MaskSpec(0.1, overlap_policy="independent")
    first, _ = make_mask((300, 800), spec, rng)
    second, stats = make_mask((300, 800), spec, rng, [M.pack(first)])
    assert stats.jaccard == (pytest.approx(_jaccard(first, second)),)
    assert stats.jaccard[0] == pytest.approx(0.1 / 1.9, abs=0.004)  # sd ≈ 0.0008 at 24 000 edges
    assert stats.shared == np.logical_and(first, second).sum()
    with pytest.raises(MaskError, match="overlap"):
        make_mask((300, 800), MaskSpec(0.1, overlap=0.03, max_tries=3, overlap_policy="independent"), rng,
                  [M.pack(first)])


def test_avoid_policy_gives_disjoint_masks_with_exact_degrees_and_the_spectral_bound():
    rows, cols, p = 120, 400, 0.1
    rng = np.random.default_rng(1)
    masks: list[np.ndarray] = []
    for _ in range(4):
        mask, stats = make_mask((rows, cols), MaskSpec(p, overlap=0.03), rng, [M.pack(m) for m in masks])
        dl, dr = _degrees(mask)
        assert mask.sum() == round(p * rows * cols) and set(dl) == {40} and set(dr) == {12}
        assert stats.jaccard == tuple(_jaccard(mask, m) for m in masks) == (0.0,) * len(masks)  # vs p/(2−p) ≈ 0.053
        assert stats.shared == 0
        n = mask / np.sqrt(np.outer(dl, dr))
        sigma2 = np.linalg.svd(n, compute_uv=False)[1]
        assert stats.sigma2 == pytest.approx(sigma2, abs=1e-4) and sigma2 <= 1.1 * M.ramanujan_bound(40, 12)
        masks.append(mask)
    first, _ = make_mask((rows, cols), MaskSpec(p, overlap_policy="independent"), np.random.default_rng(1))
    assert (first == masks[0]).all()  # nothing to avoid: the first task's mask is the independent one


def test_avoid_policy_draws_uniform_masks_from_the_least_used_positions():
    rng = np.random.default_rng(2)
    spec = MaskSpec(0.4, construction="uniform")
    masks = [make_mask((64, 96), spec, rng)[0]]
    second, stats = make_mask((64, 96), spec, rng, [M.pack(masks[0])])
    assert second.sum() == round(0.4 * 64 * 96) and not np.logical_and(masks[0], second).any()
    assert stats.shared == 0 and stats.sigma2 == pytest.approx(_sigma2_networkx(second), abs=1e-4)
    masks.append(second)
    with pytest.warns(M.MaskWarning):  # 80 % used: the third takes every free position and 20 % of the rest
        third, stats = make_mask((64, 96), spec, rng, [M.pack(m) for m in masks])
    free = ~masks[0] & ~masks[1]
    assert third[free].all() and stats.shared == third.sum() - free.sum() == np.logical_and(third, ~free).sum()
    assert MaskSpec(0.1).avoids and MaskSpec(0.1, construction="uniform", block_degree=4).avoids
    assert not MaskSpec(0.1, construction="algebraic").avoids and not MaskSpec(0.1, block_degree=4).avoids
    assert not MaskSpec(0.1, overlap_policy="independent").avoids


def test_full_matrix_falls_back_to_the_least_used_edges_with_a_warning():
    # Three 30 % masks cover 90 %: the fourth must reuse at least 9000 − 3000 = 6000 edges, the fifth
    # fits on positions used at most once and must not touch the ones the fourth reused.
    rows, cols, p = 100, 300, 0.3
    rng = np.random.default_rng(0)
    masks: list[np.ndarray] = []
    for _ in range(3):
        masks.append(make_mask((rows, cols), MaskSpec(p), rng, [M.pack(m) for m in masks])[0])
    assert np.sum(masks, axis=0).max() == 1  # pairwise disjoint
    with pytest.warns(M.MaskWarning, match="reuse the least-used"):
        fourth, stats = make_mask((rows, cols), MaskSpec(p, overlap=0.03), rng, [M.pack(m) for m in masks])
    used = np.sum(masks, axis=0)
    assert stats.shared == np.logical_and(fourth, used > 0).sum()
    assert 6000 <= stats.shared <= 6000 * 1.02 and max(stats.jaccard) > 0.03  # over δ: warned, not raised
    dl, dr = _degrees(fourth)
    assert set(dl) == {90} and set(dr) == {30}
    masks.append(fourth)
    used = np.sum(masks, axis=0)
    with pytest.warns(M.MaskWarning):
        fifth, stats = make_mask((rows, cols), MaskSpec(p), rng, [M.pack(m) for m in masks])
    assert not np.logical_and(fifth, used >= 2).any() and stats.shared == np.logical_and(fifth, used > 0).sum()
    assert stats.sigma2 <= 1.1 * stats.bound


def test_uniform_mask_is_exact_but_irregular():
    mask, stats = make_mask((128, 128), MaskSpec(0.05, construction="uniform"), np.random.default_rng(0))
    assert mask.sum() == round(0.05 * 128 * 128)
    dl, _ = _degrees(mask)
    assert dl.max() - dl.min() > 2  # binomial degrees, unlike the expander's ±1
    assert stats.sigma2 == pytest.approx(_sigma2_networkx(mask), abs=1e-4)


def test_mgg_base_is_networkx_graph_collapsed_and_blow_up_keeps_its_spectrum():
    base = M.mgg_base(5)
    g = nx.Graph(nx.margulis_gabber_galil_graph(5))
    ref = nx.to_numpy_array(g, nodelist=sorted(g.nodes())) > 0
    assert (base == ref).all()
    s_base = M.second_singular_value(sp.csr_matrix(base, dtype=np.float32))
    assert s_base <= M.MGG_BOUND
    lifted = M.blow_up(base, 25 * 3, 25 * 2)  # equal blocks: Kronecker product with a 3×2 ones matrix
    assert (M.to_dense(lifted) == np.kron(base, np.ones((3, 2), dtype=bool))).all()
    assert M.second_singular_value(lifted) == pytest.approx(s_base, abs=1e-4)


def test_algebraic_and_block_constructions_pass_their_checks():
    mask, stats = make_mask((162, 81), MaskSpec(0.1, construction="algebraic"), np.random.default_rng(0))
    assert stats.bound == pytest.approx(M.MGG_BOUND) and stats.sigma2 <= 1.1 * M.MGG_BOUND
    assert 0.05 < stats.density < 0.15
    mask, stats = make_mask((160, 320), MaskSpec(0.1, block_degree=4), np.random.default_rng(0))
    assert mask.mean() == pytest.approx(0.1, abs=0.01)  # 40 column blocks of 8, 4 of them per block row
    assert stats.sigma2 <= 1.1 * stats.bound


def test_same_seed_same_mask_and_settings_are_validated():
    a, _ = make_mask((40, 60), MaskSpec(0.2), np.random.default_rng(7))
    b, _ = make_mask((40, 60), MaskSpec(0.2), np.random.default_rng(7))
    assert (a == b).all()
    with pytest.raises(ConfigError, match="construction"):
        MaskSpec(0.1, construction="lps")
    with pytest.raises(ConfigError, match="density"):
        MaskSpec(0.0)
    with pytest.raises(ConfigError, match="overlap_policy"):
        MaskSpec(0.1, overlap_policy="disjoint")
    earlier = [M.pack(a)]
    c, _ = make_mask((40, 60), MaskSpec(0.2), np.random.default_rng(8), earlier)
    d, _ = make_mask((40, 60), MaskSpec(0.2), np.random.default_rng(8), earlier)
    assert (c == d).all() and not (a & c).any()
