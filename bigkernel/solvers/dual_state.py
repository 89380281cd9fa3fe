"""The saved state of the dual solvers (exact, exact CV): format v1's layout (layer 3).

:meth:`ExactSolver.state <bigkernel.solvers.exact.ExactSolver.state>` and
:meth:`ExactCVSolver.state <bigkernel.solvers.exact_cv.ExactCVSolver.state>` write a
:class:`~bigkernel.solvers.base.Solution` whose ``details`` carries the fitted facts
(:class:`DualFacts` and its subclasses) into JSON attributes and arrays, and ``from_state``
reads them back. The layout is that of the stores the estimators wrote before the solver layer
(``tests/fixtures/format_v1``); key order included, it must not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bigkernel._sparse import array_or_sparse, model_arrays
from bigkernel.errors import DataError
from bigkernel.kernels.factory import kernel_from_dict
from bigkernel.kernels.registry import PRECOMPUTED, is_precomputed
from bigkernel.numerics.evidence import EvidencePath
from bigkernel.numerics.gram_tiles import GramTiler
from bigkernel.numerics.precomputed import PrecomputedGram

__all__ = [
    "Bayes",
    "CVFacts",
    "DualFacts",
    "ExactFacts",
    "kernel_attr",
    "saved_scaler_range",
    "dual_arrays",
    "evidence_layout",
    "read_dual_source",
    "read_evidence_layout",
]


@dataclass(frozen=True)
class Bayes:
    """The Bayesian facts of a fit as the estimator holds them.

    Attributes
    ----------
    sigma2 : float, ndarray or None
        Signal variance (None or NaN: unknown; a store without it was saved before the posterior).
    lml : float
        Evidence at the chosen α (NaN: unknown).
    lml_path : ndarray or None
        Evidence along the α path.
    evidence : EvidencePath or None
    """

    sigma2: Any = None
    lml: float = np.nan
    lml_path: np.ndarray | None = None
    evidence: EvidencePath | None = None


@dataclass(frozen=True)
class DualFacts:
    """``Solution.details`` of a dual model's saved state: what it holds besides the dual
    coefficients, the intercept and the α path.

    Attributes
    ----------
    tiler : GramTiler or PrecomputedGram
        The source of the fitted model's kernel columns (a precomputed one: columns only).
    single : bool
        Whether y was 1-D.
    n_samples, n_features_in : int
    df : float
    df_path, gcv : ndarray
    solver_info : dict
    bayes : Bayes
    """

    tiler: Any
    single: bool
    n_samples: int
    n_features_in: int
    df: float
    df_path: np.ndarray
    gcv: np.ndarray
    solver_info: dict
    bayes: Bayes


def kernel_attr(kernel: Any) -> dict:
    """The saved ``kernel_`` (``{"name": "precomputed"}`` when K was given)."""
    return {"name": PRECOMPUTED} if kernel is None else kernel.to_dict()


def dual_arrays(
    tiler: Any, scaler: Any, data_range: tuple[Any, Any], coef: np.ndarray, intercept: np.ndarray
) -> dict[str, np.ndarray]:
    """The arrays every dual model saves: dual coefficients, intercept, the training points (or a
    precomputed K's kept columns), the scaling and the training range.

    Parameters
    ----------
    tiler : GramTiler or PrecomputedGram
        The fitted model's kernel source: its points ``X`` (a kernel by name), or the kept
        columns ``keep`` of a precomputed K.
    scaler : (mean, scale) or None
    data_range : (min, max)
        Per feature, or ``(None, None)`` when unknown.
    coef : ndarray of shape (n, k)
    intercept : ndarray of shape (k,)

    Returns
    -------
    dict of ndarray
    """
    arrays = {"dual_coef": coef, "intercept": intercept}
    if tiler.kernel is not None:
        arrays.update(model_arrays("X_fit", tiler.X))  # sparse points: their CSR parts
    elif tiler.keep is not None:  # precomputed: the training columns fitted
        arrays["precomputed_keep"] = tiler.keep
    if scaler is not None:
        arrays["scaler_mean"], arrays["scaler_scale"] = scaler
    lo, hi = data_range
    if lo is not None:
        arrays["data_min"], arrays["data_max"] = lo, hi
    return arrays


def read_dual_source(attrs: dict, arrays: dict[str, np.ndarray]) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    """``(kernel, tiler, dual_coef, intercept)`` of a saved dual model, shapes checked (the
    kernel is None and the tiler columns-only for a precomputed K)."""
    coef, intercept = arrays["dual_coef"], arrays["intercept"]
    if is_precomputed(attrs["kernel_"].get("name")):
        tiler = PrecomputedGram.columns_only(int(attrs["n_features_in_"]), arrays.get("precomputed_keep"))
        if coef.shape != (tiler.n, intercept.shape[0]):
            raise DataError(f"dual_coef {coef.shape} does not fit the {tiler.n} training rows of the saved model")
        return None, tiler, coef, intercept
    X = array_or_sparse("X_fit", arrays)
    if X.ndim != 2 or coef.shape != (X.shape[0], intercept.shape[0]):
        raise DataError(
            f"X_fit {X.shape}, dual_coef {coef.shape} and intercept {intercept.shape} do not "
            "agree: expected (n, d), (n, k) and (k,)"
        )
    kernel = kernel_from_dict(attrs["kernel_"])
    return kernel, GramTiler(kernel, X), coef, intercept


def saved_scaler_range(arrays: dict[str, np.ndarray]) -> tuple[Any, tuple[Any, Any]]:
    """The saved scaling (or None) and training range (``(None, None)`` when not saved)."""
    scaler = (arrays["scaler_mean"], arrays["scaler_scale"]) if "scaler_mean" in arrays else None
    return scaler, (arrays.get("data_min"), arrays.get("data_max"))


def evidence_layout(bayes: Bayes) -> tuple[dict, dict[str, np.ndarray]]:
    """The saved form of the Bayesian facts (attrs, arrays); empty when σ² is unknown."""
    s2 = bayes.sigma2
    if s2 is None or np.all(np.isnan(np.atleast_1d(s2))):
        return {}, {}
    arrays = {"sigma2": np.atleast_1d(np.asarray(s2, dtype=np.float64))}
    attrs: dict[str, Any] = {"log_marginal_likelihood_": float(bayes.lml)}
    if bayes.lml_path is not None:
        arrays["lml_path"] = np.asarray(bayes.lml_path, dtype=np.float64)
    ev = bayes.evidence
    if ev is not None:
        attrs["evidence"] = {"n": ev.n, "fit_intercept": ev.fit_intercept}
        arrays.update(evidence_alphas=ev.alphas, evidence_quad=ev.quad, evidence_log_det=ev.log_det)
    return attrs, arrays


def read_evidence_layout(attrs: dict, arrays: dict[str, np.ndarray], single: bool) -> Bayes:
    """Inverse of :func:`evidence_layout` (``sigma2`` None: the store has no posterior)."""
    meta = attrs.get("evidence")
    ev = None if meta is None else EvidencePath(
        arrays["evidence_alphas"], arrays["evidence_quad"], arrays["evidence_log_det"], float(meta["n"]),
        bool(meta["fit_intercept"]))  # fmt: skip
    if "sigma2" not in arrays:
        return Bayes(None, np.nan, None, ev)
    s2 = np.asarray(arrays["sigma2"], dtype=np.float64)
    return Bayes(float(s2[0]) if single else s2, float(attrs["log_marginal_likelihood_"]), arrays.get("lml_path"), ev)


@dataclass(frozen=True)
class ExactFacts(DualFacts):
    """``Solution.details`` of :meth:`ExactSolver.state <bigkernel.solvers.exact.ExactSolver.state>`:
    the dual facts plus df's standard error and CG's iterations and residuals (int/float for one
    target, arrays for several)."""

    df_stderr: float
    df_stderr_path: np.ndarray
    n_iter: Any
    residual: Any


@dataclass(frozen=True)
class CVFacts(DualFacts):
    """``Solution.details`` of :meth:`ExactCVSolver.state <bigkernel.solvers.exact_cv.ExactCVSolver.state>`:
    the dual facts plus the chosen γ, the LOO errors and the search's table (``cv_results``
    without ``params``, which the estimator rebuilds)."""

    gamma: float | None
    loo_mse: np.ndarray
    cv_results: dict[str, np.ndarray]
    best_params: dict
    best_score: float
    best_index: int
    gamma_searched: bool
