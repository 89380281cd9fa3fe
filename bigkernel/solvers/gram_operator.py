"""The Gram matrix of the training points as a matvec for CG (layer 3: owns the computes).

:class:`DistributedGram` follows a :class:`~bigkernel.numerics.gram_tiles.GramPlan`: the first tiles
that fit the cache budget are computed once and persisted (in this process, or in the workers'
memory when a distributed client is active); every matvec is then one ``compute`` of a small
graph that reads cached tiles and recomputes the others (:mod:`bigkernel.graph.gram_matvec`).
Kernel columns for the preconditioner and the diagonal come straight from the points.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid

import dask
import numpy as np

from bigkernel.graph.gram_matvec import cache_graph, matvec_graph
from bigkernel.kernels.base import Kernel
from bigkernel.numerics.gram_tiles import GramPlan, GramTiler, plan_gram
from bigkernel.runtime import active_client, compute, local_threads, persist

logger = logging.getLogger(__name__)

__all__ = ["DistributedGram"]


def _threads(client) -> int:
    if client is None:
        return local_threads()
    return max(1, sum(client.nthreads().values()))


class DistributedGram:
    """``V ↦ K V`` for the Gram matrix ``K = k(X, X)``, cached within a memory budget.

    Implements the :class:`~bigkernel.solvers.base.GramOperator` protocol (``n``, ``matvec``,
    ``columns``, ``diag``, ``info``, ``close``): its tiles are cached on the cluster (or the
    local threaded scheduler) and recomputed beyond the budget, one ``compute`` per matvec.

    Parameters
    ----------
    kernel : Kernel
    X : ndarray of shape (n, d)
    memory_budget : int
        Bytes for the operator and everything counted in ``reserve_bytes``.
    dtype : {"auto", "float64", "float32"}, default="auto"
        See :func:`~bigkernel.numerics.gram_tiles.plan_gram`.
    n_rhs : int, default=1
        Largest number of columns per matvec (sizes the working memory).
    reserve_bytes : int, default=0
        Memory the caller holds besides the operator (preconditioner, CG vectors); the
        operator adds its own copy of the points.
    tile_size : int, optional
    client : distributed.Client, optional
        Default: the active client, else the local threaded scheduler.
    tiler : GramTiler or PrecomputedGram, optional
        The tiles' source, instead of ``GramTiler(kernel, X)``: a precomputed Gram matrix
        (``kernel`` and ``X`` are then ignored). A source with ``cacheable = False`` has its
        tiles in memory already, so none is cached.

    Attributes
    ----------
    plan : GramPlan
    tiler : GramTiler
    n_matvec : int
        Matvecs run so far.
    matvec_seconds : float
        Wall time spent in them.
    """

    def __init__(
        self,
        kernel: Kernel,
        X: np.ndarray,
        *,
        memory_budget: int,
        dtype: str = "auto",
        n_rhs: int = 1,
        reserve_bytes: int = 0,
        tile_size: int | None = None,
        client=None,
        tiler=None,
    ) -> None:
        self.client = client or active_client()
        self.tiler = GramTiler(kernel, X) if tiler is None else tiler
        n, d = self.tiler.n, self.tiler.d
        self._threads = _threads(self.client)
        self.plan: GramPlan = plan_gram(
            n, d, memory_budget, dtype=dtype, kernel_extra=self.tiler.extra_bytes_per_entry(np.float32),
            n_rhs=n_rhs, threads=self._threads, reserve_bytes=reserve_bytes + self.tiler.nbytes,
            tile_size=tile_size,
        )  # fmt: skip
        if not getattr(self.tiler, "cacheable", True):
            self.plan = dataclasses.replace(self.plan, n_cached=0, cache_bytes=0, cache_dtype="float64")
        self.n_matvec, self.matvec_seconds = 0, 0.0
        if self.client is not None:
            # the points travel to every worker once, not with each matvec's graph
            self._tiler_ref = self.client.scatter(self.tiler, broadcast=True, hash=False)
        else:
            self._tiler_ref = dask.delayed(self.tiler, name=f"gram-tiler-{uuid.uuid4().hex}")
        self._cached: dict[tuple[int, int], object] = {}
        t = time.perf_counter()
        p = self.plan
        if p.n_cached:
            tiles = p.tiles[: p.n_cached]
            graphs = cache_graph(self._tiler_ref, p.edges, tiles, p.cache_dtype)
            self._cached = dict(zip(tiles, persist(*graphs, client=self.client, label="gram-cache")))
        self.build_seconds = time.perf_counter() - t
        logger.info(
            "Gram operator n=%d: tiles of %d, %d of %d tiles cached (%.0f%% of entries, %.2f GB %s), "
            "recomputed tiles %s; built in %.2fs",
            n, p.tile_size, p.n_cached, len(p.tiles), 100 * p.cached_fraction, p.cache_bytes / 1e9,
            p.cache_dtype, p.compute_dtype, self.build_seconds,
        )  # fmt: skip

    @property
    def n(self) -> int:
        return self.tiler.n

    def matvec(self, V: np.ndarray) -> np.ndarray:
        """``K V`` in float64 for ``V`` of shape (n,) or (n, k): one compute."""
        V = np.asarray(V, dtype=np.float64)
        squeeze = V.ndim == 1
        V2 = V[:, None] if squeeze else V
        t = time.perf_counter()
        ref = dask.delayed(V2, name=f"gram-vectors-{uuid.uuid4().hex}")
        graph = matvec_graph(
            self._tiler_ref, ref, self.plan.edges, self.plan.tiles, self._cached,
            dtype=self.plan.compute_dtype, n_tasks=2 * self._threads,
        )  # fmt: skip
        (out,) = compute(graph, client=self.client, label="gram-matvec")
        self.n_matvec += 1
        self.matvec_seconds += time.perf_counter() - t
        return out[:, 0] if squeeze else out

    __call__ = matvec

    def columns(self, idx: np.ndarray) -> np.ndarray:
        """``K[:, idx]`` in float64 (for low-rank preconditioners), from the points directly."""
        return self.tiler.columns(idx)

    def diag(self) -> np.ndarray:
        """The diagonal of ``K``."""
        return self.tiler.diag()

    def info(self) -> dict:
        """JSON-able description: tiles, cache, matvec counts and times."""
        p = self.plan
        return {
            "tile_size": p.tile_size, "n_tiles": len(p.tiles), "cached_tiles": p.n_cached,
            "cached_fraction": round(p.cached_fraction, 4), "cache_bytes": p.cache_bytes,
            "cache_dtype": p.cache_dtype, "compute_dtype": p.compute_dtype,
            "build_seconds": round(self.build_seconds, 3), "n_matvec": self.n_matvec,
            "matvec_seconds": round(self.matvec_seconds, 3),
        }  # fmt: skip

    def close(self) -> None:
        """Drop the cached tiles (frees the memory here or on the workers)."""
        self._cached = {}
