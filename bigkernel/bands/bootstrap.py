"""Bootstrap percentile bands (layer 3: orchestrator), resumable through a zarr store.

The lecture's procedure: B bootstrap data sets of n draws with replacement, refit on each,
predict at evaluation points, and take the ``50·(1 − c)`` and ``50·(1 + c)`` percentiles per
point (5 % and 95 % for ``c = 0.9``) as the band.

What the band is
----------------
``interval="confidence"`` (the default): a *pointwise confidence band for the fitted function*
f̂(x) at the given level (percentile bootstrap) — how much the fit itself would move with
another sample of the same size. It is **not** an interval for a new observation: it ignores
the noise, and is typically far narrower than the residual spread.

``interval="prediction"``: a pointwise *prediction interval* for a new observation
``y = f(x) + ε`` at each evaluation point, by residual resampling (Davison & Hinkley 1997,
Alg. 6.4): replicate ``r`` gives the prediction error ``δ*_r = f̂*_r(x) − (f̂(x) + ε*)`` with
``ε*`` drawn from the centred residuals of the original fit f̂, inflated by ``√(n/(n − df))``;
the interval is ``[f̂(x) − q_hi(δ*), f̂(x) − q_lo(δ*)]``. The residuals come from one extra pass
over the data (a bounded, seeded sample of at most 20,000 rows, independent of the chunking:
:mod:`bigkernel.numerics.residuals`). It assumes homoscedastic errors, independent of x. The
confidence band of the same replicates comes with it.

Evaluation points outside the per-feature range of the training X are flagged
(``out_of_range``) and reported once by an :class:`~bigkernel.errors.ExtrapolationWarning`:
there either interval only describes the model's extrapolation.

How it runs
-----------
* Resampling draws multinomial *counts* per row, out of core and independent of the chunking
  (:mod:`bigkernel.numerics.resample`); a replicate's fit is the weighted fit with its counts.
* Replicates are grouped in *batches* of ``batch_size``: a batch makes one pass over the data —
  the features of a chunk are computed once and serve every replicate of the batch (weights of
  shape (m, rows)) — and its tree-reduced statistics feed one task per replicate that solves,
  predicts at ``X_eval`` and writes its own region of the store, its completion flag last.
  Every batch goes into ONE graph, run by one :func:`bigkernel.runtime.compute`. Batch ``b``
  starts its pass once batch ``b - window`` is done, ``window`` just large enough to keep every
  worker thread busy (one batch when the data have as many chunks as worker threads): batches
  land in the store one after the other, each replicate checkpointed as its task ends, and
  few batches are in memory whatever B is (:mod:`bigkernel.bands.checkpoint`).
* The store (see :mod:`bigkernel.io.band_store`) is created, and its metadata written,
  by the client only. Rerunning with the same store (after Ctrl-C, a killed process or a
  lost cluster) computes only the replicates without a completion flag; a rerun with a larger
  ``n_bootstraps`` keeps the store's replicates and computes the new ones, one with a smaller
  ``n_bootstraps`` uses the store's first B (replicate ``r`` depends on ``r`` only). A
  replicate's values depend only on its seed, the data, their chunking and the model —
  never on the batch it ran in, the worker or the order — so a resumed run gives bitwise the
  same percentiles as an uninterrupted one (same library versions and machine arithmetic). A store written by a different job is refused with
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
Every solver has a plan (:mod:`bigkernel.bands.plans`): random features and Nyström
share one weighted pass per batch; the exact solver runs one weighted dual solve per replicate
(equal to the fit on the data with each row repeated ``count`` times); ``KernelRidge`` uses its
solver's. Each estimator provides its plan through its public ``replicate_plan(ds, X_eval, *,
seed_entropy, workers)``; a new solver gets bootstrap support by implementing it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any

import dask.array as da
import numpy as np
from dask.delayed import Delayed

from bigkernel._sparse import refuse_sparse
from bigkernel.bands.checkpoint import (
    STORE_KIND,
    StoreProgress,
    batches_in_flight,
    data_fingerprint,
    resolve_seed,
)
from bigkernel.bands.plans import ReplicatePlan, make_plan, on_device
from bigkernel.bands.result import BootstrapResult, out_of_range, read_result
from bigkernel.data.columns import checked_columns, named_column
from bigkernel.data.sources import Dataset, as_dataset
from bigkernel.errors import (
    DataError,
    ExtrapolationWarning,
    IncompleteStoreError,
    ParameterError,
    StoreMismatchError,
)
from bigkernel.io.band_store import (
    BootstrapStore,
    array_digest,
    open_or_create_store,
    open_store,
)
from bigkernel.numerics.resample import BLOCK_ROWS, METHODS, SCHEME, BootstrapWeights
from bigkernel.numerics.residuals import (
    DRAWS_PER_REPLICATE,
    EVAL_BLOCK,
    RESIDUAL_SAMPLE_ROWS,
    ResidualSample,
)
from bigkernel.runtime import active_client, compute, local_threads, progress_bars
from bigkernel.validation import Interval, Options, check_int, check_param

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "INTERVALS",
    "BootstrapResult",
    "ReplicatePlan",
    "bootstrap",
    "default_batch_size",
    "eval_grid",
    "load_bootstrap",
    "out_of_range",
]

logger = logging.getLogger(__name__)

#: Replicates sharing one pass over the data. Measured on this 2-core machine (n = 100,000,
#: D = 512 float64, B = 32, 2 workers x 1 thread, scripts/bench_bootstrap.py): one replicate per
#: task 25.2 s (1.51 CPU s per replicate: the cosine features, costlier than the replicate's
#: syrk, are recomputed for every replicate); batches of 4: 14.9 s (0.84); 8: 12.9 s (0.72);
#: 16: 11.2 s (0.68). 8 takes most of the gain with half the memory of 16 and enough batches to
#: balance the workers.
DEFAULT_BATCH_SIZE = 8

#: Dask input up to this size (X + y bytes) is read once and shared by every batch (the scheduler
#: may then hold all of it in memory); larger input is re-read by each batch.
SHARED_DATA_BYTES = 2**30

#: Kinds of interval :func:`bootstrap` returns.
INTERVALS = ("confidence", "prediction")

#: Name of the residual sampling and drawing scheme (:mod:`bigkernel.numerics.residuals`).
RESIDUAL_SCHEME = "bigkernel-residual-bottom-k-v1"


def _residual_identity() -> dict[str, Any]:
    """Identity of the residual sample kept in a store (compared before it is reused)."""
    return {
        "scheme": RESIDUAL_SCHEME,
        "capacity": RESIDUAL_SAMPLE_ROWS,
        "eval_block": EVAL_BLOCK,
        "draws_per_replicate": DRAWS_PER_REPLICATE,
    }


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def _check_X_eval(X_eval: Any, n_features: int) -> np.ndarray:
    if isinstance(X_eval, da.Array):
        (X_eval,) = compute(X_eval, label="bootstrap-eval")
    try:
        E = np.asarray(X_eval, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(
            f"X_eval must be a numeric array of shape (n_eval, {n_features}); found {type(X_eval).__name__}."
        ) from None
    if E.ndim != 2 or E.shape[1] != n_features or E.shape[0] < 1:
        hint = " (reshape a single feature with X_eval.reshape(-1, 1))" if E.ndim == 1 else ""
        raise DataError(f"X_eval must have shape (n_eval >= 1, {n_features}) like X; found {E.shape}{hint}.")
    if not np.isfinite(E).all():
        raise DataError("X_eval contains NaN or inf; evaluation points must be finite.")
    return np.ascontiguousarray(E)


def _check_confidence(confidence_level: Any, caller: str) -> float:
    """The band's coverage, in (0, 1) (0.9 for a 90 % band)."""
    return float(
        check_param(
            "confidence_level", confidence_level, [Interval(Real, 0, 1, closed="neither")], caller=caller, default=0.9
        )
    )


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


