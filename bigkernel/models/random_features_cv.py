"""RandomFeatureRidgeCV: choose (γ, α) by K-fold CV or GCV from one pass over the data."""

from __future__ import annotations

import logging
import time
from numbers import Integral
from typing import ClassVar, Self

import numpy as np
from numpy.typing import DTypeLike

from bigkernel.data.sources import Dataset
from bigkernel.devices import CPU
from bigkernel.errors import ParameterError
from bigkernel.io.model_store import register_model
from bigkernel.kernels.registry import gamma_from_length_scale, kernel_spec, kernels_searching
from bigkernel.models._base import (
    GRID,
    ArrayIn,
    DeviceLike,
    Grid,
    RandomStateLike,
    RowPartition,
)
from bigkernel.models._search import best_index, cv_results
from bigkernel.models.random_features import _RandomFeatureBase
from bigkernel.numerics.cv import cv_path
from bigkernel.numerics.primal import PrimalSolution, eigen_path, resolve_alphas
from bigkernel.numerics.splits import FoldSplit
from bigkernel.numerics.sums import sums_precision
from bigkernel.numerics.threads import lapack_limit
from bigkernel.runtime import compute
from bigkernel.validation import Interval, Options

logger = logging.getLogger(__name__)

#: default α grid when ``alphas=None``: 20 values, relative to the mean eigenvalue of the system
DEFAULT_RELATIVE_ALPHAS = np.logspace(-8, 1, 20)
#: default γ grid when neither ``gammas`` nor ``length_scales`` is given: multiples of 1/d
DEFAULT_RELATIVE_GAMMAS = np.logspace(-2, 1, 7)


