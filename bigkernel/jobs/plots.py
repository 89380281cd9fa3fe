"""Figures saved by jobs (layer 4), with matplotlib (a dependency; imported only when a figure
is drawn).

matplotlib is imported inside the functions, so that the core library and jobs without plots
never need it. Figures are drawn on an Agg canvas directly (no pyplot), which leaves the
user's global matplotlib backend untouched.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from bigkernel.data.columns import checked_columns, feature_index, feature_labels
from bigkernel.errors import DataError, ParameterError

__all__ = ["band_figure", "band_title", "plot_band", "plot_confusion", "plot_roc", "posterior_label"]

logger = logging.getLogger(__name__)

#: Training points drawn at most (an evenly spaced subset beyond that).
MAX_POINTS = 2000
#: Evaluation points (d > 1) up to which each tick also shows the point's coordinates.
MAX_LABELLED_POINTS, MAX_LABELLED_FEATURES = 12, 3
#: Colours of the bands: inside the training data's range, and outside it (extrapolation).
IN_RANGE, OUT_OF_RANGE = "tab:blue", "tab:red"


def _figure_factory():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "plotting needs matplotlib, a dependency of bigkernel that is missing here; "
            "reinstall bigkernel or `pip install matplotlib`."
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


def band_title(confidence_level: float, interval: str) -> str:
    """What a band is, for a title or a legend: e.g. "90 % confidence band for f-hat(x)".

    Parameters
    ----------
    confidence_level : float
    interval : {"confidence", "prediction"}
        ``BootstrapResult.interval``.

    Returns
    -------
    str
        Mathtext (``$\\hat f(x)$``) for matplotlib.
    """
    level = f"{100 * confidence_level:g} %"
    if interval == "prediction":
        return f"{level} prediction interval for a new $y$"
    return f"{level} confidence band for $\\hat f(x)$"


def _is_grid(E: np.ndarray, feature: int) -> bool:
    """Whether ``E`` is a grid as :func:`~bigkernel.bands.bootstrap.eval_grid` makes one:
    evenly spaced increasing values of column ``feature``, the other columns constant."""
    if E.shape[0] < 2:
        return False
    others = np.delete(E, feature, axis=1)
    step = np.diff(E[:, feature])
    return bool(np.all(others == others[0]) and np.all(step > 0) and np.allclose(step, step[0], rtol=1e-6, atol=0.0))


def band_figure(
    result: Any,
    X_train: Any,
    y_train: Any,
    X_eval: Any,
    fitted_mean: Any = None,
    n_curves: int = 5,
    feature: int = 0,
    *,
    points: bool | None = None,
    target: int = 0,
    title: str | None = None,
    figsize: tuple[float, float] = (7.0, 4.5),
    dpi: int = 100,
    posterior: dict | None = None,
    feature_names: Sequence[str] | None = None,
) -> Any:
    """The bootstrap figure as a matplotlib ``Figure`` (see :func:`plot_band`, which saves it).

    Returns
    -------
    matplotlib.figure.Figure
        On an Agg canvas; one axes.
    """
    new_figure = _figure_factory()
    E = _as_2d("X_eval", X_eval)
    n_eval, d = E.shape
    if feature_names is None:
        feature_names = checked_columns(None, X_eval=X_eval, X_train=X_train)
    feature = feature_index(feature, feature_names, d) if isinstance(feature, str) else feature
    if not 0 <= feature < d:
        raise ParameterError(f"feature must be in [0, {d}); found {feature}.")
    labels = feature_labels(feature_names, d)
    if isinstance(n_curves, bool) or int(n_curves) != n_curves or n_curves < 0:
        raise ParameterError(f"n_curves must be an integer >= 0; found {n_curves!r}.")
    band, fitted, outside = _band_arrays(result, fitted_mean, target, n_eval)
    Xt, yt = _training_points(X_train, y_train, target)

    # constrained layout keeps a legend below the axes inside the figure
    fig = new_figure(figsize=figsize, dpi=dpi, layout="constrained")
    ax = fig.add_subplot()
    grid = _is_grid(E, feature) if points is None else not points
    draw = _draw_grid if grid else _draw_points
    context = draw(ax, result, E, band, fitted, outside, Xt, yt, feature, int(n_curves), target, labels)
    if posterior is not None:
        _draw_posterior(ax, posterior, E, feature, grid, target, n_eval)
    ax.set_ylabel("y" if np.ndim(y_train) == 1 else f"y{target}")
    if title is None:
        title = f"{band_title(result.confidence_level, result.interval)} (bootstrap, B={result.n_bootstraps})"
        if posterior is not None:
            title += " and the posterior band"
        title += f"\n{context}" if context else ""
    if title:
        ax.set_title(title, fontsize="medium")
    _legend(ax, grid, d)
    return fig


def _band_arrays(
    result: Any, fitted_mean: Any, target: int, n_eval: int
) -> tuple[dict[str, np.ndarray], np.ndarray | None, np.ndarray]:
    """The band's arrays of one target (mean, interval, confidence band), the fitted values
    and the out-of-range flags, each checked to have ``n_eval`` rows."""
    band = {
        name: _pick_target(f"result.{name}", getattr(result, name), target, n_eval)
        for name in ("mean", "lower", "upper", "confidence_lower", "confidence_upper")
    }
    fitted = _pick_target("fitted_mean", fitted_mean, target, n_eval)
    outside = np.asarray(result.out_of_range, dtype=bool).reshape(-1)
    if outside.shape != (n_eval,):
        raise DataError(f"result.out_of_range must have {n_eval} values; found {outside.shape}.")
    return band, fitted, outside


def _training_points(X_train: Any, y_train: Any, target: int) -> tuple[np.ndarray, np.ndarray]:
    """The training points drawn: at most :data:`MAX_POINTS`, evenly spaced."""
    Xt = _as_2d("X_train", np.asarray(X_train))
    yt = _pick_target("y_train", np.asarray(y_train), target, Xt.shape[0])
    if Xt.shape[0] > MAX_POINTS:
        keep = np.linspace(0, Xt.shape[0] - 1, MAX_POINTS).astype(int)
        Xt, yt = Xt[keep], yt[keep]
    return Xt, yt


def _legend(ax: Any, grid: bool, d: int) -> None:
    """In the axes along a grid; below them for interval bars (which span the whole axes)."""
    if grid:
        ax.legend(loc="best", fontsize="small")
    else:
        ax.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.16 if d == 1 else -0.22),
            ncol=2,
            fontsize="small",
            frameon=False,
        )


def _draw_grid(
    ax: Any,
    result: Any,
    E: np.ndarray,
    band: dict[str, np.ndarray],
    fitted: Any,
    outside: np.ndarray,
    Xt: np.ndarray,
    yt: np.ndarray,
    feature: int,
    n_curves: int,
    target: int,
    labels: list[str],
) -> str:
    """A grid: the band shaded along ``feature``, replicate curves and the fitted curve."""
    x = E[:, feature]
    order = np.argsort(x, kind="stable")
    x = x[order]
    centre, centre_label = (fitted, "fitted $\\hat f(x)$") if fitted is not None else (band["mean"], "bootstrap mean")
    # data underneath, then the band(s), the replicate curves and the fitted curve on top
    ax.scatter(Xt[:, feature], yt, s=8, color="0.5", alpha=0.4, linewidths=0, label="data", zorder=1)
    _shade_band(ax, result, x, order, band)
    _replicate_curves(ax, result, x, order, n_curves, target)
    ax.plot(x, centre[order], color="black", linewidth=1.5, label=centre_label, zorder=4)
    if outside.any():
        ax.plot(
            E[outside, feature],
            centre[outside],
            "x",
            color=OUT_OF_RANGE,
            ms=6,
            label="outside the training data's range",
            zorder=5,
        )
    d, name = E.shape[1], labels[feature]
    ax.set_xlabel(name if d > 1 or name != "x0" else "x")
    return f"along {name}, other features at the reference point" if d > 1 else ""


def _shade_band(ax: Any, result: Any, x: np.ndarray, order: np.ndarray, band: dict[str, np.ndarray]) -> None:
    """The interval shaded along the grid; for a prediction interval, the confidence band of
    the same replicates darker inside it."""
    ax.fill_between(
        x,
        band["lower"][order],
        band["upper"][order],
        color=IN_RANGE,
        alpha=0.3,
        linewidth=0,
        label=band_title(result.confidence_level, result.interval),
        zorder=2,
    )
    if result.interval == "prediction":
        ax.fill_between(
            x,
            band["confidence_lower"][order],
            band["confidence_upper"][order],
            color=IN_RANGE,
            alpha=0.45,
            linewidth=0,
            label=band_title(result.confidence_level, "confidence"),
            zorder=2,
        )


def _replicate_curves(ax: Any, result: Any, x: np.ndarray, order: np.ndarray, n_curves: int, target: int) -> None:
    """The first ``n_curves`` replicate predictions along the grid (read from the store)."""
    m = min(n_curves, int(result.n_bootstraps))
    if not m:
        return
    preds = np.asarray(result.predictions[:m])
    curves = (preds[:, :, target] if preds.ndim == 3 else preds)[:, order]
    for i, c in enumerate(curves):
        ax.plot(
            x,
            c,
            color="tab:orange",
            linewidth=0.8,
            alpha=0.8,
            label="bootstrap replicates" if i == 0 else None,
            zorder=3,
        )


def _draw_points(
    ax: Any,
    result: Any,
    E: np.ndarray,
    band: dict[str, np.ndarray],
    fitted: Any,
    outside: np.ndarray,
    Xt: np.ndarray,
    yt: np.ndarray,
    feature: int,
    n_curves: int,
    target: int,
    labels: list[str],
) -> str:
    """Chosen points: one interval bar per point (x = the feature for d = 1, else the index)."""
    n_eval, d = E.shape
    x = E[:, 0] if d == 1 else np.arange(n_eval, dtype=np.float64)
    if d == 1:
        ax.scatter(Xt[:, 0], yt, s=8, color="0.5", alpha=0.35, linewidths=0, label="data", zorder=1)
    centre, centre_label = (fitted, "fitted $\\hat f(x)$") if fitted is not None else (band["mean"], "bootstrap mean")
    _interval_bars(ax, result, x, band, outside)
    if (~outside).any():
        ax.plot(x[~outside], centre[~outside], "o", color="black", ms=5, linestyle="none", label=centre_label, zorder=3)
    if outside.any():  # one legend entry for the points outside, whatever is drawn there
        ax.plot(
            x[outside],
            centre[outside],
            "X",
            color=OUT_OF_RANGE,
            ms=7,
            linestyle="none",
            label="outside the training data's range (extrapolated)",
            zorder=3,
        )
    return _point_axis(ax, E, x, labels)


def _interval_bars(ax: Any, result: Any, x: np.ndarray, band: dict[str, np.ndarray], outside: np.ndarray) -> None:
    """One bar per point: the interval (and, for a prediction interval, the confidence band
    as a thicker bar inside it), red at points outside the training range."""
    what = band_title(result.confidence_level, result.interval)
    bars = [("lower", "upper", what, {"elinewidth": 1.5, "capsize": 4})]
    if result.interval == "prediction":  # the (narrower) band of f-hat inside the interval
        bars.append(
            (
                "confidence_lower",
                "confidence_upper",
                band_title(result.confidence_level, "confidence"),
                {"elinewidth": 5, "capsize": 0, "alpha": 0.45},
            )
        )
    for lo, hi, label, style in bars:
        for sel, colour in ((~outside, IN_RANGE), (outside, OUT_OF_RANGE)):
            if sel.any():
                mid = (band[lo][sel] + band[hi][sel]) / 2  # a percentile band need not
                half = (band[hi][sel] - band[lo][sel]) / 2  # contain the fitted value
                ax.errorbar(
                    x[sel],
                    mid,
                    yerr=half,
                    fmt="none",
                    ecolor=colour,
                    zorder=2,
                    label=label if colour == IN_RANGE or not (~outside).any() else None,
                    **style,
                )


def _point_axis(ax: Any, E: np.ndarray, x: np.ndarray, labels: list[str]) -> str:
    """The x axis of chosen points: the feature (d = 1), else the point's row, its
    coordinates on the ticks when they are few; returns the title's context line."""
    n_eval, d = E.shape
    if d == 1:
        ax.set_xlabel("x" if labels[0] == "x0" else labels[0])
        return f"at {n_eval} chosen points"
    few = d <= MAX_LABELLED_FEATURES and n_eval <= MAX_LABELLED_POINTS  # coordinates on the ticks
    ax.set_xlabel("evaluation point (row of X_eval)" + (f": ({', '.join(labels)})" if few else ""))
    if n_eval <= MAX_LABELLED_POINTS:
        ax.set_xticks(x)
        ax.set_xticklabels([_point_label(i, E[i]) for i in range(n_eval)], fontsize="x-small")
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return f"at {n_eval} chosen points of {d} features"