def _check_interval(interval: Any) -> str:
    """'confidence' (band of the fitted function) or 'prediction' (interval for a new y)."""
    return str(check_param("interval", interval, [Options(str, INTERVALS)], caller="bootstrap", default="confidence"))


def _warn_extrapolation(E: np.ndarray, lo, hi, flags: np.ndarray, interval: str, names=None) -> None:
    """One :class:`ExtrapolationWarning`: how many points, which features, the training range."""
    outside = (E < lo) | (E > hi)
    features = np.flatnonzero(outside.any(axis=0))
    shown = [
        f"feature {names[j] if names else j}: {int(outside[:, j].sum())} points, training range [{lo[j]:.6g}, "
        f"{hi[j]:.6g}], evaluation points in [{E[:, j].min():.6g}, {E[:, j].max():.6g}]"
        for j in features[:10]
    ]
    if features.size > 10:
        shown.append(f"... ({features.size - 10} more features)")
    what = "confidence band" if interval == "confidence" else "prediction interval"
    warnings.warn(
        f"{int(flags.sum())} of {E.shape[0]} evaluation points lie outside the per-feature range "
        f"of the training X ({'; '.join(shown)}). There the bootstrap {what} reflects the "
        "model's extrapolation, not the data; such points are flagged in result.out_of_range.",
        ExtrapolationWarning,
        stacklevel=3,
    )


