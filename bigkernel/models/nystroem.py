"""NystroemRidge: kernel ridge on Nyström features — the streamed one-pass primal path, or
Falkon's preconditioned CG with one pass per iteration (``solver="cg"``)."""

from __future__ import annotations

import logging
from numbers import Real
from typing import Any, ClassVar, Self

import numpy as np
from numpy.typing import ArrayLike, DTypeLike
from sklearn.utils.validation import check_is_fitted

from bigkernel.data.sources import Dataset
from bigkernel.devices import CPU
from bigkernel.errors import DeviceError, ParameterError
from bigkernel.io.model_store import register_model
from bigkernel.kernels.base import Kernel
from bigkernel.kernels.registry import check_kernel_name, document_kernels, is_precomputed
from bigkernel.models._base import (
    ALPHA,
    COUNT,
    DEVICE,
    KERNEL_CONSTRAINTS,
    MEMORY_BUDGET,
    DeviceLike,
    Floats,
    KernelLike,
    RandomStateLike,
    Weights,
)
from bigkernel.models._streamed import PartialFitMixin
from bigkernel.models.random_features import FEATURE_DTYPE, _RandomFeatureBase
from bigkernel.numerics.nystroem_features import LANDMARK_METHODS, NystroemMap
from bigkernel.solvers.base import Solution
from bigkernel.solvers.nystroem import NystroemSolver, kernel_of_spec
from bigkernel.solvers.nystroem_cg import CGFit, NystroemCGSolver
from bigkernel.solvers.nystroem_cg_plan import NystroemCGPlan
from bigkernel.solvers.primal import PrimalFixed
from bigkernel.solvers.replicates import check_n_features, class_name, fingerprint_params
from bigkernel.validation import Interval, Options

logger = logging.getLogger(__name__)

__all__ = ["NystroemRidge"]

#: the solvers of ``NystroemRidge(solver=...)``
SOLVERS = ("direct", "cg")


