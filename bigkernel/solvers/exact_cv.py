"""The exact CV solver: (γ, α) by closed-form leave-one-out, GCV or the evidence (layer 3).

For each γ: one dense Gram matrix and one eigendecomposition of its centred form; the whole α
path — LOO residuals, GCV, df, the evidence — then follows in closed form
(:mod:`bigkernel.numerics.loo`), and the chosen point's dual solution comes from the same
eigendecomposition (no refit). :class:`ExactCVSolver` runs that search on rows in memory for
:class:`~bigkernel.ExactKernelRidgeCV`, which validates the grids, loads and scales the rows and
sets its fitted attributes from the :class:`SearchResult`. :meth:`ExactCVSolver.state` /
:meth:`ExactCVSolver.from_state` give the model store's layout (format v1,
:mod:`bigkernel.solvers.dual_state`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from types import SimpleNamespace
from typing import Any, ClassVar

import dask.array as da
import numpy as np

from bigkernel._sparse import as_block, column_min_max
from bigkernel.data.sources import Dataset
from bigkernel.errors import ParameterError
from bigkernel.kernels.base import Kernel
from bigkernel.kernels.registry import is_precomputed
from bigkernel.numerics.evidence import evidence_path
from bigkernel.numerics.gram_tiles import GramTiler
from bigkernel.numerics.loo import closed_form_scores, spectral_path
from bigkernel.numerics.precomputed import PrecomputedGram, check_symmetric
from bigkernel.numerics.scaling import standardize_moments, standardize_rows
from bigkernel.numerics.sums import check_finite
from bigkernel.runtime import compute
from bigkernel.solvers.base import Solution
from bigkernel.solvers.dual_state import (
    CVFacts,
    dual_arrays,
    evidence_layout,
    kernel_attr,
    read_dual_source,
    read_evidence_layout,
    saved_scaler_range,
)
from bigkernel.solvers.exact import build_kernel, gram_input

logger = logging.getLogger(__name__)

__all__ = [
    "CV_RESULT_ARRAYS",
    "DEFAULT_RELATIVE_ALPHAS",
    "ExactCVFixed",
    "ExactCVSolver",
    "ExactCVSpec",
    "SearchResult",
    "count_kept",
    "exact_cv_bytes",
    "kept_rows",
    "training_rows",
]

#: default α grid when ``alphas=None``: multiples of the mean eigenvalue of the centred Gram matrix
DEFAULT_RELATIVE_ALPHAS = np.logspace(-7, 2, 20)
#: the columns of the search table, one row per (γ, α)
TABLE_COLUMNS = ("gamma", "alpha", "loo", "gcv", "loo_std", "df", "evidence")
#: the ``cv_results_`` entries saved (as ``cv_<name>``; ``mean_test_evidence`` when present)
CV_RESULT_ARRAYS = ("param_gamma", "param_alpha", "mean_test_score", "std_test_score", "rank_test_score",
                    "mean_test_loo", "mean_test_gcv", "df")  # fmt: skip


def exact_cv_bytes(n: int, d: int) -> int:
    """Memory of the exact CV search at n points (bytes): the Gram matrix, the eigenvectors and
    room for kernel temporaries (3 ``n × n`` float64), plus the points."""
    return 3 * 8 * n * n + 4 * 8 * n * (d + 1)


def kernel_gamma(kernel: Kernel) -> float | None:
    """The kernel's ``gamma`` when it has a real one (reported when γ is not searched)."""
    g = getattr(kernel, "gamma", None)
    return float(g) if isinstance(g, Real) else None


