"""RandomFeatureRidge: kernel ridge regression in the primal on random features, streamed."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar, Self

import numpy as np
from dask.delayed import Delayed
from numpy.typing import ArrayLike, DTypeLike
from sklearn.base import clone
from sklearn.utils.validation import check_is_fitted

from bigkernel.data.sources import Dataset
from bigkernel.io.model_store import register_model
from bigkernel.kernels.registry import check_kernel_name, document_kernels
from bigkernel.models._base import (
    ALPHA,
    COEF0,
    COUNT,
    DEGREE,
    DEVICE,
    GAMMA,
    LENGTH_SCALE,
    NU,
    ArrayIn,
    DeviceLike,
    Floats,
    RandomStateLike,
    Weights,
    _EstimatorBase,
    single_target,
)
from bigkernel.models._posterior import Prediction, evidence_state, predict_output, read_evidence_state, set_evidence
from bigkernel.models._streamed import FeaturesOutMixin, PartialFitMixin, fitted_dtype
from bigkernel.numerics.fourier_features import FORMS, SAMPLERS, FeatureMap
from bigkernel.numerics.nystroem_features import NystroemMap
from bigkernel.numerics.primal import PrimalExpansion
from bigkernel.solvers.base import Solution
from bigkernel.solvers.feature_plan import FeaturePlan, feature_fingerprint
from bigkernel.solvers.primal import (
    FEATURE_BLOCK_BYTES,
    OnePassPrimal,
    PrimalFit,
    PrimalFixed,
    feature_block_rows,
    fit_scaler,
    stats_from_state,
    stats_state,
)
from bigkernel.solvers.random_features import RandomFeatureSolver, feature_map_arrays, feature_map_from_state
from bigkernel.solvers.replicates import check_n_features, derived_seed
from bigkernel.validation import DTypes, Options, int_seed, is_integer

logger = logging.getLogger(__name__)

__all__ = [
    "AUTO_FEATURE_DTYPE",
    "FEATURE_BLOCK_BYTES",
    "FEATURE_DTYPE",
    "RandomFeatureRidge",
    "feature_block_rows",
    "feature_map_arrays",
    "feature_map_from_state",
]

#: feature dtypes: by name, or as a numpy dtype
FEATURE_DTYPE = [Options(str, ("float32", "float64")), DTypes(("float32", "float64"))]

#: the same, or ``"auto"``: float32 Fourier features, checked after the pass and redone in
#: float64 when float32 could move the model (:mod:`bigkernel.numerics.precision`)
AUTO_FEATURE_DTYPE = [Options(str, ("auto", "float32", "float64")), DTypes(("float32", "float64"))]


class _RandomFeatureBase(FeaturesOutMixin, _EstimatorBase):
    """Shared shell of the one-pass primal estimators (random features, its CV variant,
    Nyström): checks, the solver, fitted attributes, predict, saved state, the bootstrap's
    replicate plan, and ``transform`` (the features of the fitted map).

    The fitting path itself is the solver's (:mod:`bigkernel.solvers.primal` and the modules
    of each map); subclasses name it in :meth:`make_solver`.
    """

    #: whether a fit keeps its sufficient statistics as ``stats_`` (the estimators with
    #: ``partial_fit``; their ``PartialFitMixin`` sets it)
    _keeps_stats: ClassVar[bool] = False

    #: the table entries of both random-feature estimators
    _common_constraints: ClassVar[dict[str, list]] = {
        "kernel": [str],  # a name the registry knows for this path: _check_rules
        "nu": NU,
        "degree": DEGREE,
        "coef0": COEF0,
        "n_components": [COUNT],
        "sampler": [Options(str, SAMPLERS)],
        "form": [Options(str, FORMS)],
        "fit_intercept": ["boolean"],
        "random_state": ["random_state"],
        "dtype": FEATURE_DTYPE,
        "chunk_rows": [COUNT, None],
        "standardize": ["boolean"],
        "device": DEVICE,
    }

    def _check_rules(self) -> None:
        self._check_kernel()

    def _check_kernel(self) -> None:
        """A kernel the random-feature path serves, with a smoothness its sampler has."""
        spec = check_kernel_name(self.kernel, "random_features")
        if "nu" in spec.param_names():
            spec.check_choice("nu", self.nu)

    def make_solver(self) -> OnePassPrimal:
        """The solver of this estimator's parameters, on its resolved device (set by ``fit``)."""
        return RandomFeatureSolver.from_params(
            self.get_params(deep=False), device=getattr(self, "_device", None), owner=type(self).__name__
        )

    def _seed(self) -> int:
        """The feature-map seed: ``random_state`` if an int, else drawn from it."""
        return int_seed(self.random_state)

    def _feature_map(self, n_features: int, seed: int, gamma=None, length_scale=None) -> FeatureMap:
        """The map for a bandwidth, scaled by the scaling :meth:`_fit_scaler` estimated."""
        solver = self.make_solver()
        return solver.feature_map(n_features, seed, gamma, length_scale, getattr(self, "_scaler", None))

    def _fit_scaler(self, ds: Dataset, weights=None) -> None:
        """With ``standardize=True``, the column means and standard deviations of X
        (:func:`bigkernel.solvers.primal.fit_scaler`), kept for the map."""
        self._set_scaler(fit_scaler(ds, weights) if getattr(self, "standardize", False) else None)

    def _set_scaler(self, scaler: tuple[np.ndarray, np.ndarray] | None) -> None:
        self._scaler = scaler
        if scaler is not None:
            self.scaler_mean_, self.scaler_scale_ = scaler

    def _set_solution(self, fixed: PrimalFixed, solution: Solution) -> Self:
        """Fitted attributes from a one-pass solver's :class:`Solution` (details: PrimalFit)."""
        fit: PrimalFit = solution.details
        single, fmap = fit.single, fixed.fmap
        self.feature_map_ = fmap
        self.coef_ = solution.coef[:, 0].copy() if single else solution.coef.T.copy()
        self.intercept_ = float(solution.intercept[0]) if single else solution.intercept.copy()
        self.alpha_ = solution.alpha
        self.alphas_ = solution.alphas
        self.df_path_ = fit.df_path
        best = int(np.argmin(np.abs(solution.alphas - solution.alpha)))
        self.df_ = fit.df
        set_evidence(self, fit.primal.evidence, best, single)
        self.posterior_ = fit.posterior
        self.gcv_ = single_target(fit.gcv, single)
        self.spectrum_ = fit.spectrum
        self.n_samples_fit_ = fit.n_samples
        self.n_features_in_ = fit.n_features_in
        self.dtype_, self.dtype_check_ = fit.dtype, fit.dtype_check
        stats = fit.stats
        if self._keeps_stats:
            self.stats_ = stats  # what partial_fit adds new rows to
        # the range came with the pass (rows of weight > 0 only: training rows of a split)
        self._set_range(*((None, None) if stats.x_min is None else (stats.x_min[0], stats.x_max[0])))
        logger.info(
            "fitted %s: n=%s D=%d alpha=%.3g df=%.1f",
            type(self).__name__,
            f"{self.n_samples_fit_:,}",
            fmap.n_components,
            self.alpha_,
            self.df_,
        )
        return self

    def stats_graph(
        self,
        ds: Dataset,
        fmap: FeatureMap | NystroemMap | Sequence[FeatureMap],
        weights: Weights | Delayed | None = None,
    ) -> Delayed:
        """The delayed one-pass statistics of ``ds`` under ``fmap`` (a map, or a list of maps
        sharing the pass), optionally weighted or partitioned (for orchestrators)."""
        solver = self.make_solver()
        dtype = solver.pass_dtype(fmap[0] if isinstance(fmap, (list, tuple)) else fmap)
        # no check follows these sums (orchestrators solve them): "auto" is float64 here
        dtype = "float64" if self.dtype == "auto" else dtype
        return solver.statistics_graph(fmap, ds, weights, dtype)

    # ----------------------------------------------------------------- bootstrap
    def replicate_plan(self, ds: Dataset, X_eval: np.ndarray, *, seed_entropy: int, workers: int = 1) -> FeaturePlan:
        """The bootstrap's replicate plan (:class:`~bigkernel.solvers.feature_plan.FeaturePlan`).

        Fitted: the fitted map (and scaling) held fixed, ``alpha`` as the parameter says.
        Unfitted: the map (and scaling) a fit on ``ds`` would draw, from ``random_state`` or,
        when it is not an integer, from a seed derived from ``seed_entropy``. Under
        ``dtype="auto"`` the replicates' features are float64 (no check covers their solves).

        Parameters
        ----------
        ds : Dataset
        X_eval : ndarray of shape (n_eval, n_features)
        seed_entropy : int
            The bootstrap seed.
        workers : int, default=1
            Replicates running at once (the one-pass plans do not depend on it).

        Returns
        -------
        FeaturePlan
        """
        if hasattr(self, "coef_"):
            check_n_features(self, ds.X.shape[1])
            solver = self.make_solver()
            return FeaturePlan(solver, self.feature_map_, self.alpha, X_eval,
                               feature_fingerprint(self, solver, fitted=True), self._replicate_dtype())  # fmt: skip
        est = self._with_seed(seed_entropy)
        solver = est.make_solver()
        fixed = solver.prepare(ds)  # the map (landmarks) and the scaling from all rows, once
        return FeaturePlan(solver, fixed.fmap, est.alpha, X_eval, feature_fingerprint(est, solver, fitted=False))

    def _replicate_dtype(self) -> str:
        """The feature dtype of a fitted model's bootstrap replicates: the fit's, except that
        ``dtype="auto"`` replicates run in float64, as those of an unfitted estimator do — no
        check covers a replicate's own solve (its α choice among αs that float32 does not
        resolve, or a resample that needs float64), and a fitted and an unfitted estimator give
        the same replicates."""
        return "float64" if isinstance(self.dtype, str) and self.dtype == "auto" else fitted_dtype(self)

    def _with_seed(self, seed_entropy: int) -> Self:
        """An unfitted clone with an integer ``random_state`` (derived when it is not one)."""
        est = clone(self)
        if not is_integer(est.random_state):
            # no integer seed: derive it from the bootstrap seed, so the run (and its resume) is
            # reproducible from the bootstrap seed alone
            est.set_params(random_state=derived_seed(seed_entropy))
        est._check_params()
        return est

    # ----------------------------------------------------------------- predict
    def _coef_2d(self) -> tuple[np.ndarray, np.ndarray]:
        coef = self.coef_[:, np.newaxis] if self.coef_.ndim == 1 else self.coef_.T
        return coef, np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))

    def predict(self, X: ArrayIn, return_std: bool = False, return_cov: bool = False) -> Prediction:
        """Predict; numpy in gives numpy out, dask in gives a lazy dask array out.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the posterior standard deviation of the latent f(x) (the Gaussian-process
            reading: prior ``GP(0, σ²k)``, noise ``σ²α``; ``σ² = sigma2_``), from the fit's
            eigendecomposition — no pass over the training data (see
            :mod:`bigkernel.numerics.posterior` for the formula, the intercept's share and the
            truncation bound). Dask in → a lazy dask ``(mean, std)``.
        return_cov : bool, default=False
            Also return the posterior covariance of f at the points (at most
            :data:`~bigkernel.numerics.posterior.COV_MAX_ROWS` of them).

        Returns
        -------
        y_mean : ndarray or dask array of shape (n_samples,) or (n_samples, n_targets)
        y_std : ndarray or dask array of the same shape, only with ``return_std``
        y_cov : ndarray of shape (n_samples, n_samples) or (n_samples, n_samples, n_targets),
            only with ``return_cov``
        """
        check_is_fitted(self, "coef_")
        coef, intercept = self._coef_2d()
        dtype = fitted_dtype(self)  # what the fit used (dtype="auto": float32 or float64)
        fmap, rows = self.feature_map_, feature_block_rows(self.feature_map_.n_components, dtype)
        model = PrimalExpansion(fmap, coef, intercept, dtype=dtype, block_rows=rows)
        return predict_output(
            self, X, mean_model=model, single=self.coef_.ndim == 1, return_std=return_std,
            return_cov=return_cov, posterior=lambda: getattr(self, "posterior_", None), coef=coef,
            intercept=intercept,
        )  # fmt: skip

    # ----------------------------------------------------------------- persistence
    def get_model_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted state as JSON attributes and numeric arrays (format v1; the solver's
        layout, plus the evidence, the training range and ``stats_``).

        Returns
        -------
        attrs : dict
        arrays : dict of ndarray
        """
        check_is_fitted(self, "coef_")
        coef, intercept = self._coef_2d()
        fit = PrimalFit(
            primal=None, stats=None, single=self.coef_.ndim == 1, df=self.df_, df_path=self.df_path_,
            gcv=self.gcv_, spectrum=getattr(self, "spectrum_", None), posterior=getattr(self, "posterior_", None),
            n_samples=self.n_samples_fit_, n_features_in=self.n_features_in_, dtype=fitted_dtype(self),
            dtype_check=getattr(self, "dtype_check_", None),
        )  # fmt: skip
        solution = Solution(coef, intercept, self.alpha_, self.alphas_, {}, fit)
        attrs, arrays = self.make_solver().state(PrimalFixed(self.feature_map_), solution)
        arrays.update(self._range_arrays())
        ev_attrs, ev_arrays = evidence_state(self)
        attrs.update(ev_attrs)
        arrays.update(ev_arrays)
        if self._keeps_stats:
            arrays.update(stats_state(getattr(self, "stats_", None)))
        return attrs, arrays

    def set_model_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        """Set the fitted state read back from a store (``DataError``/``KeyError`` when damaged).

        Parameters
        ----------
        attrs : dict
        arrays : dict of ndarray
        """
        fixed, solution = self.make_solver().from_state(attrs, arrays)
        fit: PrimalFit = solution.details
        single = fit.single
        coef = solution.coef.T  # the saved (n_targets, D) array itself
        self.feature_map_ = fixed.fmap
        self.coef_ = coef[0] if single else coef
        self.intercept_ = float(solution.intercept[0]) if single else solution.intercept
        self.alpha_, self.df_ = solution.alpha, fit.df
        self.alphas_, self.df_path_, self.gcv_ = solution.alphas, fit.df_path, fit.gcv
        self.n_samples_fit_, self.n_features_in_ = fit.n_samples, fit.n_features_in
        self.spectrum_ = fit.spectrum
        self.dtype_, self.dtype_check_ = fit.dtype, fit.dtype_check
        read_evidence_state(self, attrs, arrays, single=single)
        self.posterior_ = fit.posterior
        self._read_range(arrays)
        if self._keeps_stats:
            self.stats_ = stats_from_state(arrays, fixed.fmap.n_components, self.data_min_, self.data_max_)

    # transitional: io/model_store.py and the classifiers call these until they are changed


@document_kernels("random_features")
@register_model
class RandomFeatureRidge(PartialFitMixin, _RandomFeatureBase):
    """Kernel ridge regression with random Fourier features, fitted in one streamed pass.

    The data are read once, chunk by chunk; each chunk contributes its feature statistics
    ΦᵀΦ, Φᵀy, Σφ, Σy, Σy² (float64) to a tree reduction, and a D×D eigendecomposition gives the
    coefficients, degrees of freedom and GCV for every α. Memory is O(D²), not O(n).

    Parameters
    ----------
    kernel : str, default="rbf"
        Kernel approximated by the features: one of {kernels} (the kernel registry's
        random-feature path; ``"poly"`` is ``"polynomial"``); ``"fourier"`` is the fixed 1-D
        Fourier basis.
    gamma : float, default=None
        Bandwidth: rbf exp(-γ‖x-x'‖²), laplacian exp(-γ‖x-x'‖₁), matern ℓ = 1/√(2γ),
        polynomial (γ xᵀx' + coef0)^degree.
        Default 1/n_features when ``length_scale`` is not given either.
    length_scale : float or array-like of shape (n_features,), default=None
        Alternative to ``gamma`` (rbf: γ = 1/(2ℓ²)); an array gives per-feature scales (ARD).
    nu : {0.5, 1.5, 2.5}, default=1.5
        Matérn smoothness.
    degree : int, default=3
        Polynomial degree k of ``(γ xᵀx' + coef0)^k`` (scikit-learn's names and defaults).
    coef0 : float, default=1
        Polynomial offset (>= 0 on this path).
    n_components : int, default=100
        Number of features D. For ``kernel="polynomial"``: the explicit monomial map (the
        kernel exactly, ``C(d + degree, degree)`` features) when that many fit in D, else a
        TensorSketch of D features; ``feature_map_.method`` says which.
    sampler : {"iid", "orthogonal"}, default="iid"
        Orthogonal random features (rbf only) have lower variance.
    form : {"cos", "cossin"}, default="cos"
        √(2/D)·cos(ωᵀx + b), or paired √(2/D)·[cos ωᵀx, sin ωᵀx] with D/2 frequencies.
    alpha : float, list of float, "gcv" or "evidence", default=1.0
        Ridge penalty (scikit-learn's scaling: Σ squared errors + α‖β‖²). A list is searched by
        generalized cross-validation; ``"gcv"`` searches a default grid; ``"evidence"`` the
        same grid by the largest evidence (marginal likelihood of the Gaussian-process reading,
        :mod:`bigkernel.numerics.evidence`). All from one pass.
    fit_intercept : bool, default=True
        Fit an unpenalized intercept by centring in feature space.
    random_state : int, RandomState instance or None, default=None
        Seeds the feature map; the map depends on this seed, d, D and the kernel only.
    dtype : {"auto", "float32", "float64"}, default="auto"
        Precision of the features; every cross-block sum and every solve is float64
        regardless. ``"auto"``: random Fourier features in float32 (about 2–4× faster to fit
        and predict than float64: numpy's float32 ``cos`` is vectorised, its float64 one is not,
        and the float32 ``ΦᵀΦ`` product is half the work); after the pass the fit estimates
        from the spectrum of ΦᵀΦ, β and the training range whether float32 rounding could move
        the predictions by more than 1e-3·sd(y) or the posterior std by more than 1 % at the
        chosen α (:mod:`bigkernel.numerics.precision`), and if so redoes the pass in float64,
        with a warning (small α, large γ or wide-ranging X). ``dtype_`` and ``dtype_check_`` say
        which was used and why. The polynomial kernel's map is float64 under ``"auto"``.
        ``"float32"``/``"float64"`` force either (no check).
    chunk_rows : int, default=None
        Rows per dask chunk for numpy input (dask input keeps its chunks).
    standardize : bool, default=False
        Standardize each feature to mean 0, standard deviation 1 first (estimated in a light
        pre-pass over X; stored in the model's feature map). Sparse X is scaled without
        centring (mean 0), so it stays sparse.

    device : {"cpu", "cuda", "cuda:N", "auto"}, default="cpu"
        Where the fit computes: ``"cuda"`` / ``"cuda:N"`` runs the streamed pass on that GPU
        (``"auto"``: a GPU when CuPy sees one, logged). An unusable GPU raises DeviceError
        at fit start; fitted arrays are host numpy arrays (``docs/guide/gpu.rst``).

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    coef_ : ndarray of shape (n_components,) or (n_targets, n_components)
    intercept_ : float or ndarray of shape (n_targets,)
    alpha_ : float
        The penalty used (the GCV choice when several were given).
    alphas_ : ndarray of shape (n_alphas,)
    df_ : float
        Effective degrees of freedom at ``alpha_`` (trace of the hat matrix, intercept included).
    df_path_ : ndarray of shape (n_alphas,)
    gcv_ : ndarray of shape (n_alphas,) or (n_alphas, n_targets)
        Generalized cross-validation score per α.
    spectrum_ : PathSpectrum or None
        Eigenvalues of the centred feature system and the projections of y on its
        eigenvectors: ``spectrum_.gcv(alphas)`` and ``spectrum_.df(alphas)`` for any α, with no
        pass over the data (the job report draws them around a fixed α). None for models saved
        before it was kept.
    sigma2_ : float or ndarray of shape (n_targets,)
        Signal variance σ² of the Gaussian-process reading (prior GP(0, σ²k), noise σ²α) at
        ``alpha_``: its maximum-evidence value ``yᵀ(K + αI)⁻¹y / N`` (``N = n − 1`` with an
        intercept). Scales ``predict(X, return_std=True)``; NaN for models saved before it.
    log_marginal_likelihood_ : float
        Log evidence at ``alpha_`` and ``sigma2_`` (summed over targets; with an intercept, that
        of a flat prior on it — see :mod:`bigkernel.numerics.evidence`).
    log_marginal_likelihood_path_ : ndarray of shape (n_alphas,)
        The same along ``alphas_`` (each α at its own σ̂²).
    evidence_ : EvidencePath
        ``evidence_.log_likelihood(sigma2)`` gives the evidence along ``alphas_`` at any fixed σ².
    posterior_ : PrimalPosterior
        The eigenvectors kept for ``return_std`` (those with ``s/(s + α) >= 1e-3``; the variance
        is then over-estimated by at most 0.1 %) and the feature mean; saved with the model.
    feature_map_ : FeatureMap or PolynomialFeatureMap
    n_features_in_ : int
    n_samples_fit_ : int
    dtype_ : {"float32", "float64"}
        The feature dtype the fit used (and predict, transform and ``return_std`` use); saved
        with the model.
    dtype_check_ : dict or None
        With ``dtype="auto"`` and Fourier features: the float32 check — ``mean_error`` (estimated
        change of the predictions, in units of sd(y)), ``std_error`` (relative change of the
        posterior std), the tolerances ``rtol``/``std_rtol``, ``ok`` and ``reason``. None otherwise.
    data_min_, data_max_ : ndarray of shape (n_features,) or None
        Per-feature minimum and maximum of the training rows (rows of weight > 0), accumulated
        in the fit's one pass; None for a model saved before they were recorded.
    stats_ : SufficientStats or None
        The one-pass sums of the rows seen (n, Σφ, Σy, Σy², ΦᵀΦ, Φᵀy, range), saved with the
        model: :meth:`partial_fit` (and ``bigkernel update``) add new rows to them. None for a
        model saved before they were kept (it predicts, but cannot be updated).

    Notes
    -----
    :meth:`transform` gives the features of the fitted map (scaled), for any other model;
    :meth:`partial_fit` adds batches of rows — after any split into batches the model equals
    one ``fit`` on all rows, to rounding.
    """

    def __init__(
        self,
        kernel: str = "rbf",
        *,
        gamma: float | None = None,
        length_scale: float | ArrayLike | None = None,
        nu: float | None = 1.5,
        degree: int = 3,
        coef0: float = 1,
        n_components: int = 100,
        sampler: str = "iid",
        form: str = "cos",
        alpha: float | Floats | str = 1.0,
        fit_intercept: bool = True,
        random_state: RandomStateLike = None,
        dtype: DTypeLike = "auto",
        chunk_rows: int | None = None,
        standardize: bool = False,
        device: DeviceLike = "cpu",
        verbose: int = 0,
    ) -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.length_scale = length_scale
        self.nu = nu
        self.degree = degree
        self.coef0 = coef0
        self.n_components = n_components
        self.sampler = sampler
        self.form = form
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
        **_RandomFeatureBase._common_constraints,
        "dtype": AUTO_FEATURE_DTYPE,
        "gamma": GAMMA,
        "length_scale": LENGTH_SCALE,
        "alpha": ALPHA,
    }

    def _make_feature_map(self, n_features: int) -> FeatureMap:
        return self._feature_map(n_features, self._seed(), self.gamma, self.length_scale)

    def fit_dataset(self, ds: Dataset, weights: Weights | None = None) -> Self:
        """Fit from a validated :class:`~bigkernel.data.sources.Dataset` (for orchestrators).

        ``weights(start, stop) -> (1, rows)`` optionally weights rows (a training mask, or
        ``sample_weight``); a row partition keeps its groups.
        """
        self._check_params()
        solver = self.make_solver()
        fixed = solver.prepare(ds, weights)
        self._set_scaler(fixed.scaler)
        return self._set_solution(fixed, solver.fit(fixed, ds, weights))
