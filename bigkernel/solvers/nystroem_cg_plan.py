"""The bootstrap replicate plan of the Nyström CG solver (layer 3): one weighted CG fit per task.

The centres (and the scaling) are fixed before any replicate: the fitted ones for a fitted
estimator, else those its ``fit`` would draw. A replicate is one task: the solver's ``fit`` with
the replicate's bootstrap counts as row weights (a fit on the data with each row repeated
``count`` times), its passes run by the local synchronous scheduler inside the task over the
training rows held in memory once (as the exact plan holds them), then its predictions at the
evaluation points. α follows the estimator's rule in every replicate (a list: each replicate
chooses on its own held-out split).

Not built: replicates as extra columns of one CG over the store (weighted passes, all
replicates of a batch in the same passes) — the out-of-core form; this plan needs the training
rows in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np
from dask.delayed import Delayed

from bigkernel.data.sources import Dataset, as_dataset
from bigkernel.io.band_store import BootstrapStore
from bigkernel.numerics.primal import PrimalExpansion
from bigkernel.numerics.resample import BootstrapWeights
from bigkernel.solvers.exact import training_arrays
from bigkernel.solvers.nystroem_cg import NystroemCGSolver
from bigkernel.solvers.primal import PrimalFixed, feature_block_rows
from bigkernel.solvers.replicates import feature_map_digest, gated, per_replicate_tasks, with_counts

__all__ = ["CG_MAX_BATCH", "NystroemCGPlan"]

#: replicates per batch (a batch shares one weights task only)
CG_MAX_BATCH = 64


class _Counts:
    """Row weights ``(start, stop) -> (1, rows)`` from one replicate's counts."""

    def __init__(self, counts: np.ndarray) -> None:
        self.values = counts

    def __call__(self, start: int, stop: int) -> np.ndarray:
        return self.values[np.newaxis, start:stop]


@dataclass(frozen=True)
class _CGReplicate:
    """A replicate: the weighted CG fit in this task, predictions at the evaluation points."""

    solver: NystroemCGSolver
    fixed: PrimalFixed
    X_eval: np.ndarray

    def run(
        self, data: tuple[np.ndarray, np.ndarray, np.ndarray], index: int, replicate: int, store: BootstrapStore
    ) -> int:
        X, Y, counts = data
        ds = as_dataset(X, Y)
        sol = self.solver.fit(self.fixed, ds, _Counts(counts[index]), in_task=True)
        fmap = self.fixed.fmap
        dtype = str(np.dtype(self.solver.spec.dtype))
        model = PrimalExpansion(fmap, sol.coef, sol.intercept, dtype=dtype,
                                block_rows=feature_block_rows(fmap.n_components, dtype))  # fmt: skip
        coef = np.vstack([sol.coef, sol.intercept[np.newaxis, :]])
        store.write_replicate(replicate, model(self.X_eval), coef)
        return replicate


class NystroemCGPlan:
    """Replicate plan of :class:`~bigkernel.solvers.nystroem_cg.NystroemCGSolver` (implements
    :class:`~bigkernel.solvers.base.ReplicatePlan`).

    Parameters
    ----------
    solver : NystroemCGSolver
    fixed : PrimalFixed
        The centres (scaling folded into the map).
    ds : Dataset
        The training data (read into memory here, once).
    X_eval : ndarray of shape (n_eval, n_features)
    fingerprint : dict
        ``class``, ``params`` and ``fitted`` of the estimator; the plan adds the map's digest and
        the coefficients' layout.
    """

    def __init__(
        self, solver: NystroemCGSolver, fixed: PrimalFixed, ds: Dataset, X_eval: np.ndarray, fingerprint: dict[str, Any]
    ) -> None:
        arrays = training_arrays(ds)
        M = fixed.fmap.n_components
        self.n_coef = M + 1
        self.max_batch_size = CG_MAX_BATCH
        self.task_per_replicate = True  # a batch runs as m tasks (not one per chunk)
        self._data = dask.delayed((arrays.X, arrays.Y), pure=True)
        self._model = dask.delayed(_CGReplicate(solver, fixed, np.ascontiguousarray(X_eval)), pure=True)
        self.fingerprint = {
            **fingerprint, "feature_map": feature_map_digest(fixed.fmap),
            "coef_layout": f"rows 0..{M - 1} β per centre, row {M} intercept",
        }  # fmt: skip

    def batch_tasks(
        self, ds: Dataset, weights: BootstrapWeights, store: BootstrapStore, after: Sequence[Delayed] = ()
    ) -> list[Delayed]:
        """One task per replicate of ``weights.replicates`` (see ReplicatePlan)."""
        data = dask.delayed(with_counts, pure=True)(self._data, gated(weights, after))
        return per_replicate_tasks(self._model, data, weights.replicates, store)