def _check_residual_identity(info: Mapping[str, Any], path: str) -> None:
    """Refuse a stored residual sample made by another sampling scheme."""
    diffs = [
        f"  {k}: expected {v!r}, found {info.get(k)!r}" for k, v in _residual_identity().items() if info.get(k) != v
    ]
    if diffs:
        raise StoreMismatchError(
            f"bootstrap store {path!r} holds a residual sample made by another scheme; it "
            "cannot serve this prediction interval. Differing fields:\n" + "\n".join(diffs) + "\nUse a new store path."
        )


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------
def _refuse_classifier(estimator: Any) -> None:
    """Classifiers have no band here: their labels have no percentiles."""
    from sklearn.base import is_classifier

    if is_classifier(estimator):
        raise ParameterError(
            f"bootstrap() bands a regressor's predictions; {type(estimator).__name__} is a classifier, "
            "whose predicted labels have no percentile band. For a band on its decision function, "
            "bootstrap the matching regressor on the ±1 targets of one class, e.g. "
            "RandomFeatureRidge(...) with y = np.where(labels == cls, 1.0, -1.0)"
        )


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
    interval: str = "confidence",
    device: str | None = None,
    verbose: int = 0,
) -> BootstrapResult:
    """Bootstrap interval of an estimator at ``X_eval``: by default a pointwise confidence
    band for the fitted function f̂(x) at the given level (percentile bootstrap); not an
    interval for a new observation — use ``interval="prediction"``.

    The data are resampled B times (pairs), the estimator refitted on each, and its predictions
    at ``X_eval`` stored; ``interval`` decides what the percentiles describe (see the module
    docstring for the method and its assumptions).

    Parameters
    ----------
    estimator : RandomFeatureRidge, NystroemRidge, ExactKernelRidge, KernelRidge, a fitted RandomFeatureRidgeCV or ExactKernelRidgeCV, or an estimator with ``replicate_plan``
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
        Zarr store of the replicates (local path or fsspec URL). Every replicate is written
        there as its task ends, so reusing it resumes an interrupted run, computing only the
        missing replicates. With a larger ``n_bootstraps`` (same job otherwise) the store's
        replicates are kept and only the new ones computed; with a smaller one the store's
        first ``n_bootstraps`` replicates are used (bitwise the band of a fresh run with that
        B; the store keeps the others).
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
    interval : {"confidence", "prediction"}, default="confidence"
        ``"confidence"``: percentiles of the replicate predictions f̂*_r(x), a pointwise
        confidence band for the fitted function (how much f̂ would move with another sample;
        it ignores the noise of y). ``"prediction"``: a pointwise interval for a new
        observation y at x (Davison & Hinkley 1997, Alg. 6.4): the percentiles of
        ``2 f̂(x) − f̂*_r(x) + ε*`` over replicates, with ε* drawn (from the seed, per replicate
        and point) from a bounded sample (≤ 20,000 rows, chosen by a hash of (seed, row):
        independent of the chunking) of the original fit's residuals, centred and scaled by
        ``√(n / (n − df))``. Costs one unit-weight fit and one residual pass over the data, once
        per store. Assumes homoscedastic errors independent of x. The confidence band of the
        same replicates is kept in ``confidence_lower``/``confidence_upper``. Not part of the
        store's identity: both use the same replicates, and a prediction run adds the residual
        sample to a store made by a confidence run.
    device : {"cpu", "cuda", "cuda:N", "auto"} or None, default=None
        Where replicates compute (None: the estimator's own; not in the store's identity).
    verbose : int, default=0
        >= 1: the progress of the replicates' pass (bars on a terminal, else a log line every
        10 s), as the estimators' ``verbose``; an outer :func:`~bigkernel.progress_bars` shows it
        too. A line per batch landing in the store is logged at INFO either way.

    Returns
    -------
    BootstrapResult

    Warns
    -----
    ExtrapolationWarning
        Once, when evaluation points lie outside the per-feature range of the training X
        (flagged in ``result.out_of_range``): there the interval reflects the model's
        extrapolation.

    Raises
    ------
    ParameterError
        ``estimator`` is a classifier (no band on labels; see the message for the band of a
        decision function).
    StoreMismatchError
        ``store`` holds a run of a different job (data, seed, model, resampling, X_eval); the
        message lists what differs. ``n_bootstraps`` alone may differ (see ``store``).
    NotImplementedError
        The estimator type has no bootstrap plan (or, for ``interval="prediction"``, its plan
        has no ``residual_task``).

    Notes
    -----
    The run's steps, each a function below in this order: check the arguments
    (:func:`_check_request`), read the data and evaluation points (:func:`_inputs`), pick the
    store (:func:`_store_path`) and seed, ask the estimator for its plan (:func:`_plan`), open
    or create the store under the run's identity (:func:`_fingerprint`), add the original fit
    for a prediction interval (:func:`_original_fit_task`), schedule the missing replicates in
    batches (:func:`_replicate_tasks`), compute everything at once (:func:`_run_graph`),
    record the range and residuals (:func:`_record_extras`), then read the band back.
    """
    _refuse_classifier(estimator)
    req = _check_request(n_bootstraps, confidence_level, interval, method, batch_size, verbose, y)
    data = _inputs(estimator, X, y, X_eval)
    path = _store_path(store)
    entropy = resolve_seed(random_state, path if store is not None else None)
    workers = _workers(client)
    plan = _plan(estimator, data, device, entropy, workers, req.interval)  # DeviceError before any store
    bs = open_or_create_store(
        path, _fingerprint(plan, data, entropy, req.method, client), req.B, data.E.shape[0], data.k,
        plan.n_coef, eval_points=data.E,
    )  # fmt: skip
    missing = bs.missing()
    extra = _original_fit_task(plan, data, bs, entropy, req.interval)  # further results of the one compute
    data_min, data_max = _known_range(bs, data)
    replicate_tasks = _replicate_tasks(plan, data, bs, missing, entropy, req, workers)
    if data_min is None:
        # dask input: a d-column min/max on the data's own chunk keys (shared with the passes
        # that read the same keys, so no extra read when the data are shared)
        extra["data_min"], extra["data_max"] = data.ds.X.min(axis=0), data.ds.X.max(axis=0)
    extra = _run_graph(bs, replicate_tasks, extra, len(missing), req.verbose, client)
    _record_extras(bs, extra, data_min, data_max)
    if missing:
        left = bs.missing()
        if left:  # a plan whose tasks did not write their replicate
            raise IncompleteStoreError(
                f"bootstrap store {bs.path!r}: {len(left)} replicates were not written by their "
                "tasks; rerun to compute them."
            )
    bs.mark_complete()  # a grown store records its new B only now
    result = read_result(bs, req.level, len(missing), req.interval)
    if result.out_of_range.any():
        _warn_extrapolation(data.E, result.data_min, result.data_max, result.out_of_range, req.interval, data.names)
    return result


