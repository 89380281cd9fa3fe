"""ExactKernelRidgeCV: (γ, α) of the exact kernel ridge by closed-form leave-one-out or GCV.

For each γ: one dense Gram matrix and one eigendecomposition of its centred form; the whole α
path — LOO residuals, GCV, df — then follows in closed form
(:mod:`bigkernel.numerics.loo`). The chosen point's dual solution comes from the same
eigendecomposition, so there is no refit.
"""

from __future__ import annotations

import logging
import time
from numbers import Integral
from typing import Any, ClassVar, Self

import numpy as np
from sklearn.utils.validation import check_is_fitted

from bigkernel.data.sources import Dataset
from bigkernel.diagnostics import log_fit
from bigkernel.errors import DataError, ParameterError
from bigkernel.io.model_store import register_model
from bigkernel.kernels.registry import (
    bandwidth_names,
    document_kernels,
    gamma_from_length_scale,
    is_precomputed,
    kernel_spec,
    kernels_searching,
)
from bigkernel.models._base import (
    COEF0,
    DEGREE,
    DEVICE,
    GRID,
    KERNEL,
    KERNEL_PARAMS,
    MEMORY_BUDGET,
    NU,
    ArrayIn,
    DeviceLike,
    Grid,
    KernelLike,
    RandomStateLike,
    Weights,
    _EstimatorBase,
    single_target,
)
from bigkernel.models._dual import _DualPredictor
from bigkernel.models._posterior import set_evidence
from bigkernel.models.exact import ExactKernelRidge
from bigkernel.numerics.gram_tiles import GramTiler, KernelExpansion
from bigkernel.numerics.namespace import eigh_on
from bigkernel.numerics.precomputed import PrecomputedGram
from bigkernel.solvers.base import ReplicatePlan, Solution
from bigkernel.solvers.budget import resolve_memory_budget
from bigkernel.solvers.dual_state import CVFacts
from bigkernel.solvers.exact import gram_input
from bigkernel.solvers.exact_cv import ExactCVFixed, ExactCVSolver, count_kept, exact_cv_bytes, kernel_gamma
from bigkernel.solvers.exact_plan import PRECOMPUTED_BOOTSTRAP
from bigkernel.solvers.search import best_index, cv_results, search_params
from bigkernel.validation import Interval, Options

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_N", "ExactKernelRidgeCV", "exact_cv_bytes"]

#: default largest n: one O(n³) eigendecomposition per γ. Measured per γ on the project's shared
#: 2-core AMD EPYC (scipy 1.17 ``eigh``, LAPACK dsyevr; see the class docstring): ~1 s at
#: n=2000, 6-41 s at 4000, 35-100 s at 6000, 50-115 s at 8000 (depending on the load), so the
#: default 7-γ search at 6000 takes ~4-12 minutes
DEFAULT_MAX_N = 6000
#: default γ grid when neither ``gammas`` nor ``length_scales`` is given: multiples of 1/d
DEFAULT_RELATIVE_GAMMAS = np.logspace(-2, 1, 7)
CRITERIA = ("loo", "gcv", "evidence")
_INSTEAD = (
    "use RandomFeatureRidgeCV (YAML: solver random_features with gamma: [..] or cv; one pass, any "
    "n), NystroemRidge, or ExactKernelRidge at a fixed gamma (alpha list scored by GCV); or raise max_n"
)


