"""RandomFeatureRidgeCV: choose (γ, α) by K-fold CV or GCV from one pass over the data."""

from __future__ import annotations

import logging
from numbers import Integral
from typing import ClassVar, Self

import numpy as np
from numpy.typing import DTypeLike

from bigkernel.data.sources import Dataset
from bigkernel.errors import ParameterError
from bigkernel.io.model_store import register_model
from bigkernel.kernels.registry import document_kernels, kernel_spec, kernels_searching
from bigkernel.models._base import (
    GRID,
    ArrayIn,
    DeviceLike,
    Grid,
    RandomStateLike,
    RowPartition,
)
from bigkernel.models.random_features import _RandomFeatureBase
from bigkernel.solvers.base import Solution
from bigkernel.solvers.feature_plan import FeaturePlan, feature_fingerprint
from bigkernel.solvers.primal import PrimalFixed
from bigkernel.solvers.random_features_cv import (
    DEFAULT_RELATIVE_ALPHAS,
    DEFAULT_RELATIVE_GAMMAS,
    RandomFeatureCVSolver,
    SearchResult,
    SearchScores,
    search_table,
    split_best,
)
from bigkernel.solvers.replicates import check_n_features
from bigkernel.solvers.search import best_index
from bigkernel.validation import Interval, Options

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_RELATIVE_ALPHAS", "DEFAULT_RELATIVE_GAMMAS", "RandomFeatureRidgeCV"]


