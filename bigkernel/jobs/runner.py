"""Run a job: open (or make) data, fit, evaluate, save, predict, bootstrap, write reports.

Outputs go to the job's ``output`` folder: ``model.zarr``, ``config.resolved.yaml``, ``job.log``,
``summary.txt`` and, written last, ``metrics.json`` — a folder without ``metrics.json`` is an
unfinished job. A job that fails writes its error to ``job.log`` and ``status.json``
(``{"status": "failed", "error": {...}}``), never ``metrics.json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from bigkernel._version import __version__
from bigkernel.data.encode import MISSING_HINT, PREDICT_MISSING_HINT, nonfinite_named, table_facts
from bigkernel.data.sources import Dataset
from bigkernel.devices import resolve_device
from bigkernel.diagnostics import fit_findings, score_findings
from bigkernel.errors import OutputExistsError
from bigkernel.graph.residuals import residual_graph
from bigkernel.io.predictions import predict_to_path
from bigkernel.jobs import classify
from bigkernel.jobs.config import JobConfig
from bigkernel.jobs.config.estimators import JOB_KEYS, estimator_arguments, estimator_class
from bigkernel.jobs.holdout import holdout_rows, holdout_sample
from bigkernel.jobs.inputs import _chunk_rows, check_inputs, open_dataset, open_predict_data, open_training_data
from bigkernel.models._base import block_predictor
from bigkernel.models.random_features import feature_block_rows
from bigkernel.numerics.dual import describe_df
from bigkernel.numerics.splits import HoldoutSplit
from bigkernel.runtime import compute, progress_bars, progress_rows

logger = logging.getLogger(__name__)


def build_estimator(cfg: JobConfig):
    """Return the estimator the ``model:`` section describes (unfitted).

    Parameters
    ----------
    cfg : JobConfig
        The job; ``cfg.model`` names the class and holds every parameter (the config chose the
        class, a classifier for ``task: classification``, and translated the job's keys).

    Returns
    -------
    estimator
    """
    return estimator_class(cfg.model.estimator)(**estimator_arguments(cfg.model.params))


def chunk_plan(cfg: JobConfig, ds: Dataset) -> dict[str, Any]:
    """What the pass will do, from metadata only (for ``--dry-run`` and the log)."""
    n, d = ds.X.shape
    # the feature pass's figures; an exact solver's parameters have no features (its dtype is
    # the Gram's): the job's defaults then, as before
    params = cfg.model.params
    D = params.get("n_components", JOB_KEYS["n_components"].default)
    dtype = params.get("dtype") if params.get("dtype") in ("float32", "float64") else "float64"
    itemsize = np.dtype(dtype).itemsize
    rows = feature_block_rows(D, dtype)
    k = 1 if ds.y is None or ds.y.ndim == 1 else ds.y.shape[1]
    return {
        "source": ds.source, "n_samples": n, "n_features": d, "n_targets": k,
        "n_chunks": ds.X.numblocks[0], "rows_per_chunk": int(max(ds.X.chunks[0])),
        "feature_block_rows": rows, "feature_block_MiB": round(rows * D * itemsize / 2**20, 1),
        "stats_MiB_per_partial": round(8 * (D * D + D * (k + 1)) / 2**20, 1),
        "X_chunk_MiB": round(max(ds.X.chunks[0]) * d * ds.X.dtype.itemsize / 2**20, 1),
    }  # fmt: skip


def _metrics_from_residuals(r: np.ndarray) -> dict[str, dict[str, float]]:
    """RMSE and R² per group from [count, SSE, Σy, Σy²] sums (averaged over targets)."""
    out = {}
    for name, g in zip(("train", "holdout"), r):
        n = g[0, 0]
        if n == 0:
            continue
        sse, sy, syy = g[1], g[2], g[3]
        tss = syy - sy**2 / n
        out[name] = {
            "n_samples": int(n),
            "rmse": float(np.sqrt(sse.mean() / n)),
            "r2": float(np.mean(1 - sse / np.where(tss > 0, tss, np.nan))),
        }
    return out


#: what a failed job leaves in its folder (metrics.json is then never written)
STATUS_FILE = "status.json"


@contextlib.contextmanager
def _job_logging(output: str, level: str, job: str) -> Iterator[None]:
    """``job.log`` at ``level`` for the job's duration; on an exception, the error as well.

    The file's level is its own: the logger is lowered to it only when needed, so a terminal
    handler keeps its level (``bigkernel -q``) while job.log gets the full log. A failure is
    written to job.log (type and message; the traceback too unless it is a BigkernelError) and
    to ``status.json``, and re-raised: how the terminal shows it is the caller's business.

    The libraries' records are kept too, at WARNING and above (all of them at DEBUG): the
    workers' "Compute Failed" tracebacks (forwarded by ``jobs.cluster``), the nanny's, asyncio's
    and dask's warnings, which the command line keeps off the terminal.
    """
    handler = logging.FileHandler(os.path.join(output, "job.log"), mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(level)
    floor = logging.DEBUG if handler.level <= logging.DEBUG else logging.WARNING
    handler.addFilter(lambda r: r.name == "bigkernel" or r.name.startswith("bigkernel.") or r.levelno >= floor)
    root = logging.getLogger("bigkernel")
    # on the root logger, which bigkernel's and the libraries' records reach; distributed's do
    # not (its logger does not propagate), so its logger relays them: through a handler of
    # its own, as a LocalCluster sets the level of every StreamHandler of that logger
    distributed = logging.getLogger("distributed")
    targets = [(logging.getLogger(), handler)] + ([] if distributed.propagate else [(distributed, _Relay(handler))])
    for target, h in targets:
        target.addHandler(h)
    old = root.level
    root.setLevel(min(root.getEffectiveLevel(), handler.level))
    try:
        yield
    except BaseException as exc:
        _record_failure(output, job, handler, exc)
        raise
    finally:
        for target, h in targets:
            target.removeHandler(h)
        root.setLevel(old)
        handler.close()


class _Relay(logging.Handler):
    """Hands each record to another handler (which applies its own level and filters)."""

    def __init__(self, to: logging.Handler) -> None:
        super().__init__()
        self.to = to

    def emit(self, record: logging.LogRecord) -> None:
        self.to.handle(record)


def _record_failure(output: str, job: str, handler: logging.Handler, exc: BaseException) -> None:
    """The error into job.log (this handler only, whatever its level) and status.json."""
    from bigkernel.errors import BigkernelError

    message = str(exc) or ("interrupted" if isinstance(exc, KeyboardInterrupt) else "")
    ours = isinstance(exc, BigkernelError)  # its message says all; anything else is a bug: traceback
    record = logger.makeRecord(
        logger.name,
        logging.ERROR,
        __file__,
        0,
        "job %s failed: %s: %s",
        (job, type(exc).__name__, message),
        None if ours else (type(exc), exc, exc.__traceback__),
    )
    handler.handle(record)
    _write_json_atomic(os.path.join(output, STATUS_FILE), {
        "status": "failed", "job": job, "error": {"type": type(exc).__name__, "message": message},
        "log": "job.log", "bigkernel_version": __version__,
    })  # fmt: skip


#: a job's outputs in its folder besides metrics.json (removed before a rerun writes its own)
_OUTPUT_NAMES = (
    STATUS_FILE,
    "summary.txt",
    "model.zarr",
    "report.md",
    "alpha_path.png",
    "predicted_vs_observed.png",
    "holdout_sample.npz",
    "confusion_matrix.png",
    "roc.png",
    "search_results.json",
    "bootstrap_band.zarr",
    "bootstrap_band.png",
    "bootstrap_band.csv",
)


def _prepare_output(cfg: JobConfig) -> None:
    """Create the output folder; refuse to replace finished work unless ``overwrite``.

    From here on the folder is an unfinished job until ``metrics.json`` is written, so the
    outputs of an earlier run in it are removed first: a failure must not leave an old model or
    old predictions looking like this job's. (A bootstrap store is kept: reruns resume it.) A
    *finished* job overwritten is never cleared here: the run writes to a hidden sibling folder
    (:mod:`bigkernel.jobs.overwrite`), which this prepares.
    """
    done = os.path.join(cfg.output, "metrics.json")
    if os.path.exists(done) and not cfg.overwrite:
        raise OutputExistsError(
            f"output folder {cfg.output!r} already holds a finished job (metrics.json); "
            "choose another output or set `overwrite: true`"
        )
    pred = cfg.predict.output if cfg.predict is not None and "://" not in cfg.predict.output else None
    pred_inside = pred is not None and _is_inside(pred, cfg.output)
    if pred is not None and not pred_inside and os.path.exists(pred) and not cfg.overwrite:
        raise OutputExistsError(f"predict.output {pred!r} already exists; choose another path or set `overwrite: true`")
    os.makedirs(cfg.output, exist_ok=True)
    stale = [done] + [os.path.join(cfg.output, name) for name in _OUTPUT_NAMES]
    for path in stale + ([pred] if pred_inside else []):
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def _is_inside(path: str, folder: str) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(folder).rstrip(os.sep) + os.sep)


def _write_json_atomic(path: str, data: dict) -> None:
    tmp = f"{path}.partial"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


def dry_run(cfg: JobConfig) -> dict[str, Any]:
    """The resolved config and the chunk plan, computing nothing (data may not exist yet)."""
    plan: dict[str, Any] = {"config": cfg.to_dict()}
    if cfg.data.make is not None and not os.path.exists(cfg.data.make.path):
        mk = cfg.data.make
        plan["chunk_plan"] = {
            "source": mk.path,
            "n_samples": mk.n_samples,
            "n_features": mk.n_features,
            "note": "synthetic data not made yet; it will be written first",
        }
    else:
        plan["chunk_plan"] = chunk_plan(
            cfg,
            open_training_data(cfg) if cfg.data.make is None else open_dataset(cfg.data.make.source, _chunk_rows(cfg)),
        )
    return plan


def run_job(cfg: JobConfig, *, progress: bool | None = None) -> dict[str, Any]:
    """Run the whole job on the configured cluster; returns the metrics written to metrics.json.

    The steps, in order: check the inputs, open the data, fit, evaluate, save, predict,
    bootstrap (each timed, on the cluster), then the metrics, figures and summary. A job that
    overwrites a finished one runs in a hidden sibling folder, swapped in once complete.

    Parameters
    ----------
    cfg : JobConfig
        The job.
    progress : bool or None, default=None
        Overrides the job's ``progress:`` key (``bigkernel -q`` turns the bars off).

    Returns
    -------
    dict
        The metrics written to ``metrics.json``.

    Raises
    ------
    BigkernelError
        A failure, recorded in ``job.log`` and ``status.json`` first.
    """
    from bigkernel.jobs.cluster import client_from_config
    from bigkernel.jobs.overwrite import commit, stage

    staging = stage(cfg)
    final_cfg, cfg = cfg, staging.cfg
    _prepare_output(cfg)
    progress = cfg.progress if progress is None else progress
    with _job_logging(cfg.output, cfg.log_level, cfg.name), progress_bars(progress):
        with open(os.path.join(cfg.output, "config.resolved.yaml"), "w") as f:
            f.write(final_cfg.to_yaml())
        check_inputs(cfg)  # fail on missing/bad data before starting a cluster
        resolve_device(cfg.model.params["device"])  # an unusable GPU fails here too (DeviceError), as fast
        run = _JobRun(cfg, staging)
        with client_from_config(cfg.cluster) as client:
            run.client = client
            for step in (_open_data, _fit, _evaluate, _save, _predict, _bootstrap):
                step(run)
        metrics = _finish(run)
    commit(run.staging, _OUTPUT_NAMES)
    logger.info("job %s finished: %s", cfg.name, os.path.join(final_cfg.output, "metrics.json"))
    return metrics


class _JobRun:
    """What the steps of :func:`run_job` hand on: the data, the model, scores and outputs.

    Parameters
    ----------
    cfg : JobConfig
        The job (its output folder: the staging one when a finished job is overwritten).
    staging : Any
        The overwrite plan of :func:`bigkernel.jobs.overwrite.stage`.
    """

    def __init__(self, cfg: JobConfig, staging: Any) -> None:
        self.cfg, self.staging = cfg, staging
        self.client: Any = None
        self.timings: dict[str, float] = {}
        self.ds: Dataset | None = None
        self.plan: dict[str, Any] = {}
        self.est: Any = None
        self.split = HoldoutSplit(cfg.seed, cfg.data.holdout_fraction)
        self.findings: list[Any] = []
        self.scores: dict[str, Any] = {}
        self.holdout: tuple | None = None
        self.outputs: dict[str, str] = {}
        self.boot: dict[str, Any] | None = None

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Record the seconds the block takes as ``timings[name]``."""
        start = time.perf_counter()
        yield
        self.timings[name] = time.perf_counter() - start


def _open_data(run: _JobRun) -> None:
    """Open the training data, log the chunk plan, and check a bootstrap store before the fit."""
    cfg = run.cfg
    with run.timed("data"):
        run.ds = ds = open_training_data(cfg)
    progress_rows(ds.X.shape[0])  # progress lines: rows done / total
    run.plan = chunk_plan(cfg, ds) | table_facts(ds)
    logger.info("chunk plan: %s", run.plan)
    if cfg.bootstrap is not None:
        from bigkernel.jobs.bootstrap_job import check_existing_store

        check_existing_store(cfg, ds, run.client)  # a foreign store fails before the fit


def _fit(run: _JobRun) -> None:
    """Build the ``model:`` estimator and fit it on the training rows (the holdout left out)."""
    ds = run.ds
    run.est = est = build_estimator(run.cfg)
    with run.timed("fit"):
        with nonfinite_named(ds.columns, MISSING_HINT if ds.columns is not None else None):
            est.fit_dataset(ds, weights=run.split if run.cfg.data.holdout_fraction > 0 else None)
        est.set_input_facts(ds.X.dtype, ds.columns, ds.target_names)  # a table's columns: as a DataFrame fit
        if ds.encoder is not None:  # saved with the model, applied at predict
            est.table_encoder_ = ds.encoder
    run.findings = fit_findings(est, job=True)


def _evaluate(run: _JobRun) -> None:
    """Score the training and holdout rows in one pass; log what the fit and scores show."""
    cfg, ds, est = run.cfg, run.ds, run.est
    with run.timed("evaluate"):
        if cfg.task == "classification":
            run.scores, run.holdout = classify.evaluate_classifier(ds, est, run.split, run.client)
            if run.holdout is not None:
                classify.save_sample(cfg.output, run.holdout, est.classes_)
        else:
            run.scores, run.holdout = _evaluate_regressor(cfg, ds, est, run.split, run.client)
    run.findings += score_findings(run.scores)
    for f in run.findings:  # on the terminal and in job.log; listed in metrics.json and report.md
        logger.warning("%s [%s]", f.message, f.code)


def _save(run: _JobRun) -> None:
    """Save the fitted model to ``model.zarr``."""
    with run.timed("save"):
        run.outputs["model"] = run.est.save(os.path.join(run.cfg.output, "model.zarr"), overwrite=True)


def _predict(run: _JobRun) -> None:
    """Predict the ``predict:`` data, if any, to its output (X by the model's column names)."""
    cfg, ds = run.cfg, run.ds
    if cfg.predict is None:
        return
    with run.timed("predict"):
        pds = open_predict_data(cfg, ds.columns, ds.encoder)
        progress_rows(pds.X.shape[0])
        ids = None if cfg.predict.id is None else (cfg.predict.id, pds.ids)
        with nonfinite_named(pds.columns, PREDICT_MISSING_HINT if pds.columns is not None else None):
            run.outputs["predictions"] = predict_to_path(
                run.est, pds.X, cfg.predict.output, overwrite=cfg.overwrite, ids=ids
            )


def _bootstrap(run: _JobRun) -> None:
    """Run the ``bootstrap:`` section, if any; a replaced store is swapped in at the end."""
    if run.cfg.bootstrap is None:
        return
    from bigkernel.jobs.bootstrap_job import run_bootstrap_section

    with run.timed("bootstrap"):
        progress_rows(run.ds.X.shape[0])
        run.boot = boot = run_bootstrap_section(run.cfg, run.est, run.ds, run.client)
        run.outputs.update(boot.get("outputs", {}))
        for staged, final in boot.get("moves", ()):
            run.staging = run.staging.with_move(staged, final)


def _finish(run: _JobRun) -> dict[str, Any]:
    """Write the search results, figures and report, summary.txt and, last, metrics.json."""
    from bigkernel.jobs.overwrite import final_paths

    cfg, est = run.cfg, run.est
    metrics = {
        "job": cfg.name, "bigkernel_version": __version__, "data": run.plan,
        "model": _model_summary(cfg, est),
        "search": _search_summary(est),
        "scores": run.scores, "warnings": [f.as_dict() for f in run.findings],
        "timings_s": {k: round(v, 3) for k, v in run.timings.items()}, "outputs": run.outputs,
    }  # fmt: skip
    if run.boot is not None:
        metrics["bootstrap"] = run.boot.get("metrics", {})
    if hasattr(est, "cv_results_"):
        with open(os.path.join(cfg.output, "search_results.json"), "w") as f:
            json.dump(_jsonable_results(est.cv_results_), f)
    if _want_plots(cfg):
        _report(run, metrics)
    metrics = final_paths(metrics, run.staging)  # the paths the outputs have once swapped in
    with open(os.path.join(cfg.output, "summary.txt"), "w") as f:
        f.write(summary_text(metrics))
    _write_json_atomic(os.path.join(cfg.output, "metrics.json"), metrics)
    return metrics


def _report(run: _JobRun, metrics: dict[str, Any]) -> None:
    """Draw the figures and write report.md; their paths and time go into ``metrics``."""
    from bigkernel.jobs.report import make_classification_report, make_report

    t = time.perf_counter()
    if run.cfg.task == "classification":
        figures = make_classification_report(run.cfg.output, metrics, run.holdout)
    else:
        figures = make_report(run.cfg.output, getattr(run.est, "estimator_", run.est), run.holdout, metrics)
    metrics["outputs"].update(figures)
    metrics["timings_s"]["report"] = round(time.perf_counter() - t, 3)


def _evaluate_regressor(cfg: JobConfig, ds: Dataset, est, split: HoldoutSplit, client) -> tuple:
    """RMSE and R² of the training and holdout rows in one pass, and the holdout sample."""
    Y = ds.y if ds.y.ndim == 2 else ds.y[:, None]
    # any estimator: its own numpy predict per chunk, train/holdout sums in one pass; the
    # first rows for the figure and holdout_sample.npz ride along in the same graph
    head = holdout_rows(ds, split)
    res, *head = compute(
        residual_graph(ds.X, Y, block_predictor(est), groups=split.groups, n_groups=2),
        *head,
        client=client,
        label="evaluate",
    )
    holdout = holdout_sample(*head, est, split) if head else None
    if holdout is not None:
        np.savez(os.path.join(cfg.output, "holdout_sample.npz"), y=holdout[0], pred=holdout[1], row=holdout[2])
    return _metrics_from_residuals(res), holdout


def _model_summary(cfg: JobConfig, est) -> dict[str, Any]:
    """The fitted model's figures for metrics.json (every solver)."""
    inner = est
    while hasattr(inner, "estimator_"):  # a classifier wraps its regressor; KernelRidge its solver
        inner = inner.estimator_
    kernel = est.kernel if isinstance(est.kernel, str) else getattr(est.kernel, "name", str(est.kernel))
    gcv = np.asarray(getattr(est, "gcv_", None), dtype=np.float64)  # None (NaN): Nyström by CG has no GCV
    out = {
        "solver": getattr(est, "solver_", cfg.model.solver),
        "kernel": kernel,
        "n_components": getattr(inner, "n_components", None),
        "alpha": est.alpha_,
        "df": _finite(_or_nan(getattr(est, "df_", None))),
        "dtype": getattr(inner, "dtype_", None) or getattr(inner, "dtype", None),  # the fit's (auto: 32 or 64)
        "gcv": float(np.nanmin(gcv)) if np.isfinite(gcv).any() else None,
        # the Gaussian-process reading: log evidence at alpha_ and σ² (None when not computed)
        "log_marginal_likelihood": _finite(_or_nan(getattr(est, "log_marginal_likelihood_", None))),
        "sigma2": [_finite(v) for v in np.atleast_1d(np.asarray(getattr(est, "sigma2_", np.nan), dtype=float))],
    }
    if hasattr(est, "solver_reason_"):
        out["solver_reason"] = est.solver_reason_
    if hasattr(est, "classes_"):  # a classifier: its labels as JSON values
        out.update(task="classification", classes=[c.item() if hasattr(c, "item") else c for c in est.classes_])
        out["loss"] = est.loss
    if hasattr(est, "dual_gap_"):  # the primal SVM: its passes over the data and its gaps
        out.update(n_passes=int(est.n_iter_), converged=est.converged_.tolist(), dual_gap=est.dual_gap_.tolist())
    elif hasattr(inner, "df_stderr_"):  # exact: CG figures, df's standard error, the Gram cache
        out.update(
            n_samples_fit=inner.n_samples_fit_,
            df_stderr=_finite(inner.df_stderr_),
            n_iter=np.asarray(inner.n_iter_).tolist(),
            residual=np.asarray(inner.residual_).tolist(),
            solver_info=inner.solver_info_,
        )
    elif hasattr(inner, "criterion"):  # exact search (ExactKernelRidgeCV): closed form, no CG
        out.update(n_samples_fit=inner.n_samples_fit_, dtype="float64", solver_info=inner.solver_info_)
    elif hasattr(inner, "residuals_"):  # Nyström by CG: its passes and each α's held-out score
        scores = inner.validation_scores_
        out.update(n_samples_fit=inner.n_samples_fit_, n_iter=int(inner.n_iter_), solver_info=inner.solver_info_,
                   validation_scores=None if scores is None else np.asarray(scores).tolist())  # fmt: skip
    return out


def _or_nan(value: float | None) -> float:
    return np.nan if value is None else float(value)


def _finite(value: float) -> float | None:
    """None for NaN (df not computed): metrics.json stays strict JSON."""
    return float(value) if np.isfinite(value) else None


def _search_summary(est) -> dict[str, Any] | None:
    """Best point and grid size of a (γ, α) search, or None for a plain fit."""
    if not hasattr(est, "cv_results_"):
        return None
    return {
        "cv": getattr(est, "criterion", None) or est.cv,
        "best_params": est.best_params_,
        "best_score": est.best_score_,
        "n_candidates": len(est.cv_results_["params"]),
    }


def _want_plots(cfg: JobConfig) -> bool:
    from bigkernel.jobs.report import _pyplot, plots_available

    if cfg.plots == "auto":
        if not plots_available():
            logger.warning(
                "matplotlib, a dependency of bigkernel, is not installed: no figures (pip install matplotlib)"
            )
            return False
        return True
    if cfg.plots:
        _pyplot()  # raises a clear error when matplotlib is missing
    return bool(cfg.plots)


def _search_kind(cv: Any) -> str:
    """How a search scored: "GCV", "leave-one-out (closed form)" or "K-fold CV"."""
    return {"gcv": "GCV", "loo": "leave-one-out (closed form)"}.get(cv, f"{cv}-fold CV")


def _jsonable_results(results: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in results.items()}


def summary_text(m: dict[str, Any]) -> str:
    """A short human-readable report of a job's metrics."""
    d, mo = m["data"], m["model"]
    lines = [
        f"bigkernel {m['bigkernel_version']} — job {m['job']}",
        f"data:  {d['n_samples']:,} rows × {d['n_features']} features from {d['source']} ({d['n_chunks']} chunks)",
        f"model: {mo['solver']} {mo['kernel']}, "
        + (
            f"Nyström M={mo.get('n_components', 0):,} centres on n={mo['n_samples_fit']:,}, CG passes {mo['n_iter']}, "
            if mo["solver"] == "cg"
            else f"exact on n={mo['n_samples_fit']:,}, "
            + (f"CG iterations {mo['n_iter']}, " if "n_iter" in mo else "closed form (eigh per gamma), ")
            if "n_samples_fit" in mo
            else f"D={mo['n_components']}, "
        )
        + f"alpha={mo['alpha']:.3g}, {describe_df(mo['df'], mo.get('df_stderr'))}, {mo['dtype']} "
        + ("Gram" if "n_samples_fit" in mo and mo["solver"] != "cg" else "features"),
    ]
    lines += [f"WARNING: {w['message']}" for w in m.get("warnings", [])]
    if m.get("search"):
        lines.append(
            f"search: best {m['search']['best_params']} of {m['search']['n_candidates']} "
            f"candidates ({_search_kind(m['search']['cv'])})"
        )
    if mo.get("task") == "classification":
        lines += classify.score_lines(m["scores"])
    for name, s in m["scores"].items() if mo.get("task") != "classification" else ():
        lines.append(f"{name:8s} n={s['n_samples']:,}  RMSE={s['rmse']:.4f}  R²={s['r2']:.4f}")
    lines += _bootstrap_band_lines(m)
    lines.append("time:  " + ", ".join(f"{k} {v:.2f}s" for k, v in m["timings_s"].items()))
    for k, v in m["outputs"].items():
        lines.append(f"{k}: {v}")
    return "\n".join(lines) + "\n"


def _bootstrap_band_lines(m: dict[str, Any]) -> list[str]:
    """summary.txt's lines on the bootstrap band: what it is and its values (none without one)."""
    from bigkernel.jobs.band_table import band_text

    return band_text(m["bootstrap"]) if m.get("bootstrap") else []
