"""ExactKernelRidge: the exact kernel ridge solution by preconditioned CG over a blocked Gram.

For moderate n (up to ~10⁵): the training points are held in memory (n × d), the Gram matrix
is a grid of tiles cached within a memory budget and recomputed where the budget ends
(:class:`~bigkernel.solvers.gram_operator.DistributedGram`), and CG with a randomized pivoted
Cholesky (or uniform Nyström) preconditioner solves every target and every α together
(:func:`~bigkernel.numerics.dual.solve_dual`). The estimator is a shell over
:class:`~bigkernel.solvers.exact.ExactSolver`; its bootstrap plan is
:class:`~bigkernel.solvers.exact_plan.ExactPlan`.
"""

from __future__ import annotations

import logging
import time
from numbers import Integral, Real
from typing import Any, ClassVar, Self

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import clone
from sklearn.utils.validation import check_is_fitted

from bigkernel.data.sources import Dataset
from bigkernel.devices import CPU, Device
from bigkernel.errors import DeviceError, ParameterError
from bigkernel.io.model_store import register_model
from bigkernel.kernels.registry import PRECOMPUTED, document_kernels, is_precomputed
from bigkernel.models._base import (
    ALPHA,
    COUNT,
    DEVICE,
    KERNEL_CONSTRAINTS,
    MEMORY_BUDGET,
    ArrayIn,
    DeviceLike,
    Floats,
    KernelLike,
    RandomStateLike,
    Weights,
    _EstimatorBase,
    single_target,
)
from bigkernel.models._dual import _DualPredictor
from bigkernel.models._posterior import set_evidence
from bigkernel.numerics.dual import describe_df
from bigkernel.numerics.gram_tiles import DTYPES, KernelExpansion
from bigkernel.numerics.precomputed import PrecomputedGram
from bigkernel.solvers.base import ReplicatePlan, Solution
from bigkernel.solvers.budget import resolve_memory_budget
from bigkernel.solvers.dual_state import ExactFacts
from bigkernel.solvers.exact import PRECONDITIONERS, ExactFixed, ExactSolver, build_kernel, gram_input
from bigkernel.solvers.exact_plan import PRECOMPUTED_BOOTSTRAP, ExactPlan
from bigkernel.solvers.replicates import check_n_features, class_name, derived_seed, fingerprint_params
from bigkernel.validation import Interval, Options, is_integer

logger = logging.getLogger(__name__)

__all__ = ["ExactKernelRidge", "build_kernel"]


