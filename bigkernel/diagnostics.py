"""Signs that a fitted model is useless, each with its fix: a chosen α or γ on the edge of the
grid searched, feature scales far apart with ``standardize`` off, a holdout score no better
than a constant; and, at predict, rows far outside the training range (extrapolation).

Read from what every fit already keeps (``alphas_``/``alpha_``, ``cv_results_``, the training
range ``data_min_``/``data_max_``, the job's scores): no pass over the data. The estimators'
``fit`` logs the model findings at WARNING level on the ``bigkernel.diagnostics`` logger
(:func:`log_fit`; without logging configured Python prints them to stderr); a job logs every
finding and lists it in ``metrics.json`` and ``report.md``.

Logged, not ``warnings.warn``: scikit-learn's own searches (``RidgeCV``, ``GridSearchCV``) say
nothing about a grid edge, so a warning class would turn the coarse grids of every test and
pipeline that fits random data into errors under ``-W error``; a log record is seen and can be
silenced (``logging.getLogger("bigkernel.diagnostics").setLevel(logging.ERROR)``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from bigkernel._sparse import is_sparse
from bigkernel.kernels.registry import is_precomputed, kernel_spec

logger = logging.getLogger(__name__)

#: feature ranges differing by more than this factor (``standardize`` off) are flagged
SCALE_RATIO = 100.0
#: a row to predict extrapolates when a feature lies beyond the training range by more than
#: this fraction of the range's width (rows just past an edge are ordinary in new data)
EXTRAPOLATION_MARGIN = 0.1
#: values of numpy X checked at a time (bounds the check's float64 temporaries: 8 MiB each)
SUMMARY_BLOCK_VALUES = 2**20
#: kernels whose input domain standardising would break (histograms, the fixed Fourier basis on
#: [0, 1]) or that ignore X: their column scales are the user's on purpose
_SCALE_FREE_KERNELS = frozenset({"fourier", "chi2", "additive_chi2", "constant"})


@dataclass(frozen=True)
class Finding:
    """One sign of a useless fit: a stable ``code`` and a ``message`` naming the fix."""

    code: str
    message: str

    def as_dict(self) -> dict[str, str]:
        """``{"code", "message"}`` for metrics.json."""
        return {"code": self.code, "message": self.message}


def _set(key: str, value: str, job: bool) -> str:
    """A parameter setting as the user writes it: ``key: value`` in a job, ``key=Value`` in Python."""
    if job:
        return f"`{key}: {value}`"
    return f"{key}={value.capitalize() if value in ('true', 'false') else value}"


def _layers(est) -> list:
    """``est`` and the models it wraps (a classifier's regressor, KernelRidge's solver)."""
    out = [est]
    while hasattr(out[-1], "estimator_") and len(out) < 4:
        out.append(out[-1].estimator_)
    return out


def _first(est, name: str):
    return next((getattr(m, name) for m in _layers(est) if getattr(m, name, None) is not None), None)


def _criterion(est) -> str:
    """How the grid was scored, in words."""
    crit = _first(est, "criterion")  # ExactKernelRidgeCV
    if crit is None and hasattr(est, "cv_results_"):
        crit = getattr(est, "cv", None)
    if crit is None and _first(est, "validation_scores_") is not None:  # NystroemRidge(solver="cg")
        return f"the held-out {_first(est, 'validation_fraction') or 0.1:.0%} of the rows"
    if crit is None:
        crit = getattr(est, "alpha", "gcv")  # "evidence"; "gcv" or a list are scored by GCV
    if isinstance(crit, (int, np.integer)) and not isinstance(crit, bool):
        return f"{crit}-fold CV"
    return {"loo": "leave-one-out", "evidence": "the evidence"}.get(str(crit).lower(), "GCV")


def _edge(grid: np.ndarray, chosen: float) -> str | None:
    """ "top", "bottom" or None: where ``chosen`` sits in ``grid`` (None: a grid of one value)."""
    grid = np.unique(grid[np.isfinite(grid)])
    if grid.size < 2:
        return None
    if np.isclose(chosen, grid[-1], rtol=1e-9, atol=0):
        return "top"
    if np.isclose(chosen, grid[0], rtol=1e-9, atol=0):
        return "bottom"
    return None


def _grid(est) -> tuple[np.ndarray | None, np.ndarray, float, float | None]:
    """(γ grid or None, α grid at the chosen γ, chosen α, chosen γ or None)."""
    results = _first(est, "cv_results_")
    if results is not None:
        best = _first(est, "best_index_")
        if best is None:  # a classifier's search keeps best_params_ only
            best = list(results["params"]).index(_first(est, "best_params_"))
        best = int(best)
        gammas, alphas = np.asarray(results["param_gamma"]), np.asarray(results["param_alpha"])
        g = float(gammas[best])
        at_g = alphas[gammas == g] if np.isfinite(g) else alphas
        return (gammas if np.isfinite(g) else None), at_g, float(alphas[best]), (g if np.isfinite(g) else None)
    alphas = _first(est, "alphas_")
    alpha = _first(est, "alpha_")
    return None, np.atleast_1d(np.asarray(alphas if alphas is not None else [], dtype=np.float64)), alpha, None


def grid_edge_findings(est, *, job: bool = False) -> list[Finding]:
    """The chosen α (GCV, K-fold CV, the evidence, leave-one-out) or γ on an edge of its grid.

    Parameters
    ----------
    est : fitted estimator
        Any bigkernel regressor or classifier; a fixed α (a grid of one) gives nothing.
    job : bool, default=False
        Name the fixes as YAML keys (``standardize: true``) rather than parameters.

    Returns
    -------
    list of Finding
    """
    gammas, alphas, alpha, gamma = _grid(est)
    out = []
    how = _criterion(est)
    a_key = "alpha" if job else ("alphas" if hasattr(est, "cv_results_") else "alpha")
    g_key = "gamma" if job else "gammas"
    std = _set("standardize", "true", job)
    scaled = bool(getattr(est, "standardize", False))  # then standardising is no fix to offer
    raw = "" if scaled else f"features on raw scales (set {std}), or "
    if alpha is not None and np.size(alpha) == 1 and (edge := _edge(alphas, float(alpha))):
        grid = f"{alphas.size} α from {alphas.min():.3g} to {alphas.max():.3g}"
        if edge == "top":
            fix = (
                f"the fit wants more smoothing than the grid allows, often a sign that nothing was learnt: "
                f"{raw}a γ too large for the data's scale (try a smaller γ); to find the optimum, give "
                f"`{a_key}` a grid reaching above {alphas.max():.3g}"
            )
        else:
            fix = (
                f"the fit wants (almost) no penalty: give `{a_key}` a grid reaching below "
                f"{alphas.min():.3g}; if the score still improves there the model interpolates the data — "
                f"check the holdout score and the bandwidth γ for the data's scale (with random features or "
                f"Nyström, more components may fit better)"
            )
        out.append(Finding(
            f"alpha_at_{edge}_of_grid",
            f"α={float(alpha):.3g}, chosen by {how}, is the {'largest' if edge == 'top' else 'smallest'} of the "
            f"{grid} searched: {fix}.",
        ))  # fmt: skip
    if gammas is not None and gamma is not None and (edge := _edge(gammas, gamma)):
        u = np.unique(gammas)
        if edge == "bottom":
            fix = (
                "the smoothest kernel searched fitted best: "
                + ("" if scaled else f"if the features are on raw scales set {std}; else ")
                + f"give `{g_key}` values below {u[0]:.3g}"
            )
        else:
            fix = f"the roughest kernel searched fitted best: give `{g_key}` values above {u[-1]:.3g}"
        out.append(Finding(
            f"gamma_at_{edge}_of_grid",
            f"γ={gamma:.3g}, chosen by {how}, is the {'smallest' if edge == 'bottom' else 'largest'} of the "
            f"{u.size} γ from {u[0]:.3g} to {u[-1]:.3g} searched: {fix}.",
        ))  # fmt: skip
    return out


def _kernel_name(est) -> str | None:
    kernel = getattr(est, "kernel", None)
    if kernel is None or is_precomputed(kernel):
        return None
    try:
        return kernel_spec(kernel if isinstance(kernel, str) else getattr(kernel, "name", str(kernel))).name
    except (KeyError, ValueError, TypeError):
        return None


def feature_scale_findings(est, *, job: bool = False) -> list[Finding]:
    """Feature ranges (``data_min_``/``data_max_`` of the fit's own pass) differing by more
    than :data:`SCALE_RATIO` times while ``standardize`` is off.

    Columns without spread are left out (they carry no scale); kernels whose domain is the
    user's on purpose (histograms for chi², [0, 1] for the Fourier basis) are not checked.
    """
    if getattr(est, "standardize", False) or _kernel_name(est) in (None, *_SCALE_FREE_KERNELS):
        return []
    lo, hi = _first(est, "data_min_"), _first(est, "data_max_")
    if lo is None or hi is None:
        return []
    width = np.asarray(hi, dtype=np.float64) - np.asarray(lo, dtype=np.float64)
    spread = np.flatnonzero(np.isfinite(width) & (width > 0))
    if spread.size < 2:
        return []
    wide, narrow = spread[np.argmax(width[spread])], spread[np.argmin(width[spread])]
    ratio = width[wide] / width[narrow]
    if ratio <= SCALE_RATIO:
        return []
    names = getattr(est, "feature_names_in_", None)

    def name(i: int) -> str:
        return repr(str(names[i])) if names is not None else f"feature {i}"

    return [Finding(
        "feature_scales",
        f"the feature ranges differ by {ratio:.3g}× ({name(wide)} spans {width[wide]:.3g}, {name(narrow)} "
        f"{width[narrow]:.3g}) and standardize is off: one bandwidth γ cannot suit every column — the widest "
        f"dominates the kernel's distances and the narrowest are ignored. Set {_set('standardize', 'true', job)} "
        f"(or rescale the columns yourself).",
    )]  # fmt: skip


def convergence_findings(est, *, job: bool = False) -> list[Finding]:
    """A Nyström CG fit (``solver="cg"``) that stopped at ``max_iter`` above ``tol``: its
    coefficients are an early-stopped iterate, not the ridge solution at the reported α."""
    info = _first(est, "solver_info_")
    if not isinstance(info, dict) or info.get("solver") != "nystroem_cg" or info.get("converged", True):
        return []
    if info.get("chosen_converged", False):  # another α's column stopped early: not the model's
        return []
    passes, worst = info.get("n_iter"), info.get("residual_max", float("nan"))
    return [Finding(
        "cg_not_converged",
        f"Nyström CG stopped after {passes} passes (max_iter) with a relative residual up to {worst:.2g}, above "
        f"tol: the coefficients are an early-stopped solution, not the ridge solution at the chosen α. Raise "
        f"{_set('max_iter', str(2 * int(passes or 50)), job)}, loosen tol, or give a grid whose smallest α is larger "
        "(small α need more passes).",
    )]  # fmt: skip


def held_out_findings(est, *, job: bool = False) -> list[Finding]:
    """A Nyström CG fit whose chosen α scores no better on its held-out rows than predicting the
    training mean (held-out R² <= 0): whatever α the grid offered, the model learnt nothing."""
    info = _first(est, "solver_info_")
    if not isinstance(info, dict) or "held_out_mse" not in info:
        return []
    mse, constant = float(info["held_out_mse"]), float(info["held_out_constant_mse"])
    if not (np.isfinite(mse) and mse >= constant):
        return []
    return [Finding(
        "held_out_r2_not_positive",
        f"the chosen α scores a held-out MSE of {mse:.4g}, no better than predicting the training mean "
        f"({constant:.4g}): the model learnt nothing. If CG did not converge, see that warning; else check the "
        f"bandwidth γ for the data's scale (or set {_set('standardize', 'true', job)}) and the α grid.",
    )]  # fmt: skip


def fit_findings(est, *, job: bool = False) -> list[Finding]:
    """Every finding about a fitted model: grid edges, feature scales, CG convergence, a held-out
    score no better than the mean."""
    return (grid_edge_findings(est, job=job) + feature_scale_findings(est, job=job)
            + convergence_findings(est, job=job) + held_out_findings(est, job=job))  # fmt: skip


def log_fit(est) -> None:
    """Log each of :func:`fit_findings` at WARNING level (called at the end of the estimators'
    ``fit``; not by ``fit_dataset``, ``partial_fit`` or the bootstrap's replicate fits)."""
    for f in fit_findings(est):
        logger.warning("%s: %s [%s]", type(est).__name__, f.message, f.code)


def score_findings(scores: dict[str, dict[str, Any]]) -> list[Finding]:
    """A job's holdout score no better than a constant: R² <= 0 (regression), or accuracy <= the
    share of the training rows' majority class among the scored rows (classification).

    The holdout rows are judged when there are any, else the training rows.
    """
    name = "holdout" if "holdout" in scores else "train"
    s = scores.get(name)
    if s is None:
        return []
    rows = "holdout" if name == "holdout" else "training"
    if "r2" in s and s["r2"] is not None and np.isfinite(s["r2"]) and s["r2"] <= 0:
        return [Finding(
            f"{name}_r2_not_positive",
            f"{rows} R²={s['r2']:.4f} <= 0: the model predicts no better than the mean of y. See the other "
            "warnings for the cause; usual fixes: `standardize: true`, a γ suited to the data's scale "
            "(or a list of γ / `gamma: cv` to search), more components.",
        )]  # fmt: skip
    if "accuracy" in s and "confusion_matrix" in s:
        conf = np.asarray(s["confusion_matrix"], dtype=np.float64)
        ref = np.asarray(scores.get("train", s)["confusion_matrix"], dtype=np.float64)
        majority = int(np.argmax(ref.sum(axis=1)))
        rate = conf[majority].sum() / max(conf.sum(), 1.0)
        if s["accuracy"] <= rate:
            return [Finding(
                f"{name}_accuracy_at_majority_rate",
                f"{rows} accuracy {s['accuracy']:.4f} <= {rate:.4f}, the rate of always predicting the majority "
                "class: the classifier learnt nothing useful. See the other warnings for the cause; usual fixes: "
                "`standardize: true`, a γ suited to the data's scale (or `gamma: cv`), `class_weight: balanced` "
                "for rare classes.",
            )]  # fmt: skip
    return []


# --------------------------------------------------------------------------------------------
# At predict: rows far outside the training range
# --------------------------------------------------------------------------------------------
_quiet = threading.local()


@contextmanager
def no_predict_findings() -> Iterator[None]:
    """Within this block (this thread), predict logs no findings: for internal passes that
    predict the training data's own rows or the bootstrap's evaluation points (flagged by the
    band itself)."""
    before = getattr(_quiet, "on", False)
    _quiet.on = True
    try:
        yield
    finally:
        _quiet.on = before


def _training_range(est, d: int) -> tuple[np.ndarray, np.ndarray] | None:
    lo, hi = _first(est, "data_min_"), _first(est, "data_max_")
    if lo is None or hi is None:
        return None
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    return (lo, hi) if lo.shape[0] == d else None


def far_rows_summary(X: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``[[rows beyond the margin, largest excess in widths, its column, its value, rows]]`` of
    one block (shape (1, 5)); a column constant in training counts any other value (excess inf)."""
    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] == 0:
        return np.array([[0.0, -np.inf, 0.0, np.nan, 0.0]])
    width = hi - lo
    beyond = np.maximum(lo - X, X - hi) / np.where(width > 0, width, 1.0)  # in widths; ≤ 0 inside
    beyond = np.where(width > 0, beyond, np.where(beyond > 0, np.inf, beyond))
    row, col = np.unravel_index(int(np.argmax(beyond)), beyond.shape)
    n_far = int(np.count_nonzero(beyond.max(axis=1) > EXTRAPOLATION_MARGIN))
    return np.array([[float(n_far), float(beyond[row, col]), float(col), float(X[row, col]), float(X.shape[0])]])


def extrapolation_summary(est, X: Any) -> Any:
    """:func:`far_rows_summary` of every row block of ``X``: an (m, 5) array (numpy X: blocks of
    :data:`SUMMARY_BLOCK_VALUES`; a dask array: a lazy one, one row per chunk, to compute with
    the pass that reads X — row counts need not be known); None when the training range is
    unknown or X is sparse."""
    import dask.array as da

    if getattr(X, "ndim", 0) != 2 or is_sparse(X) or is_sparse(getattr(X, "_meta", None)):
        return None
    rng = _training_range(est, X.shape[1])
    if rng is None:
        return None
    if not isinstance(X, da.Array):  # in row blocks: a float64 copy of a block at a time
        step = max(1, SUMMARY_BLOCK_VALUES // max(X.shape[1], 1))
        return np.concatenate([far_rows_summary(X[lo : lo + step], *rng) for lo in range(0, max(X.shape[0], 1), step)])
    if X.numblocks[1] > 1:
        X = X.rechunk({1: -1})
    return X.map_blocks(far_rows_summary, *rng, dtype=np.float64, chunks=((1,) * X.numblocks[0], (5,)))


def extrapolation_finding(est, summary: np.ndarray | None) -> Finding | None:
    """The finding of rows beyond the training range by more than :data:`EXTRAPOLATION_MARGIN` of
    its width, from a computed :func:`extrapolation_summary`; None when there are none."""
    if summary is None:
        return None
    summary = np.asarray(summary, dtype=np.float64).reshape(-1, 5)
    n_far, n_rows = int(summary[:, 0].sum()), int(summary[:, 4].sum())
    if n_far == 0:
        return None
    excess, col, value = summary[int(np.argmax(summary[:, 1])), 1:4]
    col = int(col)
    lo, hi = _training_range(est, int(_first(est, "n_features_in_") or col + 1)) or (None, None)
    names = _first(est, "feature_names_in_")
    name = repr(str(names[col])) if names is not None else f"feature {col}"
    if lo is None:
        where = f"{excess:.3g} widths beyond the training range"
    elif not np.isfinite(excess):
        where = f"constant at {lo[col]:.4g} in training"
    else:
        where = f"{excess:.3g} widths beyond the training range [{lo[col]:.4g}, {hi[col]:.4g}]"
    return Finding(
        "extrapolation",
        f"{n_far:,} of {n_rows:,} rows to predict lie beyond the training range by more than "
        f"{EXTRAPOLATION_MARGIN:.0%} of its width (farthest: {name} = {value:.4g}, {where}): the model "
        "extrapolates there and its predictions can be far off. Check those rows (data errors, other "
        "units), or fit on data that covers them.",
    )


def log_predict(est, X: Any, summary: Any = None) -> None:
    """Log :func:`extrapolation_finding` at WARNING level: of numpy ``X`` (predict), or of a
    computed ``summary`` of ``X`` (the passes that write predictions); not within
    :func:`no_predict_findings`."""
    if getattr(_quiet, "on", False):
        return
    if summary is None:
        summary = extrapolation_summary(est, X)
    f = extrapolation_finding(est, summary)
    if f is not None:
        logger.warning("predict: %s [%s]", f.message, f.code)