@document_kernels("exact", searched="gamma")
@register_model
class ExactKernelRidgeCV(_DualPredictor, _EstimatorBase):
    """Exact kernel ridge with (γ, α) chosen by closed-form leave-one-out or GCV.

    For each γ the ``n × n`` Gram matrix is formed and its centred form ``HKH`` (``K``
    without intercept) eigendecomposed once; LOO residuals ``(yᵢ − ŷᵢ)/(1 − h_ii)``, GCV and
    df(α) then follow for every α in closed form (:mod:`bigkernel.numerics.loo`). LOO here is
    exact — the same numbers as n refits on n − 1 points — and is the exact path's equivalent
    of K-fold CV (there are no sums to subtract folds from). The best point's dual solution comes
    from the same eigendecomposition (no refit); predictions equal :class:`ExactKernelRidge`'s at
    that (γ, α).

    Only for moderate n: memory ~3·8·n² bytes (the Gram matrix, the eigenvectors, room for
    kernel temporaries), one O(n³) eigendecomposition per γ. Measured per γ (fit seconds /
    peak RSS of the process) on the project's shared 2-core AMD EPYC, scipy 1.17 ``eigh``
    (LAPACK ``dsyevr``):

    ======  =========================================================  ========
    n       seconds per γ (BLAS threads, load average)                 peak RSS
    ======  =========================================================  ========
    2000    1.1-1.4 (one thread, load 1.4-2.7)                         0.33 GB
    4000    6.4 (two, load 1.4) to 41 (two, load 3.3); 10 (one, ~3)    0.54 GB
    6000    35 (one, load 3.5); 67-100 (two, load 3.5-4.7)             0.80 GB
    8000    50-115 (two, load 1.5-4.7)                                 1.27 GB
    ======  =========================================================  ========

    The eigendecomposition runs on the BLAS threads that other processes leave idle, measured
    just before it (:mod:`bigkernel.numerics.threads`): several BLAS threads are ~1.7× faster
    on an idle machine and several times slower (4× at n=4000 in the table, which was measured
    before this rule) when other processes hold the cores. Each γ logs a line at INFO before
    and after its eigendecomposition (with the time left).
    Above ``max_n`` (default 6000) fitting raises :class:`~bigkernel.errors.DataError`; use
    :class:`RandomFeatureRidgeCV` (one data pass, any n) or :class:`NystroemRidge` there, or
    raise ``max_n``.

    Parameters
    ----------
    kernel : str, Kernel or dict, default="rbf"
        As in :class:`ExactKernelRidge`: one of {kernels}, or a Kernel. γ is searched for
        {searched_kernels} (matern: ``ℓ = 1/√(2γ)``); other kernels,
        :class:`~bigkernel.kernels.base.Kernel` objects and kernels whose ``kernel_params``
        fix a bandwidth search α only.
    gammas : sequence of float, default=None
        Bandwidths to search (exclusive with ``length_scales``); default 7 values log-spaced
        from 0.01/n_features to 10/n_features (for kernels with a γ).
    length_scales : sequence of float, default=None
        Length scales to search (rbf, laplacian, matern), converted to γ as in
        :class:`RandomFeatureRidgeCV` (``γ = 1/(2ℓ²)``, laplacian ``γ = 1/ℓ``).
    alphas : sequence of float, default=None
        Penalties (scikit-learn's scaling); default 20 values log-spaced from 1e-7 to 100 times
        the mean eigenvalue of each γ's centred Gram matrix.
    criterion : {"loo", "gcv", "evidence"}, default="loo"
        Leave-one-out mean squared error, generalized cross-validation
        ``n·RSS/(n − df)²`` (the same GCV as :class:`ExactKernelRidge`'s ``gcv_``), or the
        largest evidence (profile log marginal likelihood over σ², summed over targets;
        :mod:`bigkernel.numerics.evidence`) — the log-determinant comes from the same
        eigendecomposition per γ, so every (γ, α) is scored at no extra cost.
    degree, coef0, nu, kernel_params
        As in :class:`ExactKernelRidge`.
    fit_intercept : bool, default=True
        Unpenalized intercept by centring the kernel (``HKH``).
    standardize : bool, default=False
        Standardize each feature to mean 0, standard deviation 1 first (sparse X: scaled to
        standard deviation 1 without centring, so it stays sparse).
    max_n : int or None, default=6000
        Refuse more training points than this (None: only the memory budget limits n).
    memory_budget : int, str or None, default=None
        Bytes (or ``"4GB"``); default half the physical memory. Fitting refuses n whose
        :func:`exact_cv_bytes` exceed it.
    random_state : int, RandomState instance or None, default=None
        Accepted for a uniform interface with the other estimators; the closed form draws no
        random numbers (results are deterministic).

    device : {"cpu", "cuda", "cuda:N", "auto"}, default="cpu"
        Where the fit computes: on a GPU, the eigendecomposition of each γ runs there
        (``"auto"``: a GPU when CuPy sees one, logged). An unusable GPU raises DeviceError
        at fit start; fitted arrays are host numpy arrays (``docs/guide/gpu.rst``).

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    cv_results_ : dict of ndarray
        Like scikit-learn's: ``params``, ``param_gamma`` (NaN when γ is not searched),
        ``param_alpha``, ``mean_test_score`` (negative LOO MSE, or negative GCV, averaged over
        targets, or the log evidence summed over targets; ``-inf`` where the point is below its
        rounding floor), ``std_test_score`` (LOO: the standard deviation over the n left-out
        points, as a ``LeaveOneOut`` grid search reports; else NaN), ``rank_test_score``,
        ``mean_test_loo`` and ``mean_test_gcv`` (both criteria, positive),
        ``mean_test_evidence`` (profile log evidence), ``df`` (degrees of freedom at that point).
    best_params_ : dict
    best_score_ : float
    best_index_ : int
    gamma_ : float or None
        Chosen bandwidth (None when γ is not searched and the kernel has none).
    alpha_ : float
    alphas_ : ndarray of shape (n_alphas,)
        The α grid of the chosen γ.
    df_ : float
        Degrees of freedom at the chosen point (intercept included).
    df_path_ : ndarray of shape (n_alphas,)
    gcv_, loo_mse_ : ndarray of shape (n_alphas,) or (n_alphas, n_targets)
        GCV and LOO MSE along ``alphas_`` at the chosen γ (inf where not reliable).
    sigma2_ : float or ndarray of shape (n_targets,)
        Signal variance σ² at the chosen point (maximum evidence; see
        :class:`ExactKernelRidge`), used by ``predict(X, return_std=True)``.
    log_marginal_likelihood_ : float
        Profile log evidence at the chosen point (summed over targets).
    log_marginal_likelihood_path_ : ndarray of shape (n_alphas,)
        The same along ``alphas_`` at the chosen γ.
    dual_coef_ : ndarray of shape (n_samples,) or (n_samples, n_targets)
    intercept_ : float or ndarray of shape (n_targets,)
    X_fit_ : ndarray of shape (n_samples, n_features)
    kernel_ : Kernel
    solver_info_ : dict
        Criterion, seconds per γ (Gram matrix, eigendecomposition, scoring), fit seconds, memory.
    n_features_in_ : int
    n_samples_fit_ : int
    data_min_, data_max_ : ndarray of shape (n_features,) or None
        Per-feature range of the training rows (None for a model saved before it was recorded).
    """

    def __init__(
        self,
        kernel: KernelLike = "rbf",
        *,
        gammas: Grid = None,
        length_scales: Grid = None,
        alphas: Grid = None,
        criterion: str = "loo",
        degree: float = 3,
        coef0: float = 1,
        nu: float | None = 1.5,
        kernel_params: dict[str, Any] | None = None,
        fit_intercept: bool = True,
        standardize: bool = False,
        max_n: int | None = DEFAULT_MAX_N,
        memory_budget: float | str | None = None,
        random_state: RandomStateLike = None,
        device: DeviceLike = "cpu",
        verbose: int = 0,
    ) -> None:
        self.kernel = kernel
        self.gammas = gammas
        self.length_scales = length_scales
        self.alphas = alphas
        self.criterion = criterion
        self.degree = degree
        self.coef0 = coef0
        self.nu = nu
        self.kernel_params = kernel_params
        self.fit_intercept = fit_intercept
        self.standardize = standardize
        self.max_n = max_n
        self.memory_budget = memory_budget
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    # ----------------------------------------------------------------- parameters
    _parameter_constraints: ClassVar[dict[str, list]] = {
        "kernel": KERNEL,  # names are checked when the kernel is built (make_kernel)
        "gammas": GRID,
        "length_scales": GRID,
        "alphas": GRID,
        "criterion": [Options(str, CRITERIA)],
        "degree": DEGREE,
        "coef0": COEF0,
        "nu": NU,
        "kernel_params": KERNEL_PARAMS,
        "fit_intercept": ["boolean"],
        "standardize": ["boolean"],
        "max_n": [Interval(Integral, 2, None, closed="left"), None],
        "memory_budget": MEMORY_BUDGET,
        "random_state": ["random_state"],
        "device": DEVICE,
    }

    def _kernel_name(self) -> str | None:
        """The registry name of a kernel given by name (aliases resolved), else None."""
        if not isinstance(self.kernel, str) or is_precomputed(self.kernel):
            return None
        return kernel_spec(self.kernel).name

    def _searchable(self, bandwidth: str) -> bool:
        """Whether the kernel's ``bandwidth`` (gamma, length_scale) can be searched here."""
        name = self._kernel_name()
        return name is not None and bandwidth in kernel_spec(name).searchable("exact") and not self._fixed_bandwidth()

    def _fixed_bandwidth(self) -> bool:
        return bool(set(self.kernel_params or {}) & set(bandwidth_names()))

    def _check_rules(self) -> None:
        self._check_search()
        resolve_memory_budget(self.memory_budget)  # a size given as text must parse
        if is_precomputed(self.kernel) and self.standardize:
            raise ParameterError("standardize=True does not apply to kernel='precomputed' (X is the Gram matrix K)")

    def _check_search(self) -> None:
        """A bandwidth to search, given one way, for a kernel that has it."""
        if self.gammas is not None and self.length_scales is not None:
            raise ParameterError("give gammas or length_scales, not both")
        if self.gammas is not None and not self._searchable("gamma"):
            fixed = " with a bandwidth in kernel_params" if self._fixed_bandwidth() else ""
            raise ParameterError(
                f"gammas: kernel {self.kernel!r}{fixed} has no gamma to search; gammas exist for kernels "
                f"{', '.join(kernels_searching('exact', 'gamma'))} (given by name)"
            )
        if self.length_scales is not None and not self._searchable("length_scale"):
            raise ParameterError(
                f"length_scales: kernel {self.kernel!r} has no length scale to search here; length_scales "
                f"exist for kernels {', '.join(kernels_searching('exact', 'length_scale'))} (given by name)"
            )

    def _bandwidths(self, n_features: int) -> list[float | None]:
        """The γ grid (``[None]``: the kernel's own bandwidth, γ not searched)."""
        if self.length_scales is not None:
            return [gamma_from_length_scale(self._kernel_name(), float(v)) for v in np.atleast_1d(self.length_scales)]
        if self.gammas is not None:
            return [float(v) for v in np.atleast_1d(self.gammas)]
        if self._searchable("gamma"):
            return [float(g) / n_features for g in DEFAULT_RELATIVE_GAMMAS]
        return [None]

    def _device_eigh(self):
        """The search's eigendecomposition on the fit's GPU (None: LAPACK on the host). The
        Gram matrix is built on the host (O(n²), n <= max_n) and copied in; the eigenpairs
        come back to the host for the closed-form scores."""
        device = getattr(self, "_device", None)
        if device is None or not device.is_gpu:
            return None
        on_device = eigh_on(device.xp)

        def eigh(M):
            with device.activate():
                return on_device(M)

        return eigh

    def _check_size(self, n: int, d: int, budget: int) -> None:
        if self.max_n is not None and n > self.max_n:
            raise DataError(
                f"n_samples={n:,} exceeds max_n={self.max_n:,} of ExactKernelRidgeCV: the closed form "
                f"needs one dense eigendecomposition per gamma (O(n³) time, ~{_gb(exact_cv_bytes(n, d))} "
                f"memory); {_INSTEAD}"
            )
        need = exact_cv_bytes(n, d)
        if need > budget:
            raise DataError(
                f"ExactKernelRidgeCV at n_samples={n:,} needs ~{_gb(need)} (3 dense n × n float64 "
                f"arrays), more than memory_budget={_gb(budget)}; {_INSTEAD}, or give a larger memory_budget"
            )

    # ----------------------------------------------------------------- fit
    def fit(self, X: ArrayIn, y: ArrayIn) -> Self:
        """Search (γ, α) and fit at the best point, from numpy or dask arrays (loaded to memory).

        No ``sample_weight``: leave-one-out leaves out whole rows, so a weight (a repeated
        row) has no single meaning here; fit :class:`ExactKernelRidge` with ``sample_weight`` at
        the chosen ``gamma_`` and ``alpha_`` instead.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        y : array-like or dask array of shape (n_samples,) or (n_samples, n_targets)

        Returns
        -------
        self
        """
        self._check_params()
        if is_precomputed(self.kernel):
            X = gram_input(X, "fit")  # the square Gram matrix K (numpy, dask or zarr)
        self.fit_dataset(self._fit_input(X, y))
        log_fit(self)  # α/γ on a grid edge, feature scales far apart, logged
        return self

    def fit_dataset(self, ds: Dataset, weights: Weights | None = None) -> Self:
        """Fit from a validated :class:`~bigkernel.data.sources.Dataset` (for orchestrators).

        ``weights`` may be a row partition keeping one group (a holdout split's training rows)
        or ``weights(start, stop) -> (1, rows)`` with 0/1 entries.
        """
        self._check_params()
        t0 = time.perf_counter()
        budget = resolve_memory_budget(self.memory_budget)
        rows, d = ds.X.shape
        if self.max_n is not None and rows > self.max_n:  # refuse before loading anything
            n_kept = rows if weights is None else count_kept(weights, rows)
            self._check_size(n_kept, d, budget)
        solver = ExactCVSolver.from_params(self.get_params())
        fixed = solver.prepare(ds, weights)
        n = fixed.X.shape[0]
        if n < 2:
            raise DataError(f"leave-one-out and GCV need at least 2 samples, found n_samples={n}")
        self._check_size(n, d, budget)
        self.n_features_in_ = fixed.n_features
        self._set_range(*fixed.data_range)
        if fixed.scaler is not None:
            self.scaler_mean_, self.scaler_scale_ = fixed.scaler
        self._precomputed_keep = fixed.keep
        self._search(solver, fixed, single=ds.y.ndim == 1, t0=t0, budget=budget)
        return self

    def _search(self, solver: ExactCVSolver, fixed: ExactCVFixed, *, single: bool, t0: float, budget: int) -> None:
        """Score every (γ, α) with the :class:`~bigkernel.solvers.exact_cv.ExactCVSolver`, keep
        the best point's coefficients, set the fitted attributes."""
        n, d = fixed.X.shape
        gammas = self._bandwidths(d)
        result = solver.fit(fixed, gammas=gammas, eigh=self._device_eigh(), t0=t0).details
        table, timings, best = result.table, result.timings, result.best
        self._set_results(table, searched=gammas != [None])
        self.gamma_ = best["gamma"] if best["gamma"] is not None else kernel_gamma(best["kernel"])
        self.alpha_, self.alphas_ = best["alpha"], best["alphas"]
        ai = int(np.flatnonzero(best["alphas"] == best["alpha"])[0])
        self.df_path_, self.df_ = best["df"], float(best["df"][ai])
        self.gcv_ = single_target(best["gcv"], single)
        self.loo_mse_ = single_target(best["loo"], single)
        set_evidence(self, best["evidence"], ai, single)
        self._set_model(best["tiler"], best["coef"], best["intercept"], single)
        self.solver_info_ = {
            "method": "closed-form eigendecomposition", "criterion": self.criterion, "n_gammas": len(gammas),
            "per_gamma": timings, "memory_bytes": exact_cv_bytes(n, d), "memory_budget": budget,
            "fit_seconds": round(time.perf_counter() - t0, 3),
        }  # fmt: skip
        logger.info(
            "ExactKernelRidgeCV over %d (γ, α) points at n=%s: best %s (%s %.4g), %.2fs",
            len(self.cv_results_["params"]),
            f"{n:,}",
            self.best_params_,
            self.criterion.upper(),
            -self.best_score_,
            self.solver_info_["fit_seconds"],
        )

    def _set_results(self, table: dict[str, list], *, searched: bool) -> None:
        loo, gcv, lml = np.asarray(table["loo"]), np.asarray(table["gcv"]), np.asarray(table["evidence"])
        mean = {"loo": -loo, "gcv": -gcv, "evidence": lml}[self.criterion]
        self.cv_results_ = cv_results(
            table["gamma"],
            table["alpha"],
            mean,
            table["loo_std"],
            with_gamma=searched,
            extra={
                "mean_test_loo": loo,
                "mean_test_gcv": gcv,
                "mean_test_evidence": lml,
                "df": np.asarray(table["df"]),
            },
        )
        best = best_index(self.cv_results_, self.criterion.upper())
        params = self.cv_results_["params"]
        self.best_index_ = best
        self.best_params_ = params[best]
        self.best_score_ = float(mean[best])

    def _set_model(self, tiler: GramTiler, coef: np.ndarray, intercept: np.ndarray, single: bool) -> None:
        if isinstance(tiler, PrecomputedGram) and tiler.K is not None:  # predictions take K(X*, X_fit)
            tiler = PrecomputedGram.columns_only(self.n_features_in_, getattr(self, "_precomputed_keep", None))
        self.kernel_ = tiler.kernel
        self.X_fit_ = tiler.X
        self.n_samples_fit_ = tiler.n
        self.dual_coef_ = single_target(coef, single)
        self.intercept_ = float(intercept[0]) if single else intercept
        self._expansion = KernelExpansion(tiler, coef, intercept)

    # ----------------------------------------------------------------- bootstrap
    def replicate_plan(self, ds: Dataset, X_eval: np.ndarray, *, seed_entropy: int, workers: int = 1) -> ReplicatePlan:
        """The bootstrap's replicate plan: that of an :class:`ExactKernelRidge` at the chosen
        kernel and α (:meth:`at_choice`); the search is not repeated per replicate.

        Parameters
        ----------
        ds : Dataset
        X_eval : ndarray of shape (n_eval, n_features)
        seed_entropy : int
        workers : int, default=1
            See :meth:`ExactKernelRidge.replicate_plan`.

        Returns
        -------
        ReplicatePlan
        """
        if is_precomputed(self.kernel):
            raise ParameterError(PRECOMPUTED_BOOTSTRAP)
        return self.at_choice().replicate_plan(ds, X_eval, seed_entropy=seed_entropy, workers=workers)

    def at_choice(self) -> ExactKernelRidge:
        """This fitted model as an :class:`ExactKernelRidge` at its chosen (γ, α): its fitted
        kernel and scaling, which the exact replicate plan reuses."""
        if not hasattr(self, "dual_coef_"):
            raise ParameterError(
                "bootstrap() needs a fitted ExactKernelRidgeCV (its replicates use the chosen kernel_ "
                "and alpha_; the search is not repeated per replicate): call fit first, or bootstrap "
                "an ExactKernelRidge with the gamma and alpha you want."
            )
        est = ExactKernelRidge(
            self.kernel_, alpha=float(self.alpha_), fit_intercept=self.fit_intercept, memory_budget=self.memory_budget,
            standardize=self.standardize, random_state=self.random_state,
        )  # fmt: skip
        est.kernel_, est.n_features_in_, est.dual_coef_ = self.kernel_, self.n_features_in_, self.dual_coef_
        if self.standardize:
            est.scaler_mean_, est.scaler_scale_ = self.scaler_mean_, self.scaler_scale_
        return est

    # ----------------------------------------------------------------- persistence
    def get_model_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted state: JSON attributes and arrays (the model store's format v1, written by
        :meth:`ExactCVSolver.state <bigkernel.solvers.exact_cv.ExactCVSolver.state>`)."""
        check_is_fitted(self, "dual_coef_")
        parts = self._saved_parts()
        fixed = ExactCVFixed(parts["X"], None, parts["keep"], parts["scaler"], parts["data_range"], self.n_features_in_)
        facts = CVFacts(
            **self._dual_facts(), gamma=self.gamma_, loo_mse=self.loo_mse_, cv_results=self.cv_results_,
            best_params=self.best_params_, best_score=self.best_score_, best_index=self.best_index_,
            gamma_searched="gamma" in self.best_params_,
        )  # fmt: skip
        solution = Solution(**self._saved_solution(), details=facts)
        return ExactCVSolver.from_params(self.get_params()).state(fixed, solution)

    def set_model_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        """Set the fitted state read back by the model store (inverse of :meth:`get_model_state`,
        read by :meth:`ExactCVSolver.from_state <bigkernel.solvers.exact_cv.ExactCVSolver.from_state>`)."""
        fixed, solution = ExactCVSolver.from_params(self.get_params()).from_state(attrs, arrays)
        f: CVFacts = solution.details
        self.n_features_in_ = f.n_features_in
        self._set_model(f.tiler, solution.coef, solution.intercept, f.single)
        self._set_saved(fixed, solution)
        self.gamma_, self.loo_mse_ = f.gamma, f.loo_mse
        results = dict(f.cv_results)
        results["params"] = search_params(results["param_gamma"], results["param_alpha"], f.gamma_searched)
        self.cv_results_ = results
        self.best_index_, self.best_params_, self.best_score_ = f.best_index, f.best_params, f.best_score


def _gb(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MiB"
