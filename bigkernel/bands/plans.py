"""The bootstrap's replicate plans (layer 3): which plan serves an estimator, and what every plan does.

:func:`bigkernel.bootstrap` asks :func:`make_plan` for a
:class:`~bigkernel.solvers.base.ReplicatePlan`, and :func:`make_plan` asks the estimator: its
public ``replicate_plan(ds, X_eval, *, seed_entropy, workers)`` returns the plan its solver
builds (the plans live with their solvers in :mod:`bigkernel.solvers`). This module names no
estimator class and calls nothing private: a new solver gets bootstrap support by implementing
``replicate_plan``. An estimator without it is refused with a ``NotImplementedError`` that says
so. :func:`on_device` sets the ``device`` a run asks for.

A plan fixes everything that is not resampled — the feature map (random features), the
landmarks (Nyström), the kernel (exact solver) and the standardization — once, before any
replicate, and builds per batch the delayed tasks that fit, predict at ``X_eval`` and write
each replicate. What the plans of bigkernel's estimators do:

Fitted or not
-------------
* An **unfitted** estimator: the plan draws what its ``fit`` would draw — the random feature
  map from ``random_state``, the Nyström landmarks from the data, the scaling from the data —
  with the seed derived from the bootstrap seed when ``random_state`` is not an integer.
* A **fitted** estimator: the plan reuses the fitted map, landmarks, kernel and scaling, so the
  band is that of the fitted model. A fitted :class:`~bigkernel.RandomFeatureRidgeCV` is
  bootstrapped at its chosen (γ, α), held fixed (the search is not repeated per replicate);
  an unfitted one is refused; so is :class:`~bigkernel.ExactKernelRidgeCV` (bootstrapped as an
  ``ExactKernelRidge`` with its fitted kernel and ``alpha_``).

In both cases ``alpha`` follows the estimator's parameter: one value is the classic
fixed-smoother band, a list or ``"gcv"`` repeats the GCV choice in every replicate.

Solvers
-------
* Random features and Nyström: a batch shares one pass over the data — each chunk's features
  are computed once and weighted by every replicate's counts — then one small primal solve per
  replicate (:class:`~bigkernel.solvers.feature_plan.FeaturePlan`).
* Exact: the training data are held in memory once (the exact solver's premise); a replicate
  is one task: its rows with count > 0 and the weighted dual system
  ``(diag(s) K diag(s) + αI) u = s ⊙ y`` (``s = √counts``, see
  :mod:`bigkernel.numerics.dual`), which equals the fit on the data with each row repeated
  ``count`` times; the Gram tiles are cached in the task within its share of the memory
  budget (:class:`~bigkernel.numerics.gram_tiles.LocalGram`: the values do not depend on it).
* :class:`~bigkernel.KernelRidge`: the plan of the solver it chose (fitted) or would choose.
* A precomputed kernel is refused: a replicate resamples points, and rebuilding K for them
  needs the points.

The original fit (``interval="prediction"``)
-------------------------------------------
A plan's ``residual_task`` fits once with unit weights — the same plan, so the same map,
landmarks, kernel, scaling and α rule as every replicate: the fit f̂ the replicates scatter
around — and makes one pass over the data for its residuals (sums and a bounded, seeded
sample: :mod:`bigkernel.numerics.residuals`). Random features and Nyström: one pass of sums,
one primal solve, one residual pass; exact: one dual solve on the rows in memory (its df by
Hutchinson probes when it would not be computed otherwise, n > 2000).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from bigkernel.data.sources import Dataset
from bigkernel.devices import parse_device, resolve_device
from bigkernel.errors import ParameterError
from bigkernel.solvers.feature_plan import BATCH_STATS_BYTES
from bigkernel.solvers.replicates import ReplicatePlan

__all__ = ["BATCH_STATS_BYTES", "ReplicatePlan", "make_plan", "on_device"]


# --------------------------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------------------------
def on_device(estimator: Any, device: str | None) -> Any:
    """``estimator`` with ``device`` set (a shallow copy: the caller's is never modified),
    its device resolved now so that an unusable GPU fails before any work."""
    if device is not None:
        parse_device(device)
        if "device" not in estimator.get_params(deep=False):
            raise ParameterError(f"bootstrap(device=...) needs an estimator with a device parameter; "
                                 f"{type(estimator).__name__} has none")  # fmt: skip
        estimator = copy.copy(estimator)
        estimator.set_params(device=device)
    resolve_device(getattr(estimator, "device", "cpu"))
    return estimator


def make_plan(estimator: Any, ds: Dataset, X_eval: np.ndarray, seed_entropy: int, workers: int = 1) -> ReplicatePlan:
    """The replicate plan of ``estimator`` (fitted or not) for data ``ds``: what its public
    ``replicate_plan`` returns.

    The estimator (through its solver) builds the plan; this module knows no estimator class.
    Estimators it does not serve say why in their own ``replicate_plan`` (a precomputed kernel,
    an unfitted CV estimator).

    Parameters
    ----------
    estimator : object with ``replicate_plan(ds, X_eval, *, seed_entropy, workers) -> ReplicatePlan``
        RandomFeatureRidge, RandomFeatureRidgeCV (fitted), NystroemRidge, ExactKernelRidge,
        ExactKernelRidgeCV (fitted), KernelRidge, or any estimator implementing it.
    ds : Dataset
    X_eval : ndarray of shape (n_eval, n_features)
    seed_entropy : int
        The bootstrap seed (derives the estimator's seed when it has no integer one).
    workers : int, default=1
        Worker threads running replicates at once (splits the exact solver's memory budget).

    Returns
    -------
    ReplicatePlan

    Raises
    ------
    NotImplementedError
        ``estimator`` has no ``replicate_plan``.
    TypeError
        Its ``replicate_plan`` returned something that is not a :class:`ReplicatePlan`.
    """
    build = getattr(estimator, "replicate_plan", None)
    if not callable(build):
        raise NotImplementedError(
            f"bootstrap() does not support {type(estimator).__name__}: it supports RandomFeatureRidge, "
            "RandomFeatureRidgeCV (fitted), NystroemRidge, ExactKernelRidge, ExactKernelRidgeCV "
            "(fitted), KernelRidge and estimators that define replicate_plan(ds, X_eval, *, "
            "seed_entropy, workers) returning a bigkernel.solvers.base.ReplicatePlan."
        )
    plan = build(ds, X_eval, seed_entropy=seed_entropy, workers=workers)
    if not isinstance(plan, ReplicatePlan):
        raise TypeError(
            f"{type(estimator).__name__}.replicate_plan returned {type(plan).__name__}, which does not "
            "implement bigkernel.solvers.base.ReplicatePlan (fingerprint, n_coef, max_batch_size, batch_tasks)."
        )
    return plan