@document_kernels("nystroem")
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
        One of {kernels} (the kernel registry's Nyström path), or a
        :class:`~bigkernel.kernels.base.Kernel`.
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

    solver : {"direct", "cg"}, default="direct"
        ``"direct"``: the one pass of sums and a D×D eigendecomposition (above). ``"cg"``:
        Falkon's preconditioned conjugate gradients, one pass over the data per iteration,
        never forming the M×M system from the data (memory on the client
        ``(2 + n_alphas)·M²·8`` bytes for the preconditioner's factors, or ``2·M²·8`` past
        ``memory_budget``): for M in the tens of
        thousands. The model is ``f(x) = k(x, C) β + b``; a list of α rides the same passes
        (one CG column per α and target), α chosen on a held-out split
        (``validation_fraction``) whose predictions follow the iterates. See
        ``docs/guide/nystroem.rst``.
    tol : float, default=1e-6
        ``solver="cg"``: stop a column when its preconditioned relative residual is below this.
    max_iter : int, default=100
        ``solver="cg"``: most iterations (passes over the data).
    validation_fraction : float, default=0.1
        ``solver="cg"`` with a list of α: the share of rows held out (a seeded per-row draw) to
        choose α; the model is the one fitted on the other rows at the chosen α.
    memory_budget : int, str or None, default=None
        ``solver="cg"``: bytes (or a size like ``"8GB"``) the client may hold for the
        preconditioner (None: half the physical memory, or of the cluster's smaller worker
        total). Within it, a Cholesky factor per α (``(2 + n_alphas)·M²·8`` bytes at the
        peak); past it, one eigendecomposition of ``K_MM`` for every α (``2·M²·8``, the same
        preconditioner); past that, the fit is refused before any pass.

    device : {"cpu", "cuda", "cuda:N", "auto"}, default="cpu"
        ``solver="direct"``: Nyström features are host code: ``"cuda"`` raises DeviceError at
        fit start (use ExactKernelRidge or RandomFeatureRidge on a GPU); ``"auto"`` stays on the
        CPU, logged (``docs/guide/gpu.rst``). ``solver="cg"``: the passes' kernel panels and
        products run on the GPU (rbf family there; other kernels' panels are computed on the
        host and copied in); the preconditioner and CG vectors stay on the host.

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
    n_iter_, residuals_, validation_scores_, solver_info_
        ``solver="cg"`` only: CG iterations (passes), the relative residual history
        ``(n_iter_ + 1, n_alphas × n_targets)``, the held-out mean squared error per α (and
        target; None for one α), and the fit's facts (passes, seconds, convergence, whether the
        data stayed in memory across passes). A CG fit has no ``df_``, GCV, evidence or
        posterior: ``predict(return_std=True)`` and :meth:`partial_fit` refuse it.

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
        solver: str = "direct",
        tol: float = 1e-6,
        max_iter: int = 100,
        validation_fraction: float = 0.1,
        memory_budget: float | str | None = None,
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
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.validation_fraction = validation_fraction
        self.memory_budget = memory_budget
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
        "solver": [Options(str, SOLVERS)],
        "tol": [Interval(Real, 0, 1, closed="neither")],  # a relative residual (as the exact solver's)
        "max_iter": [COUNT],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "memory_budget": MEMORY_BUDGET,
        "device": DEVICE,
    }

    def _fit_device(self):
        """``solver="cg"``: the resolved device (its passes run there). ``"direct"``: the CPU:
        Nyström features (the kernel's cross block against the landmarks) are host code, so a
        GPU is refused at fit start with a DeviceError naming the alternatives, and
        ``device="auto"`` stays on the CPU (logged) — never a silent CPU fit of ``"cuda"``."""
        device = super()._fit_device()
        if not device.is_gpu or self.solver == "cg":  # the CG passes' kernel panels run on a GPU
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

    def make_solver(self) -> NystroemSolver:
        """The solver of this estimator's parameters (``solver``: the one-pass
        :class:`~bigkernel.solvers.nystroem.NystroemSolver` or Falkon's
        :class:`~bigkernel.solvers.nystroem_cg.NystroemCGSolver`), on its resolved device."""
        cls = NystroemCGSolver if self.solver == "cg" else NystroemSolver
        return cls.from_params(self.get_params(deep=False), device=getattr(self, "_device", None))

    def _make_kernel(self, n_features: int) -> Kernel:
        # the same kernel construction as the exact solver, so solvers are comparable
        return kernel_of_spec(self.make_solver().spec, n_features)

    def fit_dataset(self, ds: Dataset, weights: Weights | None = None) -> Self:
        """Fit from a validated :class:`~bigkernel.data.sources.Dataset` (for orchestrators).

        ``weights`` (a row partition or ``weights(start, stop) -> (1, rows)``) restricts both the
        landmarks and the statistics to the kept rows.
        """
        self._check_params()
        solver = self.make_solver()
        fixed = solver.prepare(ds, weights)
        self._set_scaler(fixed.scaler)
        if self.solver == "cg":
            return self._set_cg_solution(fixed, solver.fit(fixed, ds, weights))
        return self._set_solution(fixed, solver.fit(fixed, ds, weights))

    # ----------------------------------------------------------------- solver="cg"
    def _set_cg_solution(self, fixed: PrimalFixed, solution: Solution) -> Self:
        """Fitted attributes of a CG fit (``details``: :class:`~bigkernel.solvers.nystroem_cg.CGFit`)."""
        fit: CGFit = solution.details
        self.feature_map_ = fixed.fmap
        self.coef_ = solution.coef[:, 0].copy() if fit.single else solution.coef.T.copy()
        self.intercept_ = float(solution.intercept[0]) if fit.single else solution.intercept.copy()
        self.alpha_, self.alphas_ = solution.alpha, solution.alphas
        self.n_iter_, self.residuals_ = fit.n_iter, fit.residuals
        scores = fit.validation_scores
        self.validation_scores_ = None if scores is None else (scores[:, 0].copy() if fit.single else scores)
        self.n_samples_fit_, self.n_features_in_ = fit.n_samples, fit.n_features_in
        self.solver_info_ = dict(solution.diagnostics)
        self.posterior_ = None  # the M×M posterior of the CG model is not formed
        if self._keeps_stats:
            self.stats_ = None  # no one-pass sums: partial_fit refuses (see _check_partial_fit)
        self._set_range(fit.x_min, fit.x_max)
        return self

    def replicate_plan(self, ds: Dataset, X_eval: np.ndarray, *, seed_entropy: int, workers: int = 1) -> Any:
        """The bootstrap's replicate plan: the one-pass plan (``solver="direct"``), or with
        ``solver="cg"`` one weighted CG fit per replicate task with the fitted centres (or those
        a fit would draw) held fixed (:class:`~bigkernel.solvers.nystroem_cg_plan.NystroemCGPlan`).

        Parameters
        ----------
        ds : Dataset
        X_eval : ndarray of shape (n_eval, n_features)
        seed_entropy : int
            The bootstrap seed.
        workers : int, default=1

        Returns
        -------
        ReplicatePlan
        """
        if self.solver != "cg":
            return super().replicate_plan(ds, X_eval, seed_entropy=seed_entropy, workers=workers)
        fitted = hasattr(self, "coef_")
        est = self if fitted else self._with_seed(seed_entropy)
        if fitted:
            check_n_features(self, ds.X.shape[1])
            est._check_params()
        solver = est.make_solver()
        fixed = PrimalFixed(self.feature_map_) if fitted else solver.prepare(ds)
        fingerprint = {"class": class_name(self), "params": fingerprint_params(est), "fitted": fitted}
        return NystroemCGPlan(solver, fixed, ds, X_eval, fingerprint)

    def partial_fit(self, X: Any, y: Any, sample_weight: Any = None) -> Self:
        """As :meth:`RandomFeatureRidge.partial_fit` (``solver="direct"`` only: the CG solver
        keeps no sufficient statistics, so it refuses, fitted or not).

        Parameters
        ----------
        X, y, sample_weight
            As in :meth:`fit`.

        Returns
        -------
        self
        """
        self._check_partial_fit()
        return super().partial_fit(X, y, sample_weight)

    def _check_partial_fit(self) -> None:
        if self.solver == "cg":
            raise ParameterError(
                "NystroemRidge(solver='cg').partial_fit: the CG solver keeps no sufficient statistics (its "
                "system is never formed); fit on all rows, or use solver='direct' for partial_fit"
            )
        super()._check_partial_fit()

    def get_model_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted state (format v1; a CG model saves its centres, β, the α path, the
        residual history and the held-out scores).

        Returns
        -------
        attrs : dict
        arrays : dict of ndarray
        """
        if self.solver != "cg":
            return super().get_model_state()
        check_is_fitted(self, "coef_")
        coef, intercept = self._coef_2d()
        scores = self.validation_scores_
        fit = CGFit(
            single=self.coef_.ndim == 1, n_iter=int(self.n_iter_), residuals=self.residuals_,
            validation_scores=None if scores is None else np.asarray(scores).reshape(len(self.alphas_), -1),
            n_samples=int(self.n_samples_fit_), n_features_in=int(self.n_features_in_),
        )  # fmt: skip
        solution = Solution(coef, intercept, self.alpha_, self.alphas_, dict(self.solver_info_), fit)
        attrs, arrays = self.make_solver().state(PrimalFixed(self.feature_map_), solution)
        arrays.update(self._range_arrays())
        return attrs, arrays

    def set_model_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        """Set the fitted state read back from a store.

        Parameters
        ----------
        attrs : dict
        arrays : dict of ndarray
        """
        if self.solver != "cg":
            super().set_model_state(attrs, arrays)
            return
        fixed, solution = self.make_solver().from_state(attrs, arrays)
        self._set_cg_solution(fixed, solution)
        self._read_range(arrays)

    def _make_map(self, ds: Dataset, weights) -> NystroemMap:
        """The landmarks a fit on ``ds`` draws, scaled by the scaling :meth:`_fit_scaler`
        estimated (the classifiers' inner regressors)."""
        return self.make_solver().landmark_map(ds, weights, getattr(self, "_scaler", None))