@register_model
class RandomFeatureRidgeCV(_RandomFeatureBase):
    """Random-feature kernel ridge with (γ, α) chosen by K-fold CV or GCV, in one data pass.

    One feature map per γ (all drawn from the same seed, so γ grid points differ only in
    bandwidth) is evaluated on every chunk in the same pass; per-fold statistics give each fold's
    training system as the total minus the fold and its validation error from the fold's own
    sums. The best (γ, α) is refitted from the total statistics — no second pass.

    Parameters
    ----------
    kernel : {"rbf", "laplacian", "matern", "polynomial"}, default="rbf"
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

    def _bandwidths(self, n_features: int) -> list[float]:
        if self.length_scales is not None:
            return [gamma_from_length_scale(self.kernel, float(v)) for v in np.atleast_1d(self.length_scales)]
        if self.gammas is not None:
            return [float(v) for v in np.atleast_1d(self.gammas)]
        return [float(g) / n_features for g in DEFAULT_RELATIVE_GAMMAS]

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

    def fit_dataset(self, ds: Dataset, weights: RowPartition | None = None) -> Self:
        """Fit from a validated dataset; ``weights`` may be a row partition (e.g. a holdout split)
        whose group 0 alone takes part: other rows are in neither training nor validation."""
        self._check_params()
        n, d = ds.X.shape
        if not isinstance(self.cv, str) and n < self.cv:
            raise ParameterError(f"cv={self.cv} folds need at least {self.cv} samples, got n_samples={n}")
        seed = self._seed()
        self._fit_scaler(ds)
        gammas = self._bandwidths(d)
        fmaps = [self._feature_map(d, seed, gamma=g) for g in gammas]
        split = None if isinstance(self.cv, str) else FoldSplit(seed, int(self.cv))
        weights = _combine(split, weights)
        (stats,) = compute(self.stats_graph(ds, fmaps, weights), label="cv-fit")
        eps = sums_precision(self.dtype)  # scores below their rounding error are never chosen
        # the D × D eigendecompositions on the cores other processes leave idle (numerics.threads)
        with lapack_limit(max(f.n_components for f in fmaps)) as threads:
            scores, r2, per_split, alphas_per_gamma, dfs = self._score_gammas(stats, split, eps, gammas, threads)
        self._set_cv_results(gammas, alphas_per_gamma, scores, per_split, r2)
        self.cv_results_["df"] = np.concatenate(dfs)  # df(α) of the whole-data system, per grid point
        gi, _ = self._best_index
        return self._refit_best(
            stats[gi].total() if split is not None else stats[gi], fmaps, gammas, alphas_per_gamma, ds.y.ndim, eps
        )

    def _score_gammas(self, stats, split, eps: float, gammas: list[float], threads: int | None) -> tuple[list, ...]:
        """Every (γ, α) score from the pass's statistics: per γ one eigendecomposition of the
        whole-data system and, for K-fold CV, one per fold (logged per γ: they are most of the
        time after the pass)."""
        scores, r2, per_split, alphas_per_gamma, dfs = [], [], [], [], []
        t0 = time.perf_counter()
        for i, st in enumerate(stats):
            folds = st if split is not None else None
            total = st.total() if split is not None else st
            path = eigen_path(total, self.fit_intercept, eps, device=getattr(self, "_device", CPU))
            alphas = self._alpha_grid(path)
            alphas_per_gamma.append(alphas)
            dfs.append(path.df(alphas))
            if self.cv == "evidence":  # profile log evidence, summed over targets: higher is better
                lml = path.spectrum().evidence(alphas).log_likelihood().sum(axis=1)
                scores.append(lml)
                per_split.append(lml[np.newaxis])
                r2.append(np.full(alphas.size, np.nan))
            elif folds is None:
                gcv = path.gcv(alphas).mean(axis=1)
                scores.append(-gcv)
                per_split.append(-gcv[np.newaxis])
                r2.append(np.full(alphas.size, np.nan))
            else:
                cvp = cv_path(folds, alphas, self.fit_intercept, eps)
                mse = cvp.mse()  # (K, A)
                per_split.append(-mse)
                scores.append(-mse.mean(axis=0))
                r2.append(cvp.r2().mean(axis=0))
            logger.info(
                "RandomFeatureRidgeCV: gamma %d/%d (%.4g) scored: %d eigendecomposition(s) of %d × %d%s, %.1fs so far",
                i + 1, len(stats), gammas[i], 1 + (0 if folds is None else folds.n.shape[0]), path.eigvals.size,
                path.eigvals.size, "" if threads is None else f" on {threads} BLAS thread(s)", time.perf_counter() - t0,
            )  # fmt: skip
        return scores, r2, per_split, alphas_per_gamma, dfs

    def _alpha_grid(self, path) -> np.ndarray:
        """The α searched for one map: ``alphas``, or the default grid relative to the mean
        eigenvalue of its whole-data system."""
        if self.alphas is None:
            return DEFAULT_RELATIVE_ALPHAS * max(float(path.eigvals.mean()), np.finfo(float).tiny)
        return resolve_alphas(np.atleast_1d(self.alphas).tolist(), path)[0]

    def _refit_best(self, best_total, fmaps, gammas, alphas_per_gamma, y_ndim: int, eps: float) -> Self:
        """Fitted attributes at the best (γ, α) (``_best_index``) from that map's total statistics."""
        gi, ai = self._best_index
        path = eigen_path(best_total, self.fit_intercept, eps, device=getattr(self, "_device", CPU))
        alphas = alphas_per_gamma[gi]
        coef = path.coef(float(alphas[ai]))
        spectrum = path.spectrum()
        sol = PrimalSolution(
            coef, path.intercept(coef), float(alphas[ai]), alphas, path.df(alphas), path.gcv(alphas), spectrum,
            spectrum.evidence(alphas), path,
        )  # fmt: skip
        self.gamma_ = gammas[gi]
        return self._set_fitted(sol, fmaps[gi], y_ndim, best_total)

    def _set_cv_results(self, gammas, alphas_per_gamma, scores, per_split, r2) -> None:
        pg = np.concatenate([np.full(a.size, g, dtype=np.float64) for g, a in zip(gammas, alphas_per_gamma)])
        pa = np.concatenate([np.asarray(a, dtype=np.float64) for a in alphas_per_gamma])
        splits = np.concatenate([np.asarray(sp) for sp in per_split], axis=1)  # (n_splits, points)
        # GCV is inf when df >= n: no spread then
        finite = np.all(np.isfinite(splits), axis=0)
        std = np.where(finite, np.where(finite, splits, 0.0).std(axis=0), np.nan)
        extra = {"mean_test_r2": np.concatenate([np.asarray(r) for r in r2])}
        extra |= {f"split{k}_test_score": col for k, col in enumerate(splits)}
        results = cv_results(pg, pa, np.concatenate([np.asarray(sc) for sc in scores]), std, extra=extra)
        self.cv_results_ = results
        best = best_index(results, "CV")
        mean, params = results["mean_test_score"], results["params"]
        self.best_index_ = best
        self.best_params_ = params[best]
        self.best_score_ = float(mean[best])
        counts = np.cumsum([0] + [a.size for a in alphas_per_gamma])
        gi = int(np.searchsorted(counts, best, side="right") - 1)
        self._best_index = (gi, best - counts[gi])
        logger.info("CV over %d γ × α points: best %s (score %.4g)", mean.size, self.best_params_, self.best_score_)


def _combine(split, exclude):
    """One row partition from folds and an excluded (holdout) group."""
    if exclude is None:
        return split
    if split is None:
        return exclude
    return _FoldsWithout(split, exclude)


class _FoldsWithout:
    """Folds of ``split`` over the rows that ``exclude`` keeps (its group 0)."""

    def __init__(self, split: FoldSplit, exclude):
        self.split, self.exclude = split, exclude
        self.n_groups = split.n_groups + 1
        self.keep = tuple(range(split.n_groups))

    def groups(self, start: int, stop: int) -> np.ndarray:
        g = self.split.groups(start, stop)
        return np.where(self.exclude.groups(start, stop) == 0, g, self.split.n_groups)

    def __dask_tokenize__(self):
        return (type(self).__name__, self.split, self.exclude)
