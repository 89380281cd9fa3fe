"""The ``bootstrap:`` section of a job (layer 4): band of the fitted model, band zarr, plot.

Called by :func:`bigkernel.jobs.runner.run_job` after the fit, on the job's cluster::

    boot = run_bootstrap_section(cfg, est, ds, client)   # {"outputs": {...}, "metrics": {...}}

What is bootstrapped: the *fitted* model — any solver — with its kernel, feature map or
landmarks, scaling, γ (the searched one for a CV model) and chosen α held fixed, refitted on B resamples of all
rows of the training data set (holdout rows included: a holdout split is for scoring, the band
is about the data set). Only the data are resampled.

Outputs in the job's folder: the replicate store (``bootstrap.store``, kept so reruns resume it),
``bootstrap_band.zarr`` (arrays ``X_eval``, ``mean``, ``lower``, ``upper``, ``fitted`` and the
run's attributes; rewritten each run) and, with ``plot: true``, ``bootstrap_band.png``.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
from typing import Any

import numpy as np
import zarr

from bigkernel.data.sources import Dataset
from bigkernel.models._base import block_predictor
from bigkernel.models._compute import compute
from bigkernel.models.auto import KernelRidge
from bigkernel.models.bootstrap import BootstrapResult, bootstrap, eval_grid
from bigkernel.models.exact_cv import ExactKernelRidgeCV
from bigkernel.models.random_features_cv import RandomFeatureRidgeCV

__all__ = ["bootstrap_estimator", "bootstrap_seed", "run_bootstrap_section", "write_band"]

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
    """Before the fit: refuse a bootstrap store written by another job.

    Compares what is known before fitting — the data fingerprint, the resampling seed and
    method, and B — so a foreign store fails the job before any model is written. (The full
    fingerprint, estimator included, is checked again by :func:`bootstrap`.)
    """
    bc = cfg.bootstrap
    if bc is None or "://" in bc.store or not os.path.exists(bc.store):
        return
    import json

    from bigkernel.errors import StoreMismatchError
    from bigkernel.models.bootstrap import _data_fingerprint
    from bigkernel.models.bootstrap_store import open_store

    store = open_store(bc.store)  # a folder that is no bootstrap store is refused here
    fp = store.fingerprint or {}
    canon = lambda v: json.dumps(v, sort_keys=True, default=str)  # noqa: E731 - JSON round trip
    checks = {
        "seed": (bootstrap_seed(cfg.seed), fp.get("seed")),
        "resampling.method": (bc.method, (fp.get("resampling") or {}).get("method")),
        "n_bootstraps": (bc.n_bootstraps, store.n_replicates),
        "data": (_data_fingerprint(ds, None, client), fp.get("data")),
    }
    diffs = [f"{key}: expected {canon(exp)}, found {canon(found)}" for key, (exp, found) in checks.items()
             if canon(exp) != canon(found)]
    if diffs:
        raise StoreMismatchError(
            f"bootstrap store {bc.store!r} was written by a different job; refusing to mix results "
            f"({'; '.join(diffs)}). Use a new bootstrap.store path or delete the old store"
        )


def bootstrap_estimator(est: Any) -> Any:
    """The job's fitted model with its chosen α held fixed, for :func:`bootstrap`.

    The fitted feature map, landmarks, kernel and scaling are reused by the bootstrap plan
    (:mod:`bigkernel.models.bootstrap_plans`); a ``KernelRidge`` gives its fitted solver; a
    fitted ``RandomFeatureRidgeCV`` is bootstrapped at its chosen (γ, α) by its plan.

    Parameters
    ----------
    est : fitted RandomFeatureRidge, RandomFeatureRidgeCV, NystroemRidge, ExactKernelRidge or KernelRidge

    Returns
    -------
    estimator
        A shallow copy (the job's model is not modified).
    """
    inner = est.estimator_ if isinstance(est, KernelRidge) else est
    if isinstance(inner, (RandomFeatureRidgeCV, ExactKernelRidgeCV)):
        return inner  # their plans bootstrap the chosen (γ, α)
    boot = copy.copy(inner)
    boot.set_params(alpha=float(inner.alpha_))
    return boot


def write_band(path: str, result: BootstrapResult, X_eval: np.ndarray,
               fitted: np.ndarray | None = None) -> str:
    """Write the band (and the fitted model's predictions) as a small zarr group at ``path``.

    Replaces what is at ``path``: the band is derived from the replicate store, which is kept.
    """
    group = zarr.open_group(path, mode="w")
    arrays = {"X_eval": X_eval, "mean": result.mean, "lower": result.lower, "upper": result.upper}
    if fitted is not None:
        arrays["fitted"] = fitted
    for name, a in arrays.items():
        a = np.asarray(a, dtype=np.float64)
        group.create_array(name, shape=a.shape, chunks=a.shape, dtype="float64")[...] = a
    group.attrs.update({
        "format": "bigkernel-bootstrap-band", "confidence_level": result.confidence_level,
        "n_bootstraps": result.n_bootstraps, "method": result.method,
        "random_state": result.random_state, "store": result.store,
        "n_computed": result.n_computed, "n_reused": result.n_reused,
    })  # fmt: skip
    return path


def _plot_sample(ds: Dataset, client: Any) -> tuple[np.ndarray, np.ndarray]:
    """Up to PLOT_POINTS training rows from at most PLOT_CHUNKS evenly spaced chunks."""
    n_chunks = ds.X.numblocks[0]
    picks = sorted(set(np.linspace(0, n_chunks - 1, min(PLOT_CHUNKS, n_chunks)).astype(int)))
    parts = compute(*[ds.X.blocks[j] for j in picks], *[ds.y.blocks[j] for j in picks],
                    client=client, label="bootstrap-plot-sample")
    X = np.concatenate(parts[: len(picks)])
    y = np.concatenate(parts[len(picks):])
    keep = np.unique(np.linspace(0, X.shape[0] - 1, min(PLOT_POINTS, X.shape[0])).astype(int))
    return X[keep], y[keep]


def run_bootstrap_section(cfg: Any, est: Any, ds: Dataset, client: Any = None) -> dict[str, Any]:
    """Run the job's ``bootstrap:`` section.

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
        ``{"outputs": {name: path}, "metrics": {...}}`` for metrics.json.
    """
    # imported here: the runner imports this module lazily, from inside run_job
    from bigkernel.jobs.runner import open_dataset

    bc = cfg.bootstrap
    feature = bc.eval_grid.feature if bc.eval_grid is not None else 0
    if bc.eval is not None:
        eds = open_dataset(bc.eval, None, with_y=False)
        (E,) = compute(eds.X, client=client, label="bootstrap-eval")
        E = np.asarray(E, dtype=np.float64)
    else:
        E = eval_grid(ds.X, feature, bc.eval_grid.n_points, client=client)
    result = bootstrap(
        bootstrap_estimator(est), ds.X, ds.y, E, n_bootstraps=bc.n_bootstraps,
        confidence_level=bc.confidence_level, random_state=bootstrap_seed(cfg.seed),
        store=bc.store, method=bc.method, client=client,
    )  # fmt: skip
    fitted = block_predictor(est)(E)  # E: points in the training data's columns
    outputs = {
        "bootstrap_store": result.store,
        "bootstrap_band": write_band(os.path.join(cfg.output, "bootstrap_band.zarr"), result, E,
                                     fitted),
    }
    if bc.plot:
        from bigkernel.jobs.plots import plot_band

        Xs, ys = _plot_sample(ds, client)
        outputs["bootstrap_plot"] = plot_band(
            result, Xs, ys, E, fitted_mean=fitted, feature=feature,
            path=os.path.join(cfg.output, "bootstrap_band.png"),
        )
    width = np.asarray(result.upper - result.lower)
    metrics = {
        "n_bootstraps": result.n_bootstraps, "confidence_level": result.confidence_level,
        "method": result.method, "n_eval": int(E.shape[0]), "n_computed": result.n_computed,
        "n_reused": result.n_reused, "random_state": result.random_state,
        "mean_band_width": float(width.mean()), "max_band_width": float(width.max()),
    }  # fmt: skip
    logger.info("bootstrap: B=%d (%d computed, %d reused), mean %g %% band width %.4g",
                result.n_bootstraps, result.n_computed, result.n_reused,
                round(100 * result.confidence_level), metrics["mean_band_width"])
    return {"outputs": outputs, "metrics": metrics}
