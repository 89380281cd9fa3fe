"""The Gram matrix as a matvec on an array namespace's device (layer 1: no dask): the exact
solver's operator on a GPU.

:class:`DeviceGram` is the device counterpart of
:class:`~bigkernel.solvers.gram_operator.GramOperator` (same ``matvec`` / ``columns`` / ``diag``
/ ``info`` / ``close``), written once for every array namespace
(:mod:`~bigkernel.numerics.namespace`): CuPy on a GPU, numpy and array-api-strict in CI.

* **Points.** The host :class:`~bigkernel.numerics.gram_tiles.GramTiler` builds the rbf
  family's augmented points ``a_i = [x̃_i, −½‖x̃_i‖², 1]``, ``b_j = [x̃_j, 1, −½‖x̃_j‖²]`` (its
  transform, centring and ARD/precision maps); they are copied to the device once, so a tile is
  one GEMM ``A_i B_jᵀ = −½‖x̃_i − x̃_j‖²`` then ``exp`` — on the device.
* **Budget.** :func:`~bigkernel.numerics.gram_tiles.plan_gram` (one thread, device tiles of
  :data:`DEVICE_TILE`) splits the device budget between the CG vectors and the preconditioner
  (``reserve_bytes``), the working panels, and a cache of upper tiles (float64 when the whole
  upper triangle fits, else float32).
* **Cached tiles** stay on the device; every product is taken in row panels cast to float64,
  so products accumulate in float64 whatever the cache holds.
* **Recomputed tiles** (beyond the budget) are never written whole: each row panel of
  ``PANEL_ROWS`` rows is one GEMM + ``exp`` fused with both products (``K_ij V_j`` and
  ``K_ijᵀ V_i``), a blocked path in the namespace's own GEMM (cuBLAS on a GPU), float64.
* **Other kernels** (laplacian, Matérn, polynomial, …) have no device formula here: their tiles
  and columns are computed on the host by the kernel's own block and copied to the device (the
  cache then saves the recomputation; correct, but host-bound).

Round-off: a diagonal tile computed by GEMM is symmetric to ~1e-16, not bitwise; cached
diagonal tiles are symmetrised (``(T + Tᵀ)/2``); recomputed diagonal tiles go panel by panel
like the others and are not (CG tolerates a 1e-16 asymmetry). Both get the exact diagonal
``c``. Memory: building a tile holds about four float64 copies of it (GEMM, ``minimum``,
``exp``; a diagonal tile's symmetrised copy), which the plan counts; a matvec holds about three
float64 panels of ``PANEL_ROWS`` rows.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from bigkernel.errors import ParameterError
from bigkernel.kernels.base import Kernel
from bigkernel.numerics.gram_tiles import MIN_TILE, GramPlan, GramTiler, plan_gram
from bigkernel.numerics.namespace import as_namespace_array, device_of, take_rows, to_host

logger = logging.getLogger(__name__)

__all__ = ["DEVICE_TILE", "PANEL_ROWS", "DeviceExpansion", "DeviceGram"]

#: tile side on a device: larger than on a CPU (a GPU wants big GEMMs; 8192² float32 = 256 MiB)
DEVICE_TILE = 8192
#: rows of a panel computed at once (a recomputed tile never exists whole)
PANEL_ROWS = 1024


def _plan(n: int, d: int, budget: int, dtype: str, n_rhs: int, reserve: int, tile_size: int | None) -> GramPlan:
    """The device plan: tiles of ``tile_size`` (default :data:`DEVICE_TILE`, halved while the
    budget cannot hold one tile's workspace, down to ``MIN_TILE``)."""
    side = min(n, int(tile_size or DEVICE_TILE))
    while True:
        try:
            # 24 bytes per entry beyond the tile: GEMM, minimum and exp results (or a
            # diagonal tile's symmetrised copy) alive at once while a tile is built
            return plan_gram(n, d, budget, dtype=dtype, kernel_extra=24.0, n_rhs=n_rhs, threads=1,
                             reserve_bytes=reserve, tile_size=side)  # fmt: skip
        except ParameterError:
            if tile_size is not None or side <= MIN_TILE:
                raise
            side = max(MIN_TILE, side // 2)


class DeviceGram:
    """``V ↦ K V`` for ``K = k(X, X)`` with the points, tiles and vectors on a device.

    Implements the :class:`~bigkernel.solvers.base.GramOperator` protocol (``n``, ``matvec``,
    ``columns``, ``diag``, ``info``, ``close``) on the array namespace ``xp`` (CuPy on a GPU;
    any array-API namespace, numpy included, in the tests).

    Parameters
    ----------
    kernel : Kernel
    X : array-like of shape (n, d)
        Host points (kept on the host too: the fitted model predicts from them).
    xp : module
        The array namespace (``array_api_compat.cupy`` on a GPU).
    like : array, optional
        An array on the target device (default: the namespace's default device).
    memory_budget : int
        Device bytes for the operator and ``reserve_bytes``.
    dtype : {"auto", "float64", "float32"}, default="auto"
        Cached tiles (see :func:`~bigkernel.numerics.gram_tiles.plan_gram`).
    n_rhs : int, default=1
        Largest number of columns per matvec.
    reserve_bytes : int, default=0
        Device memory the solver holds besides the operator (CG vectors, preconditioner).
    tile_size : int, optional
        Default :data:`DEVICE_TILE`.
    panel_rows : int, optional
        Default :data:`PANEL_ROWS`.

    Attributes
    ----------
    tiler : GramTiler
        Host points and kernel (for the fitted model's predictor).
    plan : GramPlan
    n_matvec : int
    matvec_seconds : float
    """

    def __init__(
        self,
        kernel: Kernel,
        X: Any,
        *,
        xp: Any,
        like: Any = None,
        memory_budget: int,
        dtype: str = "auto",
        n_rhs: int = 1,
        reserve_bytes: int = 0,
        tile_size: int | None = None,
        panel_rows: int | None = None,
    ) -> None:
        self.xp = xp
        on_device = hasattr(X, "__array_namespace__") and not isinstance(X, np.ndarray)
        self.tiler = GramTiler(kernel, to_host(X) if on_device else X)  # scipy.sparse stays sparse
        n, d = self.tiler.n, self.tiler.d
        # the rbf formula on the device needs dense augmented points; sparse X: host blocks
        self.fast = self.tiler.fast and not self.tiler.sparse
        self._like = like
        self._masks: dict[int, tuple[Any, Any]] = {}
        self.panel_rows = int(panel_rows or PANEL_ROWS)
        points = 2 * n * (d + 2) * 8 if self.fast else 0
        self.plan: GramPlan = _plan(n, d, memory_budget, dtype, n_rhs, reserve_bytes + points, tile_size)
        if self.fast:
            A, B, self._scale = self.tiler.augmented_points()
            self._A, self._B = self._dev(A), self._dev(B)
        self.n_matvec, self.matvec_seconds = 0, 0.0
        t = time.perf_counter()
        p = self.plan
        self._cache: list[Any] = []
        cache_dtype = getattr(xp, p.cache_dtype)
        for i, j in p.tiles[: p.n_cached]:
            T = self._tile(self._slice(i), self._slice(j))
            self._cache.append(T if p.cache_dtype == "float64" else xp.astype(T, cache_dtype))
            del T
        self.build_seconds = time.perf_counter() - t
        logger.info(
            "device Gram n=%d: tiles of %d, %d of %d tiles cached on the device (%.0f%% of entries, "
            "%.2f GB %s), the rest recomputed in panels of %d rows (%s); built in %.2fs",
            n, p.tile_size, p.n_cached, len(p.tiles), 100 * p.cached_fraction, p.cache_bytes / 1e9,
            p.cache_dtype, self.panel_rows, "rbf on the device" if self.fast else "host kernel blocks",
            self.build_seconds,
        )  # fmt: skip

    # ------------------------------------------------------------------ helpers
    def _dev(self, a: Any) -> Any:
        return as_namespace_array(self.xp, np.ascontiguousarray(a), like=self._like, dtype=self.xp.float64)

    def _slice(self, i: int) -> slice:
        e = self.plan.edges
        return slice(int(e[i]), int(e[i + 1]))

    @property
    def n(self) -> int:
        return self.tiler.n

    def _exp_panel(self, A: Any, B: Any) -> Any:
        """``c·exp(min(A Bᵀ, 0))`` in float64 on the device."""
        xp = self.xp
        P = xp.exp(xp.minimum(A @ xp.matrix_transpose(B), 0.0))
        return P * self._scale if self._scale != 1.0 else P

    def _tile(self, rows: slice, cols: slice) -> Any:
        """``K[rows, cols]`` (float64, on the device); a diagonal tile exactly symmetric with
        the exact diagonal."""
        xp = self.xp
        if not self.fast:
            return self._dev(self.tiler.tile(rows, cols, np.float64))
        T = self._exp_panel(self._A[rows, :], self._B[cols, :])
        if rows == cols:
            T = T + xp.matrix_transpose(T)
            T *= 0.5
            for lo in range(0, rows.stop - rows.start, self.panel_rows):
                T = self._exact_diagonal(T, lo, min(lo + self.panel_rows, rows.stop - rows.start), lo)
        return T

    def _exact_diagonal(self, P: Any, r0: int, r1: int, c0: int) -> Any:
        """``P`` with entries ``(r0 + i, c0 + i)``, ``i < r1 − r0``, set to the kernel's exact
        diagonal ``c`` (two small elementwise products: the standard has no fill_diagonal)."""
        xp, h = self.xp, r1 - r0
        masks = self._masks.get(h)
        if masks is None:
            eye = xp.eye(h, dtype=xp.float64, device=device_of(P))
            masks = self._masks[h] = (1.0 - eye, self._scale * eye)
        P[r0:r1, c0 : c0 + h] = P[r0:r1, c0 : c0 + h] * masks[0] + masks[1]
        return P

    # ------------------------------------------------------------------ matvec
    def matvec(self, V: Any) -> Any:
        """``K V`` in float64 for device ``V`` of shape (n,) or (n, k)."""
        xp = self.xp
        V = as_namespace_array(xp, V, like=self._like, dtype=xp.float64)
        squeeze = V.ndim == 1
        if squeeze:
            V = V[:, None]
        t = time.perf_counter()
        out = xp.zeros_like(V)
        p = self.plan
        for idx, (i, j) in enumerate(p.tiles):
            rows, cols = self._slice(i), self._slice(j)
            cached = self._cache[idx] if idx < len(self._cache) else None
            out = self._tile_products(cached, rows, cols, V, out)
        self.n_matvec += 1
        self.matvec_seconds += time.perf_counter() - t
        return out[:, 0] if squeeze else out

    __call__ = matvec

    def _tile_products(self, cached: Any, rows: slice, cols: slice, V: Any, out: Any) -> Any:
        """Add ``K_ij V_j`` to ``out[rows]`` and, off the diagonal, ``K_ijᵀ V_i`` to ``out[cols]``,
        panel by panel (float64 products; a recomputed tile is never whole)."""
        xp = self.xp
        diagonal = rows == cols
        if cached is None and not self.fast:
            cached = self._tile(rows, cols)  # host kernel blocks, copied in
        Vc = V[cols, :]
        acc = (
            None if diagonal else xp.zeros((cols.stop - cols.start, V.shape[1]), dtype=xp.float64, device=device_of(V))
        )
        Bc = None if cached is not None else self._B[cols, :]
        for lo in range(rows.start, rows.stop, self.panel_rows):
            hi = min(lo + self.panel_rows, rows.stop)
            if cached is not None:
                P = cached[lo - rows.start : hi - rows.start, :]
                if P.dtype != xp.float64:
                    P = xp.astype(P, xp.float64)
            else:
                P = self._exp_panel(self._A[lo:hi, :], Bc)
                if diagonal:  # the exact diagonal; symmetric to rounding only (module docstring)
                    P = self._exact_diagonal(P, 0, hi - lo, lo - cols.start)
            out[lo:hi, :] = out[lo:hi, :] + P @ Vc
            if acc is not None:
                acc = acc + xp.matrix_transpose(P) @ V[lo:hi, :]
        if acc is not None:
            out[cols, :] = out[cols, :] + acc
        return out

    # ------------------------------------------------------------------ columns, diagonal
    def columns(self, idx: Any) -> Any:
        """``K[:, idx]`` in float64 on the device (for the preconditioner)."""
        idx = np.asarray(to_host(idx), dtype=np.int64)
        if not self.fast:
            return self._dev(self.tiler.columns(idx))
        xp = self.xp
        C = self._exp_panel(self._A, take_rows(xp, self._B, idx))
        for j, i in enumerate(idx.tolist()):  # the exact diagonal, as on the host
            C[i, j] = self._scale
        return C

    def diag(self) -> Any:
        """The diagonal of ``K`` on the device."""
        return self._dev(self.tiler.diag())

    def info(self) -> dict:
        """JSON-able description: device tiles, cache, matvec counts and times."""
        p = self.plan
        return {
            "device_namespace": getattr(self.xp, "__name__", str(self.xp)),
            "tile_size": p.tile_size, "n_tiles": len(p.tiles), "cached_tiles": p.n_cached,
            "cached_fraction": round(p.cached_fraction, 4), "cache_bytes": p.cache_bytes,
            "cache_dtype": p.cache_dtype, "compute_dtype": "float64", "panel_rows": self.panel_rows,
            "rbf_on_device": self.fast, "build_seconds": round(self.build_seconds, 3),
            "n_matvec": self.n_matvec, "matvec_seconds": round(self.matvec_seconds, 3),
        }  # fmt: skip

    def close(self) -> None:
        """Drop the cached tiles (frees their device memory)."""
        self._cache = []


class DeviceExpansion:
    """``f(Z) = k(Z, X) a + b`` of a :class:`~bigkernel.numerics.gram_tiles.KernelExpansion`
    computed on a device, block by block (rbf family: one GEMM, ``exp`` and the product with
    ``a`` per block, float64); host numpy in and out. Other kernels use the host expansion.

    Picklable (dask ships it to the workers): the device copies of the points and coefficients
    are made once per process, on first use, and never pickled.

    Parameters
    ----------
    expansion : KernelExpansion
    namespace : callable
        ``namespace() -> (xp, context)``: the array namespace and a context manager that makes
        its device current (``bigkernel.devices`` gives it for a GPU; tests pass
        array-api-strict).
    block : int, default=4096
        Rows of ``Z`` and training points per block.
    """

    def __init__(self, expansion: Any, namespace: Any, *, block: int = 4096) -> None:
        self.expansion, self.namespace, self.block = expansion, namespace, int(block)
        self._arrays: Any = None

    @property
    def n_outputs(self) -> int:
        return self.expansion.n_outputs

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_arrays"] = None  # device arrays stay in their process
        return state

    def __call__(self, Z: Any) -> np.ndarray:
        tiler = self.expansion.tiler
        if not tiler.fast or tiler.sparse:
            return self.expansion(Z)
        xp, context = self.namespace()
        with context:
            if self._arrays is None:
                _, B, scale = tiler.augmented_points()
                coef = as_namespace_array(xp, self.expansion.coef, dtype=xp.float64)
                self._arrays = (as_namespace_array(xp, B, dtype=xp.float64), coef, scale)
            B, coef, scale = self._arrays
            Az = tiler.augment(Z)
            out = np.empty((Az.shape[0], coef.shape[1]))
            out[:] = self.expansion.intercept
            for lo in range(0, Az.shape[0], self.block):
                A = as_namespace_array(xp, Az[lo : lo + self.block], like=B, dtype=xp.float64)
                acc = xp.zeros((A.shape[0], coef.shape[1]), dtype=xp.float64, device=device_of(B))
                for c0 in range(0, B.shape[0], self.block):
                    c1 = min(c0 + self.block, B.shape[0])  # the standard refuses stops past the end
                    K = xp.exp(xp.minimum(A @ xp.matrix_transpose(B[c0:c1, :]), 0.0))
                    acc = acc + K @ coef[c0:c1, :]
                out[lo : lo + A.shape[0]] += scale * to_host(acc)
        return out