def posterior_label(level: float, interval: str) -> str:
    """Legend entry of the posterior band, e.g. "90 % posterior band for f(x) (GP, σ² by evidence)"."""
    what = "a new $y$" if interval == "prediction" else "$f(x)$"
    return f"{100 * level:g} % posterior band for {what} (GP, $\\sigma^2$ by evidence)"


def _draw_posterior(ax: Any, post: dict, E: np.ndarray, feature: int, grid: bool, target: int, n_eval: int) -> None:
    """The posterior band beside the bootstrap band: dashed edges along a grid, thin offset
    bars at chosen points (so the two answers to "how sure" can be read side by side)."""
    lo = _pick_target("posterior lower", post["lower"], target, n_eval)
    hi = _pick_target("posterior upper", post["upper"], target, n_eval)
    label = posterior_label(post["level"], post["interval"])
    if grid:
        x = E[:, feature]
        order = np.argsort(x, kind="stable")
        for edge, name in ((lo, label), (hi, None)):
            ax.plot(x[order], edge[order], "--", color="tab:purple", linewidth=1.2, label=name, zorder=4)
        return
    x = E[:, 0] if E.shape[1] == 1 else np.arange(n_eval, dtype=np.float64)
    shift = 0.15 if E.shape[1] > 1 else 0.01 * float(np.ptp(x) or 1.0)
    ax.errorbar(x + shift, (lo + hi) / 2, yerr=(hi - lo) / 2, fmt="none", ecolor="tab:purple", elinewidth=1.2,
                capsize=3, label=label, zorder=2)  # fmt: skip


