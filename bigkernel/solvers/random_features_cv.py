"""Random features, (γ, α) searched in one pass: the solver behind
:class:`~bigkernel.RandomFeatureRidgeCV` (layer 3).

One feature map per γ (all drawn from the same seed, so γ grid points differ only in
bandwidth) is evaluated on every chunk in the same pass; per-fold statistics give each fold's
training system as the total minus the fold and its validation error from the fold's own
sums. The best (γ, α) is refitted from the total statistics — no second pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from bigkernel.data.sources import Dataset
from bigkernel.devices import CPU
from bigkernel.errors import ParameterError
from bigkernel.kernels.registry import gamma_from_length_scale
from bigkernel.numerics.cv import cv_path
from bigkernel.numerics.primal import PrimalSolution, eigen_path, resolve_alphas
from bigkernel.numerics.splits import FoldSplit
from bigkernel.numerics.sums import sums_precision
from bigkernel.numerics.threads import lapack_limit
from bigkernel.runtime import compute
from bigkernel.solvers.base import Solution
from bigkernel.solvers.primal import PrimalFixed, fit_scaler
from bigkernel.solvers.random_features import RandomFeatureSolver, RandomFeatureSpec, spec_from_params
from bigkernel.solvers.search import best_index, cv_results
from bigkernel.validation import int_seed

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_RELATIVE_ALPHAS",
    "DEFAULT_RELATIVE_GAMMAS",
    "RandomFeatureCVSolver",
    "RandomFeatureCVSpec",
    "SearchFixed",
    "SearchResult",
    "SearchScores",
    "search_table",
    "split_best",
]

#: default α grid when ``alphas=None``: 20 values, relative to the mean eigenvalue of the system
DEFAULT_RELATIVE_ALPHAS = np.logspace(-8, 1, 20)
#: default γ grid when neither ``gammas`` nor ``length_scales`` is given: multiples of 1/d
DEFAULT_RELATIVE_GAMMAS = np.logspace(-2, 1, 7)


@dataclass(frozen=True)
class RandomFeatureCVSpec(RandomFeatureSpec):
    """:class:`RandomFeatureSpec` plus the search: ``gammas`` or ``length_scales``, ``alphas``
    (None: the default grids) and ``cv`` (folds, ``"gcv"`` or ``"evidence"``)."""

    gammas: Any = None
    length_scales: Any = None
    alphas: Any = None
    cv: Any = 5


@dataclass(frozen=True)
class SearchFixed:
    """What a search holds fixed: one map per γ (same seed), the γ grid, the scaling, the seed
    (it also assigns the folds) and the device."""

    fmaps: list
    gammas: list[float]
    scaler: tuple[np.ndarray, np.ndarray] | None
    seed: int
    device: Any = None


@dataclass(frozen=True)
class SearchResult:
    """``Solution.details`` of the search.

    Attributes
    ----------
    cv_results : dict
        The search table (``cv_results_``), with ``df`` per grid point.
    best_index : int
        Row of the table chosen.
    gamma : float
        The chosen bandwidth.
    fixed : PrimalFixed
        The chosen γ's map (what the refit and predictions use).
    fit : PrimalFit
        The refit at the best point (``details`` of a one-pass solution).
    """

    cv_results: dict
    best_index: int
    gamma: float
    fixed: PrimalFixed
    fit: Any


@dataclass(frozen=True)
class SearchScores:
    """Per-γ scores of the search (lists indexed by γ): mean score, R², per-split scores
    (each ``(n_splits, n_alphas)``), the α grid and df(α) (empty: no ``df`` column)."""

    scores: list
    r2: list
    per_split: list
    alphas: list
    dfs: list


class RandomFeatureCVSolver(RandomFeatureSolver):
    """The one-pass (γ, α) search (implements :class:`~bigkernel.solvers.base.Solver`; its
    saved state is the chosen model's, as :class:`RandomFeatureSolver`'s)."""

    name: ClassVar[str] = "random_features_cv"

    @classmethod
    def from_params(cls, params: Mapping[str, Any], *, device: Any = None, owner: str = "RandomFeatureRidgeCV") -> Self:
        """The solver of an estimator's (validated) ``get_params()``."""
        return cls(spec_from_params(RandomFeatureCVSpec, params), device, owner)

    def bandwidths(self, n_features: int) -> list[float]:
        """The γ grid: ``length_scales`` or ``gammas``, else multiples of 1/n_features."""
        spec = self.spec
        if spec.length_scales is not None:
            return [gamma_from_length_scale(spec.kernel, float(v)) for v in np.atleast_1d(spec.length_scales)]
        if spec.gammas is not None:
            return [float(v) for v in np.atleast_1d(spec.gammas)]
        return [float(g) / n_features for g in DEFAULT_RELATIVE_GAMMAS]

    def prepare(self, data: Dataset, weights: Any = None, *, seed: int | None = None) -> SearchFixed:
        """The scaling (over all rows) and one map per γ, all from one seed."""
        n, d = data.X.shape
        cv = self.spec.cv
        if not isinstance(cv, str) and n < cv:
            raise ParameterError(f"cv={cv} folds need at least {cv} samples, got n_samples={n}")
        seed = int_seed(self.spec.random_state) if seed is None else seed
        scaler = fit_scaler(data) if self.spec.standardize else None
        gammas = self.bandwidths(d)
        fmaps = [self.feature_map(d, seed, gamma=g, scaler=scaler) for g in gammas]
        return SearchFixed(fmaps, gammas, scaler, seed, self.device)

    def fit(self, fixed: SearchFixed, data: Dataset, weights: Any = None) -> Solution:
        """The pass (every γ, every fold), the scores, the refit at the best (γ, α).

        Parameters
        ----------
        fixed : SearchFixed
        data : Dataset
        weights : row partition or None
            Group 0 alone takes part (e.g. a holdout split): other rows are in neither
            training nor validation.

        Returns
        -------
        Solution
            Of the refit; ``details`` is a :class:`SearchResult`.
        """
        split = None if isinstance(self.spec.cv, str) else FoldSplit(fixed.seed, int(self.spec.cv))
        (stats,) = compute(self.statistics_graph(fixed.fmaps, data, _combine(split, weights)), label="cv-fit")
        eps = sums_precision(self.spec.dtype)  # scores below their rounding error are never chosen
        # the D × D eigendecompositions on the cores other processes leave idle (numerics.threads)
        with lapack_limit(max(f.n_components for f in fixed.fmaps)) as threads:
            sc = self._score_gammas(stats, split, eps, fixed.gammas, threads)
        table = search_table(fixed.gammas, sc)
        best = best_index(table, "CV")
        logger.info(
            "CV over %d γ × α points: best %s (score %.4g)",
            table["mean_test_score"].size,
            table["params"][best],
            float(table["mean_test_score"][best]),
        )
        gi, ai = split_best(sc.alphas, best)
        total = stats[gi].total() if split is not None else stats[gi]
        chosen = PrimalFixed(fixed.fmaps[gi], fixed.scaler, fixed.device)
        refit = self.refit(chosen, total, sc.alphas[gi], ai, data.y.ndim == 1, eps)
        details = SearchResult(table, best, fixed.gammas[gi], chosen, refit.details)
        return Solution(refit.coef, refit.intercept, refit.alpha, refit.alphas, refit.diagnostics, details)

    def _score_gammas(
        self, stats: list, split: Any, eps: float, gammas: list[float], threads: int | None
    ) -> SearchScores:
        """Every (γ, α) score from the pass's statistics: per γ one eigendecomposition of the
        whole-data system and, for K-fold CV, one per fold (logged per γ: they are most of the
        time after the pass)."""
        out = SearchScores([], [], [], [], [])
        t0 = time.perf_counter()
        for i, st in enumerate(stats):
            folds = st if split is not None else None
            total = st.total() if split is not None else st
            path = eigen_path(total, self.spec.fit_intercept, eps, device=self.device or CPU)
            alphas = self.alpha_grid(path)
            out.alphas.append(alphas)
            out.dfs.append(path.df(alphas))
            self._score_one(path, folds, alphas, eps, out)
            logger.info(
                "RandomFeatureRidgeCV: gamma %d/%d (%.4g) scored: %d eigendecomposition(s) of %d × %d%s, %.1fs so far",
                i + 1, len(stats), gammas[i], 1 + (0 if folds is None else folds.n.shape[0]), path.eigvals.size,
                path.eigvals.size, "" if threads is None else f" on {threads} BLAS thread(s)", time.perf_counter() - t0,
            )  # fmt: skip
        return out

    def _score_one(self, path: Any, folds: Any, alphas: np.ndarray, eps: float, out: SearchScores) -> None:
        """One γ's scores along ``alphas`` (evidence, GCV or the folds' MSE) into ``out``."""
        if self.spec.cv == "evidence":  # profile log evidence, summed over targets: higher is better
            lml = path.spectrum().evidence(alphas).log_likelihood().sum(axis=1)
            out.scores.append(lml)
            out.per_split.append(lml[np.newaxis])
            out.r2.append(np.full(alphas.size, np.nan))
        elif folds is None:
            gcv = path.gcv(alphas).mean(axis=1)
            out.scores.append(-gcv)
            out.per_split.append(-gcv[np.newaxis])
            out.r2.append(np.full(alphas.size, np.nan))
        else:
            cvp = cv_path(folds, alphas, self.spec.fit_intercept, eps)
            mse = cvp.mse()  # (K, A)
            out.per_split.append(-mse)
            out.scores.append(-mse.mean(axis=0))
            out.r2.append(cvp.r2().mean(axis=0))

    def alpha_grid(self, path: Any) -> np.ndarray:
        """The α searched for one map: ``alphas``, or the default grid relative to the mean
        eigenvalue of its whole-data system."""
        if self.spec.alphas is None:
            return DEFAULT_RELATIVE_ALPHAS * max(float(path.eigvals.mean()), np.finfo(float).tiny)
        return resolve_alphas(np.atleast_1d(self.spec.alphas).tolist(), path)[0]

    def refit(self, fixed: PrimalFixed, total: Any, alphas: np.ndarray, ai: int, single: bool, eps: float) -> Solution:
        """The solution at α = ``alphas[ai]`` from the chosen map's total statistics."""
        path = eigen_path(total, self.spec.fit_intercept, eps, device=self.device or CPU)
        coef = path.coef(float(alphas[ai]))
        spectrum = path.spectrum()
        sol = PrimalSolution(
            coef, path.intercept(coef), float(alphas[ai]), alphas, path.df(alphas), path.gcv(alphas), spectrum,
            spectrum.evidence(alphas), path,
        )  # fmt: skip
        return self.solution(fixed, sol, total, single=single)


