"""Bootstrap percentile bands (layer 3: orchestrator), resumable through a zarr store.

The lecture's procedure: B bootstrap data sets of n draws with replacement, refit on each,
predict at evaluation points, and take the ``50·(1 − c)`` and ``50·(1 + c)`` percentiles per
point (5 % and 95 % for ``c = 0.9``) as the band.

How it runs
-----------
* Resampling draws multinomial *counts* per row, out of core and independent of the chunking
  (:mod:`bigkernel.numerics.resample`); a replicate's fit is the weighted fit with its counts.
* Replicates are grouped in *batches* of ``batch_size``: a batch makes one pass over the data —
  the features of a chunk are computed once and serve every replicate of the batch (weights of
  shape (m, rows)) — and its tree-reduced statistics feed one task per replicate that solves,
  predicts at ``X_eval`` and writes its own region of the store, its completion flag last.
  Every batch goes into ONE graph, run by one :func:`bigkernel.models._compute.compute`, so
  batches run in parallel on the cluster. Batch ``b`` starts its pass once batch
  ``b - 2·workers`` is done, so about ``2·workers`` batches are in memory whatever B is.
* The store (see :mod:`bigkernel.models.bootstrap_store`) is created, and its metadata written,
  by the client only. Rerunning with the same store computes only the replicates without a
  completion flag. A replicate's values depend only on its seed, the data, their chunking and the
  model — never on the batch it ran in, the worker or the order — so a resumed run gives
  bitwise the same percentiles as an uninterrupted one (same library versions and machine
  arithmetic). A store written by a different job is refused with
  :class:`~bigkernel.errors.StoreMismatchError`.

What is resampled
-----------------
Only the data. What the fit draws or estimates besides the coefficients — the random feature
map, the Nyström landmarks, the standardization, the kernel — is fixed once, from the fitted
estimator when it is fitted, else drawn as its ``fit`` would (seeded by its integer
``random_state``, or from the bootstrap seed) and kept across replicates: the band describes
the variability of the fit *given* those. With a list of α or ``alpha="gcv"`` every replicate
repeats the α selection; pass one α for the classic fixed-smoother band.

Solvers
-------
Every solver has a plan (:mod:`bigkernel.models.bootstrap_plans`): random features and Nyström
share one weighted pass per batch; the exact solver runs one weighted dual solve per replicate
(equal to the fit on the data with each row repeated ``count`` times); ``KernelRidge`` uses its
solver's. An estimator with a method ``_bootstrap_plan(ds, X_eval, seed_entropy) ->
ReplicatePlan`` provides its own.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import dask.array as da
import numpy as np
from dask.delayed import Delayed

from bigkernel.data.sources import Dataset, as_dataset
from bigkernel.errors import DataError, IncompleteStoreError, ParameterError
from bigkernel.models._compute import active_client, compute, local_threads
from bigkernel.models.bootstrap_plans import ReplicatePlan, make_plan
from bigkernel.models.bootstrap_store import (
    BootstrapStore,
    array_digest,
    open_or_create_store,
    open_store,
)
from bigkernel.numerics.resample import BLOCK_ROWS, METHODS, SCHEME, BootstrapWeights

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "BootstrapResult",
    "ReplicatePlan",
    "bootstrap",
    "default_batch_size",
    "eval_grid",
    "load_bootstrap",
]

logger = logging.getLogger(__name__)

#: Replicates sharing one pass over the data. Measured on this 2-core machine (n = 100,000,
#: D = 512 float64, B = 32, 2 workers x 1 thread, scripts/bench_bootstrap.py): one replicate per
#: task 25.2 s (1.51 CPU s per replicate: the cosine features, costlier than the replicate's
#: syrk, are recomputed for every replicate); batches of 4: 14.9 s (0.84); 8: 12.9 s (0.72);
#: 16: 11.2 s (0.68). 8 takes most of the gain with half the memory of 16 and enough batches to
#: balance the workers.
DEFAULT_BATCH_SIZE = 8

#: Batches running at once, per worker thread: batch ``b`` starts after batch ``b - window`` is
#: done (``window`` = this × worker threads), which bounds the memory of the one graph
#: whatever B is.
BATCHES_IN_FLIGHT_PER_WORKER = 2

#: Dask input up to this size (X + y bytes) is read once and shared by every batch (the scheduler
#: may then hold all of it in memory); larger input is re-read by each batch.
SHARED_DATA_BYTES = 2**30

#: ``fingerprint["kind"]`` of stores written by :func:`bootstrap`.
STORE_KIND = "bigkernel.bootstrap"

#: Rows at each end of a dask data set hashed into the store fingerprint.
_DIGEST_ROWS = 1024


# --------------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class BootstrapResult:
    """Pointwise bootstrap band and the replicate predictions behind it.

    Attributes
    ----------
    mean, lower, upper : ndarray of shape (n_eval,) or (n_eval, n_targets)
        Mean of the replicate predictions and the percentile band, per evaluation point (and
        target; 1-D when ``y`` was 1-D).
    predictions : dask.array.Array of shape (B, n_eval) or (B, n_eval, n_targets)
        Lazy replicate predictions, read from the zarr store.
    n_computed : int
        Replicates computed by this call.
    n_reused : int
        Replicates found complete in the store and reused.
    store : str
        Path (or URL) of the zarr store.
    confidence_level : float
        Central coverage of the band.
    n_bootstraps : int
        Number of replicates B.
    random_state : int
        Seed (entropy) of the resampling; pass it again to resume or reproduce the run.
    method : str
        ``"multinomial"`` or ``"poisson"``.
    X_eval : ndarray of shape (n_eval, n_features) or None
        Evaluation points (read from the store; None for stores written without them).
    """

    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    predictions: da.Array
    n_computed: int
    n_reused: int
    store: str
    confidence_level: float
    n_bootstraps: int
    random_state: int
    method: str
    X_eval: np.ndarray | None = None

    @property
    def width(self) -> np.ndarray:
        """Band width ``upper - lower`` per evaluation point (and target)."""
        return self.upper - self.lower

    def __repr__(self) -> str:
        return (
            f"BootstrapResult(n_bootstraps={self.n_bootstraps}, n_eval={self.mean.shape[0]}, "
            f"confidence_level={self.confidence_level}, method={self.method!r}, "
            f"n_computed={self.n_computed}, n_reused={self.n_reused}, store={self.store!r})"
        )


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def _chunks_digest(chunks: tuple[int, ...]) -> str:
    return "sha256:" + hashlib.sha256(repr(tuple(int(c) for c in chunks)).encode()).hexdigest()


def _data_fingerprint(ds: Dataset, arrays: tuple[Any, Any] | None, client: Any) -> dict[str, Any]:
    """Identity of the training data: shapes, dtypes, row chunking and a content digest.

    In-memory input is hashed whole. Dask input is hashed on its first and last
    ``_DIGEST_ROWS`` rows only (reading every value would cost a pass): this tells different
    data sets apart, not an edit in the middle of a data set of the same shape.
    """
    X, y = ds.X, ds.y
    n = X.shape[0]
    if arrays is not None:
        parts = arrays
        kind = "full"
    else:
        h, t = min(_DIGEST_ROWS, n), max(0, n - _DIGEST_ROWS)
        parts = compute(X[:h], y[:h], X[t:], y[t:], client=client, label="bootstrap-digest")
        kind = f"head-tail-{_DIGEST_ROWS}"
    digest = hashlib.sha256("|".join(array_digest(p) for p in parts).encode()).hexdigest()
    return {
        "n": int(n),
        "d": int(X.shape[1]),
        "y_ndim": int(y.ndim),
        "n_targets": int(1 if y.ndim == 1 else y.shape[1]),
        "dtype_X": str(X.dtype),
        "dtype_y": str(y.dtype),
        # float sums (and their tree reduction) round differently under another chunking
        "row_chunks": {"count": len(X.chunks[0]), "digest": _chunks_digest(X.chunks[0])},
        "digest_kind": kind,
        "digest": "sha256:" + digest,
    }


def _check_X_eval(X_eval: Any, n_features: int) -> np.ndarray:
    if isinstance(X_eval, da.Array):
        (X_eval,) = compute(X_eval, label="bootstrap-eval")
    try:
        E = np.asarray(X_eval, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(
            f"X_eval must be a numeric array of shape (n_eval, {n_features}); found "
            f"{type(X_eval).__name__}."
        ) from None
    if E.ndim != 2 or E.shape[1] != n_features or E.shape[0] < 1:
        hint = " (reshape a single feature with X_eval.reshape(-1, 1))" if E.ndim == 1 else ""
        raise DataError(
            f"X_eval must have shape (n_eval >= 1, {n_features}) like X; found {E.shape}{hint}."
        )
    if not np.isfinite(E).all():
        raise DataError("X_eval contains NaN or inf; evaluation points must be finite.")
    return np.ascontiguousarray(E)


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ParameterError(f"{name} must be an integer >= {minimum}; found {value!r}.")
    return int(value)


def _check_confidence(confidence_level: Any) -> float:
    if (isinstance(confidence_level, bool) or not isinstance(confidence_level, Real)
            or not 0.0 < float(confidence_level) < 1.0):
        raise ParameterError(
            f"confidence_level must be in (0, 1), e.g. 0.9 for a 90 % band; found "
            f"{confidence_level!r}."
        )
    return float(confidence_level)


def _resolve_seed(random_state: Any, store_path: str | None) -> int:
    """Integer entropy of the resampling; None reuses an existing store's seed (resume)."""
    if isinstance(random_state, Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ParameterError(f"random_state must be >= 0; found {random_state}.")
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if random_state is not None:
        raise ParameterError(
            "random_state must be None, a non-negative int or a numpy RandomState; found "
            f"{type(random_state).__name__}."
        )
    if store_path is not None:
        try:
            fp = open_store(store_path).fingerprint
        except Exception:  # noqa: BLE001 - absent or foreign: open_or_create_store says which
            fp = None
        if isinstance(fp, Mapping) and fp.get("kind") == STORE_KIND and "seed" in fp:
            logger.info("random_state=None: reusing the seed %s recorded in %s", fp["seed"],
                        store_path)
            return int(fp["seed"])
    return int(np.random.SeedSequence().entropy)


def _workers(client: Any) -> int:
    client = client or active_client()
    if client is not None:
        return max(1, sum(client.nthreads().values()))
    return local_threads()


def default_batch_size(n_replicates: int, n_workers: int, max_batch_size: int | None = None) -> int:
    """Replicates per batch: :data:`DEFAULT_BATCH_SIZE`, fewer when that would idle workers.

    Parameters
    ----------
    n_replicates : int
        Replicates to compute.
    n_workers : int
        Worker threads of the scheduler.
    max_batch_size : int, optional
        Memory bound of the estimator's plan.

    Returns
    -------
    int
        ``min(DEFAULT_BATCH_SIZE, ceil(n_replicates / n_workers), max_batch_size)``, at least 1.
    """
    m = min(DEFAULT_BATCH_SIZE, -(-max(1, n_replicates) // max(1, n_workers)))
    if max_batch_size is not None:
        m = min(m, max_batch_size)
    return max(1, m)


def _batch_dataset(ds: Dataset, batch: int, clone_data: bool) -> Dataset:
    """The data for one batch; with fresh task keys when it should be re-read per batch.

    Shared keys let the scheduler keep every chunk in memory until the last batch has used
    it; input larger than :data:`SHARED_DATA_BYTES` is therefore re-read by each batch (a pass
    per batch, which is what batching amortises). Small input is shared: re-reading it would
    only cost time (and, for a dask array wrapping numpy, ship it once per batch).
    """
    if not clone_data:
        return ds
    from dask.graph_manipulation import clone as clone_graph

    X, y = clone_graph(ds.X, ds.y, seed=batch)
    return Dataset(X, y, ds.source, ds.columns)


def _result(store: BootstrapStore, confidence_level: float, n_computed: int) -> BootstrapResult:
    fp = store.fingerprint
    single = int(fp.get("data", {}).get("y_ndim", 2)) == 1
    band = store.read_band(confidence_level)
    preds = store.predictions_dask()
    if single:
        band = type(band)(*(a[:, 0] for a in band))
        preds = preds[..., 0]
    return BootstrapResult(
        mean=band.mean, lower=band.lower, upper=band.upper, predictions=preds,
        n_computed=n_computed, n_reused=store.n_replicates - n_computed, store=store.path,
        confidence_level=confidence_level, n_bootstraps=store.n_replicates,
        random_state=int(fp.get("seed", -1)), method=str(fp.get("resampling", {}).get("method")),
        X_eval=store.read_eval_points(),
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------
def bootstrap(
    estimator: Any,
    X: Any,
    y: Any,
    X_eval: Any,
    n_bootstraps: int = 200,
    confidence_level: float = 0.9,
    random_state: int | np.random.RandomState | None = None,
    store: str | os.PathLike[str] | None = None,
    method: str = "multinomial",
    batch_size: int | None = None,
    client: Any = None,
) -> BootstrapResult:
    """Bootstrap percentile band of an estimator's predictions at ``X_eval``.

    Parameters
    ----------
    estimator : RandomFeatureRidge, NystroemRidge, ExactKernelRidge, KernelRidge, a fitted RandomFeatureRidgeCV, or an estimator with ``_bootstrap_plan``
        Never modified. Fitted: its feature map / landmarks / scaling are reused; unfitted:
        they are drawn once, as its ``fit`` would. Only the data are resampled (see the module
        docstring).
    X : array-like or dask array of shape (n_samples, n_features)
    y : array-like or dask array of shape (n_samples,) or (n_samples, n_targets)
    X_eval : array-like of shape (n_eval, n_features)
        Evaluation points (held in memory; see :func:`eval_grid`).
    n_bootstraps : int, default=200
        Number of replicates B.
    confidence_level : float, default=0.9
        Central coverage; the band is the 5 % and 95 % percentiles for 0.9. Not part of the
        store's identity: the same store serves any level.
    random_state : int, numpy RandomState or None, default=None
        Seed of the resampling (replicate ``r`` uses ``SeedSequence(seed).spawn`` child ``r``).
        None draws a fresh seed — or, when ``store`` already holds a run of :func:`bootstrap`,
        reuses that run's seed so that it can be resumed. The seed is in ``result.random_state``.
    store : str or os.PathLike, optional
        Zarr store of the replicates (local path or fsspec URL). Reusing it resumes the run.
        None creates ``<tempdir>/bigkernel-bootstrap-XXXX/bootstrap.zarr`` under
        :func:`tempfile.gettempdir`; it is not deleted (``result.predictions`` reads from it).
        With a cluster on other machines pass a path every worker can write.
    method : {"multinomial", "poisson"}, default="multinomial"
        Exact bootstrap counts, or Poisson(1) weights (an approximation: the total weight is only
        close to n).
    batch_size : int, optional
        Replicates sharing one pass over the data; values do not depend on it. Default
        :func:`default_batch_size` (8, fewer when that would leave workers idle or exceed the
        memory bound of the plan).
    client : distributed.Client, optional
        Default: the active client, else the local scheduler.

    Returns
    -------
    BootstrapResult

    Raises
    ------
    StoreMismatchError
        ``store`` holds a run of a different job (data, seed, model, resampling, B, X_eval).
    NotImplementedError
        The estimator type has no bootstrap plan.
    """
    B = _check_int("n_bootstraps", n_bootstraps, 1)
    level = _check_confidence(confidence_level)
    if method not in METHODS:
        raise ParameterError(f"method must be one of {METHODS}; found {method!r}.")
    if batch_size is not None:
        batch_size = _check_int("batch_size", batch_size, 1)
    if y is None:
        raise DataError("bootstrap() requires y; found None.")

    in_memory = not isinstance(X, da.Array) and not isinstance(y, da.Array)
    ds = as_dataset(X, y, chunk_rows=getattr(estimator, "chunk_rows", None) if in_memory else None)
    n, d = ds.X.shape
    E = _check_X_eval(X_eval, d)
    k = 1 if ds.y.ndim == 1 else int(ds.y.shape[1])

    if store is None:
        path = os.path.join(tempfile.mkdtemp(prefix="bigkernel-bootstrap-"), "bootstrap.zarr")
        logger.info("bootstrap store: %s (temporary, not deleted automatically)", path)
    else:
        path = os.fspath(store)
    entropy = _resolve_seed(random_state, path if store is not None else None)
    workers = _workers(client)
    plan = make_plan(estimator, ds, E, entropy, workers)

    fingerprint = {
        "kind": STORE_KIND,
        "seed": entropy,
        "resampling": {"scheme": SCHEME, "method": method, "block_rows": BLOCK_ROWS},
        "data": _data_fingerprint(ds, (X, y) if in_memory else None, client),
        "estimator": plan.fingerprint,
        "eval": {"n_eval": int(E.shape[0]), "digest": array_digest(E)},
    }
    bs = open_or_create_store(path, fingerprint, B, E.shape[0], k, plan.n_coef, eval_points=E)
    missing = bs.missing()
    if missing:
        m = batch_size or default_batch_size(len(missing), workers, plan.max_batch_size)
        batches = [tuple(missing[i : i + m]) for i in range(0, len(missing), m)]
        clone_data = (not in_memory and ds.X.numblocks[0] > 1
                      and ds.X.nbytes + ds.y.nbytes > SHARED_DATA_BYTES)
        window = BATCHES_IN_FLIGHT_PER_WORKER * workers
        logger.info("bootstrap: %d of %d replicates to compute (%d reused) in %d batches of <= %d "
                    "(<= %d at a time)", len(missing), B, B - len(missing), len(batches), m, window)
        per_batch: list[list[Delayed]] = []
        for b, reps in enumerate(batches):
            weights = BootstrapWeights(entropy, reps, n, method)
            # Batch b waits for batch b - window: otherwise the scheduler may run the chunk tasks
            # of every batch before reducing any and hold B·D² partial sums at once (1.5 GB at
            # B = 96, D = 512, 4 chunks, measured), whatever the memory.
            after = per_batch[b - window] if b >= window else ()
            per_batch.append(plan.batch_tasks(_batch_dataset(ds, b, clone_data), weights, bs,
                                              after=after))
        compute(*[t for tasks in per_batch for t in tasks], client=client, label="bootstrap")
        left = bs.missing()
        if left:  # a plan whose tasks did not write their replicate
            raise IncompleteStoreError(
                f"bootstrap store {bs.path!r}: {len(left)} replicates were not written by their "
                "tasks; rerun to compute them."
            )
    else:
        logger.info("bootstrap: all %d replicates found complete in %s", B, bs.path)
    return _result(bs, level, len(missing))


def load_bootstrap(
    path: str | os.PathLike[str],
    confidence_level: float = 0.9,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> BootstrapResult:
    """Read a finished bootstrap run back from its store.

    Parameters
    ----------
    path : str or os.PathLike
        The store of a :func:`bootstrap` run.
    confidence_level : float, default=0.9
        Central coverage of the band to compute from the stored replicates.
    storage_options : dict, optional
        fsspec options for URLs.

    Returns
    -------
    BootstrapResult
        With ``n_computed == 0`` and ``n_reused == n_bootstraps``.

    Raises
    ------
    DataNotFoundError
        Nothing at ``path``.
    ModelFormatError
        ``path`` is not a bootstrap store.
    IncompleteStoreError
        Some replicates are missing; rerun :func:`bootstrap` with this store to finish it.
    """
    level = _check_confidence(confidence_level)
    return _result(open_store(path, storage_options=storage_options), level, 0)


def eval_grid(
    X: Any, feature: int = 0, n_points: int = 200, reference: Any = None, *, client: Any = None
) -> np.ndarray:
    """Evaluation points along one feature, the other features held at a reference point.

    Parameters
    ----------
    X : array-like or dask array of shape (n_samples, n_features)
        Training inputs; the grid spans ``[min, max]`` of column ``feature``.
    feature : int, default=0
        Column the grid runs along.
    n_points : int, default=200
        Number of grid points.
    reference : array-like of shape (n_features,), optional
        Values of the other features. Default: the column medians — exact for numpy input and
        for dask input of at most 100,000 rows, otherwise the medians of an evenly spaced
        sample of about 100,000 rows (read in the same pass as the min and max).
    client : distributed.Client, optional
        For dask input.

    Returns
    -------
    ndarray of shape (n_points, n_features), float64
    """
    n_points = _check_int("n_points", n_points, 1)
    if isinstance(X, da.Array):
        if X.ndim != 2:
            raise DataError(f"X must be 2-D (n_samples, n_features); found shape {X.shape}.")
        step = max(1, math.ceil(X.shape[0] / 100_000))
        lo, hi, sample = compute(X.min(axis=0), X.max(axis=0), X[::step], client=client,
                                 label="eval-grid")
        A = np.asarray(sample, dtype=np.float64)
    else:
        A = np.asarray(X, dtype=np.float64)
        if A.ndim != 2:
            raise DataError(f"X must be 2-D (n_samples, n_features); found shape {A.shape}.")
        lo, hi = A.min(axis=0), A.max(axis=0)
    d = A.shape[1]
    feature = _check_int("feature", feature, 0)
    if feature >= d:
        raise ParameterError(f"feature must be < n_features = {d}; found {feature}.")
    if reference is None:
        ref = np.median(A, axis=0)
    else:
        ref = np.asarray(reference, dtype=np.float64).ravel()
        if ref.shape != (d,):
            raise ParameterError(f"reference must have shape ({d},); found {ref.shape}.")
    grid = np.tile(ref, (n_points, 1))
    grid[:, feature] = np.linspace(float(lo[feature]), float(hi[feature]), n_points)
    return grid
