"""The bootstrap band as a table (layer 4): what it is, its values, where all of them are.

A job's ``bootstrap:`` section (:mod:`bigkernel.jobs.bootstrap_job`) writes every evaluation
point to ``bootstrap_band.csv`` (:func:`write_band_csv`) and keeps up to :data:`MAX_ROWS` of
them, evenly spaced, in metrics.json (:func:`band_summary`); ``report.md`` and ``summary.txt``
show those (:func:`band_markdown`, :func:`band_text`), so a finished job folder is enough to
rebuild them.
"""

from __future__ import annotations

import csv
import os
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np

from bigkernel.data.columns import feature_labels

__all__ = [
    "MAX_ROWS",
    "band_columns",
    "band_markdown",
    "band_summary",
    "band_text",
    "describe_band",
    "describe_posterior",
    "write_band_csv",
]

#: Points shown in report.md and summary.txt (evenly spaced beyond that; all in the CSV).
MAX_ROWS = 20
#: Features of a point kept in metrics.json and shown (the CSV has every feature).
MAX_X_FEATURES = 8


def describe_band(confidence_level: float, interval: str, n_bootstraps: int) -> str:
    """One sentence saying what the band is.

    Parameters
    ----------
    confidence_level : float
    interval : {"confidence", "prediction"}
    n_bootstraps : int

    Returns
    -------
    str
    """
    level = f"{100 * confidence_level:g} %"
    if interval == "prediction":
        return (
            f"The band is a {level} bootstrap prediction interval for a new observation y "
            f"at x (B={n_bootstraps} refits on resampled data plus resampled residuals; it "
            "assumes the noise does not depend on x): where a new y is expected to fall. "
            "The narrower confidence band for the fitted function f-hat(x) is in "
            "confidence_lower/confidence_upper."
        )
    return (
        f"The band is a {level} bootstrap confidence band for the fitted function f-hat(x) "
        f"(percentiles of B={n_bootstraps} refits on resampled data): how much the fit "
        "varies, not where a new observation y will fall (for that, set "
        "`bootstrap.interval: prediction`)."
    )


def _targets(a: Any) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a[:, np.newaxis] if a.ndim == 1 else a


def describe_posterior(level: float, interval: str) -> str:
    """One sentence saying what the posterior band is and how it differs from the bootstrap's.

    Parameters
    ----------
    level : float
    interval : {"confidence", "prediction"}

    Returns
    -------
    str
    """
    what = "a new observation y at x" if interval == "prediction" else "the function f(x)"
    return (
        f"The posterior band is the {100 * level:g} % Gaussian-process posterior interval for {what} "
        "(fitted ± z·std, σ² by maximum evidence; no refits): how sure the *model* is, given its "
        "kernel and noise level — it widens where data are sparse and assumes the model is right. "
        "The bootstrap band asks how much the *fit* changes when the data are redrawn, whatever the "
        "model assumes."
    )