# --------------------------------------------------------------------------------------------
# The steps of a run, in the order bootstrap() takes them
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Request:
    """The checked arguments of a run (what it is asked for, not what it runs on)."""

    B: int
    level: float
    interval: str
    method: str
    batch_size: int | None
    verbose: int


def _check_request(
    n_bootstraps: Any, confidence_level: Any, interval: Any, method: Any, batch_size: Any, verbose: Any, y: Any
) -> _Request:
    """Step 1: the arguments, checked before anything is read (a ``ParameterError``/``DataError``
    names the one at fault)."""
    B = check_int("n_bootstraps", n_bootstraps, 1, caller="bootstrap", default=200)
    verbose = check_int("verbose", verbose, 0, caller="bootstrap", default=0)
    level = _check_confidence(confidence_level, "bootstrap")
    if B * (1 - level) / 2 < 1 - 1e-9:  # not one replicate beyond either end: the ends are interpolated
        logger.warning(
            "n_bootstraps=%d is too few for a %g %% band: fewer than one replicate lies beyond each "
            "end, so its ends are interpolated between the most extreme replicates (one replicate "
            "gives a band of width 0); use n_bootstraps >= %d (ten replicates beyond each end)",
            B,
            100 * level,
            math.ceil(20 / (1 - level) - 1e-9),
        )
    interval = _check_interval(interval)
    if method not in METHODS:
        raise ParameterError(f"method must be one of {METHODS}; found {method!r}.")
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size, 1, caller="bootstrap")
    if y is None:
        raise DataError("bootstrap() requires y; found None.")
    return _Request(B, level, interval, method, batch_size, verbose)


