"""NystroemRidge: kernel ridge on Nyström features, through the streamed one-pass primal path."""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Self

import numpy as np
from numpy.typing import ArrayLike, DTypeLike
from sklearn.utils.validation import check_is_fitted

from bigkernel._sparse import as_block, is_sparse, nonfinite_rows, scale_columns
from bigkernel.data.sources import Dataset
from bigkernel.devices import CPU
from bigkernel.errors import DataError, DeviceError
from bigkernel.io.model_store import register_model
from bigkernel.kernels.base import Kernel
from bigkernel.kernels.registry import check_kernel_name, is_precomputed
from bigkernel.models._base import (
    ALPHA,
    COUNT,
    DEVICE,
    KERNEL_CONSTRAINTS,
    DeviceLike,
    Floats,
    KernelLike,
    RandomStateLike,
    Weights,
)
from bigkernel.models._streamed import PartialFitMixin
from bigkernel.models.exact import build_kernel
from bigkernel.models.random_features import FEATURE_DTYPE, _RandomFeatureBase
from bigkernel.numerics.nystroem_features import (
    LANDMARK_METHODS,
    NystroemMap,
    landmark_pool_size,
    select_landmarks,
)
from bigkernel.numerics.primal import solve_primal
from bigkernel.numerics.sums import sums_precision
from bigkernel.runtime import compute
from bigkernel.validation import Options

logger = logging.getLogger(__name__)

__all__ = ["NystroemRidge"]