def band_columns(
    result: Any,
    X_eval: np.ndarray,
    fitted: Any,
    posterior: dict | None = None,
    feature_names: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Every evaluation point's band, column by column (the CSV's columns, in order).

    Parameters
    ----------
    result : BootstrapResult
    X_eval : ndarray of shape (n_eval, n_features)
    fitted : array-like of shape (n_eval,) or (n_eval, n_targets)
        The job's model's predictions at ``X_eval``.
    posterior : dict, optional
        The posterior band (:func:`bigkernel.jobs.bootstrap_job.posterior_band`).
    feature_names : sequence of str, optional
        The training data's column names; default ``x0``, ``x1``, ...

    Returns
    -------
    dict of str to ndarray
        ``point``, the features (by name, or ``x0``...), then per target ``fitted``, ``lower``, ``upper``, ``width``
        (suffixed ``_y<j>`` when y has several targets), ``confidence_lower`` and
        ``confidence_upper`` for a prediction interval, ``posterior_std``,
        ``posterior_lower``, ``posterior_upper``, ``posterior_width`` with a posterior band,
        and ``out_of_range``.
    """
    E = np.asarray(X_eval, dtype=np.float64)
    cols: dict[str, np.ndarray] = {"point": np.arange(E.shape[0])}
    features = {name: E[:, j] for j, name in enumerate(feature_labels(feature_names, E.shape[1]))}
    values = {"fitted": _targets(fitted), "lower": _targets(result.lower), "upper": _targets(result.upper)}
    values["width"] = values["upper"] - values["lower"]
    if result.interval == "prediction":
        values["confidence_lower"] = _targets(result.confidence_lower)
        values["confidence_upper"] = _targets(result.confidence_upper)
    if posterior is not None:
        values.update({f"posterior_{k}": _targets(posterior[k]) for k in ("std", "lower", "upper")})
        values["posterior_width"] = values["posterior_upper"] - values["posterior_lower"]
    k = values["fitted"].shape[1]
    for name, a in values.items():
        cols.update({name if k == 1 else f"{name}_y{t}": a[:, t] for t in range(k)})
    cols["out_of_range"] = np.asarray(result.out_of_range, dtype=bool)
    # a feature named like a band column ("lower", "point") is written as "x_<name>"
    features = {(f"x_{name}" if name in cols else name): v for name, v in features.items()}
    return {"point": cols.pop("point"), **features, **cols}


def write_band_csv(path: str, columns: dict[str, np.ndarray]) -> str:
    """Write :func:`band_columns` as CSV (floats exact: shortest repr that reads back the same)."""

    def cell(v: Any) -> str:
        if isinstance(v, (bool, np.bool_)):
            return "True" if v else "False"
        return str(int(v)) if isinstance(v, (int, np.integer)) else repr(float(v))

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for row in zip(*columns.values()):
            w.writerow([cell(v) for v in row])
    return path


def band_summary(
    result: Any,
    X_eval: np.ndarray,
    fitted: Any,
    posterior: dict | None = None,
    feature_names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The band's entries of metrics.json: what it is and up to :data:`MAX_ROWS` points.

    Returns
    -------
    dict
        ``interval``, ``description``, ``n_eval``, ``n_out_of_range``, ``n_features``,
        ``features`` (the names of the features shown, None when the data has none),
        ``n_targets`` and ``table``: one
        dict per shown point (``point``, ``x`` (at most :data:`MAX_X_FEATURES` values),
        ``fitted``, ``lower``, ``upper``, ``width``, ``out_of_range``, and with a posterior
        band ``posterior_lower``, ``posterior_upper``) of the first target; with a posterior
        band also ``posterior_description``.
    """
    E = np.asarray(X_eval, dtype=np.float64)
    n = E.shape[0]
    first = {
        name: _targets(a)[:, 0] for name, a in (("fitted", fitted), ("lower", result.lower), ("upper", result.upper))
    }
    outside = np.asarray(result.out_of_range, dtype=bool)
    shown = np.unique(np.linspace(0, n - 1, min(n, MAX_ROWS)).round().astype(int))
    rows = [
        {
            "point": int(i),
            "x": E[i, :MAX_X_FEATURES].tolist(),
            "fitted": float(first["fitted"][i]),
            "lower": float(first["lower"][i]),
            "upper": float(first["upper"][i]),
            "width": float(first["upper"][i] - first["lower"][i]),
            "out_of_range": bool(outside[i]),
        }
        for i in shown
    ]
    extra: dict[str, Any] = {}
    if posterior is not None:
        lo, hi = _targets(posterior["lower"])[:, 0], _targets(posterior["upper"])[:, 0]
        for row in rows:
            row.update(posterior_lower=float(lo[row["point"]]), posterior_upper=float(hi[row["point"]]))
        extra["posterior_description"] = describe_posterior(posterior["level"], posterior["interval"])
    return {
        **extra,
        "interval": result.interval,
        "description": describe_band(result.confidence_level, result.interval,
                                     result.n_bootstraps),
        "n_eval": n, "n_out_of_range": int(outside.sum()), "n_features": int(E.shape[1]),
        "features": None if feature_names is None else [str(n) for n in feature_names][:MAX_X_FEATURES],
        "n_targets": int(_targets(fitted).shape[1]), "table": rows,
    }  # fmt: skip


def _x_head(b: dict[str, Any]) -> str:
    """Heading of the point column: the feature names (metrics.json's ``features``), else "x"."""
    names = b.get("features")
    if not names:
        return "x"  # a job folder written before the names were kept
    more = ", …" if b["n_features"] > len(names) else ""
    return names[0] if b["n_features"] == 1 else f"({', '.join(names)}{more})"


