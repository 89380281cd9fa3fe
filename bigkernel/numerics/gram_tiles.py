"""Gram-matrix tiles of a kernel on one point set (layer 1: pure numpy, no dask, no files).

The Gram matrix ``K = k(X, X)`` is handled as a grid of square tiles over row ranges; only the
upper tiles (``i <= j``) are ever computed, each serves both ``K_ij`` and ``K_ji = K_ijᵀ``, so
the operator is exactly symmetric and costs half the kernel evaluations.

:class:`GramTiler` holds the (float64, centred) points and evaluates tiles. For the rbf family
(any :class:`~bigkernel.kernels.stationary.RBF`: ``gamma``, ARD ``length_scale`` or a precision
matrix) it uses one GEMM on augmented points::

    a_i = [x̃_i, −½‖x̃_i‖², 1],  b_j = [x̃_j, 1, −½‖x̃_j‖²],  a_iᵀb_j = −½‖x̃_i − x̃_j‖²

with ``x̃ = T(x − c)`` (the kernel's linear map after centring), then one ``exp`` in place:
about 2 ns per entry on one core here, against ~12 ns through the generic kernel block
(distances, several full passes over the block). Every other kernel uses its own
``Kernel._block``. Tiles are small enough (<= :data:`TILE_MAX` rows) to stay in cache.

:func:`tile_matvec` adds a tile's two contributions ``K_ij V_j`` and ``K_ijᵀ V_i`` to an
output; float32 tiles are cast to float64 in row panels first, so every product accumulates
in float64 (a float32 accumulation of ``K a`` with large, cancelling ``a`` loses ~1e-3).

:func:`plan_gram` splits a memory budget between working memory and a cache of tiles (float64
when the whole upper triangle fits, else float32), and :class:`KernelExpansion` evaluates
``k(Z, X) a + b`` for new points block by block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, DTypeLike

from bigkernel._sparse import as_csr, is_sparse, row_sq_norms, to_dense
from bigkernel.errors import DataError, ParameterError
from bigkernel.kernels._blocks import symmetrize_upper
from bigkernel.kernels.base import Kernel, Scaled
from bigkernel.kernels.stationary import RBF

__all__ = [
    "TILE_MAX",
    "GramPlan",
    "GramTiler",
    "KernelExpansion",
    "LocalGram",
    "plan_gram",
    "tile_bytes",
    "tile_edges",
    "tile_matvec",
    "upper_tiles",
]

#: largest tile side: 2048² float64 = 32 MiB; larger tiles stop fitting the caches
TILE_MAX = 2048
#: bytes of a row panel computed and used at once in :meth:`GramTiler.recompute_matvec`
_FUSED_PANEL_BYTES = 512 * 1024
#: smallest tile side chosen from a budget (tiny tiles cost more in Python than in BLAS)
MIN_TILE = 256
#: bytes of a tile's row panel (as float64) in :func:`tile_matvec` with several vectors (one
#: vector: 4×). Measured at n = 20,000, 2 threads: 1 MiB / 4 MiB panels 0.27 s / 0.09 s per
#: matvec with 9 / 1 vectors, against 0.31 s / 0.12 s for 256 KiB and 0.32 s / 0.10 s unpanelled.
_PANEL_BYTES = 1024 * 1024


def tile_edges(n: int, size: int) -> np.ndarray:
    """Edges ``0 = e_0 < … < e_T = n`` of ``T = ⌈n/size⌉`` near-equal row ranges.

    Parameters
    ----------
    n : int
        Number of points.
    size : int
        Largest tile side.

    Returns
    -------
    ndarray of int64, shape (T + 1,)
    """
    if n < 1 or size < 1:
        raise ParameterError(f"n and size must be >= 1, found n={n}, size={size}")
    count = -(-n // size)
    return np.linspace(0, n, count + 1).round().astype(np.int64)


def upper_tiles(n_blocks: int) -> list[tuple[int, int]]:
    """``(i, j)`` with ``i <= j`` in row-major order: the tiles that define a symmetric matrix."""
    return [(i, j) for i in range(n_blocks) for j in range(i, n_blocks)]


def _scale_and_base(kernel: Kernel) -> tuple[float, Kernel]:
    """``(c, k)`` with ``kernel = c·k`` (``c = 1`` unless ``kernel`` is :class:`Scaled`)."""
    if isinstance(kernel, Scaled):
        return float(kernel.scale), kernel.kernel
    return 1.0, kernel


class GramTiler:
    """Tiles ``k(X[rows], X[cols])`` and cross blocks ``k(Z, X[cols])`` for fixed points ``X``.

    Parameters
    ----------
    kernel : Kernel
    X : array-like or scipy.sparse matrix of shape (n, d)
        The points (training inputs); copied to float64 (sparse: to a CSR copy, kept sparse;
        tiles then come from sparse products, memory O(nnz) for the points).

    Attributes
    ----------
    n, d : int
    fast : bool
        Whether the rbf augmented-GEMM path is used.
    """

    def __init__(self, kernel: Kernel, X: ArrayLike) -> None:
        if not isinstance(kernel, Kernel):
            raise ParameterError(f"kernel must be a Kernel, found {type(kernel).__name__}")
        self.sparse = is_sparse(X)
        # own copy: tiles must not change if the caller's does
        X = as_csr(X, copy=True) if self.sparse else np.array(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] == 0:
            raise DataError(f"X must have shape (n, d) with n >= 1, found {X.shape}")
        self.kernel, self.X = kernel, X
        self.n, self.d = X.shape
        self._scale, base = _scale_and_base(kernel)
        self.fast = isinstance(base, RBF)
        if self.fast:
            # centring shrinks ‖x̃‖², and with it the cancellation in the augmented product
            # (not for sparse points: it would densify them)
            self._centre = None if self.sparse else X.mean(axis=0)
            self._rbf = base
            self._A, self._B = self._augment(X)

    def _points(self, Z: ArrayLike):
        """New points in the tiler's form: CSR for a sparse tiler, dense float64 otherwise (a
        sparse block against dense points is densified: its rows × d is what X_fit holds)."""
        if self.sparse:
            return as_csr(Z) if is_sparse(Z) else sp.csr_array(np.asarray(Z, dtype=np.float64))
        return to_dense(Z).astype(np.float64, copy=False)

    # ------------------------------------------------------------------ rbf fast path
    def _augment(self, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.sparse:
            # x̃ stays sparse; −½‖x̃‖² is added to the product afterwards (_neg_half_sq)
            Zt = self._rbf.transform_fn()(Z)  # sparse scaling returns a new matrix
            rows = _SparseRows(as_csr(Zt), 0.5 * row_sq_norms(Zt))
            return rows, rows
        Zt = self._rbf.transform_fn()(Z - self._centre)  # not stored: closures do not pickle
        half = 0.5 * np.einsum("ij,ij->i", Zt, Zt)
        ones = np.ones((Z.shape[0], 1))
        A = np.hstack([Zt, -half[:, None], ones])
        B = np.hstack([Zt, ones, -half[:, None]])
        return A, B

    def augment(self, Z: ArrayLike) -> np.ndarray:
        """The rbf path's augmented form ``[z̃, −½‖z̃‖², 1]`` of new points (host float64; a
        device expansion multiplies it with :meth:`augmented_points`' ``B``)."""
        if not self.fast:
            raise ParameterError("augmented points exist for the rbf family only")
        return self._augment(np.asarray(Z, dtype=np.float64))[0]

    def augmented_points(self) -> tuple[np.ndarray, np.ndarray, float]:
        """``(A, B, c)`` of the rbf path: ``K[i, j] = c·exp(min(a_iᵀb_j, 0))`` (host float64;
        a device Gram copies them once, :mod:`~bigkernel.numerics.device_gram`)."""
        if not self.fast:
            raise ParameterError("augmented points exist for the rbf family only")
        return self._A, self._B, self._scale

    def _exp_block(self, A: np.ndarray, B: np.ndarray, dtype: np.dtype, workspace: dict | None = None) -> np.ndarray:
        shape = (A.shape[0], B.shape[0])
        T = _neg_half_sq(A, B, _buffer(workspace, "f8", shape, np.float64))  # −½‖x̃ − z̃‖²
        np.minimum(T, 0.0, out=T)  # round-off can push an exponent just above 0
        if dtype != T.dtype:
            T32 = _buffer(workspace, "f4", shape, dtype)
            if T32 is None:
                T32 = T.astype(dtype)
            else:
                np.copyto(T32, T, casting="same_kind")
            T = T32
        np.exp(T, out=T)
        if self._scale != 1.0:
            T *= T.dtype.type(self._scale)
        return T

    # ------------------------------------------------------------------ tiles
    def tile(
        self, rows: slice, cols: slice, dtype: DTypeLike = np.float64, workspace: dict | None = None
    ) -> np.ndarray:
        """``K[rows, cols]``; a diagonal tile (``rows == cols``) is exactly symmetric.

        Parameters
        ----------
        rows, cols : slice
            Contiguous index ranges (``step`` 1).
        dtype : {float64, float32}
        workspace : dict, optional
            Reusable buffers (rbf path): the tile is then a view into them, valid until the
            next call with the same workspace. Tiles recomputed on every matvec use one, so
            their memory is not freshly mapped (and page-faulted) each time: tiles of 2048²
            float64 exceed glibc's largest mmap threshold (32 MiB).

        Returns
        -------
        ndarray of shape (len(rows), len(cols))
        """
        dtype = np.dtype(dtype)
        diagonal = rows == cols
        if self.fast:
            T = self._exp_block(self._A[rows], self._B[cols], dtype, workspace)
            if diagonal:
                symmetrize_upper(T)  # exact symmetry, tile by tile
                np.fill_diagonal(T, T.dtype.type(self._scale))
            return T
        Xr = self.X[rows]
        return self.kernel.block(Xr, None if diagonal else self.X[cols], dtype)

    def recompute_matvec(
        self, rows: slice, cols: slice, V: np.ndarray, out: np.ndarray, workspace: dict | None = None
    ) -> None:
        """Add ``K[rows, cols] V[cols]`` (and ``K[rows, cols]ᵀ V[rows]`` off the diagonal) to
        ``out`` without keeping the tile: float64, computed in row panels that stay in cache.

        The rbf path fuses GEMM, ``exp`` and both products panel by panel (measured ~2× faster
        than a whole tile followed by :func:`tile_matvec`: the tile never goes to memory).
        Diagonal tiles and other kernels go through :meth:`tile` (exact symmetry first).
        """
        if not self.fast or rows == cols:
            tile_matvec(self.tile(rows, cols, np.float64, workspace), V, out, rows, cols)
            return
        r0, Vc, Bc = rows.start, V[cols], self._B[cols]
        acc = np.zeros((cols.stop - cols.start, V.shape[1]))
        step = max(16, _FUSED_PANEL_BYTES // (8 * Bc.shape[0]))
        for lo in range(r0, rows.stop, step):
            hi = min(lo + step, rows.stop)
            P = _neg_half_sq(self._A[lo:hi], Bc, _buffer(workspace, "panel", (hi - lo, Bc.shape[0]), np.float64))
            np.minimum(P, 0.0, out=P)
            np.exp(P, out=P)
            if self._scale != 1.0:
                P *= self._scale
            out[lo:hi] += P @ Vc
            acc += P.T @ V[lo:hi]
        out[cols] += acc

    def cross(self, Z: ArrayLike, cols: slice | np.ndarray | None = None, dtype: DTypeLike = np.float64) -> np.ndarray:
        """``k(Z, X[cols])`` for new points ``Z`` (prediction), shape (len(Z), len(cols)).

        Parameters
        ----------
        Z : array-like of shape (m, d)
        cols : slice or int array, optional
            Columns (training points); all by default.
        dtype : {float64, float32}
        """
        Z = Z if is_sparse(Z) else np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != self.d:
            raise DataError(
                f"X has {Z.shape[-1] if Z.ndim == 2 else Z.shape} features, but the model was "
                f"fitted with {self.d}; pass data with the same columns as in fit"
            )
        Z = self._points(Z)
        cols = slice(None) if cols is None else cols
        dtype = np.dtype(dtype)
        if self.fast:
            Az, _ = self._augment(Z)
            return self._exp_block(Az, self._B[cols], dtype)
        return self.kernel.block(Z, self.X[cols], dtype)

    def columns(self, idx: ArrayLike) -> np.ndarray:
        """Kernel columns ``K[:, idx]`` (float64), e.g. for a low-rank preconditioner.

        Entries equal those of :meth:`tile` up to the diagonal, which is set exactly.
        """
        idx = np.asarray(idx, dtype=np.int64)
        if self.fast:
            C = self._exp_block(self._A, self._B[idx], np.dtype(np.float64))
            C[idx, np.arange(idx.size)] = self._scale
            return C
        return self.kernel.block(self.X, self.X[idx], np.dtype(np.float64))

    def diag(self) -> np.ndarray:
        """``k(x_i, x_i)`` for every point, float64 of shape (n,)."""
        return np.asarray(self.kernel.diag(self.X), dtype=np.float64)

    def dense(self, dtype: DTypeLike = np.float64) -> np.ndarray:
        """The whole ``n × n`` Gram matrix (small n only: references, exact eigenvalues)."""
        return self.tile(slice(0, self.n), slice(0, self.n), dtype)

    @property
    def nbytes(self) -> int:
        """Bytes held: the points and, for the rbf path, their augmented copies."""
        if self.sparse:
            points = self.X.data.nbytes + self.X.indices.nbytes + self.X.indptr.nbytes
            return points * (2 if self.fast else 1)
        return self.X.nbytes + (self._A.nbytes + self._B.nbytes if self.fast else 0)

    def extra_bytes_per_entry(self, dtype: DTypeLike = np.float64) -> int:
        """Workspace per tile entry beyond the tile itself (for the block-size budget)."""
        if self.fast:
            # the float64 exponent block when the tile is float32
            return 0 if np.dtype(dtype) == np.float64 else 8
        return self.kernel.extra_bytes_per_entry(dtype)


class _SparseRows:
    """Sparse transformed points ``x̃`` with ``½‖x̃‖²``: the rbf fast path's augmented rows
    for a sparse tiler (row slices and gathers, as for the dense augmented arrays)."""

    def __init__(self, Z, half: np.ndarray) -> None:
        self.Z, self.half = Z, half

    def __getitem__(self, idx) -> _SparseRows:
        return _SparseRows(self.Z[idx], self.half[idx])

    @property
    def shape(self) -> tuple[int, int]:
        return self.Z.shape[0], self.Z.shape[1] + 2


def _neg_half_sq(A, B, out: np.ndarray | None) -> np.ndarray:
    """``−½‖x̃_i − z̃_j‖²`` for augmented rows ``A`` and ``B``: one GEMM on the dense augmented
    arrays; a sparse product plus the two norm terms for :class:`_SparseRows`."""
    if not isinstance(A, _SparseRows):
        return np.matmul(A, B.T, out=out)
    P = to_dense(A.Z @ B.Z.T)
    if out is None:
        out = P
    else:
        np.copyto(out, P)
    out -= A.half[:, None]
    out -= B.half[None, :]
    return out


def tile_matvec(
    T: np.ndarray,
    V: np.ndarray,
    out: np.ndarray,
    rows: slice,
    cols: slice,
) -> None:
    """Add ``T V[cols]`` to ``out[rows]`` and, off the diagonal, ``Tᵀ V[rows]`` to ``out[cols]``.

    The tile is read in row panels (~4 MiB for one vector, ~1 MiB for several: measured best
    here), each used for both products while it is in cache (so a tile is read from memory
    once); float32 panels are cast to float64 first, so
    every product accumulates in float64.

    Parameters
    ----------
    T : ndarray of shape (len(rows), len(cols)), float64 or float32
        The tile ``K[rows, cols]`` (an upper tile: ``rows.start <= cols.start``).
    V : ndarray of shape (n, k), float64
    out : ndarray of shape (n, k), float64
        Accumulator, updated in place.
    rows, cols : slice
    """
    diagonal = rows == cols
    r0, Vc = rows.start, V[cols]
    acc = None if diagonal else np.zeros((T.shape[1], V.shape[1]))
    # one vector: memory-bound, larger panels; several: compute-bound, smaller panels
    panel = _PANEL_BYTES * 4 if V.shape[1] == 1 else _PANEL_BYTES
    step = max(16, panel // (8 * T.shape[1]))
    for lo in range(0, T.shape[0], step):
        P = T[lo : lo + step].astype(np.float64, copy=False)
        hi = lo + P.shape[0]
        out[r0 + lo : r0 + hi] += P @ Vc
        if acc is not None:
            acc += P.T @ V[r0 + lo : r0 + hi]
    if acc is not None:
        out[cols] += acc


class LocalGram:
    """``V ↦ K V`` computed in this process (no dask): for work inside one task.

    Upper tiles of side :data:`TILE_MAX` are cached in float64, in order, while they fit
    ``memory_budget``; the others are recomputed on every matvec. Both go through
    :meth:`GramTiler.tile` and :func:`tile_matvec`, so the result does not depend on the budget
    (bitwise): a bootstrap replicate gives the same values on any worker.

    Implements the :class:`~bigkernel.solvers.base.GramOperator` protocol (``n``, ``matvec``,
    ``columns``, ``diag``, ``info``, ``close``), in this process.

    Parameters
    ----------
    kernel : Kernel
    X : array-like of shape (n, d)
    memory_budget : int
        Bytes for cached tiles.
    """

    def __init__(self, kernel: Kernel, X: ArrayLike, memory_budget: int) -> None:
        self.tiler = GramTiler(kernel, X)
        self.edges = tile_edges(self.tiler.n, TILE_MAX)
        self.tiles = upper_tiles(len(self.edges) - 1)
        self._cache: dict[tuple[int, int], np.ndarray] = {}
        used = 0
        for i, j in self.tiles:
            size = 8 * int(self.edges[i + 1] - self.edges[i]) * int(self.edges[j + 1] - self.edges[j])
            if used + size > memory_budget:
                break
            self._cache[i, j] = self.tiler.tile(self._slice(i), self._slice(j), np.float64)
            used += size
        self.cache_bytes = used
        self.n_matvec = 0

    def _slice(self, i: int) -> slice:
        return slice(int(self.edges[i]), int(self.edges[i + 1]))

    @property
    def n(self) -> int:
        return self.tiler.n

    def matvec(self, V: np.ndarray) -> np.ndarray:
        """``K V`` in float64 for ``V`` of shape (n, k)."""
        V = np.asarray(V, dtype=np.float64)
        out = np.zeros_like(V)
        workspace: dict = {}
        for i, j in self.tiles:
            rows, cols = self._slice(i), self._slice(j)
            T = self._cache.get((i, j))
            if T is None:
                T = self.tiler.tile(rows, cols, np.float64, workspace)
            tile_matvec(T, V, out, rows, cols)
        self.n_matvec += 1
        return out

    __call__ = matvec

    def columns(self, idx: ArrayLike) -> np.ndarray:
        """``K[:, idx]`` in float64."""
        return self.tiler.columns(idx)

    def diag(self) -> np.ndarray:
        """The diagonal of ``K``."""
        return self.tiler.diag()

    def info(self) -> dict:
        """JSON-able description of the cache and the matvecs run."""
        cached = sum(
            8 * (self.edges[i + 1] - self.edges[i]) * (self.edges[j + 1] - self.edges[j]) for i, j in self._cache
        )
        return {
            "tile_size": int(np.diff(self.edges).max()),
            "n_tiles": len(self.tiles),
            "cached_tiles": len(self._cache),
            "cache_bytes": int(cached),
            "n_matvec": self.n_matvec,
        }

    def close(self) -> None:
        """Drop the cached tiles."""
        self._cache = {}


def tile_bytes(edges: Sequence[int], tiles: Sequence[tuple[int, int]], itemsize: int) -> int:
    """Bytes to store ``tiles`` (``(i, j)`` block indices over ``edges``) at ``itemsize``."""
    e = np.asarray(edges)
    return int(sum((e[i + 1] - e[i]) * (e[j + 1] - e[j]) for i, j in tiles) * itemsize)


def _buffer(workspace: dict | None, key: str, shape: tuple[int, int], dtype) -> np.ndarray | None:
    """A C-contiguous ``shape`` view into ``workspace[key]`` (grown when too small), or None."""
    if workspace is None:
        return None
    size = shape[0] * shape[1]
    buf = workspace.get(key)
    if buf is None or buf.size < size:
        buf = workspace[key] = np.empty(size, dtype=dtype)
    return buf[:size].reshape(shape)


class KernelExpansion:
    """``f(Z) = k(Z, X) a + b`` evaluated block by block: memory ``O(block²)``, not ``O(m n)``.

    A picklable callable on numpy blocks (dask ships it to the workers once per graph).

    Parameters
    ----------
    tiler : GramTiler
        Holds the training points ``X`` and the kernel.
    coef : ndarray of shape (n, k)
        Dual coefficients ``a``.
    intercept : ndarray of shape (k,)
    dtype : {"float64", "float32"}, default="float64"
        Dtype of the kernel blocks; products accumulate in float64.
    block : int, default=TILE_MAX
        Rows of ``Z`` and columns of ``X`` per block.
    """

    def __init__(
        self,
        tiler: GramTiler,
        coef: np.ndarray,
        intercept: np.ndarray,
        *,
        dtype: DTypeLike = np.float64,
        block: int = TILE_MAX,
    ) -> None:
        self.tiler, self.dtype, self.block = tiler, np.dtype(dtype), int(block)
        self.coef = np.asarray(coef, dtype=np.float64)
        self.intercept = np.asarray(intercept, dtype=np.float64)
        if self.coef.shape[0] != tiler.n or self.intercept.shape != (self.coef.shape[1],):
            raise DataError(
                f"coef must have shape ({tiler.n}, k) and intercept (k,), found "
                f"{self.coef.shape} and {self.intercept.shape}"
            )

    @property
    def n_outputs(self) -> int:
        return self.coef.shape[1]

    def __call__(self, Z: ArrayLike) -> np.ndarray:
        Z = as_csr(Z) if is_sparse(Z) else np.asarray(Z, dtype=np.float64)
        out = np.empty((Z.shape[0], self.coef.shape[1]))
        out[:] = self.intercept
        edges = tile_edges(self.tiler.n, self.block)
        for lo in range(0, Z.shape[0], self.block):
            Zb = Z[lo : lo + self.block]
            for c0, c1 in zip(edges[:-1], edges[1:]):
                Kb = self.tiler.cross(Zb, slice(int(c0), int(c1)), self.dtype)
                out[lo : lo + Zb.shape[0]] += Kb.astype(np.float64, copy=False) @ self.coef[c0:c1]
        return out


@dataclass(frozen=True)
class GramPlan:
    """How a Gram operator uses its memory budget (from :func:`plan_gram`).

    Attributes
    ----------
    edges : ndarray
        Tile edges over the points.
    tiles : list of (i, j)
        Every upper tile.
    n_cached : int
        The first ``n_cached`` tiles are held in memory; the others are recomputed per matvec.
    cache_dtype, compute_dtype : str
        Dtype of cached and of recomputed tiles.
    cache_bytes : int
        Bytes of the cached tiles (never more than ``cache_budget``).
    cache_budget : int
        What the budget leaves for the cache after the working memory.
    work_bytes : int
        Working memory: per-thread tile workspace and matvec accumulators.
    """

    edges: np.ndarray
    tiles: list[tuple[int, int]]
    n_cached: int
    cache_dtype: str
    compute_dtype: str
    cache_bytes: int
    cache_budget: int
    work_bytes: int

    @property
    def tile_size(self) -> int:
        return int(np.diff(self.edges).max())

    @property
    def cached_fraction(self) -> float:
        """Fraction of the upper-triangle entries held in memory."""
        e = self.edges
        sizes = [(e[i + 1] - e[i]) * (e[j + 1] - e[j]) for i, j in self.tiles]
        return float(sum(sizes[: self.n_cached]) / sum(sizes))


DTYPES = ("auto", "float64", "float32")


def plan_gram(
    n: int,
    d: int,
    budget_bytes: int,
    *,
    dtype: str = "auto",
    kernel_extra: float = 8.0,
    n_rhs: int = 1,
    threads: int = 1,
    reserve_bytes: int = 0,
    tile_size: int | None = None,
) -> GramPlan:
    """Tile size, cache dtype and cached tiles of an ``n × n`` Gram operator within a budget.

    The budget covers everything the operator and its solver hold: ``reserve_bytes`` (e.g. a
    preconditioner and the CG vectors, given by the caller), per-thread tile workspace
    (:func:`~bigkernel.numerics.budget.gram_block_bytes` of one tile, ``threads`` at once), one
    ``(n, n_rhs)`` float64 accumulator per matvec task (``2·threads`` tasks) and the cache.

    Parameters
    ----------
    n, d : int
        Points and features.
    budget_bytes : int
        Total memory allowed.
    dtype : {"auto", "float64", "float32"}, default="auto"
        Cached tiles: ``"auto"``: float64 when every upper tile fits the cache in float64, else
        float32. A fixed dtype caches as many tiles as fit. Recomputed tiles are float64.
    kernel_extra : float, default=8.0
        Kernel workspace per entry (``GramTiler.extra_bytes_per_entry``).
    n_rhs : int, default=1
        Columns per matvec.
    threads : int, default=1
        Tiles computed at once.
    reserve_bytes : int, default=0
        Memory the caller needs besides the operator.
    tile_size : int, optional
        Largest tile side; default :data:`TILE_MAX`, smaller when the budget demands.

    Returns
    -------
    GramPlan

    Raises
    ------
    ParameterError
        If the budget cannot hold the working memory; the message gives the minimum.

    Notes
    -----
    One function on purpose: every term of the memory budget is computed here, in one place,
    so that the plan and its accounting cannot drift apart.
    """
    from bigkernel.numerics.budget import gram_block_bytes, gram_block_size

    if dtype not in DTYPES:
        raise ParameterError(f"dtype must be one of {list(DTYPES)}, found {dtype!r}")
    budget = int(budget_bytes)
    threads, n_rhs = max(1, int(threads)), max(1, int(n_rhs))
    free = budget - int(reserve_bytes) - 2 * threads * n * n_rhs * 8
    work_item = 8 if dtype == "float64" else 4  # auto may end float32: size the workspace for it
    extra = kernel_extra + (8 if work_item == 4 else 0)
    side = min(TILE_MAX if tile_size is None else int(tile_size), n)
    # a tile's workspace takes at most a quarter of the free memory per thread, but tiles stay
    # >= MIN_TILE (smaller ones waste time; the check below reports a short budget) unless the
    # caller asked for smaller ones; ``tile_size`` is the largest side, not a fixed one
    try:
        fit = gram_block_size(n, d, work_item, free // (4 * threads), extra, n_rhs=n_rhs)
    except ParameterError:
        fit = 1
    side = min(side, max(fit, min(MIN_TILE, side)))
    work = threads * gram_block_bytes(side, side, d, work_item, extra, n_rhs=n_rhs)
    cache_budget = free - work
    if cache_budget < 0:
        need = budget - cache_budget
        raise ParameterError(
            f"memory_budget={budget:,} bytes cannot hold the Gram operator's working memory for "
            f"n={n}: at least {need:,} bytes are needed; raise memory_budget"
        )
    edges = tile_edges(n, side)
    tiles = upper_tiles(len(edges) - 1)
    full64 = tile_bytes(edges, tiles, 8)
    if dtype == "auto":
        dtype = "float64" if full64 <= cache_budget else "float32"
    item = np.dtype(dtype).itemsize
    sizes = np.array([(edges[i + 1] - edges[i]) * (edges[j + 1] - edges[j]) for i, j in tiles]) * item
    n_cached = int(np.searchsorted(np.cumsum(sizes), cache_budget, side="right"))
    # recomputed tiles are float64 whatever the cache holds: fused in cache-sized panels they
    # cost ~2.3 ns per entry here, float32 (with its casts) ~4.5
    return GramPlan(
        edges,
        tiles,
        n_cached,
        dtype,
        "float64",
        int(sizes[:n_cached].sum()),
        int(cache_budget),
        int(work + 2 * threads * n * n_rhs * 8),
    )