@register_model
class NystroemRidge(PartialFitMixin, _RandomFeatureBase):
    """Kernel ridge regression on Nyström features ``φ(x) = K_mm^(-1/2) k_m(x)``.

    ``n_components`` landmarks are sampled from the training rows (seeded), then the data are
    streamed once, exactly as for :class:`~bigkernel.RandomFeatureRidge`: one pass accumulates
    ΦᵀΦ, Φᵀy, Σφ, Σy, Σy² and one eigendecomposition gives the coefficients, df(α) and GCV
    for every α. Any exact kernel works (no spectral sampler is needed). Landmarks cost one
    extra read of the sampled rows.

    Parameters
    ----------
    kernel : str or Kernel, default="rbf"
        Any name of :func:`~bigkernel.kernels.factory.make_kernel` or a Kernel.
    gamma, degree, coef0, length_scale, nu, kernel_params
        Kernel parameters, as in :class:`~bigkernel.ExactKernelRidge`.
    n_components : int, default=100
        Number of landmarks m (the map has m features, fewer if ``K_mm`` is singular).
    landmarks : {"uniform", "rpcholesky"}, default="rpcholesky"
        Uniform rows, or randomly pivoted Cholesky pivots among ``max(4m, 2000)`` uniform
        candidates (better than uniform at the same m).
    alpha : float, list of float, "gcv" or "evidence", default=1.0
        As in :class:`~bigkernel.RandomFeatureRidge`.
    fit_intercept : bool, default=True
        Fit an unpenalized intercept by centring in feature space.
    random_state : int, RandomState instance or None, default=None
        Seeds the landmark sample.
    dtype : {"float64", "float32"}, default="float64"
        Precision of the features; sums and solves are float64.
    chunk_rows : int, default=None
        Rows per dask chunk for numpy input (dask input keeps its chunks).
    standardize : bool, default=False
        Standardize each feature to mean 0, standard deviation 1 first (sparse X: scaled to
        standard deviation 1 without centring, so it stays sparse).

    device : {"cpu", "cuda", "cuda:N", "auto"}, default="cpu"
        Nyström features are host code in this version: ``"cuda"`` raises DeviceError at fit
        start (use ExactKernelRidge or RandomFeatureRidge on a GPU); ``"auto"`` stays on the
        CPU, logged (``docs/guide/gpu.rst``).

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    coef_, intercept_, alpha_, alphas_, df_, df_path_, gcv_, spectrum_, n_features_in_, n_samples_fit_, data_min_, data_max_
        As in :class:`~bigkernel.RandomFeatureRidge`.
    sigma2_, log_marginal_likelihood_, log_marginal_likelihood_path_, evidence_, posterior_
        As in :class:`~bigkernel.RandomFeatureRidge` (``predict(X, return_std=True)``).
    feature_map_ : NystroemMap
        Landmarks and ``K_mm^(-1/2)`` (saved with the model).
    stats_ : SufficientStats or None
        As in :class:`~bigkernel.RandomFeatureRidge`: what :meth:`partial_fit` adds to.

    Notes
    -----
    :meth:`transform` gives the Nyström features of the fitted landmarks. With
    :meth:`partial_fit`, the landmarks are drawn from the **first batch** (later batches only
    add statistics): the model equals a fit on all rows with those landmarks, to rounding.
    """

    def __init__(
        self,
        kernel: KernelLike = "rbf",
        *,
        gamma: float | None = None,
        degree: float = 3,
        coef0: float = 1,
        length_scale: float | ArrayLike | None = None,
        nu: float | None = 1.5,
        kernel_params: dict[str, Any] | None = None,
        n_components: int = 100,
        landmarks: str = "rpcholesky",
        alpha: float | Floats | str = 1.0,
        fit_intercept: bool = True,
        random_state: RandomStateLike = None,
        dtype: DTypeLike = "float64",
        chunk_rows: int | None = None,
        standardize: bool = False,
        device: DeviceLike = "cpu",
        verbose: int = 0,
    ) -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.length_scale = length_scale
        self.nu = nu
        self.kernel_params = kernel_params
        self.n_components = n_components
        self.landmarks = landmarks
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.random_state = random_state
        self.dtype = dtype
        self.chunk_rows = chunk_rows
        self.standardize = standardize
        self.device = device
        self.verbose = verbose

    # ----------------------------------------------------------------- parameters
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **KERNEL_CONSTRAINTS,
        "n_components": [COUNT],
        "landmarks": [Options(str, LANDMARK_METHODS)],
        "alpha": ALPHA,
        "fit_intercept": ["boolean"],
        "random_state": ["random_state"],
        "dtype": FEATURE_DTYPE,
        "chunk_rows": [COUNT, None],
        "standardize": ["boolean"],
        "device": DEVICE,
    }

    def _fit_device(self):
        """The CPU: Nyström features (the kernel's cross block against the landmarks) are host
        code, so a GPU is refused at fit start with a DeviceError naming the alternatives, and
        ``device="auto"`` stays on the CPU (logged) — never a silent CPU fit of ``"cuda"``."""
        device = super()._fit_device()
        if not device.is_gpu:
            return device
        if self.device == "auto":
            logger.info("NystroemRidge: device='auto' found %s, but Nyström features run on the CPU", device)
            return CPU
        raise DeviceError(
            f"NystroemRidge(device={self.device!r}): Nyström features are computed on the CPU in "
            "this version; use device='cpu', or on the GPU ExactKernelRidge (exact, n up to ~10⁶) "
            "or RandomFeatureRidge (any n)"
        )

    def _check_rules(self) -> None:
        """Any kernel (the kernel checks its own parameters), but a kernel function: not
        ``"precomputed"``, whose error names the path that takes a Gram matrix."""
        if is_precomputed(self.kernel):
            check_kernel_name(self.kernel, "nystroem")

    def _make_kernel(self, n_features: int) -> Kernel:
        # the same kernel construction as the exact solver, so solvers are comparable
        return build_kernel(self, n_features)

    def fit_dataset(self, ds: Dataset, weights: Weights | None = None) -> Self:
        """Fit from a validated :class:`~bigkernel.data.sources.Dataset` (for orchestrators).

        ``weights`` (a row partition or ``weights(start, stop) -> (1, rows)``) restricts both the
        landmarks and the statistics to the kept rows.
        """
        self._check_params()
        self._fit_scaler(ds, weights)
        fmap = self._make_map(ds, weights)
        (stats,) = compute(self.stats_graph(ds, fmap, weights), label="fit")
        return self._set_fitted(
            solve_primal(
                stats,
                self.alpha,
                self.fit_intercept,
                sums_precision(self.dtype),
                device=getattr(self, "_device", CPU),
            ),
            fmap,
            ds.y.ndim,
            stats,
        )

    def _new_map(self, ds: Dataset, weights: Weights | None = None) -> NystroemMap:
        """The map a fit on ``ds`` draws (``partial_fit``'s first batch, the transformer)."""
        return self._make_map(ds, weights)

    def _make_map(self, ds: Dataset, weights) -> NystroemMap:
        n, d = ds.X.shape
        kernel = self._make_kernel(d)
        seed = self._seed()
        rng = np.random.default_rng(seed)
        size = landmark_pool_size(n, self.n_components, self.landmarks)
        rows = _sample_rows(rng, n, size, weights)
        (pool,) = compute(ds.X[rows], label="landmarks")
        pool = as_block(pool)  # sparse X gives sparse landmarks (CSR)
        if nonfinite_rows(pool) is not None:
            raise DataError("X contains NaN or inf in the rows sampled as Nyström landmarks; remove or impute them")
        scaler = getattr(self, "_scaler", None)
        if scaler is not None:
            pool = scale_columns(pool, 1.0 / scaler[1]) if is_sparse(pool) else (pool - scaler[0]) / scaler[1]
        pool = pool[rng.permutation(pool.shape[0])]  # sorted for the read; shuffle for "first m"
        Z = select_landmarks(kernel, pool, self.n_components, self.landmarks, random_state=rng)
        params = {"landmarks": self.landmarks, "seed": seed, "pool": int(pool.shape[0])}
        fmap = NystroemMap.from_landmarks(kernel, Z, params=params)
        logger.info(
            "Nyström map: %d %s landmarks from %d candidates, %d components",
            Z.shape[0],
            self.landmarks,
            pool.shape[0],
            fmap.n_components,
        )
        return fmap if scaler is None else fmap.standardized(*scaler)

    # ----------------------------------------------------------------- persistence
    def _get_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        check_is_fitted(self, "coef_")
        fm = self.feature_map_
        attrs = {
            "feature_map": fm.to_metadata(), "alpha_": self.alpha_, "df_": self.df_,
            "n_samples_fit_": self.n_samples_fit_, "n_features_in_": self.n_features_in_,
            "single_output": self.coef_.ndim == 1,
        }  # fmt: skip
        arrays = {
            "coef": np.atleast_2d(self.coef_), "intercept": np.atleast_1d(np.asarray(self.intercept_, float)),
            "alphas": self.alphas_, "df_path": self.df_path_, "gcv": np.asarray(self.gcv_), **fm.arrays(),
            **self._range_arrays(),
        }  # fmt: skip
        self._add_spectrum_state(attrs, arrays)
        self._add_posterior_state(attrs, arrays)
        self._add_stats_state(arrays)
        return attrs, arrays

    def _set_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        fm = NystroemMap.from_arrays(attrs["feature_map"], arrays)
        coef, intercept = arrays["coef"], arrays["intercept"]
        if coef.shape[1] != fm.n_components or coef.shape[0] != intercept.shape[0]:
            raise DataError(f"coef has shape {coef.shape}, expected (n_targets, {fm.n_components})")
        single = bool(attrs["single_output"])
        self.feature_map_ = fm
        self.coef_ = coef[0] if single else coef
        self.intercept_ = float(intercept[0]) if single else intercept
        self.alpha_, self.df_ = float(attrs["alpha_"]), float(attrs["df_"])
        self.alphas_, self.df_path_, self.gcv_ = arrays["alphas"], arrays["df_path"], arrays["gcv"]
        self.n_samples_fit_, self.n_features_in_ = int(attrs["n_samples_fit_"]), int(attrs["n_features_in_"])
        self._read_spectrum_state(attrs, arrays)
        self._read_posterior_state(attrs, arrays)
        self._read_range(arrays)
        self._read_stats_state(arrays)


def _sample_rows(rng: np.random.Generator, n: int, size: int, weights) -> np.ndarray:
    """``size`` distinct row indices, uniform among the rows ``weights`` keeps (sorted)."""
    if weights is None:
        return np.sort(rng.choice(n, size=size, replace=False))
    picked: list[int] = []
    seen: set[int] = set()
    # draw in rounds: kept rows are a large fraction in practice (a training split)
    for _ in range(64):
        cand = rng.choice(n, size=min(n, 2 * size), replace=False)
        for i in cand:
            i = int(i)
            if i not in seen and _kept(weights, i):
                seen.add(i)
                picked.append(i)
                if len(picked) == size:
                    return np.sort(np.array(picked))
        if len(seen) >= n:
            break
    if not picked:
        raise DataError("no training rows to draw landmarks from (all rows are held out or weighted 0)")
    return np.sort(np.array(picked))


def _kept(weights, i: int) -> bool:
    if hasattr(weights, "groups"):
        return int(np.asarray(weights.groups(i, i + 1))[0]) in tuple(weights.keep)
    return float(np.asarray(weights(i, i + 1))[0, 0]) > 0
