"""What the dual models (ExactKernelRidge, ExactKernelRidgeCV) share beside their fits:
memory budgets (host and GPU), the preconditioner's default rank, prediction (mean, posterior
std/cov, on a GPU when one is usable) and the arrays every dual model saves; and the checks of a
precomputed Gram matrix."""

from __future__ import annotations

import logging
import math
from numbers import Real

import dask.array as da
import numpy as np
import psutil
import zarr
from dask.utils import parse_bytes
from sklearn.utils.validation import check_is_fitted

from bigkernel._sparse import array_or_sparse, model_arrays, refuse_sparse
from bigkernel.data.sources import from_zarr
from bigkernel.devices import Device, DeviceNamespace
from bigkernel.errors import DataError, ParameterError
from bigkernel.kernels.registry import is_precomputed
from bigkernel.models._base import ArrayIn, int_seed
from bigkernel.models._posterior import Prediction, predict_output
from bigkernel.numerics.device_gram import DeviceExpansion
from bigkernel.numerics.gram_tiles import LocalGram
from bigkernel.numerics.posterior import CGPosterior, DensePosterior
from bigkernel.numerics.precond import rpcholesky_factor
from bigkernel.numerics.scaling import standardize_rows
from bigkernel.runtime import active_client

logger = logging.getLogger(__name__)

#: default memory budget: this fraction of the machine's physical memory
DEFAULT_MEMORY_FRACTION = 0.5
#: ``return_std`` factors ``K + αI`` (one n × n float64 array) up to this n
DENSE_POSTERIOR_MAX_N = 20_000


def resolve_memory_budget(value) -> int:
    """Bytes from an int, a string like ``"4GB"``, or ``None``: half the physical memory (with a
    distributed client active, half of the smaller of that and the workers' total memory limit:
    the Gram cache lives on the workers, the solver's vectors here)."""
    if value is None:
        total = psutil.virtual_memory().total
        client = active_client()
        if client is not None:
            limits = [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]
            if limits and all(limits):
                total = min(total, sum(limits))
        return int(DEFAULT_MEMORY_FRACTION * total)
    if isinstance(value, str):
        try:
            out = parse_bytes(value)
        except ValueError:
            raise ParameterError(f"memory_budget must be bytes or a size like '4GB', got {value!r}") from None
    elif isinstance(value, Real) and not isinstance(value, bool) and np.isfinite(value):
        out = int(value)
    else:
        raise ParameterError(f"memory_budget must be bytes, a size like '4GB' or None, got {value!r}")
    if out <= 0:
        raise ParameterError(f"memory_budget must be > 0, got {value!r}")
    return int(out)


#: share of a GPU's free memory taken by default (the rest: CUDA context, CuPy's pool slack)
DEVICE_MEMORY_FRACTION = 0.8


def device_budget(value, device: Device) -> int:
    """Device bytes of a fit on ``device``: ``memory_budget`` when given (capped, with a log
    line, at the device's free memory), else :data:`DEVICE_MEMORY_FRACTION` of the device's
    free memory (the host numbers do not apply to a GPU). A CPU device (the namespace tests)
    has no free-memory figure: the host rule applies."""
    free = device.free_memory()
    if value is None:
        return int(DEVICE_MEMORY_FRACTION * free) if free is not None else resolve_memory_budget(None)
    budget = resolve_memory_budget(value)
    if free is not None and budget > free:
        logger.warning("memory_budget=%s exceeds the GPU's free memory (%.2f GB): using %.2f GB", value,
                       free / 1e9, DEVICE_MEMORY_FRACTION * free / 1e9)  # fmt: skip
        return int(DEVICE_MEMORY_FRACTION * free)
    return budget