@dataclass(frozen=True)
class _Inputs:
    """The data of a run: the dataset, the evaluation points and what the store's identity
    needs to know about them."""

    ds: Dataset
    E: np.ndarray  # evaluation points, float64, C-contiguous
    names: Any  # the feature names (messages), or None
    in_memory: bool  # X and y given as arrays (not dask)
    raw: tuple[Any, Any]  # X and y as given (digested for the store's identity when in memory)

    @property
    def k(self) -> int:
        """Targets."""
        return 1 if self.ds.y.ndim == 1 else int(self.ds.y.shape[1])


def _inputs(estimator: Any, X: Any, y: Any, X_eval: Any) -> _Inputs:
    """Step 2: the data as a :class:`Dataset` (chunked as the estimator would, for in-memory
    input) and the checked evaluation points, columns matched by name."""
    names = checked_columns(estimator, X=X, X_eval=X_eval)  # by name, never by position
    in_memory = not isinstance(X, da.Array) and not isinstance(y, da.Array)
    ds = as_dataset(X, y, chunk_rows=getattr(estimator, "chunk_rows", None) if in_memory else None)
    refuse_sparse(ds.X, "bootstrap() does not take sparse X yet (fit and predict do); pass X.toarray() for the bands")
    E = _check_X_eval(X_eval, ds.X.shape[1])
    return _Inputs(ds, E, names, in_memory, (X, y))


def _store_path(store: str | os.PathLike[str] | None) -> str:
    """Step 3: the store's path; a new temporary folder (kept) when none is given."""
    if store is not None:
        return os.fspath(store)
    path = os.path.join(tempfile.mkdtemp(prefix="bigkernel-bootstrap-"), "bootstrap.zarr")
    logger.info("bootstrap store: %s (temporary, not deleted automatically)", path)
    return path


def _plan(
    estimator: Any, data: _Inputs, device: str | None, entropy: int, workers: int, interval: str
) -> ReplicatePlan:
    """Step 4: the estimator's replicate plan on ``device`` (:mod:`bigkernel.bands.plans`),
    refused for a prediction interval when it cannot fit the original model."""
    plan = make_plan(on_device(estimator, device), data.ds, data.E, entropy, workers)
    if interval == "prediction" and not callable(getattr(plan, "residual_task", None)):
        raise NotImplementedError(
            f"interval='prediction' needs the bootstrap plan of {type(estimator).__name__} to "
            "provide residual_task(ds, seed, capacity) (the original fit's residuals); use "
            "interval='confidence'."
        )
    return plan


def _fingerprint(plan: ReplicatePlan, data: _Inputs, entropy: int, method: str, client: Any) -> dict[str, Any]:
    """Step 5: the store's identity — seed, resampling, data, model (the plan's fingerprint) and
    evaluation points — compared with a store that exists (:class:`StoreMismatchError`)."""
    return {
        "kind": STORE_KIND,
        "seed": entropy,
        "resampling": {"scheme": SCHEME, "method": method, "block_rows": BLOCK_ROWS},
        "data": data_fingerprint(data.ds, data.raw if data.in_memory else None, client),
        "estimator": plan.fingerprint,
        "eval": {"n_eval": int(data.E.shape[0]), "digest": array_digest(data.E)},
    }


def _original_fit_task(
    plan: ReplicatePlan, data: _Inputs, bs: BootstrapStore, entropy: int, interval: str
) -> dict[str, Any]:
    """Step 6: ``{"residuals": task}`` when a prediction interval needs the original fit's
    residual sample and the store has none yet; a stored one is checked and reused."""
    if interval != "prediction":
        return {}
    found = bs.read_residuals()
    if found is not None:
        _check_residual_identity(found[1], bs.path)
        return {}
    return {"residuals": plan.residual_task(data.ds, entropy, RESIDUAL_SAMPLE_ROWS)}


