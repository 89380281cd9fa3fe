"""``bigkernel update``: add new rows to a saved streamed model without reading the old ones.

A model of the one-pass primal path (RandomFeatureRidge, NystroemRidge, or a KernelRidge that
chose one of them) keeps its sufficient statistics; the new rows' statistics are added in one
pass over the new data, the penalty is re-chosen on all rows, and the model is written —
atomically — to a new folder or, when asked explicitly, over the old one.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from sklearn.base import is_classifier

from bigkernel.data.sources import Dataset
from bigkernel.errors import OutputExistsError, ParameterError
from bigkernel.io.atomic import atomic_folder
from bigkernel.jobs.config import path_relation

logger = logging.getLogger(__name__)


def updatable_part(model: Any) -> Any:
    """The estimator that takes new rows: ``model`` itself, or the solver a KernelRidge chose.

    Raises
    ------
    ParameterError
        The model has no ``partial_fit`` (the exact solver, a CV search) or no saved statistics.
    """
    if is_classifier(model):
        # its inner regressor's sums hold ±1 targets of the classes seen; new rows would need
        # their labels encoded the same way (and a new class could not be added)
        raise ParameterError(
            f"a {type(model).__name__} model cannot be updated with new rows: `bigkernel update` adds rows "
            "to regressors (RandomFeatureRidge, NystroemRidge, KernelRidge with solver random_features / "
            "nystroem); refit the classifier on all rows instead"
        )
    inner = getattr(model, "estimator_", model)
    name = type(model).__name__ + (f" (solver {model.solver_!r})" if inner is not model else "")
    if not hasattr(inner, "partial_fit_dataset"):
        raise ParameterError(
            f"a {name} model cannot be updated with new rows: only the streamed estimators "
            "(RandomFeatureRidge, NystroemRidge, or KernelRidge with solver random_features / "
            "nystroem) keep the sums that new rows are added to; refit on all rows instead"
        )
    if getattr(inner, "stats_", None) is None:
        raise ParameterError(
            f"this {name} model was saved without its sufficient statistics (by a bigkernel "
            "before they were kept), so new rows cannot be added to it; refit it on all rows "
            "once with this bigkernel to make it updatable"
        )
    return inner


def check_update_paths(model_path: str, data_path: str, output: str | None, in_place: bool, overwrite: bool) -> str:
    """Where the updated model goes: ``output``, or ``model_path`` with ``in_place``; checked
    before any data is read. Returns the target path."""
    if (output is None) == (not in_place):
        raise ParameterError(
            "say where the updated model goes: --output NEW.zarr (a new folder), or --in-place "
            "to replace the model (written beside it and renamed into place when complete)"
        )
    if in_place:
        return model_path
    for what, path in (("model", model_path), ("data", data_path)):
        relation = path_relation(output, path)
        if relation:
            hint = "use --in-place to replace the model" if what == "model" else "choose another --output"
            raise OutputExistsError(f"--output {output} {relation} the {what} {path}; {hint}")
    if os.path.exists(output) and not overwrite:
        raise OutputExistsError(f"model output {output!r} exists; pass --overwrite to replace it")
    return output


def update_model(
    model: Any, model_path: str, ds: Dataset, target: str, *, metrics_path: str | None = None
) -> dict[str, Any]:
    """Add the rows of ``ds`` to ``model`` (loaded from ``model_path``) and save it at ``target``.

    The model is written to a hidden sibling of ``target`` and renamed into place only when
    complete (an existing model there is moved aside first and removed last), so a failure at
    any point leaves the old model — never a half-written one — at ``target``.

    Parameters
    ----------
    model : estimator
        A loaded model (:func:`bigkernel.load`).
    model_path : str
        Where it was loaded from (reported).
    ds : Dataset
        The new rows, X and y, with the model's columns.
    target : str
        Where to write the updated model (from :func:`check_update_paths`).
    metrics_path : str, optional
        Also write the returned metrics there as JSON.

    Returns
    -------
    dict
        ``model``, ``output``, ``n_samples_before``, ``n_samples_added``, ``n_samples_after``,
        ``alpha`` and ``df`` of the updated model, and ``scaling``: with ``standardize``, the
        column scaling is the first fit's, kept fixed (None without ``standardize``).
    """
    inner = updatable_part(model)
    before = int(inner.n_samples_fit_)
    scaled = bool(getattr(inner, "standardize", False))
    if scaled:
        # the scaling was estimated by the first fit and frozen in the feature map (a loaded
        # model keeps it there only): the new rows are scaled by it
        logger.info(
            "standardize: the new rows are scaled with the column means and deviations of the "
            "model's first fit (%s rows), kept fixed; the updated model equals a fit on all rows "
            "with that scaling, not with one re-estimated from all rows",
            f"{before:,}",
        )
    inner.partial_fit_dataset(ds)
    if inner is not model:
        model.set_fitted_estimator(inner, model.solver_, model.solver_reason_)
    model.save(target, overwrite=True)
    metrics = {
        "model": str(model_path),
        "output": str(target),
        "estimator": type(inner).__name__,
        "n_samples_before": before,
        "n_samples_added": int(ds.X.shape[0]),
        "n_samples_after": int(inner.n_samples_fit_),
        "alpha": float(inner.alpha_),
        "df": float(inner.df_),
        "scaling": "from the first fit, kept fixed" if scaled else None,
    }
    if metrics_path is not None:
        with atomic_folder(metrics_path, overwrite=True, what="metrics") as tmp, open(tmp, "w") as f:
            json.dump(metrics, f, indent=2)
    logger.info(
        "updated %s: %s + %s rows = %s rows seen, alpha=%.3g → %s",
        metrics["estimator"],
        f"{before:,}",
        f"{metrics['n_samples_added']:,}",
        f"{metrics['n_samples_after']:,}",
        metrics["alpha"],
        target,
    )
    return metrics
