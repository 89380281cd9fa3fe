"""What every bigkernel estimator shares: sklearn tags, parameter and input validation, zarr I/O
hooks, and the parameter-table entries several estimators use."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from numbers import Integral, Real
from typing import Any, ClassVar, Protocol, Self

import dask.array as da
import numpy as np
from numpy.typing import ArrayLike, DTypeLike
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_array, check_consistent_length

from bigkernel._sparse import check_real
from bigkernel.data.columns import check_frame_columns, model_columns
from bigkernel.data.frames import is_dask_frame, validate_data
from bigkernel.data.sources import Dataset, as_dask, as_dataset
from bigkernel.devices import CPU, Device, parse_device, resolve_device
from bigkernel.diagnostics import log_fit, log_predict, no_predict_findings
from bigkernel.errors import DataError, DeviceError, ParameterError
from bigkernel.graph.stream import predict_graph
from bigkernel.io.model_store import save_model
from bigkernel.io.predictions import predict_to_zarr
from bigkernel.kernels.base import Kernel
from bigkernel.kernels.registry import kernel_spec
from bigkernel.runtime import map_rows, progress_bars
from bigkernel.validation import (
    Constraint,
    Interval,
    ListOf,
    Options,
    canonical_params,
    validate_params,
)

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# Types of the public API (one definition each, so the estimators' signatures agree)
# --------------------------------------------------------------------------------------------
#: input data (X, y, sample_weight): anything numpy reads, or a dask array (read chunk by chunk);
#: X may also be scipy.sparse (or a dask array of sparse chunks)
ArrayIn = ArrayLike | da.Array
#: predictions: numpy for numpy input, a lazy dask array for dask input
ArrayOut = np.ndarray | da.Array
#: ``random_state``: a seed, a RandomState, or None (fresh entropy)
RandomStateLike = int | np.random.RandomState | None
#: a list, tuple or 1-D array of numbers (``ListOf`` in the parameter tables: a grid of α or γ)
Floats = Sequence[float] | np.ndarray
#: a searched grid of the CV estimators (``GRID``): a list, one value, or None (the default grid)
Grid = Floats | float | None
#: ``kernel``: a registered name, a saved kernel's dict, or a Kernel instance
KernelLike = str | dict[str, Any] | Kernel


class RowPartition(Protocol):
    """Rows split into groups summed apart in the one pass (``HoldoutSplit``, ``FoldSplit``):
    ``groups(start, stop)`` gives each row's group, ``keep`` the groups that get statistics."""

    @property
    def n_groups(self) -> int: ...

    @property
    def keep(self) -> tuple[int, ...]: ...

    def groups(self, start: int, stop: int) -> np.ndarray: ...


#: ``weights`` of ``fit_dataset``: ``weights(start, stop) -> (m, stop - start)`` row weights
#: (``RowWeights``) or a row partition; ``stats_graph`` also takes either one delayed (the
#: bootstrap gates its weights behind other tasks)
Weights = Callable[[int, int], np.ndarray] | RowPartition

#: ``device``: where a fit computes (see :mod:`bigkernel.devices`)
DeviceLike = str


class _Device(Constraint):
    """A ``device`` value: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"``
    (:func:`bigkernel.devices.parse_device` decides; the job config uses the same function)."""

    def __repr__(self) -> str:
        return "'device'"

    def is_satisfied_by(self, value: Any) -> bool:
        if not isinstance(value, str):
            return False
        try:
            parse_device(value)
        except ParameterError:
            return False
        return True

    def describe(self) -> str:
        return "'cpu', 'cuda', 'cuda:N' (a GPU ordinal) or 'auto'"