def _known_range(bs: BootstrapStore, data: _Inputs) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The per-feature training range: the store's, else read from in-memory X now (dask
    input: None, computed with the replicates)."""
    data_min, data_max = bs.read_range()
    if data_min is None and data.in_memory:
        A = np.asarray(data.raw[0])
        data_min, data_max = A.min(axis=0), A.max(axis=0)
    return data_min, data_max


def _replicate_tasks(
    plan: ReplicatePlan,
    data: _Inputs,
    bs: BootstrapStore,
    missing: list[int],
    entropy: int,
    req: _Request,
    workers: int,
) -> list[Delayed]:
    """Step 7: the delayed tasks of the replicates the store lacks, in batches that land one
    after the other (see the module docstring, *How it runs*)."""
    B, ds = req.B, data.ds
    if not missing:
        logger.info("bootstrap: %d/%d replicates already in the store %s, computing 0", B, B, bs.path)
        return []
    m = req.batch_size or default_batch_size(len(missing), workers, plan.max_batch_size)
    batches = [tuple(missing[i : i + m]) for i in range(0, len(missing), m)]
    clone_data = not data.in_memory and ds.X.numblocks[0] > 1 and ds.X.nbytes + ds.y.nbytes > SHARED_DATA_BYTES
    # one task per replicate (exact) or one per chunk (feature plans) in a batch's pass
    window = batches_in_flight(workers, m if getattr(plan, "task_per_replicate", False) else ds.X.numblocks[0])
    logger.info(
        "bootstrap: %d/%d replicates already in the store, computing %d in %d batches of <= %d (%d at a time)",
        B - len(missing), B, len(missing), len(batches), m, window,
    )  # fmt: skip
    per_batch: list[list[Delayed]] = []
    for b, reps in enumerate(batches):
        weights = BootstrapWeights(entropy, reps, ds.X.shape[0], req.method)
        # Batch b waits for batch b - window, so batches land (are checkpointed) one after
        # the other instead of all at the end, and the scheduler never holds the partial
        # sums of every batch at once (1.5 GB at B = 96, D = 512, 4 chunks, measured).
        after = per_batch[b - window] if b >= window else ()
        per_batch.append(plan.batch_tasks(_batch_dataset(ds, b, clone_data), weights, bs, after=after))
    return [t for batch in per_batch for t in batch]


def _run_graph(
    bs: BootstrapStore, replicate_tasks: list[Delayed], extra: dict[str, Any], n_missing: int, verbose: int, client: Any
) -> dict[str, Any]:
    """Step 8: ONE compute of the replicates, the original fit and the range; returns the
    ``extra`` results by name (the replicates write themselves into the store)."""
    if not (replicate_tasks or extra):
        return extra
    shown = progress_bars(True) if verbose else contextlib.nullcontext()  # else an outer context's
    with StoreProgress(bs, n_missing), shown:  # a line per landing, what is kept on Ctrl-C
        out = compute(*replicate_tasks, *extra.values(), client=client, label="bootstrap")
    return dict(zip(extra, out[len(replicate_tasks) :], strict=True))


def _record_extras(
    bs: BootstrapStore, extra: dict[str, Any], data_min: np.ndarray | None, data_max: np.ndarray | None
) -> None:
    """Step 9: write the training range (when the store has none) and a new residual sample."""
    if "data_min" in extra:
        data_min, data_max = extra["data_min"], extra["data_max"]
    if data_min is not None and bs.read_range()[0] is None:
        bs.write_range(data_min, data_max)
    if "residuals" in extra:
        sample: ResidualSample = extra["residuals"]
        bs.write_residuals(sample, _residual_identity())
        logger.info(
            "bootstrap: original fit df=%.1f on n=%d rows, residual sd %s (x%.4f for df), %d residuals kept",
            sample.df,
            sample.n,
            np.array2string(sample.sigma, precision=4),
            sample.scale,
            sample.residuals.shape[0],
        )


def load_bootstrap(
    path: str | os.PathLike[str],
    confidence_level: float = 0.9,
    *,
    interval: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> BootstrapResult:
    """Read a finished bootstrap run back from its store.

    Parameters
    ----------
    path : str or os.PathLike
        The store of a :func:`bootstrap` run.
    confidence_level : float, default=0.9
        Central coverage of the interval to compute from the stored replicates.
    interval : {"confidence", "prediction"} or None, default=None
        What ``lower``/``upper`` are (see :func:`bootstrap`). None: ``"prediction"`` when the
        store holds a residual sample (a run with ``interval="prediction"`` wrote it), else
        ``"confidence"``. ``"prediction"`` on a store without one raises
        :class:`IncompleteStoreError`.
    storage_options : dict, optional
        fsspec options for URLs.

    Returns
    -------
    BootstrapResult
        With ``n_computed == 0`` and ``n_reused == n_bootstraps``; ``out_of_range`` from the
        stored training range (all False, ``data_min`` None, for stores written before it was
        recorded). No warning is emitted.

    Raises
    ------
    DataNotFoundError
        Nothing at ``path``.
    ModelFormatError
        ``path`` is not a bootstrap store.
    IncompleteStoreError
        Some replicates are missing; rerun :func:`bootstrap` with this store to finish it.
    """
    level = _check_confidence(confidence_level, "load_bootstrap")
    store = open_store(path, storage_options=storage_options)
    if interval is None:
        interval = "prediction" if store.read_residuals() is not None else "confidence"
    return read_result(store, level, 0, _check_interval(interval))


def eval_grid(
    X: Any,
    feature: int = 0,
    n_points: int = 200,
    reference: Any = None,
    *,
    client: Any = None,
    onehot: Any = None,
) -> np.ndarray:
    """Evaluation points along one feature, the other features held at a reference point.

    Parameters
    ----------
    X : array-like, DataFrame or dask array of shape (n_samples, n_features)
        Training inputs; the grid spans ``[min, max]`` of column ``feature``.
    feature : int or str, default=0
        Column the grid runs along: an index, or a column name of a DataFrame ``X``.
    n_points : int, default=200
        Number of grid points.
    reference : array-like of shape (n_features,), optional
        Values of the other features. Default: the column medians — exact for numpy input and
        for dask input of at most 100,000 rows, otherwise the medians of an evenly spaced
        sample of about 100,000 rows (read in the same pass as the min and max).
    client : distributed.Client, optional
        For dask input.
    onehot : list of lists of int, optional
        The column indices of each one-hot encoded feature
        (:meth:`~bigkernel.TableEncoder.onehot_groups`): held at its most frequent category in
        the default reference, since the medians of 0/1 columns can name no category at all.

    Returns
    -------
    ndarray of shape (n_points, n_features), float64
    """
    n_points = check_int("n_points", n_points, 1, caller="eval_grid", default=200)
    if isinstance(X, da.Array):
        if X.ndim != 2:
            raise DataError(f"X must be 2-D (n_samples, n_features); found shape {X.shape}.")
        step = max(1, math.ceil(X.shape[0] / 100_000))
        lo, hi, sample = compute(X.min(axis=0), X.max(axis=0), X[::step], client=client, label="eval-grid")
        A = np.asarray(sample, dtype=np.float64)
    else:
        A = np.asarray(X, dtype=np.float64)
        if A.ndim != 2:
            raise DataError(f"X must be 2-D (n_samples, n_features); found shape {A.shape}.")
        lo, hi = A.min(axis=0), A.max(axis=0)
    d = A.shape[1]
    feature = check_int("feature", named_column(feature, X, d), 0, caller="eval_grid", default=0)
    if feature >= d:
        raise ParameterError(f"feature must be < n_features = {d}; found {feature}.")
    if reference is None:
        ref = np.median(A, axis=0)
        for group in onehot or ():
            group = list(group)
            ref[group] = 0.0
            ref[group[int(np.argmax(A[:, group].mean(axis=0)))]] = 1.0
    else:
        ref = np.asarray(reference, dtype=np.float64).ravel()
        if ref.shape != (d,):
            raise ParameterError(f"reference must have shape ({d},); found {ref.shape}.")
    grid = np.tile(ref, (n_points, 1))
    grid[:, feature] = np.linspace(float(lo[feature]), float(hi[feature]), n_points)
    return grid