def _x(row: dict[str, Any], n_features: int) -> str:
    values = ", ".join(f"{v:.4g}" for v in row["x"])
    more = ", …" if n_features > len(row["x"]) else ""
    return values if n_features == 1 else f"({values}{more})"


def _notes(b: dict[str, Any], where: str) -> list[str]:
    """Sentences after the table: out-of-range points, the target shown, where the rest is."""
    n, rows = b["n_eval"], b["table"]
    notes = []
    if b["n_out_of_range"]:
        notes.append(
            f"{b['n_out_of_range']} of {n} points lie outside the training data's "
            "range in at least one feature (flagged): there the band shows the model's "
            "extrapolation, which the data do not support."
        )
    if b.get("n_targets", 1) > 1:
        notes.append(f"Values of the first of {b['n_targets']} targets.")
    if len(rows) < n:
        notes.append(f"{len(rows)} of {n} points, evenly spaced; all of them are in {where}.")
    else:
        notes.append(f"The same values are in {where}.")
    return notes


def band_markdown(b: dict[str, Any], output: str) -> list[str]:
    """Lines of report.md for the band (``b`` = metrics.json's ``bootstrap``); [] without a table.

    Parameters
    ----------
    b : dict
        ``metrics["bootstrap"]``.
    output : str
        The job's folder: files are linked relative to it.
    """
    if not b.get("table"):
        return []  # a job folder written before the band table existed
    rel = {key: os.path.relpath(b[key], output) for key in ("band_csv", "band_zarr") if b.get(key)}
    where = " and ".join(f"[`{p}`]({p})" for p in rel.values()) or "bootstrap_band.zarr"
    post = "posterior_description" in b
    lines = [
        "",
        "## Bootstrap band: values" + (" (and the posterior band)" if post else ""),
        "",
        b["description"],
        *(["", b["posterior_description"]] if post else []),
        "",
        f"| point | {_x_head(b)} | fitted | lower | upper | width |"
        + (" posterior lower | posterior upper |" if post else "")
        + " out of range |",
        "|---|---|---|---|---|---|" + ("---|---|" if post else "") + "---|",
    ]
    for r in b["table"]:
        extra = f" {r['posterior_lower']:.4g} | {r['posterior_upper']:.4g} |" if post else ""
        lines.append(
            f"| {r['point']} | {_x(r, b['n_features'])} | {r['fitted']:.4g} | "
            f"{r['lower']:.4g} | {r['upper']:.4g} | {r['width']:.4g} |{extra} "
            f"{'**yes**' if r['out_of_range'] else ''} |"
        )
    return lines + [""] + _notes(b, where)


def band_text(b: dict[str, Any]) -> list[str]:
    """Lines of summary.txt for the band (``b`` = metrics.json's ``bootstrap``); [] without a table."""
    if not b.get("table"):
        return []
    where = " and ".join(b[key] for key in ("band_csv", "band_zarr") if b.get(key))

    def wrap(text: str) -> list[str]:
        return textwrap.wrap(text, 96, subsequent_indent="  ")

    post = "posterior_description" in b
    lines = wrap("bootstrap band: " + b["description"])
    if post:
        lines += wrap("posterior band: " + b["posterior_description"])
    xs = [_x(r, b["n_features"]) for r in b["table"]]
    xh = _x_head(b)
    xw = max(len(xh), *(len(x) for x in xs))
    head = f"  {'point':>6}  {xh:<{xw}}  {'fitted':>10}  {'lower':>10}  {'upper':>10}  {'width':>10}  "
    lines.append(head + (f"{'post. lower':>11}  {'post. upper':>11}  " if post else "") + "out of range")
    for r, x in zip(b["table"], xs):
        extra = f"{r['posterior_lower']:>11.4g}  {r['posterior_upper']:>11.4g}  " if post else ""
        lines.append(
            f"  {r['point']:>6}  {x:<{xw}}  {r['fitted']:>10.4g}  {r['lower']:>10.4g}  "
            f"{r['upper']:>10.4g}  {r['width']:>10.4g}  {extra}"
            f"{'yes' if r['out_of_range'] else 'no'}"
        )
    for note in _notes(b, where or "bootstrap_band.zarr"):
        lines += wrap("  " + note)
    return lines