# --------------------------------------------------------------------------------------------
# Entries of the parameter tables (``_parameter_constraints``) that several estimators share
# --------------------------------------------------------------------------------------------
#: a finite number > 0
POSITIVE = Interval(Real, 0, None, closed="neither")
#: an integer > 0 (written as > 0, not >= 1, so estimator and job config say the same)
COUNT = Interval(Integral, 0, None, closed="neither")
#: the ridge penalty: a number, a list scored by GCV, or the default grid (scored by GCV or the evidence)
ALPHA = [POSITIVE, ListOf(POSITIVE), Options(str, ("gcv", "evidence"))]
#: a searched grid (the CV estimators): a list, or one value
GRID = [ListOf(POSITIVE), POSITIVE, None]
#: ``verbose``: 0, or >= 1 for the progress of the estimator's passes
VERBOSE = [Interval(Integral, 0, None, closed="left")]
#: the methods that run passes over the data: inside ``progress_bars()`` when ``verbose`` >= 1
VERBOSE_METHODS = (
    "fit",
    "fit_dataset",
    "partial_fit",
    "predict",
    "predict_proba",
    "decision_function",
    "predict_to_zarr",
)
#: the compute device of a fit: checked by form here; whether a GPU is usable is checked at the
#: start of ``fit`` (:meth:`_EstimatorBase._fit_device`), which raises DeviceError
DEVICE = [_Device()]
#: bytes, a size such as "4GB" (parsed by ``resolve_memory_budget``) or None (half the memory)
MEMORY_BUDGET = [POSITIVE, str, None]
# Kernel parameters: the types here; names, paths and allowed values come from the kernel
# registry (bigkernel.kernels.registry), checked in each estimator's _check_rules and when the
# kernel is built.
KERNEL = [str, dict, Kernel]
GAMMA = [POSITIVE, None]
LENGTH_SCALE = [POSITIVE, "array-like", None]
NU = [Options(Real, kernel_spec("matern").param("nu").choices), None]
DEGREE = [POSITIVE]
COEF0 = [Interval(Real, None, None, closed="neither")]
KERNEL_PARAMS = [dict, None]
#: the kernel's entries, shared by every estimator that builds an exact kernel (names are checked
#: when the kernel is built, by make_kernel and the registry)
KERNEL_CONSTRAINTS = {
    "kernel": KERNEL,
    "gamma": GAMMA,
    "degree": DEGREE,
    "coef0": COEF0,
    "length_scale": LENGTH_SCALE,
    "nu": NU,
    "kernel_params": KERNEL_PARAMS,
}


#: scipy.sparse X accepted by ``validate_data`` (CSR/CSC kept, other formats become CSR)
SPARSE_OK: dict[str, Any] = {"accept_sparse": ("csr", "csc")}


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
        from bigkernel.runtime import compute

        (sample_weight,) = compute(sample_weight, label="sample weights")
    try:
        sw = _check_sample_weight(sample_weight, np.empty((n, 0)), dtype=np.float64, ensure_non_negative=True)
    except ValueError as exc:
        raise ParameterError(f"sample_weight must be finite weights >= 0, one per row (shape ({n},)); {exc}") from None
    return sw


def single_target(a: np.ndarray, single: bool) -> np.ndarray:
    """Column 0 of a per-target array as its own 1-D array when y was 1-D, else ``a``."""
    return a[:, 0].copy() if single else a


