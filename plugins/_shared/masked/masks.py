"""Sparse binary masks for weight matrices: bipartite expanders, uniform random masks, overlap control.

A mask of an ``rows × cols`` weight matrix is the biadjacency matrix of a bipartite graph between the
matrix's output units (rows) and input units (columns). Three constructions:

``random`` (default)
    A random biregular bipartite graph with exact edge count ``round(density·rows·cols)``, every row
    degree ⌊d_L⌋ or ⌈d_L⌉ and every column degree ⌊d_R⌋ or ⌈d_R⌉. Built as a *union of random
    permutation matchings*: the column stubs are laid out as a sequence of independent random
    permutations of the columns (the last one cut short), and the rows, in random order, take
    consecutive chunks of it. A chunk inside one permutation has no repeated column; a chunk that
    straddles two permutations may, and the repeats are swapped with later entries of the second
    permutation (always possible because ``d_L ≤ cols``). So there are no collisions to repair, no
    edge is lost, and the whole thing is O(nnz) vectorised numpy.
``algebraic``
    The Margulis–Gabber–Galil graph of networkx on m² vertices (degree 8 as networkx builds it, a
    multigraph; with parallel edges collapsed, 4 to 8 per vertex: docs/reference-code.md §4) as a
    *base* graph, blown up to the matrix shape: base vertex i owns a contiguous block of rows (and of
    columns), and every base edge becomes a dense block (the Kronecker product with an all-ones
    matrix). The non-trivial normalised spectrum of a blow-up with equal blocks is the base
    graph's, so the expansion certificate carries over. m is chosen so that 8/m² (an upper bound on the
    base density) is the nearest to the requested density; when the shape is not a multiple of m the
    blocks differ by one row/column and degrees are only approximately regular (reported).
``block`` (``block_degree = d > 0``)
    The paper's "degree 4 or 8 at 10 % density" reading: a random d-left-regular base graph on
    ``n_r × n_c`` super-vertices with ``n_c = round(d / density)`` (and ``n_r`` in proportion to the
    shape), blown up like ``algebraic``. Degree d refers to the base graph; the mask has the requested
    density up to the rounding of block sizes.
``uniform``
    ``nnz`` positions drawn uniformly without replacement: the equally sparse random mask of the
    ablation. No regularity, no spectral check.

Overlap with earlier tasks' masks of the same matrix (``MaskSpec.overlap_policy``):

``avoid`` (default; paper §4.1 "as disjoint as possible", Alg. 1 line 7, App. A.4 step 4 "greedily
resampling edges")
    The sampled graph's edges that earlier masks already hold are moved off them by degree-preserving
    edge swaps ((r₁,c₁),(r₂,c₂) → (r₁,c₂),(r₂,c₁)), so row and column degrees stay exactly those of
    the sample. A swap is taken only when it lowers the number of earlier masks sharing the two edges,
    so the mask ends disjoint from all earlier ones while the graph allows it. When capacity runs out
    (the earlier masks cover so much that no disjoint mask with these degrees is left, or the swaps
    stall near that point), the remaining shared edges sit on the least-used positions the swaps reached;
    their number is ``MaskStats.shared`` and a :class:`MaskWarning` says so. A ``uniform`` mask, which has
    no degrees to keep, is drawn uniformly among the least-used positions directly. The blow-ups
    (``algebraic``, ``block``) have no single edges to move and are resampled whole, as under
    ``independent``.
``independent``
    Each mask is sampled independently of the earlier ones (expected Jaccard p/(2−p) between two
    density-p masks, ≈ 0.053 at 10 %) and resampled whole when it exceeds δ, up to ``max_tries``.

Expansion is measured on the degree-normalised biadjacency N = D_L^{-1/2} A D_R^{-1/2}, whose top
singular value is exactly 1 (singular vectors √d_L, √d_R). Its second singular value σ₂ is computed
by Lanczos (``scipy.sparse.linalg.eigsh``) on the Gram operator of the deflated matrix N − u₁v₁ᵀ,
never forming a dense matrix. For a (d_L, d_R)-biregular graph σ₂ is compared with the bipartite
Ramanujan bound (√(d_L−1) + √(d_R−1)) / √(d_L·d_R) (= 2√(d−1)/d when both degrees are d).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, eigsh

from clbench.errors import ConfigError

CONSTRUCTIONS = ("random", "algebraic", "uniform")
OVERLAP_POLICIES = ("avoid", "independent")
SWAP_PATIENCE = 10  # rounds in a row with (almost) no accepted swap before the avoidance stops
SWAP_BATCH = 1 << 14  # at least this many swap attempts a round (few movable edges: several partners each)
MGG_BOUND = 5 * math.sqrt(2) / 8  # Gabber–Galil: λ₂ ≤ 5√2 for the degree-8 MGG graph, normalised by d = 8


class MaskError(ConfigError):
    """No mask satisfying the constraints was found within the allowed number of tries."""


class MaskWarning(UserWarning):
    """A mask had to share edges with earlier masks: the matrix has no room left for a disjoint one."""


@dataclass(frozen=True)
class MaskSpec:
    """What one mask must satisfy."""

    density: float
    construction: str = "random"
    block_degree: int = 0  # 0: degree implied by the density; d > 0: block expander on a d-regular base graph
    epsilon: float = 0.1  # slack on the Ramanujan bound (σ₂ ≤ (1+ε)·bound)
    overlap: float = 1.0  # δ: max Jaccard against every earlier mask of the matrix (independent: resample above it)
    max_tries: int = 20  # resamples before giving up
    spectral_check: bool = True
    overlap_policy: str = "avoid"  # avoid: swap edges off earlier masks (§4.1, App. A.4); independent: resample whole

    def __post_init__(self) -> None:
        if not 0.0 < self.density <= 1.0:
            raise ConfigError(f"density={self.density} must lie in (0, 1]")
        if self.construction not in CONSTRUCTIONS:
            raise ConfigError(f"construction={self.construction!r}: choose one of {list(CONSTRUCTIONS)}")
        if self.block_degree < 0:
            raise ConfigError(f"block_degree={self.block_degree} must be ≥ 0")
        if self.epsilon < 0:
            raise ConfigError(f"epsilon={self.epsilon} must be ≥ 0")
        if not 0.0 <= self.overlap <= 1.0:
            raise ConfigError(f"overlap={self.overlap} must lie in [0, 1]")
        if self.overlap_policy not in OVERLAP_POLICIES:
            raise ConfigError(f"overlap_policy={self.overlap_policy!r}: choose one of {list(OVERLAP_POLICIES)}")
        if self.max_tries < 1:
            raise ConfigError(f"max_tries={self.max_tries} must be ≥ 1")

    @property
    def avoids(self) -> bool:
        """Whether masks avoid earlier masks' edges: under ``avoid``, for the constructions made of single
        edges (``uniform``, and ``random`` without ``block_degree``; a blow-up's edges come in blocks)."""
        single = self.construction == "uniform" or (self.construction == "random" and not self.block_degree)
        return self.overlap_policy == "avoid" and single


@dataclass(frozen=True)
class MaskStats:
    """What was checked about one mask (reported in the result file)."""

    nnz: int
    density: float
    row_degrees: tuple[int, int]  # (min, max)
    col_degrees: tuple[int, int]
    sigma2: float | None  # second singular value of the normalised biadjacency (None: not computed)
    bound: float | None  # the bound σ₂ was checked against (Ramanujan for the mean degrees; MGG's for algebraic)
    jaccard: tuple[float, ...]  # against each earlier mask, in task order
    tries: int
    shared: int = 0  # edges that some earlier mask also holds (> 0 under avoid only when capacity ran out)

    @property
    def spectral_gap(self) -> float | None:
        return None if self.sigma2 is None else 1.0 - self.sigma2

    def as_dict(self) -> dict[str, object]:
        return {"nnz": self.nnz, "density": self.density, "row_degrees": list(self.row_degrees),
                "col_degrees": list(self.col_degrees), "sigma2": self.sigma2, "bound": self.bound,
                "spectral_gap": self.spectral_gap, "jaccard": list(self.jaccard), "tries": self.tries,
                "shared": self.shared}


# --------------------------------------------------------------------------- degrees
def edge_count(rows: int, cols: int, density: float) -> int:
    return int(round(density * rows * cols))


def balanced_degrees(n: int, total: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` integers summing to ``total``, each ⌊total/n⌋ or ⌈total/n⌉, the larger ones at random places."""
    base, extra = divmod(total, n)
    deg = np.full(n, base, dtype=np.int64)
    deg[rng.choice(n, size=extra, replace=False)] += 1
    return deg


def ramanujan_bound(d_left: float, d_right: float) -> float:
    """(√(d_L−1) + √(d_R−1)) / √(d_L·d_R): the second singular value of a Ramanujan biregular graph."""
    if d_left <= 1 or d_right <= 1:
        return 1.0
    return (math.sqrt(d_left - 1) + math.sqrt(d_right - 1)) / math.sqrt(d_left * d_right)


# --------------------------------------------------------------------------- constructions
def random_biregular(rows: int, cols: int, nnz: int, rng: np.random.Generator) -> sp.csr_matrix:
    """A random bipartite graph with ``nnz`` distinct edges and balanced degrees, as a CSR biadjacency.

    Union of random permutation matchings (see the module docstring); O(nnz) time and memory.
    """
    row_deg = balanced_degrees(rows, nnz, rng)
    indptr = np.concatenate(([0], np.cumsum(row_deg))).astype(np.int64)
    if nnz == 0:
        return sp.csr_matrix((np.zeros(0, np.float32), np.zeros(0, np.int32), indptr), shape=(rows, cols))
    full, rest = divmod(nnz, cols)
    n_perm = full + (1 if rest else 0)
    perms = rng.permuted(np.tile(np.arange(cols, dtype=np.int32), (n_perm, 1)), axis=1)
    row_order = rng.permutation(rows)
    deg_in_order = row_deg[row_order]
    starts = np.concatenate(([0], np.cumsum(deg_in_order)[:-1]))
    _separate_straddling_chunks(perms, starts, deg_in_order, cols)
    stream = perms.reshape(-1)[:nnz]
    start_of_row = np.empty(rows, dtype=np.int64)
    start_of_row[row_order] = starts  # where row i's chunk begins in the stream
    gather = np.repeat(start_of_row - indptr[:-1], row_deg) + np.arange(nnz, dtype=np.int64)
    return sp.csr_matrix((np.ones(nnz, np.float32), stream[gather], indptr), shape=(rows, cols))


def _separate_straddling_chunks(perms: np.ndarray, starts: np.ndarray, deg: np.ndarray, cols: int) -> None:
    """Make every chunk that spans two permutations repeat-free, in place, keeping each row a permutation.

    For a chunk with tail A (end of permutation p) and head B (first b entries of permutation p+1),
    a column of B that is also in A is swapped with an entry of permutation p+1 beyond position b
    whose column is in neither A nor B; there are always enough (|A ∪ B| ≤ d_L ≤ cols).
    """
    ends = starts + deg
    # empty chunks (rows of degree 0 when density·cols < 1) never straddle
    straddle = np.nonzero((deg > 0) & ((starts // cols) != ((ends - 1) // cols)))[0]
    for i in straddle:
        p, a0 = divmod(int(starts[i]), cols)
        b = int(ends[i]) - (p + 1) * cols
        tail = perms[p, a0:]
        head = perms[p + 1, :b]
        clash = np.nonzero(np.isin(head, tail, assume_unique=True))[0]
        if clash.size == 0:
            continue
        later = np.arange(b, cols)
        free = later[~np.isin(perms[p + 1, b:], tail, assume_unique=True)]
        # later chunks of permutation p+1 start at b: any free position there is equally random
        pick = free[:clash.size] if free.size >= clash.size else None
        if pick is None:  # pragma: no cover - impossible when deg ≤ cols
            raise MaskError("internal: no free column to separate a straddling chunk")
        perms[p + 1, clash], perms[p + 1, pick] = perms[p + 1, pick].copy(), perms[p + 1, clash].copy()


def csr_from_edges(rows: int, cols: int, r: np.ndarray, c: np.ndarray) -> sp.csr_matrix:
    """CSR biadjacency of distinct edges (r, c), built by a counting sort on rows (no duplicate summing)."""
    if r.size > 1 and not bool(np.all(r[:-1] <= r[1:])):
        order = np.argsort(r, kind="stable")
        r, c = r[order], c[order]
    indptr = np.concatenate(([0], np.cumsum(np.bincount(r, minlength=rows)))).astype(np.int64)
    return sp.csr_matrix((np.ones(r.size, np.float32), c.astype(np.int32), indptr), shape=(rows, cols))


def uniform_random(rows: int, cols: int, nnz: int, rng: np.random.Generator) -> sp.csr_matrix:
    """``nnz`` positions drawn uniformly without replacement (the equally sparse random mask)."""
    flat = np.sort(rng.choice(rows * cols, size=nnz, replace=False))
    return csr_from_edges(rows, cols, flat // cols, flat % cols)


def least_used(rows: int, cols: int, nnz: int, used: np.ndarray, rng: np.random.Generator) -> sp.csr_matrix:
    """``nnz`` positions drawn uniformly among the least-used ones (``used``: how many earlier masks hold
    each flat position): all positions below some usage level, and a uniform sample of that level."""
    level = int(np.searchsorted(np.cumsum(np.bincount(used)), nnz))
    below = np.flatnonzero(used < level)
    tied = rng.choice(np.flatnonzero(used == level), size=nnz - below.size, replace=False)
    flat = np.sort(np.concatenate([below, tied]))
    return csr_from_edges(rows, cols, flat // cols, flat % cols)


def mgg_base(m: int) -> np.ndarray:
    """Biadjacency (m²×m², 0/1) of networkx's Margulis–Gabber–Galil graph with parallel edges collapsed.

    Read as the bipartite double cover of the base graph: row i and column j are joined when i ~ j.
    """
    import networkx as nx

    g = nx.margulis_gabber_galil_graph(m)
    nodes = sorted(g.nodes())
    index = {v: i for i, v in enumerate(nodes)}
    a = np.zeros((len(nodes), len(nodes)), dtype=bool)
    for u, v in g.edges():
        a[index[u], index[v]] = a[index[v], index[u]] = True
    return a


def random_base(n_rows: int, n_cols: int, degree: int, rng: np.random.Generator) -> np.ndarray:
    """A random base graph with left degree ``degree`` (balanced right degrees), as a dense bool array."""
    if degree > n_cols:
        raise ConfigError(f"block_degree={degree} exceeds the {n_cols} column blocks")
    return random_biregular(n_rows, n_cols, n_rows * degree, rng).toarray().astype(bool)


def block_index(n: int, blocks: int) -> np.ndarray:
    """Block of each of ``n`` units split into ``blocks`` contiguous blocks differing by at most one."""
    return np.repeat(np.arange(blocks), [len(b) for b in np.array_split(np.arange(n), blocks)])


def blow_up(base: np.ndarray, rows: int, cols: int) -> sp.csr_matrix:
    """The ``rows × cols`` mask in which base entry (i, j) becomes a dense block (Kronecker-like lift)."""
    n_r, n_c = base.shape
    if n_r > rows or n_c > cols:
        raise ConfigError(f"base graph {n_r}×{n_c} is larger than the {rows}×{cols} matrix")
    active = base[block_index(rows, n_r)][:, block_index(cols, n_c)]
    return sp.csr_matrix(active, dtype=np.float32)


def algebraic_base(rows: int, cols: int, density: float) -> np.ndarray:
    """MGG base graph on m² vertices with m from the density (collapsed degree ≤ 8, so density ≈ 8/m²)."""
    m = max(2, int(round(math.sqrt(8.0 / density))))
    while m * m > min(rows, cols) and m > 2:
        m -= 1
    return mgg_base(m)


def permute(a: sp.csr_matrix, rng: np.random.Generator) -> sp.csr_matrix:
    """Relabel rows and columns at random (the spectrum is unchanged)."""
    pr, pc = rng.permutation(a.shape[0]), rng.permutation(a.shape[1])
    return sp.csr_matrix(a[pr][:, pc])


# --------------------------------------------------------------------------- overlap avoidance
def usage(earlier: Sequence[np.ndarray], size: int) -> np.ndarray:
    """How many of the bit-packed ``earlier`` masks (at least one) hold each of ``size`` flat positions."""
    count = np.unpackbits(earlier[0], count=size)
    if len(earlier) > 255:
        count = count.astype(np.uint16)
    for e in earlier[1:]:
        count += np.unpackbits(e, count=size)
    return count


def avoid_used(a: sp.csr_matrix, mask: np.ndarray, used: np.ndarray, rng: np.random.Generator) -> sp.csr_matrix:
    """``a`` with its edges moved off positions that earlier masks use (``used``: their count per flat
    position) by degree-preserving edge swaps; ``mask``, the dense bool form of ``a``, is updated in place.

    Each round pairs the edges that could still move (usage above the matrix's least usage) with each
    other, or, once fewer than 2·:data:`SWAP_BATCH` are left, each with random edges of the mask
    (several when fewer than :data:`SWAP_BATCH`), and swaps their columns, (r₁,c₁),(r₂,c₂) →
    (r₁,c₂),(r₂,c₁), when both new positions are free in the mask and their total usage is lower.
    Swaps that share an edge or a new position keep one of them, so a round's swaps apply at once. Rows keep their edges and columns are only exchanged: every degree is kept.
    Stops when nothing can move or after :data:`SWAP_PATIENCE` rounds in a row that move fewer than 1 %
    of the movable edges (capacity is out: what is left sits on the least-used positions reached).
    """
    rows, cols = a.shape
    taken = mask.reshape(-1)
    index = np.int32 if rows * cols < 2**31 else np.int64
    base = np.repeat(np.arange(0, rows * cols, cols, dtype=index), np.diff(a.indptr))  # r·cols per edge
    c = a.indices.astype(index)
    floor = int(used.min())
    cost = used[base + c].astype(np.int32)  # per edge: how many earlier masks hold it
    cand = np.flatnonzero(cost > floor)
    owner = np.empty(c.size, dtype=index)
    idle = 0
    while cand.size and idle < SWAP_PATIENCE:
        if cand.size >= 2 * SWAP_BATCH:  # many movable edges: pair them with each other
            i, j = rng.permutation(cand).astype(index)[:cand.size // 2 * 2].reshape(2, -1)
        else:
            i = np.repeat(cand.astype(index), max(1, SWAP_BATCH // cand.size))
            j = rng.integers(c.size, size=i.size, dtype=index)
        swaps = np.stack([i, j, base[i] + c[j], base[j] + c[i]])  # the edges and their new positions
        swaps = swaps[:, ~taken[swaps[2]] & ~taken[swaps[3]]]
        i, j, new_i, new_j = swaps
        swaps = swaps[:, used[new_i].astype(np.int32) + used[new_j] < cost[i] + cost[j]]
        i, j, new_i, new_j = swaps[:, _alone(swaps, owner, taken)]
        taken[base[i] + c[i]] = taken[base[j] + c[j]] = False
        taken[new_i] = taken[new_j] = True
        c[i], c[j] = c[j], c[i]
        cost[i], cost[j] = used[new_i], used[new_j]
        idle = idle + 1 if i.size < max(1, cand.size // 100) else 0
        movable = np.zeros(c.size, dtype=bool)
        movable[cand] = movable[j] = True
        cand = np.flatnonzero(movable)
        cand = cand[cost[cand] > floor]
    return sp.csr_matrix((a.data, c.astype(np.int32), a.indptr), shape=a.shape)


def _alone(swaps: np.ndarray, owner: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """Which swaps (columns: edge i, edge j, new position of i, new position of j) share neither an edge
    nor a new position with another, so that all can apply at once. An edge in several swaps stays
    with the last one written into ``owner`` (scratch, one slot per edge), the edges to move written
    last so that they win over partners; then a new position that several of the remaining swaps would
    create drops them all (rare: they must agree on row and column). New positions are free in
    ``taken`` (the flat mask), which marks the repeated ones for a moment."""
    swap = np.arange(swaps.shape[1], dtype=owner.dtype)
    owner[swaps[1]] = swap
    owner[swaps[0]] = swap
    alone = (owner[swaps[0]] == swap) & (owner[swaps[1]] == swap)
    new = swaps[2:, alone]
    ordered = np.sort(new, axis=None)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if repeated.size:
        taken[repeated] = True
        alone[alone] = ~(taken[new[0]] | taken[new[1]])
        taken[repeated] = False
    return alone


# --------------------------------------------------------------------------- checks
def degrees(a: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    return np.diff(a.indptr), np.bincount(a.indices, minlength=a.shape[1])


def second_singular_value(a: sp.spmatrix, tol: float = 1e-3) -> float:
    """σ₂ of N = D_L^{-1/2} A D_R^{-1/2}: Lanczos on the Gram operator of N − u₁v₁ᵀ (smaller side).

    u₁ ∝ √d_L and v₁ ∝ √d_R are N's top singular vectors exactly (N v₁ = u₁ for any degrees), so the
    deflation is exact; isolated vertices get weight 0. The degree scalings are applied to vectors and
    Aᵀ is a CSR copy (CSR matvecs are 4× faster than CSC ones here): memory is twice the CSR of A.
    """
    a = sp.csr_matrix(a, dtype=np.float32)
    rows, cols = a.shape
    dl, dr = degrees(a)
    il = np.where(dl > 0, 1.0 / np.sqrt(np.maximum(dl, 1)), 0.0).astype(np.float32)
    ir = np.where(dr > 0, 1.0 / np.sqrt(np.maximum(dr, 1)), 0.0).astype(np.float32)
    u1 = (np.sqrt(dl) / np.linalg.norm(np.sqrt(dl))).astype(np.float32)
    v1 = (np.sqrt(dr) / np.linalg.norm(np.sqrt(dr))).astype(np.float32)
    if min(rows, cols) <= 32:
        dense = il[:, None] * a.toarray() * ir[None, :] - np.outer(u1, v1)
        return float(np.linalg.svd(dense.astype(np.float64), compute_uv=False)[0])
    csc = a.tocsc()
    at = sp.csr_matrix((csc.data, csc.indices, csc.indptr), shape=(cols, rows))

    def n_mv(x: np.ndarray) -> np.ndarray:  # (N − u₁v₁ᵀ) x
        return il * (a @ (ir * x)) - u1 * (v1 @ x)

    def nt_mv(y: np.ndarray) -> np.ndarray:  # (N − u₁v₁ᵀ)ᵀ y
        return ir * (at @ (il * y)) - v1 * (u1 @ y)

    if rows <= cols:
        size = rows

        def gram(x: np.ndarray) -> np.ndarray:
            return n_mv(nt_mv(np.asarray(x, dtype=np.float32).ravel()))
    else:
        size = cols

        def gram(x: np.ndarray) -> np.ndarray:
            return nt_mv(n_mv(np.asarray(x, dtype=np.float32).ravel()))

    op = LinearOperator((size, size), matvec=gram, dtype=np.float32)
    v0 = np.random.default_rng(0).standard_normal(size).astype(np.float32)
    vals = eigsh(op, k=1, which="LA", tol=tol, ncv=min(size - 1, 24), v0=v0, return_eigenvectors=False)
    return float(math.sqrt(max(float(vals[0]), 0.0)))


def jaccard_packed(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard index of two bit-packed masks (``np.packbits`` of the flattened bool arrays)."""
    inter = int(np.bitwise_count(a & b).sum())
    union = int(np.bitwise_count(a | b).sum())
    return inter / union if union else 0.0


def pack(mask: np.ndarray) -> np.ndarray:
    return np.packbits(mask.reshape(-1))


def to_dense(a: sp.csr_matrix) -> np.ndarray:
    """The bool mask of a CSR biadjacency (rows·cols bytes: the output format the model needs)."""
    mask = np.zeros(a.shape, dtype=bool)
    mask[np.repeat(np.arange(a.shape[0]), np.diff(a.indptr)), a.indices] = True
    return mask


# --------------------------------------------------------------------------- the entry point
def sample(rows: int, cols: int, spec: MaskSpec, rng: np.random.Generator,
           used: np.ndarray | None = None) -> tuple[sp.csr_matrix, sp.csr_matrix, str]:
    """One candidate biadjacency, the graph whose σ₂ certifies it (itself, or the base graph of a
    blow-up, whose non-trivial spectrum the blow-up inherits) and the bound: "ramanujan", "mgg", "none".
    With ``used`` (earlier masks per flat position), a uniform mask takes the least-used positions."""
    nnz = edge_count(rows, cols, spec.density)
    if spec.construction == "uniform":
        a = uniform_random(rows, cols, nnz, rng) if used is None else least_used(rows, cols, nnz, used, rng)
        return a, a, "none"
    if spec.block_degree:
        n_c = max(spec.block_degree, min(cols, int(round(spec.block_degree / spec.density))))
        n_r = max(1, min(rows, int(round(n_c * rows / cols))))
        base = random_base(n_r, n_c, spec.block_degree, rng)
        return permute(blow_up(base, rows, cols), rng), sp.csr_matrix(base, dtype=np.float32), "ramanujan"
    if spec.construction == "algebraic":
        # the base graph is fixed: a random relabelling gives each task a different mask
        base = algebraic_base(rows, cols, spec.density)
        return permute(blow_up(base, rows, cols), rng), sp.csr_matrix(base, dtype=np.float32), "mgg"
    a = random_biregular(rows, cols, nnz, rng)
    return a, a, "ramanujan"


def check_bound(kind: str, d_left: float, d_right: float) -> float:
    """The σ₂ bound a construction must meet: Ramanujan for random graphs; MGG's proven 5√2/8, which is
    weaker than Ramanujan's 2√7/8 for degree 8 (the Margulis–Gabber–Galil family is an expander family,
    not a Ramanujan one)."""
    return MGG_BOUND if kind == "mgg" else ramanujan_bound(d_left, d_right)


def make_mask(shape: Sequence[int], spec: MaskSpec, rng: np.random.Generator,
              earlier: Sequence[np.ndarray] = ()) -> tuple[np.ndarray, MaskStats]:
    """A bool mask of ``shape`` (2-D; higher ranks are flattened after the first axis) meeting ``spec``.

    ``earlier`` holds the bit-packed masks (:func:`pack`) of the same matrix for earlier tasks. When
    ``spec.avoids``, each sample is moved off the earlier masks' edges (:func:`avoid_used`, or a uniform
    mask drawn on the least-used positions); edges still shared then mean the matrix is out of room,
    which is a :class:`MaskWarning` (also above δ: a resample cannot do better), never an error.
    Otherwise (``independent``) masks over δ are resampled. Resamples until the spectral check (when it
    applies) holds; raises :class:`MaskError` after ``spec.max_tries`` samples, naming what failed.
    """
    rows = int(shape[0])
    cols = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    used = usage(earlier, rows * cols) if earlier and spec.avoids else None
    last = ""
    for attempt in range(1, spec.max_tries + 1):
        a, cert, kind = sample(rows, cols, spec, rng, used)
        mask = to_dense(a)
        if used is not None and spec.construction == "random":
            a = cert = avoid_used(a, mask, used, rng)
        jac, shared = overlaps(pack(mask), earlier)
        if used is None and jac and max(jac) > spec.overlap:
            last = f"Jaccard overlap {max(jac):.4f} > overlap={spec.overlap}"
            continue
        dl, dr = degrees(a)
        bl, br = (dl, dr) if cert is a else degrees(cert)
        bound = check_bound(kind, float(bl.mean()), float(br.mean()))
        sigma2 = None
        if spec.spectral_check and min(cert.shape) > 1 and cert.nnz:
            sigma2 = second_singular_value(cert)
            if kind != "none" and sigma2 > (1 + spec.epsilon) * bound:
                last = f"σ₂ = {sigma2:.4f} > (1+ε)·bound = {(1 + spec.epsilon) * bound:.4f}"
                continue
        stats = MaskStats(int(a.nnz), a.nnz / (rows * cols), (int(dl.min()), int(dl.max())),
                          (int(dr.min()), int(dr.max())), sigma2, bound, jac, attempt, shared)
        if used is not None and shared:
            warnings.warn(MaskWarning(capacity_message(rows, cols, stats, used, spec)), stacklevel=2)
        return mask.reshape(tuple(int(s) for s in shape)), stats
    raise MaskError(f"no {spec.construction} mask for a {rows}×{cols} matrix at density {spec.density} "
                    f"after max_tries={spec.max_tries} samples: {last}. Raise overlap (δ), epsilon or max_tries, "
                    "lower the density, or (random and uniform masks) set overlap_policy='avoid'")


def capacity_message(rows: int, cols: int, stats: MaskStats, used: np.ndarray, spec: MaskSpec) -> str:
    free = int(np.count_nonzero(used == 0))
    over = ">" if max(stats.jaccard) > spec.overlap else "≤"
    return (f"{rows}×{cols} matrix: earlier masks leave {free} of {rows * cols} positions free for {stats.nnz} "
            f"edges, so {stats.shared} edges reuse the least-used positions reached "
            f"(max Jaccard {max(stats.jaccard):.4f} {over} overlap={spec.overlap})")


def overlaps(packed: np.ndarray, earlier: Sequence[np.ndarray]) -> tuple[tuple[float, ...], int]:
    """The Jaccard index with each earlier (bit-packed) mask, and how many edges any of them holds."""
    jac = tuple(jaccard_packed(packed, e) for e in earlier)
    return jac, int(np.bitwise_count(packed & np.bitwise_or.reduce(earlier)).sum()) if earlier else 0


def describe(mask: np.ndarray, earlier: Sequence[np.ndarray] = (), spectral: bool = True) -> MaskStats:
    """The statistics of any mask (e.g. a LoTA mask calibrated from data), checked against nothing."""
    rows = int(mask.shape[0])
    a = sp.csr_matrix(mask.reshape(rows, -1), dtype=np.float32)
    dl, dr = degrees(a)
    jac, shared = overlaps(pack(mask), earlier)
    sigma2 = second_singular_value(a) if spectral and min(a.shape) > 1 and a.nnz else None
    return MaskStats(int(a.nnz), a.nnz / mask.size, (int(dl.min()), int(dl.max())), (int(dr.min()), int(dr.max())),
                     sigma2, ramanujan_bound(float(dl.mean()), float(dr.mean())), jac, 1, shared)
