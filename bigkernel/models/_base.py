"""What every bigkernel estimator shares: sklearn tags, input validation, zarr I/O hooks."""

from __future__ import annotations

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_array, check_consistent_length, validate_data

from bigkernel.data.sources import Dataset, as_dataset
from bigkernel.errors import DataError, ParameterError


class RowWeights:
    """Picklable row weights ``weights(start, stop) -> (1, stop - start)`` from one array (the
    ``weights`` of the solvers' ``fit_dataset``)."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.asarray(values, dtype=np.float64)

    def __call__(self, start: int, stop: int) -> np.ndarray:
        return self.values[np.newaxis, start:stop]

    def __dask_tokenize__(self):
        from dask.base import tokenize

        return ("bigkernel.RowWeights", tokenize(self.values))


def check_sample_weight(sample_weight, n: int) -> np.ndarray:
    """Row weights as float64 (n,): finite, >= 0, not all zero (dask input is computed)."""
    from sklearn.utils.validation import _check_sample_weight

    if isinstance(sample_weight, da.Array):
        from bigkernel.models._compute import compute

        (sample_weight,) = compute(sample_weight, label="sample weights")
    try:
        sw = _check_sample_weight(sample_weight, np.empty((n, 0)), dtype=np.float64,
                                  ensure_non_negative=True)
    except ValueError as exc:
        raise ParameterError(
            f"sample_weight must be finite weights >= 0, one per row (shape ({n},)); {exc}"
        ) from None
    return sw


class _NamedBlocks:
    """``est.predict`` for numpy blocks cut from the table the model was fitted on: each block
    gets the fitted column names back, so scikit-learn's name check passes (a bare array would
    warn "X does not have valid feature names") and its width check still runs."""

    def __init__(self, est) -> None:
        self.est = est

    def __call__(self, X: np.ndarray):
        import pandas as pd

        return self.est.predict(pd.DataFrame(X, columns=self.est.feature_names_in_, copy=False))


def block_predictor(est):
    """The numpy predictor of internal passes over the training data's own columns (evaluation,
    bootstrap evaluation points): ``est.predict``, giving blocks the fitted column names when
    the model has them."""
    return _NamedBlocks(est) if hasattr(est, "feature_names_in_") else est.predict


class _EstimatorBase(RegressorMixin, BaseEstimator):
    """Multi-output regressor taking numpy or dask input; subclasses implement ``fit``,
    ``predict``, ``_get_state`` and ``_set_state``."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags

    # ----------------------------------------------------------------- data
    def fit(self, X, y, sample_weight=None):
        """Fit from numpy or dask arrays (see the class docstring for what each solver does).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        y : array-like or dask array of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like or dask array of shape (n_samples,), optional
            Row weights ``c >= 0``: the objective becomes ``Σ cᵢ (yᵢ − f(xᵢ))² + α‖f‖²``, so
            integer weights give the fit on the data with row ``i`` repeated ``cᵢ`` times
            (bootstrap counts). Held in memory (8 bytes per row; a dask array is read once).

        Returns
        -------
        self
        """
        self._check_params()
        ds = self._fit_input(X, y)
        if sample_weight is None:
            return self.fit_dataset(ds)
        return self.fit_dataset(ds, weights=RowWeights(check_sample_weight(sample_weight, ds.X.shape[0])))

    def _fit_input(self, X, y) -> Dataset:
        """Validated training data (metadata only; values are checked in the pass)."""
        if y is None:
            raise DataError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        ds, _ = self._as_dataset(X, y, reset=True)
        return ds

    def _as_dataset(self, X, y=None, *, reset: bool) -> tuple[Dataset, bool]:
        """Validated dask data set and whether the input was dask (so output should be)."""
        if isinstance(X, da.Array) or isinstance(y, da.Array):
            ds = as_dataset(X, y)
            if not reset:
                self._check_n_features(ds.X.shape[1])
            elif ds.X.shape[0] < 1:
                raise DataError("X is empty")
            else:
                self._set_input_facts(ds.X.dtype)  # a dask array has no column names
            return ds, True
        X = validate_data(self, X, reset=reset, ensure_all_finite=False, dtype=[np.float64, np.float32])
        if y is not None:
            # y checked here, not by validate_data, so NaN/inf reach the pass and its row-range error
            y = check_array(y, ensure_2d=False, dtype=np.float64, ensure_all_finite=False, input_name="y")
            check_consistent_length(X, y)
        if reset:
            self._set_input_facts(X.dtype, getattr(self, "feature_names_in_", None))
        return as_dataset(X, y, chunk_rows=getattr(self, "chunk_rows", None)), False

    def _set_input_facts(self, X_dtype, feature_names=None) -> None:
        """Remember the training X's dtype and column names (``feature_names_in_``, checked at
        predict by scikit-learn's ``validate_data``); both are saved with the model.

        ``fit`` sets them from its input; orchestrators fitting a :class:`Dataset` read from a
        table pass the selected columns, as a DataFrame fit would.
        """
        self._X_dtype_in = np.dtype(X_dtype).name
        if feature_names is None:
            self.__dict__.pop("feature_names_in_", None)  # a refit without names forgets the old ones
        else:
            self.feature_names_in_ = np.asarray(feature_names, dtype=object)

    def _predict_with(self, X, block, graph, single: bool):
        """Predictions of numpy X by ``block(X)`` (numpy out), of dask X by ``graph(X)`` (lazy
        dask out); 1-D for a single target."""
        if isinstance(X, da.Array):
            ds, _ = self._as_dataset(X, reset=False)
            out = graph(ds.X)
        else:
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
            out = block(X)
        return out[:, 0] if single else out

    def _check_n_features(self, d: int) -> None:
        if d != self.n_features_in_:
            raise DataError(
                f"X has {d} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input"
            )

    # ----------------------------------------------------------------- output
    def predict_to_zarr(self, X, path: str, *, name: str = "y_pred", overwrite: bool = False) -> str:
        """Predict a dask/numpy X straight into a zarr array, chunk by chunk (out of core).

        See :func:`bigkernel.models.predict_io.predict_to_zarr`.
        """
        from bigkernel.models.predict_io import predict_to_zarr

        return predict_to_zarr(self, X, path, name=name, overwrite=overwrite)

    def save(self, path: str, *, overwrite: bool = False) -> str:
        """Save the fitted model as a zarr group with JSON metadata (no pickle)."""
        from bigkernel.models.persist import save_model

        return save_model(self, path, overwrite=overwrite)