def _point_label(i: int, row: np.ndarray) -> str:
    """Tick label of evaluation point ``i``: its index and, for few features, its coordinates."""
    if row.size > MAX_LABELLED_FEATURES:
        return str(i)
    return f"{i}\n(" + ", ".join(f"{v:.3g}" for v in row) + ")"


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
    points: bool | None = None,
    target: int = 0,
    title: str | None = None,
    figsize: tuple[float, float] = (7.0, 4.5),
    dpi: int = 100,
    posterior: dict | None = None,
    feature_names: Sequence[str] | None = None,
) -> str:
    """Save the bootstrap figure: a band over a grid, or interval bars at chosen points.

    What is drawn says what the band is: the title and legend read "90 % confidence band for
    f-hat(x)" (the band of the fitted function, ``result.interval == "confidence"``) or "90 %
    prediction interval for a new y" (then the confidence band is drawn inside it). Evaluation
    points outside the training data's range (``result.out_of_range``) are drawn in red and
    named in the legend: the band there is an extrapolation.

    * **A grid** (as :func:`bigkernel.bands.bootstrap.eval_grid` makes): the lecture's figure —
      data, fitted curve, replicate curves, the band shaded along column ``feature``. For d > 1
      the other features are held at a reference point and the training points are drawn
      against ``feature`` only, as context — they are not on the slice.
    * **Chosen points**: one interval bar per point, with the fitted value as a marker; the
      horizontal axis is the feature for d = 1 (with the data), else the point's index (with
      its coordinates on the tick labels for a few points of a few features).

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
        Replicate curves drawn on a grid (the first ones).
    feature : int or str, default=0
        Column of ``X_eval`` on the horizontal axis of a grid: an index, or one of the
        ``feature_names``.
    path : str or os.PathLike
        Output PNG file.
    points : bool, optional
        Draw interval bars at the points (True) or a band along a grid (False). Default: a
        grid when ``X_eval`` varies in column ``feature`` only, evenly spaced and increasing.
    target : int, default=0
        Target plotted when y has several.
    title : str, optional
        Default: what the band is, B, and where it is evaluated.
    figsize : (float, float), default=(7.0, 4.5)
        Inches; the PNG is ``figsize * dpi`` pixels.
    dpi : int, default=100
    posterior : dict, optional
        A posterior band (:func:`bigkernel.jobs.bootstrap_job.posterior_band`: ``level``,
        ``interval``, ``lower``, ``upper``) drawn beside the bootstrap band — the lecture figure
        with both answers to "how sure": dashed edges along a grid, thin bars at points.
    feature_names : sequence of str, optional
        Names of the features, on the axis and in the title. Default: the columns of a
        DataFrame ``X_eval`` or ``X_train``, else ``x0``, ``x1``, ...

    Returns
    -------
    str
        ``path``.
    """
    fig = band_figure(
        result,
        X_train,
        y_train,
        X_eval,
        fitted_mean,
        n_curves,
        feature,
        points=points,
        target=target,
        title=title,
        figsize=figsize,
        dpi=dpi,
        posterior=posterior,
        feature_names=feature_names,
    )
    path = os.fspath(path)
    fig.savefig(path, format="png")
    logger.info("saved bootstrap band plot %s", path)
    return path


