"""Figures and a one-page Markdown report for a job's output folder.

matplotlib is optional (``pip install "bigkernel[plot]"``) and imported only here, with the Agg
backend, so the library and headless workers never need a display.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import numpy as np

from bigkernel.errors import BigkernelError

logger = logging.getLogger(__name__)

FIGSIZE = (7.0, 4.5)
DPI = 100  # figures are FIGSIZE × DPI = 700 × 450 pixels


class PlotUnavailableError(BigkernelError, ImportError):
    """matplotlib is not installed."""


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailableError(
            "plots need matplotlib: pip install \"bigkernel[plot]\" (or set `plots: false` in the job)"
        ) from None
    return plt


def plots_available() -> bool:
    """Whether matplotlib can be imported."""
    try:
        _pyplot()
        return True
    except PlotUnavailableError:
        return False


def path_table(est) -> dict[str, np.ndarray]:
    """α-path diagnostics of a fitted estimator: gamma, alpha, score (lower is better), df, kind."""
    if hasattr(est, "cv_results_"):
        r = est.cv_results_
        cv = getattr(est, "criterion", None) or est.cv  # ExactKernelRidgeCV: "loo" or "gcv"
        kind = {"gcv": "GCV", "loo": "LOO MSE (closed form)"}.get(cv, f"{cv}-fold CV MSE")
        return {"gamma": np.asarray(r["param_gamma"]), "alpha": np.asarray(r["param_alpha"]),
                "score": -np.asarray(r["mean_test_score"]), "df": np.asarray(r["df"]), "kind": kind}
    fmap = getattr(est, "feature_map_", None)  # the exact solver has no feature map
    gamma = fmap.params.get("length_scale") if fmap is not None else None
    g = np.full(np.size(est.alphas_), np.nan if gamma is None or isinstance(gamma, list) else
                1.0 / (2.0 * float(gamma) ** 2))
    gcv = np.asarray(est.gcv_)
    return {"gamma": g, "alpha": np.asarray(est.alphas_), "score": gcv if gcv.ndim == 1 else gcv.mean(axis=1),
            "df": np.asarray(est.df_path_), "kind": "GCV"}  # fmt: skip


def plot_alpha_path(table: dict[str, Any], path: str, chosen: tuple[float, float] | None = None) -> str:
    """CV/GCV error against α (log axes), one curve per γ, df(α) on a second axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=FIGSIZE, dpi=DPI)
    ax2 = ax.twinx()
    gammas = table["gamma"]
    keys = np.unique(gammas[~np.isnan(gammas)]) if np.any(~np.isnan(gammas)) else [np.nan]
    for i, g in enumerate(keys):
        sel = np.isnan(gammas) if np.isnan(g) else gammas == g
        order = np.argsort(table["alpha"][sel])
        a, sc, df = table["alpha"][sel][order], table["score"][sel][order], table["df"][sel][order]
        label = "" if np.isnan(g) else f"γ={g:.3g}"
        line, = ax.plot(a, sc, marker="o", ms=3, label=label or table["kind"])
        ax2.plot(a, df, ls="--", color=line.get_color(), alpha=0.6)
    if chosen is not None:
        ax.axvline(chosen[1], color="k", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("α (ridge penalty)")
    ax.set_ylabel(table["kind"])
    ax2.set_ylabel("df(α)  (dashed)")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Penalty path: error (solid) and degrees of freedom (dashed)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_predicted_vs_observed(y: np.ndarray, pred: np.ndarray, path: str, title: str = "holdout") -> str:
    """Scatter of predictions against observations with the identity line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=FIGSIZE, dpi=DPI)
    ax.scatter(y, pred, s=4, alpha=0.4)
    lo, hi = float(min(y.min(), pred.min())), float(max(y.max(), pred.max()))
    ax.plot([lo, hi], [lo, hi], color="k", lw=1)
    rmse = float(np.sqrt(np.mean((y - pred) ** 2)))
    ax.set_xlabel("observed y")
    ax.set_ylabel("predicted y")
    ax.set_title(f"Predicted vs observed ({title}, {y.size:,} points, RMSE {rmse:.3g})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report(output: str, metrics: dict[str, Any], figures: dict[str, str]) -> str:
    """``report.md`` in ``output``: the job's figures (relative links) and key numbers."""
    m = metrics
    lines = [f"# bigkernel job `{m['job']}`", "",
             f"- data: {m['data']['n_samples']:,} rows × {m['data']['n_features']} features from `{m['data']['source']}`",
             f"- model: {m['model']['kernel']} "
             + (f"exact kernel ridge, n={m['model']['n_samples_fit']:,}, " if "n_samples_fit" in m["model"]
                else f"{str(m['model']['solver']).replace('_', ' ')}, D={m['model']['n_components']}, ")
             + f"α={m['model']['alpha']:.3g}, df={m['model']['df']:.1f}"]  # fmt: skip
    if m.get("search"):
        lines.append(f"- search: best {m['search']['best_params']} of {m['search']['n_candidates']} candidates")
    lines += ["", "| set | n | RMSE | R² |", "|---|---|---|---|"]
    for name, s in m["scores"].items():
        lines.append(f"| {name} | {s['n_samples']:,} | {s['rmse']:.4f} | {s['r2']:.4f} |")
    lines += ["", "| stage | seconds |", "|---|---|"] + [f"| {k} | {v:.2f} |" for k, v in m["timings_s"].items()]
    lines += _bootstrap_band_section(m, output)
    for title, fig in figures.items():
        lines += ["", f"## {title}", "", f"![{title}]({os.path.relpath(fig, output)})"]
    path = os.path.join(output, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _bootstrap_band_section(metrics: dict[str, Any], output: str) -> list[str]:
    """report.md's section on the bootstrap band: what it is and a table of its values."""
    from bigkernel.jobs.band_table import band_markdown

    return band_markdown(metrics["bootstrap"], output) if metrics.get("bootstrap") else []


def make_report(output: str, est, holdout: tuple[np.ndarray, np.ndarray] | None, metrics: dict[str, Any]) -> dict[str, str]:
    """Write the job's figures and report.md; returns {title: path} of everything written."""
    figures: dict[str, str] = {}
    table = path_table(est)
    figures["Penalty path"] = plot_alpha_path(table, os.path.join(output, "alpha_path.png"),
                                              chosen=(getattr(est, "gamma_", np.nan), est.alpha_))
    if holdout is not None and holdout[0].size:
        figures["Predicted vs observed"] = plot_predicted_vs_observed(
            holdout[0], holdout[1], os.path.join(output, "predicted_vs_observed.png"))
    band = os.path.join(output, "bootstrap_band.png")
    if os.path.exists(band):
        figures["Bootstrap band"] = band
    figures["report"] = write_report(output, metrics, {k: v for k, v in figures.items()})
    return figures


def report_from_folder(output: str) -> dict[str, str]:
    """Rebuild figures and report.md from a finished job folder (``bigkernel report``)."""
    from bigkernel.models.persist import load

    metrics_path = os.path.join(output, "metrics.json")
    if not os.path.exists(metrics_path):
        from bigkernel.errors import DataNotFoundError

        raise DataNotFoundError(f"{output!r} holds no finished job (no metrics.json); run the job first")
    with open(metrics_path) as f:
        metrics = json.load(f)
    est = load(os.path.join(output, "model.zarr"))
    search = os.path.join(output, "search_results.json")
    if os.path.exists(search):
        with open(search) as f:
            est.cv_results_ = {k: np.asarray(v) if k != "params" else v for k, v in json.load(f).items()}
    sample = os.path.join(output, "holdout_sample.npz")
    holdout = None
    if os.path.exists(sample):
        with np.load(sample, allow_pickle=False) as z:
            holdout = (z["y"], z["pred"])
    return make_report(output, est, holdout, metrics)