@document_kernels("random_features", searched="gamma")
@register_model
class RandomFeatureRidgeCV(_RandomFeatureBase):
    """Random-feature kernel ridge with (γ, α) chosen by K-fold CV or GCV, in one data pass.

    One feature map per γ (all drawn from the same seed, so γ grid points differ only in
    bandwidth) is evaluated on every chunk in the same pass; per-fold statistics give each fold's
    training system as the total minus the fold and its validation error from the fold's own
    sums. The best (γ, α) is refitted from the total statistics — no second pass.

    Parameters
    ----------
    kernel : str, default="rbf"
        A random-feature kernel with a bandwidth to search: one of {searched_kernels}.
    gammas : sequence of float, default=None
        Bandwidths to search (exclusive with ``length_scales``); default 7 values log-spaced
        from 0.01/n_features to 10/n_features.
    length_scales : sequence of float, default=None
        Length scales to search instead of ``gammas`` (rbf, matern: γ = 1/(2ℓ²); laplacian:
        γ = 1/ℓ).
    alphas : sequence of float, default=None
        Penalties to search; default 20 values log-spaced from 1e-8 to 10 times the mean
        eigenvalue of each fold's centred system.
    cv : int, "gcv" or "evidence", default=5
        Number of folds (rows assigned by a seeded hash of the row index), generalized
        cross-validation on the whole data, or the largest evidence (profile log marginal
        likelihood over σ², summed over targets; :mod:`bigkernel.numerics.evidence`) — every γ
        and α from the same one pass, as for GCV.
    nu, degree, coef0, n_components, sampler, form, fit_intercept, random_state, dtype, chunk_rows, standardize
        As in :class:`RandomFeatureRidge`.

    device : {"cpu", "cuda", "cuda:N", "auto"}, default="cpu"
        Where the fit computes: on a GPU, the one pass (every γ, every fold) runs there
        (``"auto"``: a GPU when CuPy sees one, logged). An unusable GPU raises DeviceError
        at fit start; fitted arrays are host numpy arrays (``docs/guide/gpu.rst``).

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    cv_results_ : dict of ndarray
        Like scikit-learn's: ``params``, ``param_gamma``, ``param_alpha``, ``mean_test_score``
        (negative MSE; for ``cv="gcv"`` the negative GCV score; for ``cv="evidence"`` the log
        evidence), ``std_test_score``,
        ``rank_test_score``, ``split{k}_test_score``, ``mean_test_r2``, ``df`` (degrees of
        freedom of the whole-data system at that point).
    best_params_ : dict
    best_score_ : float
    gamma_, alpha_ : float
        The chosen bandwidth and penalty; ``coef_``, ``intercept_``, ``df_`` etc. as in
        :class:`RandomFeatureRidge` for them.
    """

    def __init__(
        self,
        kernel: str = "rbf",
        *,
        gammas: Grid = None,
        length_scales: Grid = None,
        alphas: Grid = None,
        cv: int | str = 5,
        nu: float | None = 1.5,
        degree: int = 3,
        coef0: float = 1,
        n_components: int = 100,
        sampler: str = "iid",
        form: str = "cos",
        fit_intercept: bool = True,
        random_state: RandomStateLike = None,
        dtype: DTypeLike = "float64",
        chunk_rows: int | None = None,
        standardize: bool = False,
        device: DeviceLike = "cpu",
        verbose: int = 0,
    ) -> None:
        self.kernel = kernel
        self.gammas = gammas
        self.length_scales = length_scales
        self.alphas = alphas
        self.cv = cv
        self.nu = nu
        self.degree = degree
        self.coef0 = coef0
        self.n_components = n_components
        self.sampler = sampler
        self.form = form
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
        "gammas": GRID,
        "length_scales": GRID,
        "alphas": GRID,
        "cv": [Interval(Integral, 2, None, closed="left"), Options(str, ("gcv", "evidence"))],
    }

    def _check_rules(self) -> None:
        super()._check_rules()
        self._check_search()

    def _check_search(self) -> None:
        """A bandwidth to search, given one way."""
        if not kernel_spec(self.kernel).searchable("random_features"):
            raise ParameterError(
                f"kernel={self.kernel!r} has no bandwidth to search; use RandomFeatureRidge(alpha='gcv'), or a "
                f"kernel with one: {', '.join(kernels_searching('random_features', 'gamma'))}"
            )
        if self.gammas is not None and self.length_scales is not None:
            raise ParameterError("give gammas or length_scales, not both")

    def fit(self, X: ArrayIn, y: ArrayIn) -> Self:
        """Search (γ, α) in one pass and refit at the best point (see the class docstring).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        y : array-like or dask array of shape (n_samples,) or (n_samples, n_targets)

        Returns
        -------
        self
        """
        # no sample_weight: the folds are row partitions of the unweighted data
        return super().fit(X, y)

    def make_solver(self) -> RandomFeatureCVSolver:
        """The search's solver of this estimator's parameters, on its resolved device."""
        return RandomFeatureCVSolver.from_params(
            self.get_params(deep=False), device=getattr(self, "_device", None), owner=type(self).__name__
        )

    def fit_dataset(self, ds: Dataset, weights: RowPartition | None = None) -> Self:
        """Fit from a validated dataset; ``weights`` may be a row partition (e.g. a holdout split)
        whose group 0 alone takes part: other rows are in neither training nor validation."""
        self._check_params()
        solver = self.make_solver()
        fixed = solver.prepare(ds, weights)
        self._set_scaler(fixed.scaler)
        solution = solver.fit(fixed, ds, weights)
        found: SearchResult = solution.details
        self.cv_results_ = found.cv_results
        self.best_index_ = found.best_index
        self.best_params_ = found.cv_results["params"][found.best_index]
        self.best_score_ = float(found.cv_results["mean_test_score"][found.best_index])
        self.gamma_ = found.gamma
        refit = Solution(solution.coef, solution.intercept, solution.alpha, solution.alphas, {}, found.fit)
        return self._set_solution(found.fixed, refit)

    # the search's steps, for RandomFeatureClassifierCV (which scores by accuracy in a second
    # pass and refits through this estimator)
    def _bandwidths(self, n_features: int) -> list[float]:
        return self.make_solver().bandwidths(n_features)

    def _alpha_grid(self, path) -> np.ndarray:
        return self.make_solver().alpha_grid(path)

    def _set_cv_results(self, gammas, alphas_per_gamma, scores, per_split, r2) -> None:
        """``cv_results_``, ``best_*`` and the (γ, α) indices of the best point."""
        table = search_table(gammas, SearchScores(scores, r2, per_split, alphas_per_gamma, []))
        best = best_index(table, "CV")
        self.cv_results_, self.best_index_ = table, best
        self.best_params_ = table["params"][best]
        self.best_score_ = float(table["mean_test_score"][best])
        self._best_index = split_best(alphas_per_gamma, best)
        logger.info(
            "CV over %d γ × α points: best %s (score %.4g)", table["mean_test_score"].size, self.best_params_,
            self.best_score_,
        )  # fmt: skip

    def _refit_best(self, best_total, fmaps, gammas, alphas_per_gamma, y_ndim: int, eps: float) -> Self:
        """Fitted attributes at the best (γ, α) (``_best_index``) from that map's total statistics."""
        gi, ai = self._best_index
        solver = self.make_solver()
        fixed = PrimalFixed(fmaps[gi], getattr(self, "_scaler", None), solver.device)
        self.gamma_ = gammas[gi]
        return self._set_solution(fixed, solver.refit(fixed, best_total, alphas_per_gamma[gi], ai, y_ndim == 1, eps))

    def replicate_plan(self, ds: Dataset, X_eval: np.ndarray, *, seed_entropy: int, workers: int = 1) -> FeaturePlan:
        """The bootstrap's replicate plan at the chosen (γ, α), held fixed (the search is not
        repeated per replicate). Needs a fitted estimator (``ParameterError`` otherwise).

        Parameters
        ----------
        ds : Dataset
        X_eval : ndarray of shape (n_eval, n_features)
        seed_entropy : int
            The bootstrap seed (unused: the fitted map is held).
        workers : int, default=1

        Returns
        -------
        FeaturePlan
        """
        if not hasattr(self, "coef_"):
            raise ParameterError(
                "bootstrap() needs a fitted RandomFeatureRidgeCV (its replicates use the chosen "
                "gamma_ and alpha_; the search is not repeated per replicate): call fit first, or "
                "bootstrap a RandomFeatureRidge with the gamma and alpha you want."
            )
        check_n_features(self, ds.X.shape[1])
        alpha = float(self.alpha_)
        solver = self.make_solver()
        fingerprint = feature_fingerprint(self, solver, fitted=True, gamma_=float(self.gamma_), alpha_=alpha)
        return FeaturePlan(solver, self.feature_map_, alpha, X_eval, fingerprint)
