"""What every bigkernel classifier shares: labels → ±1 targets, ``class_weight`` → row weights,
decision values → labels, and the regressor fitted inside.

A classifier with ``loss="squared_error"`` is regularised least squares on ±1 targets: the
labels are encoded as one target column per class (+1 for the class, −1 otherwise; a single
column for two classes, +1 for ``classes_[1]``), and the matching regressor
(:class:`~bigkernel.RandomFeatureRidge`, :class:`~bigkernel.NystroemRidge`, …) is fitted on
that matrix in its one pass — so the α path, GCV and the saved state are the regressor's.
Prediction is one-vs-rest: the class with the largest decision value (binary: its sign).

Subclasses name the regressor (``_regressor``) and may override
:meth:`_ClassifierBase.fit_targets`, the one step that turns encoded targets into a fitted
decision model (the SVM losses plug in there, through the primal SVM solver
:class:`~bigkernel.solvers.primal_svm.PrimalSVMSolver`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, ClassVar, Self

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted, column_or_1d

from bigkernel._sparse import check_real
from bigkernel.data.frames import validate_data
from bigkernel.data.sources import Dataset, as_dask, as_dataset
from bigkernel.data.validate import check_X_metadata
from bigkernel.diagnostics import log_fit
from bigkernel.errors import DataError
from bigkernel.io.model_store import save_model
from bigkernel.models._base import (
    SPARSE_OK,
    ArrayIn,
    ArrayOut,
    RowWeights,
    Weights,
    _EstimatorBase,
    _init_defaults,
    check_estimator_params,
    check_sample_weight,
    show_progress_when_verbose,
    target_names_of,
)
from bigkernel.runtime import compute
from bigkernel.validation import Options

logger = logging.getLogger(__name__)

#: the losses a classifier may minimise (the SVM losses join this tuple where they are served)
LOSSES = ("squared_error",)
#: the table entries every classifier adds to its regressor's
CLASSIFIER_CONSTRAINTS: dict[str, list] = {
    "class_weight": [dict, Options(str, ("balanced",)), None],
    "loss": [Options(str, LOSSES)],
}
#: label kinds a classifier accepts (scikit-learn's ``type_of_target``)
_LABEL_KINDS = ("binary", "multiclass")


# --------------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------------
def labels_in_memory(y) -> np.ndarray:
    """The labels as a 1-D numpy array (a dask array is computed: n labels, not the features).

    A column vector (n, 1) is raveled with scikit-learn's ``DataConversionWarning``.
    """
    if isinstance(y, da.Array):
        (y,) = compute(y, label="labels")
    y = np.asarray(y)
    if y.dtype.kind == "T":  # numpy's StringDType (zarr string arrays): plain Python strings
        y = y.astype(object)
    if y.ndim == 2 and y.shape[1] == 1:
        return column_or_1d(y, warn=True)
    if y.ndim != 1:
        raise DataError(
            f"y must be one label per row, shape (n_samples,); got shape {y.shape}. Classifiers here "
            "are not multi-label or multi-output: fit one per column"
        )
    return y


def encode_labels(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, codes)``: the sorted distinct labels and each row's index into them.

    Refuses what is not a set of classes (scikit-learn's ``type_of_target`` is "continuous" or
    other) and a single class, with the reason.
    """
    if y.dtype.kind in "fc" and not np.all(np.isfinite(y)):
        what = "NaN" if np.any(np.isnan(y)) else "infinity"
        raise DataError(f"Input y contains {what}; class labels must be finite: drop or label those rows")
    kind = type_of_target(y, input_name="y")
    if kind not in _LABEL_KINDS:
        raise DataError(
            f"Unknown label type: {kind!r}. A classifier needs discrete class labels (ints, strings, "
            f"bools); y looks {kind}. For a numeric target, use the regressor (e.g. RandomFeatureRidge)"
        )
    classes, codes = np.unique(y, return_inverse=True)
    if classes.size < 2:
        raise DataError(
            f"y holds only one class ({classes[0]!r}); a classifier needs samples of at least two "
            "classes (1 class found)"
        )
    return classes, codes.reshape(-1).astype(np.int32 if classes.size > 127 else np.int8)


def pm1_block(codes: np.ndarray, n_classes: int) -> np.ndarray:
    """±1 targets of a block of class codes: (rows, n_classes), or (rows,) for two classes."""
    if n_classes == 2:
        return np.where(codes == 1, 1.0, -1.0)
    return np.where(codes[:, np.newaxis] == np.arange(n_classes), 1.0, -1.0)