def search_table(gammas: list[float], sc: SearchScores) -> dict:
    """``cv_results_`` of the scores, with ``df`` (of the whole-data system) per grid point
    when ``sc.dfs`` has it."""
    pg = np.concatenate([np.full(a.size, g, dtype=np.float64) for g, a in zip(gammas, sc.alphas)])
    pa = np.concatenate([np.asarray(a, dtype=np.float64) for a in sc.alphas])
    splits = np.concatenate([np.asarray(sp) for sp in sc.per_split], axis=1)  # (n_splits, points)
    # GCV is inf when df >= n: no spread then
    finite = np.all(np.isfinite(splits), axis=0)
    std = np.where(finite, np.where(finite, splits, 0.0).std(axis=0), np.nan)
    extra = {"mean_test_r2": np.concatenate([np.asarray(r) for r in sc.r2])}
    extra |= {f"split{k}_test_score": col for k, col in enumerate(splits)}
    results = cv_results(pg, pa, np.concatenate([np.asarray(s) for s in sc.scores]), std, extra=extra)
    if sc.dfs:
        results["df"] = np.concatenate(sc.dfs)
    return results


def split_best(alphas_per_gamma: list, best: int) -> tuple[int, int]:
    """The (γ index, α index) of row ``best`` of the search table."""
    counts = np.cumsum([0] + [a.size for a in alphas_per_gamma])
    gi = int(np.searchsorted(counts, best, side="right") - 1)
    return gi, int(best - counts[gi])


def _combine(split: FoldSplit | None, exclude: Any) -> Any:
    """One row partition from folds and an excluded (holdout) group."""
    if exclude is None:
        return split
    if split is None:
        return exclude
    return _FoldsWithout(split, exclude)


class _FoldsWithout:
    """Folds of ``split`` over the rows that ``exclude`` keeps (its group 0)."""

    def __init__(self, split: FoldSplit, exclude: Any) -> None:
        self.split, self.exclude = split, exclude
        self.n_groups = split.n_groups + 1
        self.keep = tuple(range(split.n_groups))

    def groups(self, start: int, stop: int) -> np.ndarray:
        g = self.split.groups(start, stop)
        return np.where(self.exclude.groups(start, stop) == 0, g, self.split.n_groups)

    def __dask_tokenize__(self) -> tuple:
        return (type(self).__name__, self.split, self.exclude)