def plot_confusion(conf: Any, classes: Any, path: str | os.PathLike[str], title: str = "holdout") -> str:
    """Save a confusion matrix (rows: true class, columns: predicted), counts written in the
    cells and the colour the share of the true class (row-normalised)."""
    conf = np.asarray(conf, dtype=np.float64)
    labels = [str(c) for c in classes]
    k = len(labels)
    share = conf / np.maximum(conf.sum(axis=1, keepdims=True), 1.0)
    size = 3.0 + 0.45 * k
    fig = _figure_factory()(figsize=(size + 1.0, size), dpi=100)
    ax = fig.add_subplot()
    im = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(im, ax=ax, label="share of the true class")
    if k <= 20:  # numbers stay legible up to ~20 classes
        for i in range(k):
            for j in range(k):
                ax.text(j, i, f"{int(conf[i, j]):,}", ha="center", va="center",
                        color="white" if share[i, j] > 0.5 else "black", fontsize=8)  # fmt: skip
    ax.set_xticks(range(k), labels, rotation=45 if k > 6 else 0)
    ax.set_yticks(range(k), labels)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    acc = np.trace(conf) / max(conf.sum(), 1.0)
    ax.set_title(f"Confusion matrix ({title}, {int(conf.sum()):,} rows, accuracy {acc:.3f})")
    fig.tight_layout()
    fig.savefig(os.fspath(path), format="png")
    return os.fspath(path)


def plot_roc(positive: Any, decision: Any, path: str | os.PathLike[str]) -> str:
    """Save the ROC curve of a binary classifier's decision values (``positive``: whether each
    row is of the second class), with its area in the title."""
    from sklearn.metrics import roc_auc_score, roc_curve

    positive, decision = np.asarray(positive, dtype=bool), np.asarray(decision, dtype=np.float64)
    fpr, tpr, _ = roc_curve(positive, decision)
    fig = _figure_factory()(figsize=(5.5, 5.0), dpi=100)
    ax = fig.add_subplot()
    ax.plot(fpr, tpr, color=IN_RANGE, lw=1.5)
    ax.plot([0, 1], [0, 1], color="k", lw=0.8, ls="--")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(f"ROC (holdout sample, {positive.size:,} rows), AUC {roc_auc_score(positive, decision):.3f}")
    fig.tight_layout()
    fig.savefig(os.fspath(path), format="png")
    return os.fspath(path)