@dataclass(frozen=True)
class ExactCVSpec:
    """Everything the search depends on besides the rows and the γ grid."""

    kernel: Any = "rbf"
    degree: float = 3
    coef0: float = 1
    nu: float | None = 1.5
    kernel_params: dict | None = None
    fit_intercept: bool = True
    alphas: Any = None
    criterion: str = "loo"
    standardize: bool = False

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ExactCVSpec:
        """The spec of an estimator's ``get_params()`` (other parameters are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in params.items() if k in names})

    @property
    def precomputed(self) -> bool:
        """``kernel="precomputed"``: X is the Gram matrix."""
        return is_precomputed(self.kernel)


@dataclass(frozen=True)
class ExactCVFixed:
    """What :meth:`ExactCVSolver.prepare` holds fixed for the search.

    Attributes
    ----------
    X : ndarray or sparse matrix of shape (n, d), or K (n, n)
        The training rows in memory, scaled when standardized (for a model read back by
        :meth:`ExactCVSolver.from_state`: the saved points, None for a precomputed K).
    Y : ndarray of shape (n, k) or None
        None for a model read back.
    keep : ndarray of int or None
        Precomputed K: the training columns fitted (None: all).
    scaler : (mean, scale) or None
    data_range : (min, max)
        Per-feature range of the unscaled rows, ``(None, None)`` when unknown.
    n_features : int
        Columns of the input (K's columns for a precomputed kernel).
    """

    X: Any
    Y: np.ndarray | None
    keep: np.ndarray | None
    scaler: tuple[np.ndarray, np.ndarray] | None
    data_range: tuple[Any, Any]
    n_features: int


@dataclass(frozen=True)
class SearchResult:
    """What the search found.

    Attributes
    ----------
    table : dict of list
        :data:`TABLE_COLUMNS`, one entry per (γ, α).
    timings : list of dict
        Per γ: Gram, eigendecomposition and scoring seconds.
    best : dict
        The best point: ``gamma``, ``kernel``, ``tiler``, ``alpha``, ``alphas``, ``coef``,
        ``intercept``, ``df``, ``gcv``, ``loo``, ``evidence``.
    """

    table: dict[str, list]
    timings: list[dict]
    best: dict[str, Any]


class ExactCVSolver:
    """Closed-form (γ, α) search of the exact path (see the module docstring).

    Parameters
    ----------
    spec : ExactCVSpec
    """

    name: ClassVar[str] = "exact_cv"

    def __init__(self, spec: ExactCVSpec) -> None:
        self.spec = spec

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ExactCVSolver:
        """The solver of an estimator's (validated) ``get_params()``."""
        return cls(ExactCVSpec.from_params(params))

    def kernel_at(self, gamma: float | None, n_features: int, precomputed: bool = False) -> Kernel | None:
        """The kernel at bandwidth ``gamma`` (None: the kernel's own); None when K is given."""
        if precomputed:
            return None  # K is given: α alone is searched
        s = self.spec
        params = SimpleNamespace(kernel=s.kernel, gamma=gamma, degree=s.degree, coef0=s.coef0, length_scale=None,
                                 nu=s.nu, kernel_params=s.kernel_params)  # fmt: skip
        return build_kernel(params, n_features)

    # ----------------------------------------------------------------- prepare / fit
    def prepare(self, data: Dataset, weights: Any = None) -> ExactCVFixed:
        """The training rows in memory (one compute for dask input), their range and scaling.

        Parameters
        ----------
        data : Dataset
        weights : row partition keeping one group, or ``weights(start, stop) -> (1, rows)`` with
            0/1 entries, optional

        Returns
        -------
        ExactCVFixed
        """
        X, Y, keep = training_rows(data, weights, precomputed=self.spec.precomputed)
        data_range = (None, None) if self.spec.precomputed else tuple(column_min_max(X))
        scaler = None
        if self.spec.standardize:
            scaler = standardize_moments(X)
            X = standardize_rows(X, *scaler)
        return ExactCVFixed(X, Y, keep, scaler, data_range, int(data.X.shape[1]))

    def fit(
        self,
        fixed: ExactCVFixed,
        data: Dataset | None = None,
        weights: Any = None,
        *,
        gammas: Sequence[float | None] = (None,),
        eigh: Callable | None = None,
        t0: float | None = None,
    ) -> Solution:
        """The search on the rows ``fixed`` holds (``data`` and ``weights`` were read by
        :meth:`prepare`): the best point's :class:`Solution`, whose ``details`` is the
        :class:`SearchResult` (``gammas``, ``eigh``, ``t0``: see :meth:`search`)."""
        result = self.search(fixed.X, fixed.Y, list(gammas), precomputed=self.spec.precomputed, eigh=eigh, t0=t0)
        best = result.best
        return Solution(best["coef"], best["intercept"], best["alpha"], best["alphas"],
                        {"per_gamma": result.timings}, result)  # fmt: skip

    def _alphas(self, eigvals: np.ndarray, n: int) -> np.ndarray:
        if self.spec.alphas is not None:
            return np.atleast_1d(np.asarray(self.spec.alphas, dtype=np.float64))
        scale = float(np.maximum(eigvals, 0.0).sum()) / n
        return DEFAULT_RELATIVE_ALPHAS * (scale if scale > 0 else 1.0)

    def _score(self, path: Any, n: int) -> dict[str, Any]:
        """Every α of one γ scored from its eigendecomposition: the scores, the evidence, the
        criterion and the best α's index ``j`` and ranking ``key``."""
        alphas = self._alphas(path.eigvals, n)
        sc = closed_form_scores(path, alphas)
        loo, gcv = sc.loo_mse.mean(axis=1), sc.gcv.mean(axis=1)
        # the evidence from the same eigendecomposition: ycᵀ(K̄ + αI)⁻¹yc = Σ c²/(λ + α)
        quad = (path.proj[None] ** 2 / (path.eigvals[None, :, None] + alphas[:, None, None])).sum(axis=1)
        ev = evidence_path(path.eigvals, quad, alphas, n, self.spec.fit_intercept)
        lml = ev.log_likelihood().sum(axis=1)
        crit = {"loo": loo, "gcv": gcv, "evidence": -lml}[self.spec.criterion]
        finite = np.isfinite(crit)
        j = int(np.argmin(np.where(finite, crit, np.inf))) if finite.any() else int(np.argmax(alphas))
        key = (1, -float(crit[j])) if finite.any() else (0, float(alphas[j]))
        return {"alphas": alphas, "sc": sc, "loo": loo, "gcv": gcv, "ev": ev, "lml": lml, "crit": crit, "j": j,
                "key": key}  # fmt: skip

    def _append(self, table: dict[str, list], g_report: float | None, s: dict[str, Any]) -> None:
        alphas = s["alphas"]
        table["gamma"] += [g_report] * alphas.size
        table["alpha"] += alphas.tolist()
        table["loo"] += s["loo"].tolist()
        table["gcv"] += s["gcv"].tolist()
        loo_std = s["sc"].loo_std if self.spec.criterion == "loo" else np.full(alphas.size, np.nan)
        table["loo_std"] += loo_std.tolist()
        table["df"] += s["sc"].df.tolist()
        table["evidence"] += s["lml"].tolist()

    def search(
        self,
        X: Any,
        Y: np.ndarray,
        gammas: list[float | None],
        *,
        precomputed: bool = False,
        eigh: Callable | None = None,
        t0: float | None = None,
    ) -> SearchResult:
        """Score every (γ, α) and keep the best point's coefficients.

        Per γ, one Gram matrix and one eigendecomposition serve every α and the best point's
        coefficients; each Gram matrix is freed before the next is built (the memory bound of
        :func:`exact_cv_bytes`).

        Parameters
        ----------
        X : ndarray of shape (n, d), or K (n, n) when ``precomputed``
        Y : ndarray of shape (n, k)
        gammas : list of float or None
            The γ grid (``[None]``: the kernel's own bandwidth).
        precomputed : bool, default=False
        eigh : callable, optional
            The eigendecomposition (on a GPU); default LAPACK on the host.
        t0 : float, optional
            When the fit started (``time.perf_counter()``; for the time-left log line).

        Returns
        -------
        SearchResult
        """
        n, d = X.shape
        t0 = time.perf_counter() if t0 is None else t0
        table: dict[str, list] = {k: [] for k in TABLE_COLUMNS}
        timings: list[dict] = []
        best_key, best = None, None
        for gi, g in enumerate(gammas):
            kernel = self.kernel_at(g, d, precomputed)
            tiler = PrecomputedGram(X) if kernel is None else GramTiler(kernel, X)
            t = time.perf_counter()
            K = tiler.dense()
            t_gram = time.perf_counter() - t
            # the eigendecomposition is nearly all of the time: say so before it starts
            logger.info(
                "ExactKernelRidgeCV: gamma %d/%d: eigendecomposition of the %s × %s Gram matrix%s",
                gi + 1, len(gammas), f"{n:,}", f"{n:,}",
                f" (the last took {timings[-1]['eigh_seconds']:.1f}s)" if timings else "",
            )  # fmt: skip
            path = spectral_path(K, Y, fit_intercept=self.spec.fit_intercept, overwrite=True, eigh=eigh)
            del K
            t_eigh = time.perf_counter() - t - t_gram
            s = self._score(path, n)
            g_report = g if g is not None else kernel_gamma(kernel)
            self._append(table, g_report, s)
            if best_key is None or s["key"] > best_key:  # strict: ties keep the first point
                a = float(s["alphas"][s["j"]])
                best_key = s["key"]
                best = {"gamma": g, "kernel": kernel, "tiler": tiler, "alpha": a, "alphas": s["alphas"],
                        "coef": path.coef(a), "intercept": path.intercept(a), "df": s["sc"].df, "gcv": s["sc"].gcv,
                        "loo": s["sc"].loo_mse, "evidence": s["ev"]}  # fmt: skip
            timings.append({"gamma": g_report, "gram_seconds": round(t_gram, 3), "eigh_seconds": round(t_eigh, 3),
                            "score_seconds": round(time.perf_counter() - t - t_gram - t_eigh, 3)})  # fmt: skip
            self._log_gamma(gi, len(gammas), g_report, n, t_gram, t_eigh, s, t0)
            del path
        return SearchResult(table, timings, best)

    def _log_gamma(self, gi: int, n_gammas: int, g_report, n: int, t_gram: float, t_eigh: float, s, t0: float) -> None:
        crit = self.spec.criterion.upper()
        logger.info(
            "ExactKernelRidgeCV: gamma %d/%d done: closed-form %s at gamma=%s, n=%s: Gram %.2fs, eigh %.2fs; "
            "best alpha %.3g (%s %.4g)%s",
            gi + 1, n_gammas, crit, "-" if g_report is None else f"{g_report:.4g}",
            f"{n:,}", t_gram, t_eigh, s["alphas"][s["j"]], crit, s["crit"][s["j"]],
            f"; ~{(time.perf_counter() - t0) / (gi + 1) * (n_gammas - gi - 1):.0f}s left"
            if gi + 1 < n_gammas else "",
        )  # fmt: skip

    # ----------------------------------------------------------------- saved state
    def state(self, fixed: ExactCVFixed, solution: Solution) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The saved attributes and arrays of a fitted CV model (format v1: the layout of the
        stores the estimator wrote before the solver layer).

        Parameters
        ----------
        fixed : ExactCVFixed
            Its ``scaler`` and ``data_range``.
        solution : Solution
            ``coef`` (n, k), ``intercept`` (k,); ``details`` a
            :class:`~bigkernel.solvers.dual_state.CVFacts`.

        Returns
        -------
        attrs : dict
        arrays : dict of ndarray
        """
        f: CVFacts = solution.details
        attrs = {
            "kernel_": kernel_attr(f.tiler.kernel), "alpha_": solution.alpha, "gamma_": f.gamma, "df_": f.df,
            "best_params_": f.best_params, "best_score_": float(f.best_score) if np.isfinite(f.best_score) else None,
            "best_index_": f.best_index, "gamma_searched": f.gamma_searched, "solver_info_": f.solver_info,
            "n_features_in_": f.n_features_in, "n_samples_fit_": f.n_samples, "single_output": f.single,
        }  # fmt: skip
        arrays = {
            **dual_arrays(f.tiler, fixed.scaler, fixed.data_range, solution.coef, solution.intercept),
            "alphas": solution.alphas, "df_path": f.df_path,
            "gcv": np.asarray(f.gcv), "loo_mse": np.asarray(f.loo_mse),
            **{f"cv_{k}": np.asarray(f.cv_results[k]) for k in CV_RESULT_ARRAYS},
        }  # fmt: skip
        if "mean_test_evidence" in f.cv_results:
            arrays["cv_mean_test_evidence"] = np.asarray(f.cv_results["mean_test_evidence"])
        ev_attrs, ev_arrays = evidence_layout(f.bayes)
        return {**attrs, **ev_attrs}, {**arrays, **ev_arrays}

    def from_state(self, attrs: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> tuple[ExactCVFixed, Solution]:
        """Inverse of :meth:`state` (``DataError`` when the arrays' shapes disagree); the
        ``cv_results`` of the details lack ``params`` (the estimator rebuilds them)."""
        kernel, tiler, coef, intercept = read_dual_source(attrs, arrays)
        single = bool(attrs["single_output"])
        scaler, data_range = saved_scaler_range(arrays)
        keep = tiler.keep if kernel is None else None
        fixed = ExactCVFixed(
            None if kernel is None else tiler.X, None, keep, scaler, data_range, int(attrs["n_features_in_"])
        )
        results = {k: arrays[f"cv_{k}"] for k in CV_RESULT_ARRAYS}
        if "cv_mean_test_evidence" in arrays:  # stores before the evidence have none
            results["mean_test_evidence"] = arrays["cv_mean_test_evidence"]
        facts = CVFacts(
            tiler=tiler, single=single, n_samples=int(attrs["n_samples_fit_"]),
            n_features_in=int(attrs["n_features_in_"]), df=float(attrs["df_"]), df_path=arrays["df_path"],
            gcv=arrays["gcv"], solver_info=attrs["solver_info_"], bayes=read_evidence_layout(attrs, arrays, single),
            gamma=None if attrs["gamma_"] is None else float(attrs["gamma_"]), loo_mse=arrays["loo_mse"],
            cv_results=results, best_params=dict(attrs["best_params_"]),
            best_score=-math.inf if attrs["best_score_"] is None else float(attrs["best_score_"]),
            best_index=int(attrs["best_index_"]), gamma_searched=bool(attrs["gamma_searched"]),
        )  # fmt: skip
        return fixed, Solution(coef, intercept, float(attrs["alpha_"]), arrays["alphas"], {}, facts)


# --------------------------------------------------------------------------------------------
# The training rows
# --------------------------------------------------------------------------------------------
def training_rows(ds: Dataset, weights: Any = None, *, precomputed: bool = False) -> tuple[Any, np.ndarray, Any]:
    """X (n, d), Y (n, k) in memory (one compute for dask input), training rows only, and for a
    precomputed K the kept columns (None: all); a precomputed K is checked square and symmetric."""
    X, Y = ds.X, ds.y if ds.y.ndim == 2 else ds.y[:, None]
    if isinstance(X, da.Array) or isinstance(Y, da.Array):
        X, Y = compute(X, Y, label="load training data")
    X, Y = as_block(X), np.asarray(Y, dtype=np.float64)  # sparse X stays sparse (CSR)
    check_finite(X, Y, 0)
    if precomputed:
        gram_input(X, "fit")
        check_symmetric(X)
    kept = None
    if weights is not None:
        keep = kept_rows(weights, 0, X.shape[0])
        X, Y = X[keep], Y[keep]
        if precomputed and not keep.all():  # K of the kept rows: their columns too
            X, kept = X[:, keep], np.flatnonzero(keep)
    return X, Y, kept


def kept_rows(weights: Any, start: int, stop: int) -> np.ndarray:
    """Boolean mask of rows ``start:stop`` a weight specification keeps (one group or 0/1 weights)."""
    if hasattr(weights, "groups"):
        return np.isin(np.asarray(weights.groups(start, stop)), list(weights.keep))
    W = np.asarray(weights(start, stop), dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != 1 or not np.all((W == 0) | (W == 1)):
        raise ParameterError(
            "ExactKernelRidgeCV takes a row partition or 0/1 row weights (one set) only; weighted or "
            "replicated fits (bootstrap counts) are not supported"
        )
    return W[0] == 1


def count_kept(weights: Any, n: int, block: int = 1 << 20) -> int:
    """Rows a weight specification keeps, counted block by block (no data read)."""
    return sum(int(kept_rows(weights, lo, min(n, lo + block)).sum()) for lo in range(0, n, block))
