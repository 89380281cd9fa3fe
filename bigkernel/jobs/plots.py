"""Figures saved by jobs (layer 4). matplotlib is optional: ``pip install bigkernel[plot]``.

matplotlib is imported inside the functions, so that the core library and jobs without plots
never need it. Figures are drawn on an Agg canvas directly (no pyplot), which leaves the
user's global matplotlib backend untouched.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from bigkernel.errors import DataError, ParameterError

__all__ = ["plot_band"]

logger = logging.getLogger(__name__)

#: Training points drawn at most (an evenly spaced subset beyond that).
MAX_POINTS = 2000


def _figure_factory():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "plotting needs matplotlib, which is not installed; install it with "
            "`pip install bigkernel[plot]` (or `pip install matplotlib`)."
        ) from None

    def new_figure(**kwargs: Any) -> Any:
        fig = Figure(**kwargs)
        FigureCanvasAgg(fig)
        return fig

    return new_figure


def _as_2d(name: str, a: Any) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, np.newaxis]
    if a.ndim != 2:
        raise DataError(f"{name} must be 1-D or 2-D; found shape {a.shape}.")
    return a


def _pick_target(name: str, a: np.ndarray | None, target: int, n_rows: int) -> np.ndarray | None:
    if a is None:
        return None
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, np.newaxis]
    if a.shape[0] != n_rows:
        raise DataError(f"{name} must have {n_rows} rows; found shape {a.shape}.")
    if target >= a.shape[1]:
        raise ParameterError(f"target must be < {a.shape[1]} for {name}; found {target}.")
    return a[:, target]


def plot_band(
    result: Any,
    X_train: Any,
    y_train: Any,
    X_eval: Any,
    fitted_mean: Any = None,
    n_curves: int = 5,
    feature: int = 0,
    *,
    path: str | os.PathLike[str],
    target: int = 0,
    title: str | None = None,
    figsize: tuple[float, float] = (7.0, 4.5),
    dpi: int = 100,
) -> str:
    """Save the lecture's bootstrap figure: data, fitted curve, replicate curves, band.

    For d = 1 this is the band over the input; for d > 1 the band along column ``feature``
    with the other features held at a reference point (build ``X_eval`` with
    :func:`bigkernel.bands.bootstrap.eval_grid`). The training points are then drawn against
    that feature only, as context — they are not on the slice.

    Parameters
    ----------
    result : BootstrapResult
        From :func:`bigkernel.bands.bootstrap.bootstrap` or ``load_bootstrap``.
    X_train : array-like of shape (n_samples, n_features)
        Training inputs (a dask array is read whole: pass a subset for big data). At most
        :data:`MAX_POINTS` evenly spaced points are drawn.
    y_train : array-like of shape (n_samples,) or (n_samples, n_targets)
    X_eval : array-like of shape (n_eval, n_features)
        The evaluation points of ``result``.
    fitted_mean : array-like of shape (n_eval,) or (n_eval, n_targets), optional
        Predictions of the model fitted on all the data; default: the bootstrap mean (labelled
        so).
    n_curves : int, default=5
        Replicate curves drawn (the first ones).
    feature : int, default=0
        Column of ``X_eval`` on the horizontal axis.
    path : str or os.PathLike
        Output PNG file.
    target : int, default=0
        Target plotted when y has several.
    title : str, optional
    figsize : (float, float), default=(7.0, 4.5)
        Inches; the PNG is ``figsize * dpi`` pixels.
    dpi : int, default=100

    Returns
    -------
    str
        ``path``.
    """
    new_figure = _figure_factory()
    E = _as_2d("X_eval", X_eval)
    n_eval = E.shape[0]
    if not 0 <= feature < E.shape[1]:
        raise ParameterError(f"feature must be in [0, {E.shape[1]}); found {feature}.")
    if isinstance(n_curves, bool) or int(n_curves) != n_curves or n_curves < 0:
        raise ParameterError(f"n_curves must be an integer >= 0; found {n_curves!r}.")
    mean = _pick_target("result.mean", result.mean, target, n_eval)
    lower = _pick_target("result.lower", result.lower, target, n_eval)
    upper = _pick_target("result.upper", result.upper, target, n_eval)
    fitted = _pick_target("fitted_mean", fitted_mean, target, n_eval)

    Xt = _as_2d("X_train", np.asarray(X_train))
    yt = _pick_target("y_train", np.asarray(y_train), target, Xt.shape[0])
    if Xt.shape[0] > MAX_POINTS:
        keep = np.linspace(0, Xt.shape[0] - 1, MAX_POINTS).astype(int)
        Xt, yt = Xt[keep], yt[keep]

    x = E[:, feature]
    order = np.argsort(x, kind="stable")
    x = x[order]
    m = min(int(n_curves), int(result.n_bootstraps))
    curves = None
    if m:
        preds = np.asarray(result.predictions[:m])
        curves = (preds[:, :, target] if preds.ndim == 3 else preds)[:, order]

    fig = new_figure(figsize=figsize, dpi=dpi)
    ax = fig.add_subplot()
    level = round(100 * result.confidence_level)
    # data underneath, then the band, the replicate curves and the fitted curve on top
    ax.scatter(Xt[:, feature], yt, s=8, color="0.5", alpha=0.4, linewidths=0, label="data",
               zorder=1)
    ax.fill_between(x, lower[order], upper[order], color="tab:blue", alpha=0.35, linewidth=0,
                    label=f"{level} % bootstrap band (B = {result.n_bootstraps})", zorder=2)
    if curves is not None:
        for i, c in enumerate(curves):
            ax.plot(x, c, color="tab:orange", linewidth=0.8, alpha=0.8,
                    label="bootstrap replicates" if i == 0 else None, zorder=3)
    if fitted is not None:
        ax.plot(x, fitted[order], color="black", linewidth=1.5, label="fitted", zorder=4)
    else:
        ax.plot(x, mean[order], color="black", linewidth=1.5, label="bootstrap mean", zorder=4)
    d = E.shape[1]
    ax.set_xlabel(f"x{feature}" if d > 1 else "x")
    ax.set_ylabel("y" if np.ndim(y_train) == 1 else f"y{target}")
    if title is None and d > 1:
        title = f"band along x{feature}, other features at the reference point"
    if title:
        ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    path = os.fspath(path)
    fig.savefig(path, format="png")
    logger.info("saved bootstrap band plot %s", path)
    return path
