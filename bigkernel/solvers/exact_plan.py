"""The exact solver's bootstrap replicate plan (layer 3): one weighted dual solve per task.

The training data are held in memory once (the exact solver's premise); a replicate is one
task: its rows with count > 0 and the weighted dual system ``(diag(s) K diag(s) + αI) u = s ⊙ y``
(``s = √counts``, see :mod:`bigkernel.numerics.dual`), which equals the fit on the data with each
row repeated ``count`` times; the Gram tiles are cached in the task within its share of the
memory budget (:class:`~bigkernel.numerics.gram_tiles.LocalGram`: the values do not depend on
it), or on the task's GPU (:class:`~bigkernel.numerics.device_gram.DeviceGram`).

:meth:`bigkernel.ExactKernelRidge.replicate_plan` builds an :class:`ExactPlan` (and
:meth:`bigkernel.ExactKernelRidgeCV.replicate_plan` through it, at its chosen kernel and α).
The plan's residual task (``interval="prediction"``) is one dual solve on the rows in memory
(its df by Hutchinson probes when it would not be computed otherwise, n > 2000).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np
from dask.delayed import Delayed

from bigkernel.data.sources import Dataset
from bigkernel.devices import Device, task_device
from bigkernel.errors import ParameterError
from bigkernel.io.band_store import BootstrapStore, array_digest
from bigkernel.kernels.base import Kernel
from bigkernel.numerics.gram_tiles import KernelExpansion
from bigkernel.numerics.resample import BootstrapWeights
from bigkernel.numerics.residuals import ResidualSample, finish_residuals, residual_summary
from bigkernel.numerics.scaling import column_moments, safe_scale
from bigkernel.solvers import budget as limits
from bigkernel.solvers.budget import device_budget, resolve_memory_budget
from bigkernel.solvers.exact import ExactSolver, training_arrays
from bigkernel.solvers.replicates import gated, jsonable, per_replicate_tasks, task_cache_budget, with_counts

__all__ = ["EXACT_MAX_BATCH", "PRECOMPUTED_BOOTSTRAP", "ExactPlan"]

#: Replicates of the exact solver per batch (a batch shares one weights task only).
EXACT_MAX_BATCH = 64

#: why a precomputed kernel has no replicate plan: a replicate is a fit on resampled rows, K's
#: rows and columns both, and K(X_eval, rows) for its predictions; the plans resample points
PRECOMPUTED_BOOTSTRAP = (
    "bootstrap() does not support kernel='precomputed': resampling rows needs the points to rebuild "
    "K; bootstrap the estimator with the kernel that built K (e.g. kernel='rbf') on X"
)


@dataclass(frozen=True)
class _ExactReplicate:
    """A replicate of the exact solver: rows with count > 0, weighted CG, predictions."""

    solver: ExactSolver  # integer seed, standardize=False (X is scaled)
    kernel: Kernel
    X_eval: np.ndarray  # scaled like X
    solve_budget: int  # decides rank and exact df, as in a fit with this budget
    cache_budget: int  # Gram tiles cached per task (speed only, never the values)
    memory_budget: Any  # the estimator's parameter (a GPU task's budget is its device's)
    device: Device

    def run(
        self, data: tuple[np.ndarray, np.ndarray, np.ndarray], index: int, replicate: int, store: BootstrapStore
    ) -> int:
        X, Y, counts = data
        c = counts[index]
        keep = c > 0
        Xk, Yk, ck = X[keep], Y[keep], c[keep]
        sol, op = self._solve(self.solver, Xk, Yk, None if np.all(ck == 1.0) else ck)
        pred = KernelExpansion(op.tiler, sol.coef, sol.intercept)(self.X_eval)
        coef = np.zeros((X.shape[0] + 1, Y.shape[1]))
        coef[:-1][keep] = sol.coef  # dual coefficients per training row (0: not drawn)
        coef[-1] = sol.intercept
        store.write_replicate(replicate, pred, coef)
        return replicate

    def _solve(self, solver: ExactSolver, X: np.ndarray, Y: np.ndarray, sample_weight: np.ndarray | None):
        """One dual solve in this task: on the host a :class:`LocalGram` within the task's cache
        budget; on a GPU (resolved here) a :class:`DeviceGram` caching float64 tiles within this
        task's share of the device memory. Bitwise resume holds per device: the CPU's values do
        not depend on the budget; the GPU's agree to rounding across budgets (cached and
        recomputed tiles are GEMMs of other shapes)."""
        device = task_device(self.device)  # a dask-cuda worker: its own GPU
        op_budget, where = self.cache_budget, contextlib.nullcontext()
        if device.is_gpu:
            with device.activate():
                share = self.cache_budget / max(self.solve_budget, 1)
                op_budget = int(device_budget(self.memory_budget, device) * share)
            where = device.activate()
        with where:
            sol, op, _, _ = solver.solve(
                self.kernel, X, Y, device=device, budget=self.solve_budget, sample_weight=sample_weight,
                op_budget=op_budget, op_dtype="float64", in_task=True,
            )  # fmt: skip
        return sol, op

    def reference(self, data: tuple[np.ndarray, np.ndarray], seed: int, capacity: int) -> ResidualSample:
        """The fit on all rows with unit weights, its predictions and residual sample."""
        X, Y = data
        solver = self.solver
        if not solver.spec.n_probes:  # df is needed for the residual scale; probes give it above n = 2000
            solver = ExactSolver(dataclasses.replace(solver.spec, n_probes=limits.DEFAULT_PROBES))
        sol, op = self._solve(solver, X, Y, None)
        fit = KernelExpansion(op.tiler, sol.coef, sol.intercept)
        df = float(sol.df[int(np.flatnonzero(sol.alphas == sol.alpha)[0])])
        return finish_residuals(residual_summary(fit(X), Y, 0, seed, capacity), fit(self.X_eval), df)


def _exact_reference(model: _ExactReplicate, data: tuple, seed: int, capacity: int) -> ResidualSample:
    return model.reference(data, seed, capacity)


def _check_evidence_memory(solver: ExactSolver, n: int, budget: int, workers: int) -> None:
    """Refuse ``alpha="evidence"`` above the eigenvalue limit when the replicates running at
    once would each hold the dense K and a Cholesky factor (16·n² bytes) beyond the half of the
    budget that one fit may give them (the fit's own check sees one solve, not ``workers``)."""
    alpha = solver.spec.alpha
    # read at call time: the tests lower the limit on bigkernel.solvers.budget
    if not (isinstance(alpha, str) and alpha == "evidence") or n <= limits.EXACT_DF_MAX_N:
        return
    each = 16 * n * n
    if workers > 1 and workers * each > budget // 2:
        raise ParameterError(
            f"bootstrap of ExactKernelRidge(alpha='evidence') at n={n:,}: each replicate chooses alpha by "
            f"one Cholesky factor per alpha, holding the dense n × n matrix and its factor ({each / 1e9:.2f} GB), "
            f"and {workers} run at once: {workers * each / 1e9:.2f} GB is more than half the memory budget "
            f"({budget / 2e9:.2f} of {budget / 1e9:.2f} GB). Fix alpha to the full fit's (est.set_params(alpha=est.alpha_)), run "
            "fewer workers at once, or raise memory_budget"
        )


def _scaling(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = column_moments(X)
    return mean, safe_scale(std)


class ExactPlan:
    """Replicate plan of the exact solver (a :class:`~bigkernel.solvers.base.ReplicatePlan`).

    Parameters
    ----------
    solver : ExactSolver
        Of the estimator's parameters, with an integer ``random_state``.
    ds : Dataset
        The training data (read into memory here, once).
    X_eval : ndarray of shape (n_eval, n_features)
    device : Device
        Where replicates run (re-resolved in each task).
    kernel : Kernel, optional
        A fitted model's kernel (default: the kernel of the solver's parameters).
    scaler : (ndarray, ndarray), optional
        A fitted model's standardization (default: from the data when ``standardize``).
    workers : int, default=1
        Replicates running at once (they share the memory budget).
    fingerprint : dict
        ``class``, ``params`` and ``fitted`` of the estimator; the plan adds the kernel, the
        scaling's digest, the seed and the coefficients' layout.
    """

    def __init__(
        self,
        solver: ExactSolver,
        ds: Dataset,
        X_eval: np.ndarray,
        *,
        device: Device,
        kernel: Kernel | None = None,
        scaler: tuple[np.ndarray, np.ndarray] | None = None,
        workers: int = 1,
        fingerprint: dict[str, Any],
    ) -> None:
        spec = solver.spec
        arrays = training_arrays(ds)
        X, Y = arrays.X, arrays.Y
        if spec.standardize:
            scaler = _scaling(X) if scaler is None else scaler
            X = (X - scaler[0]) / scaler[1]
            X_eval = (X_eval - scaler[0]) / scaler[1]
        solver = ExactSolver(dataclasses.replace(spec, standardize=False))
        kernel = solver.kernel(ds.X.shape[1]) if kernel is None else kernel
        budget = resolve_memory_budget(spec.memory_budget)
        n = X.shape[0]
        _check_evidence_memory(solver, n, budget, workers)
        self.n_coef = n + 1
        self.max_batch_size = EXACT_MAX_BATCH
        self.task_per_replicate = True  # a batch runs as m tasks (not one per chunk)
        self._data = dask.delayed((X, Y), pure=True)
        self._model = dask.delayed(
            _ExactReplicate(solver, kernel, np.ascontiguousarray(X_eval), budget, task_cache_budget(budget, workers),
                            spec.memory_budget, device), pure=True,
        )  # fmt: skip
        self.fingerprint = {
            **fingerprint, "kernel": jsonable(kernel.to_dict()),
            "scaler": None if scaler is None else array_digest(np.concatenate(scaler)),
            "seed": int(spec.random_state),
            "coef_layout": f"rows 0..{n - 1} dual coef per training row, row {n} intercept",
        }  # fmt: skip

    def residual_task(self, ds: Dataset, seed: int, capacity: int) -> Delayed:
        """Delayed :class:`ResidualSample` of the unit-weight fit (one task: data in memory)."""
        return dask.delayed(_exact_reference, pure=True)(self._model, self._data, seed, capacity)

    def batch_tasks(
        self, ds: Dataset, weights: BootstrapWeights, store: BootstrapStore, after: Sequence[Delayed] = ()
    ) -> list[Delayed]:
        """One task per replicate of ``weights.replicates`` (see
        :class:`~bigkernel.solvers.base.ReplicatePlan`)."""
        data = dask.delayed(with_counts, pure=True)(self._data, gated(weights, after))
        return per_replicate_tasks(self._model, data, weights.replicates, store)