@document_kernels("exact")
@register_model
class ExactKernelRidge(_DualPredictor, _EstimatorBase):
    """Exact kernel ridge regression, blocked and preconditioned, for n up to ~10⁵.

    Solves ``(K + αI) a = y`` (or its centred form with an intercept) by conjugate gradients:
    the Gram matrix ``K`` is never formed whole unless it fits ``memory_budget``; its tiles
    are cached while the budget lasts and recomputed on every matvec beyond it. Predictions
    ``k(X*, X) a + b`` are computed block by block (dask in → lazy dask out).

    Parameters
    ----------
    kernel : str, Kernel or dict, default="rbf"
        One of {kernels} (the kernel registry's exact path; ``"sigmoid"`` is not PSD: warns),
        or a :class:`~bigkernel.kernels.base.Kernel` (sums, products, scalings, ARD).
    alpha : float, list of float, "gcv" or "evidence", default=1.0
        Ridge penalty (scikit-learn's scaling). A list is scored by GCV: exact for
        n <= 2000 (eigenvalues), else with the Hutchinson estimate of df; ``"gcv"`` scores
        α = c·mean(diag K) for c in 1e-5 … 10 (7 values). All α share one CG run.
        ``"evidence"``: the same grid by the largest evidence (n <= 2000: the log-determinant
        comes from the eigenvalues; up to n = 10,000, when the dense n × n matrix and one factor
        fit half the memory budget, from one Cholesky factor of ``K + αI`` per α, O(n³) each:
        the fit takes ~3× a fixed-α fit at n = 3,000, ~9× at 6,000, ~14× at 10,000; larger n
        raises, naming the estimators that can).
    gamma : float, default=None
        Kernel bandwidth (scikit-learn's meaning); default 1/n_features.
    degree : int, default=3
        Polynomial degree.
    coef0 : float, default=1
        Polynomial and sigmoid offset.
    length_scale : float or array-like, default=None
        Alternative bandwidth (rbf, laplacian, matern); an array gives ARD scales.
    nu : {0.5, 1.5, 2.5}, default=1.5
        Matérn smoothness.
    kernel_params : dict, default=None
        Further kernel parameters (e.g. ``periodicity``, ``precision``).
    fit_intercept : bool, default=True
        Unpenalized intercept by centring the kernel (``HKH``, ``H`` never formed).
    tol : float, default=1e-6
        CG stops at this relative residual ``‖y − (K + αI)a‖ / ‖y‖``.
    max_iter : int, default=None
        CG iterations; default 10·n.
    preconditioner : {"rpcholesky", "nystroem"} or None, default="rpcholesky"
        Low-rank preconditioner: randomly pivoted Cholesky or uniform Nyström.
    rank : int, default=None
        Preconditioner rank; default ``min(n, max(100, ⌈7√n⌉))`` (see
        :func:`~bigkernel.solvers.budget.default_exact_rank`).
    memory_budget : int, str or None, default=None
        Bytes (or ``"4GB"``) for the Gram cache and the solver's working memory; default half
        the physical memory (with a distributed client: half of the smaller of that and the
        workers' total memory limit). Decides what is cached (see ``dtype``).
    dtype : {"auto", "float64", "float32"}, default="auto"
        Cached Gram tiles: ``"auto"`` stores float64 when the whole (upper) Gram matrix fits
        the budget, else float32 (predictions then differ from float64 by ~1e-5 relative).
        Tiles beyond the budget are recomputed in float64; products accumulate in float64.
    n_probes : int or None, default=None
        Degrees of freedom df(α): exact (eigenvalues of the centred Gram matrix) for
        n <= 2000, else a Hutchinson estimate whose probes ride along in the same CG run.
        ``None``: exact df for n <= 2000, none above (``df_`` is NaN) unless several α need
        it for GCV (then 8 probes); an int > 0: always, with that many probes above 2000 (each
        probe column makes the first CG iterations dearer: ~+40 % fit time for 8 probes at
        n = 20,000); 0: never, unless several α need it.
    standardize : bool, default=False
        Standardize each feature to mean 0, standard deviation 1 first (sparse X: scaled to
        standard deviation 1 without centring, so it stays sparse).
    random_state : int, RandomState instance or None, default=None
        Seeds the preconditioner's pivots and the probes.

    device : {"cpu", "cuda", "cuda:N", "auto"}, default="cpu"
        Where the fit computes: on a GPU, Gram tiles (``memory_budget`` is then GPU memory),
        preconditioner and CG vectors live there; ``"auto"``: a GPU when CuPy sees one
        (logged). An unusable GPU raises DeviceError at fit start; fitted arrays are host numpy
        arrays (``docs/guide/gpu.rst``).

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    dual_coef_ : ndarray of shape (n_samples,) or (n_samples, n_targets)
    intercept_ : float or ndarray of shape (n_targets,)
    X_fit_ : ndarray of shape (n_samples, n_features)
        Training points (prediction needs them; they are saved with the model).
    kernel_ : Kernel
    alpha_ : float
    alphas_ : ndarray of shape (n_alphas,)
    df_ : float
        Degrees of freedom at ``alpha_`` (intercept included); NaN when not computed.
    df_stderr_ : float
        Standard error of ``df_`` (0 when exact).
    df_path_, df_stderr_path_ : ndarray of shape (n_alphas,)
    gcv_ : ndarray of shape (n_alphas,) or (n_alphas, n_targets)
    n_iter_ : int or ndarray of shape (n_targets,)
        CG iterations at ``alpha_``.
    residual_ : float or ndarray of shape (n_targets,)
        True relative residual of the returned solution.
    solver_info_ : dict
        Preconditioner, Gram cache (tiles, dtype, bytes, fraction), matvecs and timings.
    sigma2_ : float or ndarray of shape (n_targets,)
        Maximum-evidence signal variance at ``alpha_`` (see :class:`RandomFeatureRidge`),
        ``ycᵀ(K̄ + αI)⁻¹yc / (n − 1)`` (``/ n`` without intercept) from the fit's dual solution:
        known at every n, so ``predict(X, return_std=True)`` works at every n.
    log_marginal_likelihood_ : float
        The profile evidence at ``alpha_``. It needs ``log|K + αI|``: computed for n <= 2000
        (eigenvalues, every α) and with ``alpha="evidence"`` (see ``alpha``); NaN otherwise —
        one Cholesky factor costs O(n³) (with the dense Gram matrix 0.9× the fixed-α fit's time
        at n = 3,000, 2.7× at 6,000, 3.8× at 10,000), too much to spend on every fit.
    log_marginal_likelihood_path_ : ndarray of shape (n_alphas,) or None
        The evidence along ``alphas_``; None when not computed.
    evidence_ : EvidencePath
        Quadratic forms and log-determinants along ``alphas_`` (log-determinants NaN where
        not computed).
    posterior_weights_ : ndarray of shape (n_samples,) or None
        The row weights of a weighted fit (the posterior's noise is ``σ²α/cᵢ``; saved).
    n_features_in_ : int
    n_samples_fit_ : int
    data_min_, data_max_ : ndarray of shape (n_features,) or None
        Per-feature minimum and maximum of the training rows (rows of weight > 0, before
        standardization); None for a model saved before they were recorded.
    """

    def __init__(
        self,
        kernel: KernelLike = "rbf",
        *,
        alpha: float | Floats | str = 1.0,
        gamma: float | None = None,
        degree: float = 3,
        coef0: float = 1,
        length_scale: float | ArrayLike | None = None,
        nu: float | None = 1.5,
        kernel_params: dict[str, Any] | None = None,
        fit_intercept: bool = True,
        tol: float = 1e-6,
        max_iter: int | None = None,
        preconditioner: str | None = "rpcholesky",
        rank: int | None = None,
        memory_budget: float | str | None = None,
        dtype: str = "auto",
        n_probes: int | None = None,
        standardize: bool = False,
        random_state: RandomStateLike = None,
        device: DeviceLike = "cpu",
        verbose: int = 0,
    ) -> None:
        self.kernel = kernel
        self.alpha = alpha
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.length_scale = length_scale
        self.nu = nu
        self.kernel_params = kernel_params
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.preconditioner = preconditioner
        self.rank = rank
        self.memory_budget = memory_budget
        self.dtype = dtype
        self.n_probes = n_probes
        self.standardize = standardize
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    # ----------------------------------------------------------------- parameters
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **KERNEL_CONSTRAINTS,
        "alpha": ALPHA,
        "fit_intercept": ["boolean"],
        "tol": [Interval(Real, 0, 1, closed="neither")],
        "max_iter": [COUNT, None],
        "preconditioner": [Options(str, tuple(p for p in PRECONDITIONERS if p)), None],
        "rank": [COUNT, None],
        "memory_budget": MEMORY_BUDGET,
        "dtype": [Options(str, DTYPES)],
        "n_probes": [Interval(Integral, 0, None, closed="left"), None],
        "standardize": ["boolean"],
        "random_state": ["random_state"],
        "device": DEVICE,
    }

    def _check_rules(self) -> None:
        self._check_memory_budget()
        self._check_precomputed()

    def _check_precomputed(self) -> None:
        """``kernel="precomputed"``: X is the Gram matrix, so nothing may transform it."""
        if is_precomputed(self.kernel) and self.standardize:
            raise ParameterError(
                "standardize=True scales the columns of X, but with kernel='precomputed' X is the Gram matrix "
                "K: standardize the data before computing K, and set standardize=False"
            )

    def _check_memory_budget(self) -> None:
        """A size given as text must parse (``"4GB"``)."""
        resolve_memory_budget(self.memory_budget)

    def fit(self, X: ArrayIn, y: ArrayIn, sample_weight: ArrayIn | None = None) -> Self:
        """Fit (see the class docstring); with ``kernel="precomputed"``, X is the Gram matrix
        ``K(X, X)`` of shape (n, n) — numpy, dask or zarr, never modified.

        Parameters
        ----------
        X : array-like, dask or zarr array of shape (n_samples, n_features) or (n, n)
        y : array-like or dask array of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like or dask array of shape (n_samples,), optional
            Row weights (see :meth:`bigkernel.models._base._EstimatorBase.fit`).

        Returns
        -------
        self
        """
        if is_precomputed(self.kernel):
            X = gram_input(X, "fit")
        return super().fit(X, y, sample_weight)

    def fit_dataset(self, ds: Dataset, weights: Weights | None = None) -> Self:
        """Fit from a validated :class:`~bigkernel.data.sources.Dataset` (for orchestrators).

        ``weights`` may be a row partition keeping one group (a holdout split's training rows)
        or ``weights(start, stop) -> (1, rows)`` (0/1 entries select rows; others weight them,
        as ``sample_weight``).
        """
        self._check_params()
        device = self._device
        if device.is_gpu and is_precomputed(self.kernel):
            raise DeviceError(
                f"kernel={PRECOMPUTED!r} with device={self.device!r}: a precomputed Gram matrix is "
                "read on the CPU in this version; use device='cpu' (or a kernel by name on the GPU)"
            )
        return self._fit_on(ds, weights, device)

    def _fit_on(self, ds: Dataset, weights: Weights | None, device: Device) -> Self:
        """Prepare and fit the :class:`~bigkernel.solvers.exact.ExactSolver` on ``device`` (any
        object with ``is_gpu``, ``xp``, ``activate`` and ``free_memory``: the namespace tests
        pass array-api-strict's), then set the fitted attributes."""
        t0 = time.perf_counter()
        solver = ExactSolver.from_params(self.get_params())
        fixed = solver.prepare(ds, weights, device=device)
        solution = solver.fit(fixed)
        self._set_fitted(fixed, solution, ds.y.ndim == 1, time.perf_counter() - t0)
        return self

    def _set_fitted(self, fixed: ExactFixed, solution: Solution, single: bool, seconds: float) -> None:
        """The fitted attributes of a :class:`Solution` of the exact solver."""
        details = solution.details
        sol = details.dual
        self.n_features_in_ = fixed.n_features  # K's columns, before rows of weight 0 went
        self._set_range(*fixed.data_range)
        if fixed.scaler is not None:
            self.scaler_mean_, self.scaler_scale_ = fixed.scaler
        # the posterior of a weighted fit needs the weights of its rows (saved with the model)
        self.posterior_weights_ = fixed.sample_weight
        self.kernel_ = fixed.kernel
        self.X_fit_ = details.tiler.X if fixed.kernel is not None else None  # precomputed: K is not kept
        self.n_samples_fit_ = details.tiler.n
        self.dual_coef_ = single_target(sol.coef, single)
        self.intercept_ = float(sol.intercept[0]) if single else sol.intercept
        self.alpha_, self.alphas_ = sol.alpha, sol.alphas
        best = int(np.flatnonzero(sol.alphas == sol.alpha)[0])
        self.df_path_, self.df_stderr_path_ = sol.df, sol.df_stderr
        self.df_, self.df_stderr_ = float(sol.df[best]), float(sol.df_stderr[best])
        set_evidence(self, sol.evidence, best, single)
        self.__dict__.pop("_posterior_cache", None)
        self.gcv_ = single_target(sol.gcv, single)
        self.n_iter_ = int(sol.n_iter[0]) if single else sol.n_iter
        self.residual_ = float(sol.residual[0]) if single else sol.residual
        self.solver_info_ = {
            **solution.diagnostics, "fit_seconds": round(seconds, 3), "device": str(fixed.device),
            "df_method": sol.df_method, "converged": sol.converged, "n_matvec": sol.n_matvec, **sol.info,
            "gram": details.gram_info,
        }  # fmt: skip
        source = (
            details.tiler if fixed.kernel is not None else PrecomputedGram.columns_only(fixed.n_features, fixed.keep)
        )
        self._expansion = KernelExpansion(source, sol.coef, sol.intercept)
        logger.info(
            "fitted ExactKernelRidge: n=%s alpha=%.3g %s, %d CG iterations, residual %.2g, %.2fs",
            f"{self.n_samples_fit_:,}", self.alpha_, describe_df(self.df_, self.df_stderr_), int(np.max(sol.n_iter)),
            float(np.max(sol.residual)), self.solver_info_["fit_seconds"],
        )  # fmt: skip

    # ----------------------------------------------------------------- bootstrap
    def replicate_plan(self, ds: Dataset, X_eval: np.ndarray, *, seed_entropy: int, workers: int = 1) -> ReplicatePlan:
        """The bootstrap's replicate plan (:class:`~bigkernel.solvers.exact_plan.ExactPlan`):
        one weighted dual solve per replicate task, with this model's fitted kernel and scaling
        when fitted, else those a fit would choose.

        Parameters
        ----------
        ds : Dataset
            The training data.
        X_eval : ndarray of shape (n_eval, n_features)
        seed_entropy : int
            The bootstrap seed (derives the preconditioner's seed when ``random_state`` is not an
            integer).
        workers : int, default=1
            Replicates running at once (they share the memory budget).

        Returns
        -------
        ReplicatePlan
        """
        if is_precomputed(self.kernel):
            raise ParameterError(PRECOMPUTED_BOOTSTRAP)
        fitted = hasattr(self, "dual_coef_")
        if fitted:
            check_n_features(self, ds.X.shape[1])
        work = clone(self)
        if not is_integer(work.random_state):
            # no integer seed: derive it from the bootstrap seed, so the run (and its resume) is
            # reproducible from the bootstrap seed alone
            work.set_params(random_state=derived_seed(seed_entropy))
        work._check_params()
        scaler = (self.scaler_mean_, self.scaler_scale_) if fitted and self.standardize else None
        return ExactPlan(
            ExactSolver.from_params(work.get_params()), ds, X_eval, device=work._fit_device(),
            kernel=self.kernel_ if fitted else None, scaler=scaler, workers=workers,
            fingerprint={"class": class_name(self), "params": fingerprint_params(self), "fitted": fitted},
        )  # fmt: skip

    # ----------------------------------------------------------------- persistence
    def get_model_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted state: JSON attributes and arrays (the model store's format v1, written by
        :meth:`ExactSolver.state <bigkernel.solvers.exact.ExactSolver.state>`)."""
        check_is_fitted(self, "dual_coef_")
        fixed = ExactFixed(
            **self._saved_parts(), Y=None, sample_weight=getattr(self, "posterior_weights_", None),
            n_features=self.n_features_in_, device=CPU, budget=0,
        )  # fmt: skip
        facts = ExactFacts(
            **self._dual_facts(), df_stderr=self.df_stderr_, df_stderr_path=self.df_stderr_path_,
            n_iter=self.n_iter_, residual=self.residual_,
        )  # fmt: skip
        solution = Solution(**self._saved_solution(), details=facts)
        return ExactSolver.from_params(self.get_params()).state(fixed, solution)

    def set_model_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        """Set the fitted state read back by the model store (inverse of :meth:`get_model_state`,
        read by :meth:`ExactSolver.from_state <bigkernel.solvers.exact.ExactSolver.from_state>`)."""
        fixed, solution = ExactSolver.from_params(self.get_params()).from_state(attrs, arrays)
        f: ExactFacts = solution.details
        self.posterior_weights_ = fixed.sample_weight
        self.kernel_, self.X_fit_ = fixed.kernel, fixed.X
        self.dual_coef_ = single_target(solution.coef, f.single)
        self.intercept_ = float(solution.intercept[0]) if f.single else solution.intercept
        self._set_saved(fixed, solution)
        self.df_stderr_, self.df_stderr_path_ = f.df_stderr, f.df_stderr_path
        self.n_iter_, self.residual_ = f.n_iter, f.residual
        self._expansion = KernelExpansion(f.tiler, solution.coef, solution.intercept)
        self.__dict__.pop("_posterior_cache", None)
