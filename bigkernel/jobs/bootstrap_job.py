"""The ``bootstrap:`` section of a job (layer 4): band of the fitted model, band zarr, plot.

Called by :func:`bigkernel.jobs.runner.run_job` after the fit, on the job's cluster::

    boot = run_bootstrap_section(cfg, est, ds, client)   # {"outputs": {...}, "metrics": {...}}

What is bootstrapped: the *fitted* model — any solver — with its kernel, feature map or
landmarks, scaling, γ (the searched one for a CV model) and chosen α held fixed, refitted on B resamples of all
rows of the training data set (holdout rows included: a holdout split is for scoring, the band
is about the data set). Only the data are resampled.

What the band is (``bootstrap.interval``): a confidence band for the fitted function f-hat(x)
(default), or a prediction interval for a new y. Evaluation points come from ``eval_grid`` (a
grid along one feature), ``eval`` as a data source, or ``eval`` as points written in the YAML.

Outputs in the job's folder: the replicate store (``bootstrap.store``, kept so reruns resume it),
``bootstrap_band.zarr`` (arrays ``X_eval``, ``mean``, ``lower``, ``upper``, ``fitted``,
``out_of_range``, for a prediction interval ``confidence_lower``/``confidence_upper``, the
training range ``data_min``/``data_max`` when known, and the run's attributes, ``interval``
among them; rewritten each run), ``bootstrap_band.csv`` (every point: coordinates, fitted,
lower, upper, width, out-of-range flag; :mod:`bigkernel.jobs.band_table`) and, with
``plot: true``, ``bootstrap_band.png`` (a shaded band along a grid, interval bars at chosen
points).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import logging
import os
import shutil
import warnings
from typing import Any

import numpy as np
import zarr
from sklearn.base import is_classifier

from bigkernel.bands.bootstrap import BootstrapResult, bootstrap, eval_grid
from bigkernel.data.columns import feature_index
from bigkernel.data.sources import Dataset
from bigkernel.diagnostics import no_predict_findings
from bigkernel.errors import ExtrapolationWarning, StoreMismatchError
from bigkernel.jobs.band_table import band_columns, band_summary, write_band_csv
from bigkernel.jobs.config import SourceConfig
from bigkernel.jobs.inputs import open_eval_data
from bigkernel.jobs.overwrite import staged_sibling
from bigkernel.models._base import block_predictor
from bigkernel.runtime import compute

__all__ = [
    "bootstrap_estimator",
    "bootstrap_seed",
    "evaluation_points",
    "posterior_band",
    "run_bootstrap_section",
    "write_band",
]

logger = logging.getLogger(__name__)

#: Training points drawn in the plot, taken from at most this many chunks.
PLOT_POINTS, PLOT_CHUNKS = 2000, 4


def bootstrap_seed(seed: int) -> int:
    """Resampling seed of a job with top-level ``seed``.

    Derived rather than ``seed`` itself: synthetic data block ``j`` and bootstrap replicate
    ``j`` would otherwise both start from ``SeedSequence(seed, spawn_key=(j,))``.
    """
    digest = hashlib.sha256(f"bigkernel.bootstrap:{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def check_existing_store(cfg, ds: Dataset, client: Any) -> None:
    """Before the fit: refuse a bootstrap store written by another job (without ``overwrite``).

    Compares what is known before fitting — the data fingerprint, the resampling seed and
    method — so a foreign store fails the job before any model is written. (The full
    fingerprint, estimator included, is checked again by :func:`bootstrap`.) ``n_bootstraps``
    may differ: the store is grown, or its first replicates used. With ``overwrite: true`` a
    foreign store is replaced once the job completes (:mod:`bigkernel.jobs.overwrite`).
    """
    bc = cfg.bootstrap
    if bc is None or cfg.overwrite or "://" in bc.store or not os.path.exists(bc.store):
        return
    import json

    from bigkernel.bands.checkpoint import data_fingerprint
    from bigkernel.io.band_store import open_store

    store = open_store(bc.store)  # a folder that is no bootstrap store is refused here
    fp = store.fingerprint or {}
    canon = lambda v: json.dumps(v, sort_keys=True, default=str)
    checks = {
        "seed": (bootstrap_seed(cfg.seed), fp.get("seed")),
        "resampling.method": (bc.method, (fp.get("resampling") or {}).get("method")),
        "data": (data_fingerprint(ds, None, client), fp.get("data")),
    }
    diffs = [
        f"{key}: expected {canon(exp)}, found {canon(found)}"
        for key, (exp, found) in checks.items()
        if canon(exp) != canon(found)
    ]
    if diffs:
        raise StoreMismatchError(
            f"bootstrap store {bc.store!r} was written by a different job; refusing to mix results "
            f"({'; '.join(diffs)}). Use a new bootstrap.store path, delete the old store, or set "
            "`overwrite: true` to replace it once this job's store is complete"
        )


def evaluation_points(cfg: Any, ds: Dataset, client: Any = None) -> tuple[np.ndarray, bool]:
    """The band's evaluation points and whether they are chosen points (else a grid).

    Parameters
    ----------
    cfg : JobConfig
        With ``cfg.bootstrap`` set.
    ds : Dataset
        The training data (the grid spans it).
    client : distributed.Client, optional

    Returns
    -------
    X_eval : ndarray of shape (n_eval, n_features), float64
    points : bool
        True for ``eval`` (a data source or inline points), False for ``eval_grid``.
    """
    bc = cfg.bootstrap
    if isinstance(bc.eval, SourceConfig):
        eds = open_eval_data(cfg, ds.columns, ds.encoder)  # the training columns, by name (encoded as at fit)
        (E,) = compute(eds.X, client=client, label="bootstrap-eval")
        return np.asarray(E, dtype=np.float64), True
    if bc.eval is not None:  # points written in the YAML
        return np.asarray(bc.eval, dtype=np.float64).reshape(len(bc.eval), -1), True
    onehot = ds.encoder.onehot_groups() if ds.encoder is not None else None  # held at their commonest
    return eval_grid(ds.X, grid_feature(cfg, ds), bc.eval_grid.n_points, client=client, onehot=onehot), False


def grid_feature(cfg: Any, ds: Dataset) -> int:
    """The column index of ``bootstrap.eval_grid.feature`` (an index, or a column name of the
    training data); 0 without a grid."""
    bc = cfg.bootstrap
    if bc.eval_grid is None:
        return 0
    return feature_index(bc.eval_grid.feature, ds.columns, ds.X.shape[1], "bootstrap.eval_grid.feature")


def bootstrap_estimator(est: Any) -> Any:
    """The job's fitted model with its chosen α held fixed, for :func:`bootstrap`.

    The fitted feature map, landmarks, kernel and scaling are reused by the bootstrap plan
    (the estimator's ``replicate_plan``). Decided on public facts only, not on the class:

    * a fitted regressor that delegates to a fitted solver (``estimator_``, as ``KernelRidge``)
      is bootstrapped as that solver, with the model's column names;
    * a model without an ``alpha`` parameter (the CV estimators: ``alphas`` and a chosen
      ``alpha_``) is returned as it is: its plan bootstraps the chosen (γ, α);
    * otherwise a copy with ``alpha`` set to the fitted ``alpha_`` (one α: the classic
      fixed-smoother band, not a GCV choice repeated per replicate).

    Parameters
    ----------
    est : fitted RandomFeatureRidge, RandomFeatureRidgeCV, NystroemRidge, ExactKernelRidge,
        ExactKernelRidgeCV or KernelRidge

    Returns
    -------
    estimator
        A shallow copy (the job's model is not modified), or the fitted CV model itself.
    """
    # a meta-estimator's fitted solver; a classifier stays itself, for bootstrap() to refuse
    inner = est if is_classifier(est) else getattr(est, "estimator_", est)
    if "alpha" not in inner.get_params(deep=False):
        return inner  # a CV model: its plan bootstraps the chosen (γ, α)
    boot = copy.copy(inner)
    boot.set_params(alpha=float(inner.alpha_))
    if inner is not est and hasattr(est, "feature_names_in_"):  # the solver gets its columns' names (messages)
        boot.feature_names_in_ = est.feature_names_in_
    return boot


def posterior_band(est: Any, X_eval: np.ndarray, fitted: np.ndarray, level: float, interval: str) -> dict[str, Any]:
    """The posterior band of the job's model at ``X_eval`` (``intervals: {posterior: true}``).

    ``fitted ± z·std`` with ``z`` the normal quantile of ``level`` and ``std`` the posterior
    standard deviation of f(x) (:meth:`RandomFeatureRidge.predict` with ``return_std``); for
    ``interval="prediction"`` the noise variance ``σ²α`` is added, so the band is for a new y.

    Returns
    -------
    dict
        ``level``, ``interval``, ``std``, ``lower``, ``upper`` (arrays shaped like ``fitted``),
        ``sigma2``, ``alpha``.
    """
    from scipy.stats import norm

    X = X_eval
    if hasattr(est, "feature_names_in_"):  # the job's columns: give the points their names back
        import pandas as pd

        X = pd.DataFrame(X_eval, columns=est.feature_names_in_)
    with no_predict_findings():  # the band flags its own points outside the training range
        _, std = est.predict(X, return_std=True)
    std = np.asarray(std, dtype=np.float64)
    sigma2 = np.asarray(est.sigma2_, dtype=np.float64)
    if interval == "prediction":
        std = np.sqrt(std**2 + sigma2 * float(est.alpha_))
    z = float(norm.ppf(0.5 + level / 2))
    fitted = np.asarray(fitted, dtype=np.float64)
    return {
        "level": float(level), "interval": interval, "std": std, "lower": fitted - z * std,
        "upper": fitted + z * std, "sigma2": sigma2.tolist(), "alpha": float(est.alpha_),
    }  # fmt: skip


def write_band(
    path: str,
    result: BootstrapResult,
    X_eval: np.ndarray,
    fitted: np.ndarray | None = None,
    posterior: dict[str, Any] | None = None,
) -> str:
    """Write the band (and the fitted model's predictions) as a small zarr group at ``path``.

    Replaces what is at ``path``: the band is derived from the replicate store, which is kept.
    Arrays: ``X_eval``, ``mean``, ``lower``, ``upper`` (the requested interval), ``fitted``,
    ``out_of_range`` (bool per point), ``confidence_lower``/``confidence_upper`` for a
    prediction interval, ``data_min``/``data_max`` (the training range) when known, and with
    a ``posterior`` band (:func:`posterior_band`) ``posterior_std``, ``posterior_lower``,
    ``posterior_upper``; attributes: ``interval``, ``confidence_level``, ``n_bootstraps``,
    ``method``, ``posterior_level``, ...
    """
    group = zarr.open_group(path, mode="w")
    arrays = {"X_eval": X_eval, "mean": result.mean, "lower": result.lower, "upper": result.upper}
    if fitted is not None:
        arrays["fitted"] = fitted
    if result.interval == "prediction":
        arrays.update(confidence_lower=result.confidence_lower, confidence_upper=result.confidence_upper)
    if result.data_min is not None:
        arrays.update(data_min=result.data_min, data_max=result.data_max)
    if posterior is not None:
        arrays.update({f"posterior_{k}": posterior[k] for k in ("std", "lower", "upper")})
    for name, a in arrays.items():
        a = np.asarray(a, dtype=np.float64)
        group.create_array(name, shape=a.shape, chunks=a.shape, dtype="float64")[...] = a
    outside = np.asarray(result.out_of_range, dtype=bool)
    group.create_array("out_of_range", shape=outside.shape, chunks=outside.shape, dtype="bool")[...] = outside
    group.attrs.update({
        "format": "bigkernel-bootstrap-band", "interval": result.interval,
        "confidence_level": result.confidence_level,
        "n_bootstraps": result.n_bootstraps, "method": result.method,
        "random_state": result.random_state, "store": result.store,
        "n_computed": result.n_computed, "n_reused": result.n_reused,
        "n_out_of_range": int(outside.sum()),
    })  # fmt: skip
    if posterior is not None:
        group.attrs.update({"posterior_level": posterior["level"], "posterior_interval": posterior["interval"]})
    return path


def _finite_or_none(v: Any) -> float | None:
    return float(v) if v is not None and np.isfinite(v) else None


def _plot_sample(ds: Dataset, client: Any) -> tuple[np.ndarray, np.ndarray]:
    """Up to PLOT_POINTS training rows from at most PLOT_CHUNKS evenly spaced chunks."""
    n_chunks = ds.X.numblocks[0]
    picks = sorted(set(np.linspace(0, n_chunks - 1, min(PLOT_CHUNKS, n_chunks)).astype(int)))
    parts = compute(
        *[ds.X.blocks[j] for j in picks], *[ds.y.blocks[j] for j in picks], client=client, label="bootstrap-plot-sample"
    )
    X = np.concatenate(parts[: len(picks)])
    y = np.concatenate(parts[len(picks) :])
    keep = np.unique(np.linspace(0, X.shape[0] - 1, min(PLOT_POINTS, X.shape[0])).astype(int))
    return X[keep], y[keep]


def run_bootstrap_section(cfg: Any, est: Any, ds: Dataset, client: Any = None) -> dict[str, Any]:
    """Run the job's ``bootstrap:`` section.

    Steps: the evaluation points; the replicates (:func:`_run_replicates`); the fitted model's
    predictions and, with ``intervals: {posterior: true}``, its posterior band; the band's files
    (:func:`_write_outputs`); the metrics (:func:`_band_metrics`).

    Parameters
    ----------
    cfg : JobConfig
        With ``cfg.bootstrap`` set.
    est : estimator
        The job's fitted model (any solver).
    ds : Dataset
        The training data set (all rows are resampled).
    client : distributed.Client, optional

    Returns
    -------
    dict
        ``{"outputs": {name: path}, "metrics": {...}, "moves": [(staged, store)]}`` for
        metrics.json and the job's final swap of a staged store.
    """
    bc = cfg.bootstrap
    E, points = evaluation_points(cfg, ds, client)
    result, move = _run_replicates(cfg, est, ds, E, client)
    fitted = block_predictor(est)(E)  # E: points in the training data's columns
    ic = getattr(cfg, "intervals", None)
    post = None
    if ic is not None and ic.posterior:
        level = ic.level if ic.level is not None else bc.confidence_level
        post = posterior_band(est, E, fitted, level, bc.interval)
    outputs = _write_outputs(cfg, ds, result, E, fitted, post, points, client)
    metrics = _band_metrics(result, est, ds, E, fitted, post, outputs)
    return {"outputs": outputs, "metrics": metrics, "moves": [move] if move else []}


def _run_replicates(
    cfg: Any, est: Any, ds: Dataset, E: np.ndarray, client: Any
) -> tuple[BootstrapResult, tuple[str, str] | None]:
    """:func:`bootstrap` of the fitted model in the job's store (or its staged sibling), and
    the store swap to make once the job completes (see :func:`_bootstrap_in_store`).

    Points outside the training range are reported in the job's log (and its report and
    summary) rather than as a warning; other warnings pass through.
    """
    bc = cfg.bootstrap
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ExtrapolationWarning)
        run = lambda store: bootstrap(
            bootstrap_estimator(est), ds.X, ds.y, E, n_bootstraps=bc.n_bootstraps,
            confidence_level=bc.confidence_level, random_state=bootstrap_seed(cfg.seed),
            store=store, method=bc.method, interval=bc.interval, client=client,
        )  # fmt: skip
        result, move = _bootstrap_in_store(cfg, run)
    if move:  # the band and metrics name the store where it will be once the job completes
        result = dataclasses.replace(result, store=move[1])
    for w in caught:
        if issubclass(w.category, ExtrapolationWarning):
            logger.warning("bootstrap: %s", w.message)
        else:  # not ours to swallow
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return result, move


def _write_outputs(
    cfg: Any,
    ds: Dataset,
    result: BootstrapResult,
    E: np.ndarray,
    fitted: np.ndarray,
    post: dict[str, Any] | None,
    points: bool,
    client: Any,
) -> dict[str, str]:
    """The band's files in the job's folder: ``bootstrap_band.zarr``, ``bootstrap_band.csv`` and,
    with ``plot: true``, ``bootstrap_band.png``; returns ``{output name: path}`` (the replicate
    store included)."""
    band_zarr = write_band(os.path.join(cfg.output, "bootstrap_band.zarr"), result, E, fitted, post)
    band_csv = write_band_csv(
        os.path.join(cfg.output, "bootstrap_band.csv"),
        band_columns(result, E, fitted, posterior=post, feature_names=ds.columns),
    )
    outputs = {"bootstrap_store": result.store, "bootstrap_band": band_zarr, "bootstrap_band_csv": band_csv}
    if cfg.bootstrap.plot:
        from bigkernel.jobs.plots import plot_band

        Xs, ys = _plot_sample(ds, client)
        outputs["bootstrap_plot"] = plot_band(
            result,
            Xs,
            ys,
            E,
            fitted_mean=fitted,
            points=points,
            posterior=post,
            feature=grid_feature(cfg, ds),
            feature_names=ds.columns,
            path=os.path.join(cfg.output, "bootstrap_band.png"),
        )
    return outputs


def _band_metrics(
    result: BootstrapResult,
    est: Any,
    ds: Dataset,
    E: np.ndarray,
    fitted: np.ndarray,
    post: dict[str, Any] | None,
    outputs: dict[str, str],
) -> dict[str, Any]:
    """The section's metrics (metrics.json), logged in one line."""
    width = np.asarray(result.upper - result.lower)
    metrics = {
        "n_bootstraps": result.n_bootstraps, "confidence_level": result.confidence_level,
        "method": result.method, "n_eval": int(E.shape[0]), "n_computed": result.n_computed,
        "n_reused": result.n_reused, "random_state": result.random_state,
        "mean_band_width": float(width.mean()), "max_band_width": float(width.max()),
        **band_summary(result, E, fitted, posterior=post, feature_names=ds.columns),
        "band_zarr": outputs["bootstrap_band"], "band_csv": outputs["bootstrap_band_csv"],
    }  # fmt: skip
    if post is not None:
        pw = np.asarray(post["upper"] - post["lower"])
        metrics["posterior"] = {
            "level": post["level"], "interval": post["interval"], "mean_band_width": float(pw.mean()),
            "max_band_width": float(pw.max()), "sigma2": post["sigma2"], "alpha": post["alpha"],
            "log_marginal_likelihood": _finite_or_none(getattr(est, "log_marginal_likelihood_", None)),
        }  # fmt: skip
    logger.info(
        "bootstrap: B=%d (%d computed, %d reused), %s, mean width %.4g, %d of %d points outside the training range",
        result.n_bootstraps,
        result.n_computed,
        result.n_reused,
        metrics["interval"],
        metrics["mean_band_width"],
        metrics["n_out_of_range"],
        metrics["n_eval"],
    )
    return metrics


def _bootstrap_in_store(cfg: Any, run: Any) -> tuple[BootstrapResult, tuple[str, str] | None]:
    """Run the bootstrap in the store the rules of :mod:`bigkernel.jobs.overwrite` pick.

    Returns the result and, when the replicates went to a staged store, ``(staged, store)``:
    the swap the job makes once it completes.
    """
    store = cfg.bootstrap.store
    if not cfg.overwrite or "://" in store:
        try:
            return run(store), None
        except StoreMismatchError as exc:
            raise StoreMismatchError(
                f"{exc}\nIn a job, `overwrite: true` replaces it once this job's new store is complete."
            ) from None
    staged = staged_sibling(store)
    if os.path.exists(staged):  # the new store of an interrupted overwrite run: resume it
        try:
            return run(staged), (staged, store)
        except StoreMismatchError:
            logger.info("bootstrap: removing %s, the staged store of another job", staged)
            shutil.rmtree(staged)
    try:
        return run(store), None  # this job's store (any n_bootstraps): reused
    except StoreMismatchError as exc:
        diffs = "; ".join(line.strip() for line in str(exc).splitlines() if line.startswith("  "))
        logger.info(
            "bootstrap: %s holds another job's replicates (%s); overwrite: computing into %s, which "
            "replaces it when this job completes",
            store, diffs, staged,
        )  # fmt: skip
        return run(staged), (staged, store)