def pm1_targets(codes: np.ndarray, n_classes: int, X: da.Array) -> da.Array:
    """The ±1 target matrix, lazy, with X's row chunks: only the codes (one byte per row) are
    held, the n × n_classes targets are made chunk by chunk inside the pass."""
    c = da.from_array(codes, chunks=(X.chunks[0],))
    if n_classes == 2:
        return c.map_blocks(pm1_block, n_classes, dtype=np.float64)
    return c.map_blocks(pm1_block, n_classes, dtype=np.float64, new_axis=1, chunks=(X.chunks[0], (n_classes,)))


def class_weights(class_weight, classes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Weight per class (aligned with ``classes``): 1, a dict's values, or "balanced"
    ``n / (n_classes · count)`` (scikit-learn's rule: ``counts`` of the fitted rows, unweighted)."""
    if class_weight is None:
        return np.ones(classes.size)
    if isinstance(class_weight, str):  # "balanced", the only string the table allows
        with np.errstate(divide="ignore"):
            return np.where(counts > 0, counts.sum() / (classes.size * np.where(counts > 0, counts, 1)), 0.0)
    w = np.ones(classes.size)
    known = {_label_key(c): i for i, c in enumerate(classes)}
    for label, value in class_weight.items():
        i = known.get(_label_key(label))
        if i is None:
            raise DataError(
                f"class_weight names class {label!r}, which is not in y (classes: {classes.tolist()}); "
                "use the labels as they appear in y"
            )
        w[i] = float(value)
    return w


def _label_key(label) -> Any:
    return label.item() if isinstance(label, np.generic) else label


def classes_to_json(classes: np.ndarray) -> dict:
    """``classes_`` as JSON: the dtype and the values (strings, ints, floats, bools)."""
    values = [_label_key(c) for c in classes.tolist()]
    return {"dtype": classes.dtype.str if classes.dtype != object else "object", "values": values}


def classes_from_json(meta: Mapping) -> np.ndarray:
    """The ``classes_`` array saved by :func:`classes_to_json`, dtype and values exact."""
    dtype = np.dtype(object) if meta["dtype"] == "object" else np.dtype(meta["dtype"])
    out = np.empty(len(meta["values"]), dtype=dtype)
    out[:] = meta["values"]
    return out


class _TimesRows:
    """Row weights ``weights(start, stop) · v[start:stop]``: a row partition (its kept groups
    weighted 1) or a weight callable, times per-row weights (class weights)."""

    def __init__(self, weights, values: np.ndarray) -> None:
        self.weights, self.values = weights, np.asarray(values, dtype=np.float64)

    def __call__(self, start: int, stop: int) -> np.ndarray:
        v = self.values[np.newaxis, start:stop]
        if hasattr(self.weights, "groups"):
            keep = np.isin(np.asarray(self.weights.groups(start, stop)), self.weights.keep)
            return keep[np.newaxis] * v
        return np.asarray(self.weights(start, stop), dtype=np.float64) * v

    def __dask_tokenize__(self):
        from dask.base import tokenize

        return ("bigkernel._TimesRows", tokenize(self.weights), tokenize(self.values))


def kept_rows(weights, n: int) -> np.ndarray | None:
    """Weight of each row under ``weights`` (None: all 1) — the class counts of "balanced"."""
    if weights is None:
        return None
    if hasattr(weights, "groups"):
        return np.isin(np.asarray(weights.groups(0, n)), weights.keep).astype(np.float64)
    return np.asarray(weights(0, n), dtype=np.float64)[0]


# --------------------------------------------------------------------------------------------
# The estimator
# --------------------------------------------------------------------------------------------
def store_init_params(est, params: dict[str, Any]) -> None:
    """Set each ``__init__`` argument (``locals()`` of the ``__init__``) as an attribute of the
    same name, unchanged (scikit-learn's rule), so the classifiers' long signatures need no
    line-per-parameter bodies copied from their regressors."""
    for name, value in params.items():
        if name not in ("self", "__class__"):
            setattr(est, name, value)


class _ClassifierBase(ClassifierMixin, BaseEstimator):
    """One-vs-rest classifier on a bigkernel regressor; subclasses set ``_regressor`` and the
    ``__init__`` (the regressor's parameters plus ``class_weight`` and ``loss``)."""

    #: the regressor fitted on the ±1 targets (its ``__init__`` names the forwarded parameters)
    _regressor: ClassVar[type]
    _parameter_constraints: ClassVar[dict[str, list]] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        show_progress_when_verbose(cls)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = False
        tags.input_tags.sparse = True  # scipy.sparse X: read as stored, never densified (as the regressors)
        return tags

    # ----------------------------------------------------------------- parameters
    def _check_params(self) -> None:
        check_estimator_params(self)

    def make_regressor(self) -> Any:
        """The regressor with this classifier's shared parameters (unfitted): the decision
        model :meth:`fit_targets` fits, and the one a saved state is read into."""
        names = _init_defaults(self._regressor).keys()
        params = self.get_params(deep=False)
        return self._regressor(**{k: v for k, v in params.items() if k in names})

    set_input_facts = _EstimatorBase.set_input_facts

    # ----------------------------------------------------------------- fit
    def fit(self, X: ArrayIn, y: ArrayIn, sample_weight: ArrayIn | None = None) -> Self:
        """Fit one-vs-rest on numpy or dask data.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix or dask array of shape (n_samples, n_features)
            Sparse X (CSR/CSC, or dask chunks of them) is read as stored, never densified.
        y : array-like or dask array of shape (n_samples,)
            Class labels of any type (ints, strings, bools). A dask array is computed once
            (the labels only); the ±1 targets are made chunk by chunk.
        sample_weight : array-like or dask array of shape (n_samples,), optional
            Row weights, multiplied by the class weights.

        Returns
        -------
        self
        """
        self._check_params()
        if y is None:
            raise DataError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        if isinstance(X, da.Array):
            X = as_dask(X)
            check_X_metadata(X)
            self.set_input_facts(X.dtype)
        else:
            check_real(X, "X")  # text of numbers is not converted silently (labels y may be text)
            X = validate_data(self, X, reset=True, ensure_all_finite=False, dtype=[np.float64, np.float32], **SPARSE_OK)
            self.set_input_facts(X.dtype, getattr(self, "feature_names_in_", None), target_names_of(y))
        y = labels_in_memory(y)
        if y.shape[0] != X.shape[0]:
            raise DataError(
                f"X has {X.shape[0]} rows but y has {y.shape[0]} labels; they must describe the same samples"
            )
        sw = None if sample_weight is None else check_sample_weight(sample_weight, X.shape[0])
        self._fit_labels(X, y, weights=None if sw is None else RowWeights(sw))
        log_fit(self)  # α/γ on a grid edge, feature scales far apart, logged
        return self

    def fit_dataset(self, ds: Dataset, weights: Weights | None = None) -> Self:
        """Fit from a :class:`~bigkernel.data.sources.Dataset` whose ``y`` holds the labels
        (for orchestrators: jobs, holdout partitions); ``weights`` as in the regressors."""
        self._check_params()
        self.n_features_in_ = ds.X.shape[1]
        return self._fit_labels(ds.X, labels_in_memory(ds.y), weights, columns=ds.columns)

    def _fit_labels(self, X, y: np.ndarray, weights, columns=None) -> Self:
        classes, codes = encode_labels(y)
        row_w = kept_rows(weights, X.shape[0])
        # "balanced" counts the rows that are fitted (weight > 0), not their weights: scikit-learn's rule
        counts = np.bincount(codes, weights=None if row_w is None else (row_w > 0), minlength=classes.size)
        if weights is not None and np.count_nonzero(counts) < 2:
            raise DataError("the training rows (weight > 0) hold only one class; a classifier needs two or more")
        cw = class_weights(self.class_weight, classes, counts)
        self.classes_, self.class_weight_ = classes, cw
        if not np.all(cw == 1.0):
            weights = RowWeights(cw[codes]) if weights is None else _TimesRows(weights, cw[codes])
        X = as_dask(X, getattr(self, "chunk_rows", None), "X")
        ds = as_dataset(X, pm1_targets(codes, classes.size, X), columns=columns)
        logger.info("%s: %d classes, %s rows", type(self).__name__, classes.size, f"{X.shape[0]:,}")
        self.set_fitted_estimator(self.fit_targets(ds, weights))
        return self

    def fit_targets(self, ds: Dataset, weights: Weights | None) -> Any:
        """The fitted decision model of ``ds`` (its ``y`` the ±1 targets: one column per class,
        or one column for two classes) under row ``weights``: an object whose ``predict(X)``
        gives the decision values and whose ``get_model_state`` / ``set_model_state`` save it.

        ``loss="squared_error"``: the regressor's one-pass least-squares fit (every α from one
        eigendecomposition). Other losses override this method.
        """
        return self.make_regressor().fit_dataset(ds, weights=weights)

    def set_fitted_estimator(self, est: Any) -> None:
        """Fitted attributes from the fitted decision model ``est`` (its penalty,
        coefficients, diagnostics), which becomes ``estimator_``."""
        self.estimator_ = est
        self.n_features_in_ = est.n_features_in_
        names = ("alpha_", "alphas_", "df_", "gcv_", "coef_", "intercept_", "dual_coef_", "n_samples_fit_",
                 "residuals_", "validation_scores_")  # fmt: skip
        for name in names:
            if hasattr(est, name):
                setattr(self, name, getattr(est, name))
        self.n_iter_ = getattr(est, "n_iter_", 1)  # the one-pass solvers: one pass

    # ----------------------------------------------------------------- predict
    def decision_function(self, X: ArrayIn) -> ArrayOut:
        """Decision values: shape (n,) for two classes (> 0 means ``classes_[1]``), else
        (n, n_classes), one column per class.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix or dask array of shape (n_samples, n_features)

        Returns
        -------
        ndarray, or a lazy dask array for dask input
        """
        check_is_fitted(self, "estimator_")
        if not isinstance(X, da.Array):
            check_real(X, "X")
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32], **SPARSE_OK)
        return self.estimator_.predict(X)

    def predict(self, X: ArrayIn) -> ArrayOut:
        """The class with the largest decision value (numpy in → numpy out, dask → lazy dask).

        Parameters
        ----------
        X : array-like, scipy.sparse matrix or dask array of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples,), values from ``classes_``
        """
        scores = self.decision_function(X)
        if isinstance(scores, da.Array):
            return scores.map_blocks(
                _labels_of, self.classes_, dtype=self.classes_.dtype, drop_axis=list(range(1, scores.ndim))
            )
        return _labels_of(scores, self.classes_)

    # ----------------------------------------------------------------- persistence
    def save(self, path: str, *, overwrite: bool = False) -> str:
        """Save the fitted classifier as a zarr group (see :func:`bigkernel.load`); ``classes_``
        is saved as JSON values with their dtype and restored exactly.

        Parameters
        ----------
        path : str
        overwrite : bool, default=False

        Returns
        -------
        str
            ``path``.
        """
        return save_model(self, path, overwrite=overwrite)

    def get_model_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted state for the model store: the decision model's (``"inner"``), the
        classes (values with their dtype) and the class weights.

        Returns
        -------
        attrs : dict
            JSON-able attributes.
        arrays : dict of ndarray
        """
        check_is_fitted(self, "estimator_")
        attrs, arrays = self.estimator_.get_model_state()
        cw = self.class_weight
        if isinstance(cw, dict):  # JSON keys are strings: keep the labels with their types
            cw = [[_label_key(k), float(v)] for k, v in cw.items()]
        state = {"inner": attrs, "classes": classes_to_json(self.classes_), "class_weight": cw}
        json.dumps(state["classes"])  # a label JSON cannot hold fails here, before writing
        return state, {**arrays, "class_weight_": np.asarray(self.class_weight_, dtype=np.float64)}

    def set_model_state(self, attrs: Mapping[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Set the fitted state written by :meth:`get_model_state` (``KeyError`` /
        ``ValueError`` when damaged).

        Parameters
        ----------
        attrs : dict
        arrays : dict of ndarray
            Consumed: the classifier's own arrays are removed from it.
        """
        self.classes_ = classes_from_json(attrs["classes"])
        cw = attrs.get("class_weight")
        if isinstance(cw, list):
            self.class_weight = {k: v for k, v in cw}
        self.class_weight_ = arrays.pop("class_weight_")
        inner = self.make_regressor()
        inner.set_model_state(attrs["inner"], arrays)
        self.set_fitted_estimator(inner)


def _labels_of(scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Labels of decision values: the sign for two classes, else the largest column."""
    if scores.ndim == 1:
        return classes[(scores > 0).astype(np.intp)]
    return classes[np.argmax(scores, axis=1)]
