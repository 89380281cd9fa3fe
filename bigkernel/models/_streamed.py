"""What the streamed (one-pass primal) estimators add on top of a fit: the features as output
(``transform``, ``transform_to_zarr``) and model updates from new rows (``partial_fit``).

``partial_fit`` relies on the one pass producing *sufficient statistics*
(:class:`~bigkernel.numerics.sums.SufficientStats`: n, Σφ, Σy, Σy², ΦᵀΦ, Φᵀy, the range of X):
they add across batches, so the statistics of all rows seen are the sum of each batch's, and the
solve from them equals one fit on all rows (to rounding). The fitted model keeps them as
``stats_`` and saves them with the model (``O(D²)`` numbers).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Self

import dask.array as da
import numpy as np
from sklearn.utils.validation import check_is_fitted

from bigkernel._sparse import check_real
from bigkernel.data.frames import validate_data
from bigkernel.data.sources import Dataset, as_dataset
from bigkernel.errors import DataError, ParameterError
from bigkernel.graph.stream import predict_graph
from bigkernel.io.predictions import transform_to_zarr
from bigkernel.models._base import SPARSE_OK
from bigkernel.numerics.primal import FeatureBlocks
from bigkernel.numerics.sums import SufficientStats
from bigkernel.runtime import compute, map_rows
from bigkernel.solvers.primal import STATS_FIELDS as _STATS_FIELDS
from bigkernel.solvers.primal import PrimalFixed, resolve_feature_dtype

logger = logging.getLogger(__name__)

#: names of the saved arrays of ``stats_`` (defined with the solver that saves them)
STATS_FIELDS = _STATS_FIELDS


def transform_features(est: Any, fmap: Any, X: Any, dtype: str) -> np.ndarray | da.Array:
    """``φ(X)`` of a fitted estimator or transformer ``est`` (with ``n_features_in_``).

    numpy (array-like) in → numpy ``(n, D)`` out, checked by scikit-learn's ``validate_data``
    (width, column names, NaN/inf); dask in → a lazy dask array with X's row chunks and one
    column chunk of D, whose tasks refuse NaN/inf naming the rows.
    """
    blocks = FeatureBlocks(fmap, str(np.dtype(dtype)))
    if isinstance(X, da.Array):
        Xd = as_dataset(X).X  # 2-D, numeric, chunked along rows only (clear errors otherwise)
        if Xd.shape[1] != est.n_features_in_:
            raise DataError(
                f"X has {Xd.shape[1]} features, but {type(est).__name__} is expecting "
                f"{est.n_features_in_} features as input"
            )
        return predict_graph(Xd, blocks, blocks.n_outputs, dtype=blocks.dtype)
    check_real(X, "X")
    X = validate_data(est, X, reset=False, dtype=[np.float64, np.float32], **SPARSE_OK)
    return map_rows(blocks, X, blocks.n_outputs, blocks.dtype)


def fitted_dtype(est: Any) -> str:
    """The feature dtype of ``est``: a fitted model's ``dtype_`` (what its fit used), else
    what its ``dtype`` names (``"auto"``: float32 for random Fourier features, float64 for
    the polynomial kernel's map and Nyström; the float32 check may still choose float64 at fit).
    """
    dtype = getattr(est, "dtype_", None)
    if dtype is not None:
        return str(dtype)
    fmap = getattr(est, "feature_map_", None)
    if fmap is not None:
        return resolve_feature_dtype(est.dtype, fmap)
    if isinstance(est.dtype, str) and est.dtype == "auto":
        fourier = getattr(est, "_auto_fourier", True) and getattr(est, "kernel", None) not in ("polynomial", "poly")
        return "float32" if fourier else "float64"
    return str(np.dtype(est.dtype))


class FeaturesOutMixin:
    """``transform`` / ``transform_to_zarr`` of a fitted model holding ``feature_map_`` and a
    feature ``dtype`` (the primal estimators and the feature transformers)."""

    def __sklearn_tags__(self):
        from sklearn.utils import TransformerTags

        tags = super().__sklearn_tags__()
        if tags.transformer_tags is None:  # a regressor that also transforms
            tags.transformer_tags = TransformerTags()
        # the output has the features' dtype, whatever the input's
        tags.transformer_tags.preserves_dtype = [fitted_dtype(self)]
        return tags

    def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> np.ndarray | da.Array:
        """``fit(X, y, **fit_params)``, then :meth:`transform` of the same X.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        y : array-like or dask array, optional
            The targets (required by the estimators; ignored by the transformers).
        **fit_params
            Passed to ``fit`` (e.g. ``sample_weight``).

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components)
        """
        return self.fit(X, y, **fit_params).transform(X)

    def transform(self, X: Any) -> np.ndarray | da.Array:
        """The features φ(X) the model uses, scaled as in the fit (``φ(x)ᵀφ(x') ≈ k(x, x')``).

        Feed them to any other linear model: a scikit-learn ``Ridge`` on them with the same α
        and intercept gives this model (for a fitted ridge estimator).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components)
            In the ``dtype`` of the features; numpy for numpy input, a lazy dask array (X's
            row chunks, one column chunk) for dask input.
        """
        check_is_fitted(self, "feature_map_")
        return transform_features(self, self.feature_map_, X, fitted_dtype(self))

    def transform_to_zarr(self, X: Any, path: str, *, name: str = "features", overwrite: bool = False) -> str:
        """Write φ(X) straight to a zarr array, chunk by chunk (outputs larger than memory).

        Written to a hidden sibling folder and renamed into place when complete, like
        :meth:`predict_to_zarr`: an interrupted write leaves no store that looks finished.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        path : str
            The zarr group to write (local path or fsspec URL).
        name : str, default="features"
            Name of the array of shape (n_samples, n_components) in the feature ``dtype``.
        overwrite : bool, default=False
            Replace an existing local ``path``; without it, an existing one raises
            :class:`~bigkernel.OutputExistsError`.

        Returns
        -------
        str
            ``path``.
        """
        check_is_fitted(self, "feature_map_")
        return transform_to_zarr(self, X, path, name=name, overwrite=overwrite)


class PartialFitMixin:
    """``partial_fit`` for the streamed ridge estimators (RandomFeatureRidge, NystroemRidge).

    The host class provides ``make_solver()`` (a one-pass primal solver:
    :class:`~bigkernel.solvers.primal.OnePassPrimal`), ``_set_solution``, ``_set_scaler``,
    ``_fit_input`` and ``_as_dataset``.
    """

    #: fits keep their statistics as ``stats_`` (read by ``_RandomFeatureBase._set_solution``)
    _keeps_stats: ClassVar[bool] = True

    def partial_fit(self, X: Any, y: Any, sample_weight: Any = None) -> Self:
        """Add a batch of rows to the model and re-solve, as if fitted on all rows seen.

        The first call (or the first after construction; a fitted model continues) fixes the
        feature map exactly as ``fit`` would on this batch: the default γ = 1/n_features from its
        width, the random features from ``random_state``; Nyström landmarks are drawn from
        **this first batch only** (give it at least ``n_components`` representative rows).
        Each call adds the batch's one-pass statistics to ``stats_`` and solves again, so a
        list of α or ``"gcv"`` is re-chosen on all rows seen; ``n_samples_fit_`` counts them.
        The result equals ``fit`` on all rows with the same feature map, to rounding, for any
        split into batches. With ``standardize=True`` the scaling is estimated like the
        feature map: by ``fit``, or from the **first batch** of ``partial_fit`` (its column
        means and deviations), then frozen — later batches are scaled by it, so the model
        equals ``fit`` on all rows with that scaling, not with one estimated from all rows.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        y : array-like or dask array of shape (n_samples,) or (n_samples, n_targets)
            The same number of targets (and 1-D or 2-D) in every call.
        sample_weight : array-like of shape (n_samples,), optional
            Row weights, as in ``fit``.

        Returns
        -------
        self
        """
        from bigkernel.models._base import RowWeights, check_sample_weight

        first = not hasattr(self, "coef_")
        if first:
            self._check_partial_fit()
            ds = self._fit_input(X, y)
        else:
            if y is None:
                raise DataError(f"{type(self).__name__}.partial_fit requires y, but the target y is None")
            ds, _ = self._as_dataset(X, y, reset=False)
        weights = None if sample_weight is None else RowWeights(check_sample_weight(sample_weight, ds.X.shape[0]))
        return self.partial_fit_dataset(ds, weights)

    def partial_fit_dataset(self, ds: Dataset, weights: Any = None) -> Self:
        """:meth:`partial_fit` from a validated :class:`~bigkernel.data.sources.Dataset` (for
        orchestrators such as ``bigkernel update``); ``weights(start, stop) -> (1, rows)``."""
        solver = self.make_solver()
        if not hasattr(self, "coef_"):
            self._check_partial_fit()
            # the map and (standardize=True) the scaling from this batch, then frozen in the map
            fixed, before = solver.prepare(ds, weights), None
            self._set_scaler(fixed.scaler)
            fmap = fixed.fmap
            if getattr(fmap, "landmarks", None) is not None and fmap.landmarks.shape[0] < self.n_components:
                logger.warning(
                    "partial_fit: the first batch gave %d Nyström landmarks of n_components=%d; "
                    "later batches cannot add landmarks",
                    fmap.landmarks.shape[0],
                    self.n_components,
                )
        else:
            self._check_params()  # α may have been changed (set_params) since the last batch
            before, fixed = self._stats_for_update(ds), PrimalFixed(self.feature_map_, None, solver.device)
        # the batches add to the sums of the first one: all in the dtype the first one resolved
        dtype = solver.pass_dtype(fixed.fmap) if before is None else fitted_dtype(self)
        (stats,) = compute(solver.statistics_graph(fixed.fmap, ds, weights, dtype), label="partial_fit")
        total = stats if before is None else before + stats
        single = ds.y.ndim == 1 if before is None else np.ndim(self.coef_) == 1
        solution, ok = solver.checked(fixed, solver.solve(fixed, total, single=single, dtype=dtype))
        if not ok:
            logger.warning(
                "partial_fit: float32 features could move this model beyond the tolerance (%s); the "
                "sums of earlier batches are float32, so refit on all rows with dtype='float64'",
                solution.details.dtype_check,
            )
        return self._set_solution(fixed, solution)

    def _check_partial_fit(self) -> None:
        self._check_params()

    def _stats_for_update(self, ds: Dataset) -> SufficientStats:
        """The statistics of the rows seen so far, checked against the new batch."""
        stats = getattr(self, "stats_", None)
        if stats is None:
            raise ParameterError(
                f"this {type(self).__name__} holds no sufficient statistics (a model saved by a "
                "bigkernel that did not keep stats_), so new rows "
                "cannot be added to it; refit it on all rows once (fit) to make it updatable"
            )
        self._check_n_features(ds.X.shape[1])
        k_model = stats.sum_y.shape[1]
        k_new = 1 if ds.y.ndim == 1 else ds.y.shape[1]
        single = np.ndim(self.coef_) == 1
        if k_new != k_model or (ds.y.ndim == 1) != single:
            raise DataError(
                f"the new rows have y of shape {ds.y.shape}, but the model was fitted on "
                f"{'a 1-D y' if single else f'{k_model} target columns'}; give y with the same targets"
            )
        return stats