def default_exact_rank(n: int, memory_budget: int) -> int:
    """Default preconditioner rank of the exact solver: ``min(n, max(100, ⌈7√n⌉))``, and at
    most what keeps the preconditioner (three ``n × r`` float64 arrays) within a quarter of the
    memory budget.

    Larger than :func:`~bigkernel.numerics.precond.default_rank` (``2√n``) because every CG
    iteration here is a pass over the Gram matrix (``O(n²)``) while the preconditioner costs
    ``O(n r²)`` once: measured at n = 20,000 (rbf γ = 0.5, α = 1e-2, tol 1e-6) rank 283 needs
    ~60 iterations, 700 needs 32, 1000 needs 22, 1400 needs 13 — and rank ~1000 gives the
    shortest fit.
    """
    by_memory = int(memory_budget // (4 * 3 * 8 * max(n, 1)))
    return int(max(1, min(n, max(100, math.ceil(7.0 * math.sqrt(n))), max(by_memory, 1))))


def predict_namespace(device: Device) -> DeviceNamespace | None:
    """Where predictions of a dual model run: a :class:`~bigkernel.devices.DeviceNamespace`
    (resolved in each task: a dask worker's own GPU) for a GPU ``device``, else None (the host).
    ``device`` is the estimator's ``_predict_device()``: the CPU when the saved ``device`` names
    a GPU not usable here, so a model fitted on a GPU predicts on any machine."""
    return DeviceNamespace(device) if device.is_gpu else None


class _DualPredictor:
    """Prediction of the dual solvers: ``k(X, X_fit) a + b`` block by block, from the fitted
    ``_expansion`` (a :class:`KernelExpansion`), ``dual_coef_`` and the optional scaling."""

    # ----------------------------------------------------------------- predict
    def _model(self):
        """The numpy predictor ``Z ↦ k(Z, X) a + b`` (standardization included): on the GPU
        when ``device`` names one that is usable here (:func:`predict_namespace`), else on
        the host — so a model fitted on a GPU predicts on any machine."""
        expansion = self._expansion
        where = predict_namespace(self._predict_device())
        if where is not None:
            expansion = DeviceExpansion(expansion, where)
        if getattr(self, "scaler_mean_", None) is not None and self.standardize:
            return _Standardized(expansion, self.scaler_mean_, self.scaler_scale_)
        return expansion

    def predict(self, X: ArrayIn, return_std: bool = False, return_cov: bool = False) -> Prediction:
        """Predict ``k(X, X_fit) a + b``, block by block (at the chosen parameters).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the posterior standard deviation of the latent f(x): with
            ``fit_intercept=False`` and ``σ² = 1`` it is scikit-learn's
            ``GaussianProcessRegressor(kernel, alpha=alpha_, optimizer=None)``; here
            ``σ² = sigma2_`` (and, with an intercept, its flat-prior uncertainty is included; see
            :mod:`bigkernel.numerics.posterior`). The first call factors ``K + αI`` (kept with the
            estimator, not saved); above :data:`DENSE_POSTERIOR_MAX_N` points (or when the n × n
            matrix does not fit half the memory budget) the variances come from batched CG solves
            instead — weighted fits and ``return_cov`` included. ``sigma2_`` is known at every n.
        return_cov : bool, default=False
            Also return the posterior covariance at the points (at most
            :data:`~bigkernel.numerics.posterior.COV_MAX_ROWS`).

        Returns
        -------
        y_mean : ndarray, or lazy dask array for dask input, of shape (n_samples,) or
            (n_samples, n_targets)
        y_std : the same shape, only with ``return_std``
        y_cov : ndarray of shape (n_samples, n_samples) or (n_samples, n_samples, n_targets),
            only with ``return_cov``
        """
        check_is_fitted(self, "dual_coef_")
        if is_precomputed(self.kernel):
            if return_std or return_cov:
                raise DataError(
                    "return_std / return_cov need the kernel at new points and k(x, x); a precomputed kernel "
                    "gives only k(X, X_fit): use the kernel by name (or a Kernel object) for the posterior"
                )
            X = _gram_input(X, "predict", self.n_features_in_)
            return self._predict_with(X, self._model(), single=self.dual_coef_.ndim == 1)
        exp = self._expansion
        scaled = getattr(self, "scaler_mean_", None) is not None and self.standardize
        return predict_output(
            self, X, mean_model=self._model(), single=self.dual_coef_.ndim == 1, return_std=return_std,
            return_cov=return_cov, posterior=self._exact_posterior, coef=exp.coef, intercept=exp.intercept,
            transform=_Scaler(self.scaler_mean_, self.scaler_scale_) if scaled else None,
        )  # fmt: skip

    def _exact_posterior(self):
        """The unit-variance posterior at ``alpha_`` (built once, kept with the estimator)."""
        key = ("posterior", float(self.alpha_), bool(self.fit_intercept))
        cached = self.__dict__.get("_posterior_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        tiler = self._expansion.tiler
        n = tiler.n
        sw = getattr(self, "posterior_weights_", None)
        if n <= DENSE_POSTERIOR_MAX_N and 8 * n * n <= resolve_memory_budget(getattr(self, "memory_budget", None)) // 2:
            post = DensePosterior(tiler, self.alpha_, self.fit_intercept, sample_weight=sw)
        else:
            post = self._cg_posterior(sw)
        self._posterior_cache = (key, post)
        return post

    def _cg_posterior(self, sample_weight: np.ndarray | None = None) -> CGPosterior:
        """Batched CG over an in-process Gram operator (the cache takes half the budget), with a
        randomly pivoted Cholesky preconditioner of the fit's default rank (of ``K``; scaled by
        the weights' square roots in :class:`CGPosterior`)."""
        tiler = self._expansion.tiler
        n = tiler.n
        budget = resolve_memory_budget(getattr(self, "memory_budget", None))
        gram = LocalGram(tiler.kernel, tiler.X, budget // 2)
        rank = min(n, default_exact_rank(n, budget))
        factor = rpcholesky_factor(gram.columns, gram.diag(), rank, random_state=int_seed(self.random_state)).L
        logger.info("posterior variance of the exact path by CG: n=%s, preconditioner rank %d", f"{n:,}", rank)
        return CGPosterior(gram, self.alpha_, self.fit_intercept, factor=factor, tol=min(getattr(self, "tol", 1e-6), 1e-8),
                           max_iter=getattr(self, "max_iter", None), sample_weight=sample_weight)  # fmt: skip

    # ----------------------------------------------------------------- persistence
    def _dual_arrays(self) -> dict[str, np.ndarray]:
        """The arrays every dual model saves: points, dual coefficients, intercept, scaling."""
        arrays = {
            "dual_coef": self.dual_coef_.reshape(self.n_samples_fit_, -1),
            "intercept": np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64)),
        }  # fmt: skip
        if self.X_fit_ is not None:
            arrays.update(model_arrays("X_fit", self.X_fit_))  # sparse points: their CSR parts
        elif self._expansion.tiler.keep is not None:  # precomputed: the training columns fitted
            arrays["precomputed_keep"] = self._expansion.tiler.keep
        if getattr(self, "scaler_mean_", None) is not None and self.standardize:
            arrays["scaler_mean"], arrays["scaler_scale"] = self.scaler_mean_, self.scaler_scale_
        arrays.update(self._range_arrays())
        return arrays

    @staticmethod
    def _read_dual_arrays(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(X_fit, dual_coef, intercept)`` of saved arrays, their shapes checked."""
        X, coef, intercept = array_or_sparse("X_fit", arrays), arrays["dual_coef"], arrays["intercept"]
        if X.ndim != 2 or coef.shape != (X.shape[0], intercept.shape[0]):
            raise DataError(
                f"X_fit {X.shape}, dual_coef {coef.shape} and intercept {intercept.shape} do not "
                "agree: expected (n, d), (n, k) and (k,)"
            )
        return X, coef, intercept


class _Scaler:
    """``(Z − mean) / scale``: the standardization of the dual models, picklable."""

    def __init__(self, mean: np.ndarray, scale: np.ndarray) -> None:
        self.mean, self.scale = mean, scale

    def __call__(self, Z: np.ndarray) -> np.ndarray:
        return (np.asarray(Z, dtype=np.float64) - self.mean) / self.scale


class _Standardized:
    """``f((Z − mean) / scale)``: a picklable wrapper of a numpy predictor."""

    def __init__(self, model, mean: np.ndarray, scale: np.ndarray) -> None:
        self.model, self.mean, self.scale = model, mean, scale

    @property
    def n_outputs(self) -> int:
        return self.model.n_outputs

    def __call__(self, Z: np.ndarray) -> np.ndarray:
        return self.model(standardize_rows(Z, self.mean, self.scale))


def _gram_input(K, action: str, n_columns: int | None = None):
    """``K`` checked as the Gram matrix of ``kernel="precomputed"``: 2-D, square at fit, one
    column per training row at predict; a zarr array becomes a dask array (read by chunks)."""
    if isinstance(K, zarr.Array):
        K = from_zarr(K)
    refuse_sparse(K, "kernel='precomputed' takes a dense Gram matrix; found a sparse one: pass K.toarray()")
    if isinstance(K, da.Array) and K.ndim == 2 and K.numblocks[1] > 1:
        K = K.rechunk({1: -1})  # a square matrix is often stored in square chunks: read whole rows
    shape = getattr(K, "shape", None) or np.shape(K)
    if action == "fit" and (len(shape) != 2 or shape[0] != shape[1]):
        raise DataError(
            f"kernel='precomputed': fit takes the square Gram matrix K(X, X) of shape (n_samples, n_samples), "
            f"found shape {tuple(shape)}"
        )
    if action == "predict" and (len(shape) != 2 or shape[1] != n_columns):
        raise DataError(
            f"kernel='precomputed': predict takes K(X*, X_fit) of shape (n_samples, {n_columns}) — one column "
            f"per training row — found shape {tuple(shape)}"
        )
    return K
