"""Figures and a one-page Markdown report for a job's output folder.

matplotlib (a dependency of bigkernel) is imported only here, with the Agg backend, so the
library and headless workers never import it or need a display.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import numpy as np

from bigkernel.errors import BigkernelError
from bigkernel.jobs import classify
from bigkernel.jobs import holdout as holdout_module
from bigkernel.numerics.dual import describe_df

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
            "plots need matplotlib, a dependency of bigkernel that is missing here: pip install "
            "matplotlib (or set `plots: false` in the job)"
        ) from None
    return plt


def plots_available() -> bool:
    """Whether matplotlib can be imported."""
    try:
        _pyplot()
        return True
    except PlotUnavailableError:
        return False


#: a fixed α's GCV/df curve spans α·10^[-3, 3] (61 points, α itself among them)
FIXED_ALPHA_CURVE = np.logspace(-3.0, 3.0, 61)


def path_table(est) -> dict[str, np.ndarray] | None:
    """α-path diagnostics of a fitted estimator: gamma, alpha, score (lower is better), df, kind.

    With one α and a primal model (random features, Nyström), the GCV and df curves over
    α·:data:`FIXED_ALPHA_CURVE` come from the fit's eigendecomposition (``spectrum_``; no pass
    over the data). None when there is no path to draw (one α and no spectrum: the exact
    solver, or a model saved before spectra were kept); :func:`no_path_reason` says why.
    """
    if hasattr(est, "cv_results_"):
        r = est.cv_results_
        cv = getattr(est, "criterion", None) or est.cv  # ExactKernelRidgeCV: "loo" or "gcv"
        kind = {"gcv": "GCV", "loo": "LOO MSE (closed form)"}.get(cv, f"{cv}-fold CV MSE")
        return {
            "gamma": np.asarray(r["param_gamma"]),
            "alpha": np.asarray(r["param_alpha"]),
            "score": -np.asarray(r["mean_test_score"]),
            "df": np.asarray(r["df"]),
            "kind": kind,
        }
    if hasattr(est, "residuals_"):  # Nyström by CG: no GCV, no df
        return _held_out_path(est)
    fmap = getattr(est, "feature_map_", None)  # the exact solver has no feature map
    gamma = fmap.params.get("length_scale") if fmap is not None else None
    alphas, gcv, df = np.asarray(est.alphas_), np.asarray(est.gcv_), np.asarray(est.df_path_)
    table: dict[str, Any] = {"kind": "GCV"}
    if alphas.size == 1:
        spectrum = getattr(est, "spectrum_", None)
        if spectrum is None:
            return None
        alphas = float(est.alpha_) * FIXED_ALPHA_CURVE
        gcv, df = spectrum.gcv(alphas), spectrum.df(alphas)
        table["title"] = f"α fixed at {est.alpha_:.3g}: GCV (solid) and df (dashed) around it"
        table["note"] = (
            f"α was fixed at {est.alpha_:.3g} (the fit used that α only); the penalty-path "
            "figure shows GCV and df over α·10^±3 around it, from the fit's "
            "eigendecomposition (no further pass over the data)."
        )
    g = np.full(alphas.size, np.nan if gamma is None or isinstance(gamma, list) else 1.0 / (2.0 * float(gamma) ** 2))
    table.update(gamma=g, alpha=alphas, score=gcv if gcv.ndim == 1 else gcv.mean(axis=1), df=df)
    return table


def _held_out_path(est) -> dict[str, Any] | None:
    """The α path of a Nyström CG fit: the held-out mean squared error of each α (averaged
    over targets), no df; None for one α (nothing was scored)."""
    scores = getattr(est, "validation_scores_", None)
    if scores is None:
        return None
    scores = np.asarray(scores, dtype=np.float64)
    alphas = np.asarray(est.alphas_, dtype=np.float64)
    return {
        "kind": "held-out MSE",
        "gamma": np.full(alphas.size, np.nan),
        "alpha": alphas,
        "score": scores if scores.ndim == 1 else scores.mean(axis=1),
        "df": np.full(alphas.size, np.nan),
        "title": "Penalty path: held-out MSE per α (Falkon's CG: no df curve)",
    }


def no_path_reason(est, table: dict[str, Any] | None = None) -> str:
    """Why there is no penalty-path figure for ``est`` (its ``table``, if any) (for report.md)."""
    if table is not None:
        return f"No penalty-path figure: no α on the path has a finite {table['kind']} score."
    if hasattr(est, "residuals_"):
        return (
            f"No penalty-path figure: α was fixed (α={est.alpha_:.3g}); Nyström by CG scores α on a held-out "
            "split when it is given several. Give a list of α to see the path."
        )
    why = (
        "the exact solver scores only the α it solves for"
        if getattr(est, "feature_map_", None) is None
        else "this model was saved before bigkernel kept the spectrum that gives the curve"
    )
    return (
        f"No penalty-path figure: α was fixed (α={est.alpha_:.3g}) and {why}, so the path "
        "would be a single point. Give `alpha: gcv` or a list of α to see the path."
    )


def plot_alpha_path(table: dict[str, Any], path: str, chosen: tuple[float, float] | None = None) -> str:
    """CV/GCV error against α (log axes), one curve per γ, df(α) on a second axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=FIGSIZE, dpi=DPI)
    ax2 = ax.twinx()
    gammas = table["gamma"]
    keys = np.unique(gammas[~np.isnan(gammas)]) if np.any(~np.isnan(gammas)) else [np.nan]
    for g in keys:
        sel = np.isnan(gammas) if np.isnan(g) else gammas == g
        order = np.argsort(table["alpha"][sel])
        a, sc, df = table["alpha"][sel][order], table["score"][sel][order], table["df"][sel][order]
        sc = np.where(np.isfinite(sc), sc, np.nan)  # inf: an unreliable score, not drawn
        label = "" if np.isnan(g) else f"γ={g:.3g}"
        (line,) = ax.plot(a, sc, marker="o", ms=3, label=label or table["kind"])
        ax2.plot(a, df, ls="--", color=line.get_color(), alpha=0.6)
    if chosen is not None:
        ax.axvline(chosen[1], color="k", lw=0.8, ls=":")
        at = np.isclose(table["alpha"], chosen[1], rtol=1e-12, atol=0)
        if isinstance(chosen[0], float) and np.isfinite(chosen[0]):
            at &= np.isnan(gammas) | np.isclose(gammas, chosen[0], rtol=1e-12)
        if at.sum() == 1:  # the chosen point on its curve (not drawn when ambiguous)
            ax.plot(
                table["alpha"][at],
                table["score"][at],
                marker="*",
                ms=12,
                color="k",
                ls="",
                label=f"chosen α={chosen[1]:.3g}",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("α (ridge penalty)")
    ax.set_ylabel(table["kind"])
    ax2.set_ylabel("df(α)  (dashed)")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(table.get("title", "Penalty path: error (solid) and degrees of freedom (dashed)"))
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


def write_report(
    output: str,
    metrics: dict[str, Any],
    figures: dict[str, str],
    notes: dict[str, str] | None = None,
    score_lines=None,
) -> str:
    """``report.md`` in ``output``: the job's figures (relative links), key numbers and
    ``notes`` ({section title: paragraph}, e.g. why a figure is missing, what a file holds);
    ``score_lines(scores, classes)`` writes the scores of a classification job."""
    m = metrics
    lines = [f"# bigkernel job `{m['job']}`", "", *_warnings_section(m),
             f"- data: {m['data']['n_samples']:,} rows × {m['data']['n_features']} features from `{m['data']['source']}`",
             f"- model: {m['model']['kernel']} "
             + (f"exact kernel ridge, n={m['model']['n_samples_fit']:,}, " if "n_samples_fit" in m["model"]
                else f"{str(m['model']['solver']).replace('_', ' ')}, D={m['model']['n_components']}, ")
             + f"α={m['model']['alpha']:.3g}, {describe_df(m['model']['df'], m['model'].get('df_stderr'))}"]  # fmt: skip
    if m.get("search"):
        lines.append(f"- search: best {m['search']['best_params']} of {m['search']['n_candidates']} candidates")
    if score_lines is not None:
        lines += [""] + score_lines(m["scores"], m["model"]["classes"])
    else:
        lines += ["", "| set | n | RMSE | R² |", "|---|---|---|---|"]
        for name, s in m["scores"].items():
            lines.append(f"| {name} | {s['n_samples']:,} | {s['rmse']:.4f} | {s['r2']:.4f} |")
    lines += ["", "| stage | seconds |", "|---|---|"] + [f"| {k} | {v:.2f} |" for k, v in m["timings_s"].items()]
    lines += _bootstrap_band_section(m, output)
    for title, fig in figures.items():
        lines += ["", f"## {title}", "", f"![{title}]({os.path.relpath(fig, output)})"]
    for title, text in (notes or {}).items():
        lines += ["", f"## {title}", "", text]
    path = os.path.join(output, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _warnings_section(metrics: dict[str, Any]) -> list[str]:
    """report.md's first section when the fit looks useless: each warning with its fix."""
    found = metrics.get("warnings") or []
    if not found:
        return []
    head = f"## Warnings ({len(found)}): this model may be useless — see the fixes"
    return [head, "", *[f"- **{w['code']}**: {w['message']}" for w in found], ""]


def _bootstrap_band_section(metrics: dict[str, Any], output: str) -> list[str]:
    """report.md's section on the bootstrap band: what it is and a table of its values."""
    from bigkernel.jobs.band_table import band_markdown

    return band_markdown(metrics["bootstrap"], output) if metrics.get("bootstrap") else []


def make_report(output: str, est, holdout: tuple[np.ndarray, ...] | None, metrics: dict[str, Any]) -> dict[str, str]:
    """Write the job's figures and report.md; returns {title: path} of everything written.

    ``holdout`` is ``(y, pred, ...)`` of the holdout sample (the runner's :func:`holdout_sample`).
    """
    figures: dict[str, str] = {}
    notes: dict[str, str] = {}
    table = path_table(est)
    if table is None or not np.isfinite(table["score"]).any():
        notes["Penalty path"] = no_path_reason(est, table)
    else:
        figures["Penalty path"] = plot_alpha_path(
            table, os.path.join(output, "alpha_path.png"), chosen=(getattr(est, "gamma_", np.nan), est.alpha_)
        )
        if "note" in table:
            notes["Penalty path with a fixed α"] = table["note"]
    if holdout is not None and holdout[0].size:
        figures["Predicted vs observed"] = plot_predicted_vs_observed(
            holdout[0], holdout[1], os.path.join(output, "predicted_vs_observed.png")
        )
    band = os.path.join(output, "bootstrap_band.png")
    if os.path.exists(band):
        figures["Bootstrap band"] = band
    sample = holdout_sample_note(output, metrics)
    if sample:
        notes["Holdout sample"] = sample
    figures["report"] = write_report(output, metrics, {k: v for k, v in figures.items()}, notes)
    return figures


def holdout_sample_note(output: str, metrics: dict[str, Any]) -> str | None:
    """What ``holdout_sample.npz`` in ``output`` holds, from the file itself; None without one."""
    path = os.path.join(output, "holdout_sample.npz")
    if not os.path.exists(path):
        return None
    with np.load(path, allow_pickle=False) as z:
        arrays, size = sorted(z.files), int(z["y"].size)
    first = min(int(metrics["data"]["n_samples"]), holdout_module.HOLDOUT_SAMPLE_ROWS)
    what = {
        "row": "`row` (global row index in the training data, from 0)",
        "y": "`y` (observed; the first target when there are several)",
        "pred": "`pred` (the saved model's prediction)",
    }
    order = [a for a in what if a in arrays] + [a for a in arrays if a not in what]
    listed = ", ".join(what.get(a, f"`{a}`") for a in order)
    return (
        f"`holdout_sample.npz` holds the {size:,} holdout rows among the first {first:,} rows of "
        f"the training data (the rows the predicted-vs-observed figure draws; the holdout "
        f"scores above use every holdout row): arrays {listed}, one entry per row. "
        "Read it with `numpy.load`."
    )


def report_from_folder(output: str) -> dict[str, str]:
    """Rebuild figures and report.md from a finished job folder (``bigkernel report``)."""
    from bigkernel.io.model_store import load_estimator

    metrics_path = os.path.join(output, "metrics.json")
    if not os.path.exists(metrics_path):
        from bigkernel.errors import DataNotFoundError

        raise DataNotFoundError(f"{output!r} holds no finished job (no metrics.json); run the job first")
    with open(metrics_path) as f:
        metrics = json.load(f)
    est = load_estimator(os.path.join(output, "model.zarr"))
    search = os.path.join(output, "search_results.json")
    if os.path.exists(search):
        with open(search) as f:
            est.cv_results_ = {k: np.asarray(v) if k != "params" else v for k, v in json.load(f).items()}
    sample = os.path.join(output, "holdout_sample.npz")
    holdout = None
    classification = metrics["model"].get("task") == "classification"
    if os.path.exists(sample):
        with np.load(sample, allow_pickle=False) as z:
            holdout = (z["y"], z["decision"], z["row"]) if classification else (z["y"], z["pred"])
    if classification:
        return make_classification_report(output, metrics, holdout)
    return make_report(output, est, holdout, metrics)


# --------------------------------------------------------------------------------------------
# Classification jobs
# --------------------------------------------------------------------------------------------
def score_table(scores: dict[str, dict[str, Any]], classes: list) -> list[str]:
    """report.md's tables: the scores, then the confusion matrix of each set."""
    lines = ["| set | n | accuracy | balanced accuracy | log-loss |", "|---|---|---|---|---|"]
    for name, s in scores.items():
        lines.append(f"| {name} | {s['n_samples']:,} | {s['accuracy']:.4f} | {s['balanced_accuracy']:.4f} | — |")
    lines += ["", f"Log-loss: {classify.LOG_LOSS_NOTE}."]
    for name, s in scores.items():
        lines += ["", f"Confusion matrix ({name}; rows: true class, columns: predicted):", ""]
        lines += ["| true \\ predicted | " + " | ".join(map(str, classes)) + " |", "|---" * (len(classes) + 1) + "|"]
        lines += [
            f"| {c} | " + " | ".join(str(v) for v in row) + " |" for c, row in zip(classes, s["confusion_matrix"])
        ]
    return lines


def make_classification_report(output: str, metrics: dict[str, Any], sample: tuple | None) -> dict[str, str]:
    """Figures (confusion matrix; ROC for two classes, from the holdout sample) and report.md."""
    from bigkernel.jobs.plots import plot_confusion, plot_roc

    classes = metrics["model"]["classes"]
    figures: dict[str, str] = {}
    name = "holdout" if "holdout" in metrics["scores"] else "train"
    conf = np.asarray(metrics["scores"][name]["confusion_matrix"])
    figures["Confusion matrix"] = plot_confusion(conf, classes, os.path.join(output, "confusion_matrix.png"), name)
    notes = {}
    if len(classes) == 2 and sample is not None and sample[0].size and len(set(sample[0].tolist())) == 2:
        positive = np.asarray(sample[0]).astype(str) == str(classes[1])
        figures["ROC (holdout sample)"] = plot_roc(positive, sample[1], os.path.join(output, "roc.png"))
    elif len(classes) == 2:
        notes["ROC"] = "no ROC curve: it needs holdout rows of both classes (set data.holdout_fraction > 0)"
    figures["report"] = write_report(output, metrics, dict(figures), notes, score_lines=score_table)
    return figures