@functools.cache
def _init_defaults(cls: type) -> dict:
    """The default of each ``__init__`` parameter of ``cls`` (offered as the fix of an error)."""
    return {
        name: p.default
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def check_estimator_params(est) -> None:
    """Check ``est``'s parameters against its ``_parameter_constraints`` table (the errors name
    the parameter, the allowed forms and the default) and set text options back in the table's
    spelling: options match regardless of case, as kernel names do (``alpha="GCV"`` fits as
    ``"gcv"``), and the code after this compares one spelling."""
    cls = type(est)
    params = est.get_params(deep=False)
    table = est._parameter_constraints
    validate_params(table, params, cls.__name__, defaults=_init_defaults(cls))
    for name, value in canonical_params(table, params).items():
        setattr(est, name, value)


def target_names_of(y) -> list[str] | None:
    """y's column names when it carries text ones (a named pandas Series, a DataFrame)."""
    names = [getattr(y, "name", None)] if getattr(y, "ndim", 0) == 1 else list(getattr(y, "columns", []))
    return names if names and all(isinstance(n, str) for n in names) else None


class _NamedBlocks:
    """``est.predict`` for numpy blocks cut from the table the model was fitted on: each block
    gets the fitted column names back, so scikit-learn's name check passes (a bare array would
    warn "X does not have valid feature names") and its width check still runs."""

    def __init__(self, est) -> None:
        self.est = est

    def __call__(self, X: np.ndarray):
        import pandas as pd

        return self.est.predict(pd.DataFrame(X, columns=self.est.feature_names_in_, copy=False))


class _Quiet:
    """``predict`` without the predict-time findings (an internal pass's own rows)."""

    def __init__(self, predict: Callable) -> None:
        self.predict = predict

    def __call__(self, X: np.ndarray):
        with no_predict_findings():
            return self.predict(X)


def block_predictor(est):
    """The numpy predictor of internal passes over the training data's own columns (evaluation,
    bootstrap evaluation points): ``est.predict``, giving blocks the fitted column names when
    the model has them, and logging no extrapolation finding (the holdout rows are the
    training data's; the bootstrap flags its own points)."""
    return _Quiet(_NamedBlocks(est) if hasattr(est, "feature_names_in_") else est.predict)


def show_progress_when_verbose(cls: type) -> None:
    """Run each of ``cls``'s :data:`VERBOSE_METHODS` inside :func:`~bigkernel.runtime.progress_bars`
    when the estimator's ``verbose`` is >= 1 (called by the estimator bases' ``__init_subclass__``,
    so every estimator and mixin method gets it, and an outer ``progress_bars()`` still works
    with ``verbose=0``); ``verbose`` joins the class's parameter table."""
    if "verbose" in _init_defaults(cls) and "verbose" not in cls._parameter_constraints:
        cls._parameter_constraints = {**cls._parameter_constraints, "verbose": VERBOSE}
    for name in VERBOSE_METHODS:
        method = inspect.getattr_static(cls, name, None)
        if inspect.isfunction(method) and not getattr(method, "_verbose_progress", False):
            setattr(cls, name, _with_progress(method))


def _with_progress(method: Callable) -> Callable:
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if not getattr(self, "verbose", 0):
            return method(self, *args, **kwargs)
        with progress_bars(True):
            return method(self, *args, **kwargs)

    run._verbose_progress = True
    return run


class _EstimatorBase(RegressorMixin, BaseEstimator):
    """Multi-output regressor taking numpy or dask input; subclasses implement ``fit``,
    ``predict``, ``get_model_state`` and ``set_model_state``."""

    #: the allowed forms of each ``__init__`` parameter (see :mod:`bigkernel.validation`),
    #: checked by :meth:`_check_params` at the start of every fit
    _parameter_constraints: ClassVar[dict[str, list]] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        show_progress_when_verbose(cls)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        tags.input_tags.sparse = True  # scipy.sparse X: multiplied as stored, never densified
        return tags

    # ----------------------------------------------------------------- parameters
    def _check_params(self) -> None:
        """Check every parameter against the table, then the rules that relate several."""
        self._validate_params()
        self._check_rules()
        self._device = self._fit_device()  # DeviceError here, before any data is read

    def _validate_params(self) -> None:
        """Check every parameter against ``_parameter_constraints`` (overrides scikit-learn's
        private method of the same name, which reads scikit-learn's own constraint objects)."""
        check_estimator_params(self)

    def _check_rules(self) -> None:
        """Rules a table cannot express (several parameters together); none by default."""

    def _fit_device(self) -> Device:
        """The resolved :class:`~bigkernel.devices.Device` of this fit (``device`` parameter).

        Called at the start of every fit (:meth:`_check_params` keeps it as ``self._device``,
        the one object every solver, graph and task of the fit receives): ``"cuda"`` without
        CuPy or a GPU raises :class:`~bigkernel.errors.DeviceError` before any data is read;
        ``"auto"`` logs its choice. The fitted model does not depend on it (fitted arrays are
        host numpy arrays).
        """
        return resolve_device(getattr(self, "device", "cpu"))

    def _predict_device(self) -> Device:
        """The :class:`~bigkernel.devices.Device` predictions run on: the ``device`` parameter
        resolved now, or the CPU when it names a GPU that is not usable here (logged at debug
        level) — a model saved from a GPU fit keeps ``device="cuda"`` and predicts on a CPU-only
        machine too. A malformed value still raises :class:`~bigkernel.errors.ParameterError`."""
        spec = getattr(self, "device", "cpu")
        if spec in (None, "cpu"):
            return CPU
        try:
            return resolve_device(spec)
        except DeviceError as exc:
            logger.debug("predicting on the CPU: %s", exc)
            return CPU

    # ----------------------------------------------------------------- data
    def fit(self, X: ArrayIn, y: ArrayIn, sample_weight: ArrayIn | None = None) -> Self:
        """Fit from numpy or dask arrays (see the class docstring for what each solver does).

        Parameters
        ----------
        X : array-like, scipy.sparse matrix or dask array of shape (n_samples, n_features)
            Sparse X (CSR/CSC, or dask chunks of them) is multiplied as stored, never densified.
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
        weights = None if sample_weight is None else RowWeights(check_sample_weight(sample_weight, ds.X.shape[0]))
        self.fit_dataset(ds, weights=weights)
        log_fit(self)  # α/γ on a grid edge, feature scales far apart, logged
        return self

    def _fit_input(self, X, y) -> Dataset:
        """Validated training data (metadata only; values are checked in the pass)."""
        if y is None:
            raise DataError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        ds, _ = self._as_dataset(X, y, reset=True)
        return ds

    def _lazy_frame(self, X, *, reset: bool) -> tuple[Any, list[str] | None]:
        """A dask DataFrame X as a dask array and its column names (checked against the fit's
        when ``reset`` is False, as a pandas DataFrame's are); other X unchanged, None."""
        if not is_dask_frame(X):
            return X, None
        names = [str(c) for c in X.columns]
        if not reset:
            check_frame_columns(model_columns(self), X, "X")
        return as_dask(X), names

    def _as_dataset(self, X, y=None, *, reset: bool) -> tuple[Dataset, bool]:
        """Validated dask data set and whether the input was dask (so output should be); a
        dask DataFrame X (or Series y) is read lazily, by its column names."""
        X, names = self._lazy_frame(X, reset=reset)
        y_names = None
        if is_dask_frame(y):
            y_names, y = target_names_of(y), as_dask(y, name="y")
        if isinstance(X, da.Array) or isinstance(y, da.Array):
            ds = as_dataset(X, y)
            if not reset:
                self._check_n_features(ds.X.shape[1])
            elif ds.X.shape[0] < 1:
                raise DataError("X is empty")
            else:
                self.set_input_facts(ds.X.dtype, names, y_names)  # names: a dask DataFrame's (an array has none)
            return ds, True
        check_real(X, "X")
        check_real(y, "y")
        y_in = y
        X = validate_data(self, X, reset=reset, ensure_all_finite=False, dtype=[np.float64, np.float32], **SPARSE_OK)
        if y is not None:
            # y checked here, not by validate_data, so NaN/inf reach the pass and its row-range error
            y = check_array(y, ensure_2d=False, dtype=np.float64, ensure_all_finite=False, input_name="y")
            check_consistent_length(X, y)
        if reset:
            self.set_input_facts(X.dtype, getattr(self, "feature_names_in_", None), target_names_of(y_in))
        return as_dataset(X, y, chunk_rows=getattr(self, "chunk_rows", None)), False

    def set_input_facts(
        self, X_dtype: DTypeLike, feature_names: Sequence[str] | None = None, target_names: Sequence[str] | None = None
    ) -> None:
        """Remember the training X's dtype and column names (``feature_names_in_``, checked at
        predict by scikit-learn's ``validate_data``) and y's names (a pandas Series' name, a
        DataFrame's columns, a table's y columns: ``bigkernel update`` reads new targets by
        them); all are saved with the model.

        ``fit`` sets them from its input; orchestrators fitting a :class:`Dataset` read from a
        table pass the selected columns, as a DataFrame fit would.
        """
        self.X_dtype_in_ = np.dtype(X_dtype).name
        self.target_names_in_ = None if target_names is None else [str(t) for t in target_names]
        if feature_names is None:
            self.__dict__.pop("feature_names_in_", None)  # a refit without names forgets the old ones
        else:
            self.feature_names_in_ = np.asarray(feature_names, dtype=object)

    def _predict_with(self, X, model, single: bool):
        """Predictions of ``model`` (a callable on numpy blocks with ``n_outputs``): numpy X in,
        numpy out; dask X in, lazy dask out; 1-D for a single target."""
        X, _ = self._lazy_frame(X, reset=False)
        if isinstance(X, da.Array):
            ds, _ = self._as_dataset(X, reset=False)
            out = predict_graph(ds.X, model, model.n_outputs)
        else:
            check_real(X, "X")
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32], **SPARSE_OK)
            log_predict(self, X)
            out = map_rows(model, X, model.n_outputs)
        return out[:, 0] if single else out

    # ----------------------------------------------------------------- training range
    def _set_range(self, lo, hi) -> None:
        """``data_min_`` / ``data_max_`` (float64, shape (n_features,)) of the training rows;
        None when unknown (a model saved before they existed)."""
        if lo is None or hi is None:
            self.data_min_ = self.data_max_ = None
            return
        self.data_min_ = np.array(lo, dtype=np.float64).reshape(-1)
        self.data_max_ = np.array(hi, dtype=np.float64).reshape(-1)

    def _range_arrays(self) -> dict[str, np.ndarray]:
        """The training range as saved arrays (none when unknown)."""
        if getattr(self, "data_min_", None) is None:
            return {}
        return {"data_min": self.data_min_, "data_max": self.data_max_}

    def _read_range(self, arrays: dict[str, np.ndarray]) -> None:
        """Set the training range from saved arrays (optional: older models have none)."""
        self._set_range(arrays.get("data_min"), arrays.get("data_max"))

    def _check_n_features(self, d: int) -> None:
        if d != self.n_features_in_:
            raise DataError(
                f"X has {d} features, but {type(self).__name__} is expecting {self.n_features_in_} features as input"
            )

    # ----------------------------------------------------------------- output
    def predict_to_zarr(self, X: ArrayIn, path: str, *, name: str = "y_pred", overwrite: bool = False) -> str:
        """Predict a dask/numpy X straight into a zarr array, chunk by chunk (out of core).

        Local outputs are written to a hidden sibling folder and renamed when complete, so an
        interrupted prediction leaves no store that looks finished.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        path : str
            The zarr group to write (local path or fsspec URL).
        name : str, default="y_pred"
            Name of the float64 array of shape (n_samples,) or (n_samples, n_targets) in it.
        overwrite : bool, default=False
            Replace an existing local ``path``; without it, an existing one raises
            :class:`~bigkernel.OutputExistsError`.

        Returns
        -------
        str
            ``path``.
        """
        return predict_to_zarr(self, X, path, name=name, overwrite=overwrite)

    def save(self, path: str, *, overwrite: bool = False) -> str:
        """Save the fitted model as a zarr group with JSON metadata (no pickle).

        Parameters
        ----------
        path : str
            The zarr group to write; read it back with :func:`bigkernel.load`.
        overwrite : bool, default=False
            Replace an existing local ``path``; without it, an existing one raises
            :class:`~bigkernel.OutputExistsError`.

        Returns
        -------
        str
            ``path``.
        """
        return save_model(self, path, overwrite=overwrite)
