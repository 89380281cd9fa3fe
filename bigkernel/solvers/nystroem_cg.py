"""Nyström by Falkon's preconditioned CG, one Dask pass per iteration: the solver behind
``NystroemRidge(solver="cg")`` (layer 3).

The model is ``f(x) = k(x, C) β + b`` over M centres C (the same landmark draw as the one-pass
solver). With weights w (sample weights or bootstrap counts) over the training rows, β solves

    (K̃ᵀ W K̃ + α K_MM) β = K̃ᵀ W (y − ȳ),    K̃ = K_nM − 1 μᵀ,  b = ȳ − μᵀβ

(μ, ȳ the weighted means: the unpenalised intercept by centring). ``prepare`` draws the
centres; ``fit`` runs

1. one pass for the moments: ``K_nMᵀ[w, w ⊙ y]`` and ``[Σw, Σwy]`` (μ, ȳ and the right-hand
   sides), plus the held-out rows' targets when α is a grid;
2. the preconditioner (:class:`~bigkernel.numerics.falkon.FalkonPreconditioner`: Cholesky
   factors of ``K_MM`` and, per α, of ``TTᵀ/M + α/n_w I``) on the client;
3. CG (:func:`~bigkernel.numerics.falkon.falkon_solve`), every iteration one pass
   (:func:`~bigkernel.graph.nystroem_pass.falkon_pass_graph`) that computes
   ``K_nMᵀ W K_nM V`` for every column at once — one column per (α, target) — and the held-out
   rows' ``K_v V``, so their predictions for every α follow the iterates at no extra pass.

α is chosen by the held-out mean squared error (weighted by the held-out rows' weights, mean
over targets); the model is the one fitted on the training rows at that α.
"""

from __future__ import annotations

import logging
import time
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self

import dask
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from bigkernel.data.sources import Dataset
from bigkernel.errors import DataError, ParameterError
from bigkernel.graph.nystroem_pass import falkon_pass_graph
from bigkernel.numerics.falkon import FalkonPreconditioner, falkon_solve
from bigkernel.numerics.nystroem_block import BlockProducts, panel_rows_for
from bigkernel.numerics.splits import HoldoutSplit
from bigkernel.runtime import active_client, compute, persist
from bigkernel.solvers.base import Solution
from bigkernel.solvers.budget import resolve_memory_budget
from bigkernel.solvers.nystroem import NystroemSolver, NystroemSpec
from bigkernel.solvers.primal import PrimalFixed, fit_scaler
from bigkernel.solvers.primal_svm import svm_row_weights
from bigkernel.validation import int_seed

logger = logging.getLogger(__name__)

__all__ = ["CGFit", "NystroemCGSolver", "NystroemCGSpec"]

#: α/n of the grid the iteration-count targets are stated for (issue 21): 10⁻⁷ … 10⁻¹
DEFAULT_RELATIVE_ALPHAS = 10.0 ** np.arange(-7.0, 0.0)

#: offsets the held-out split's seed from the centres' (same ``random_state``, independent draws)
HOLDOUT_SEED_SALT = 0xFA1C0

#: keep X in the workers' (or this process's) memory across the passes when it takes at most
#: this fraction of the memory budget; else every pass reads it again
PERSIST_FRACTION = 0.25


@dataclass(frozen=True)
class NystroemCGSpec(NystroemSpec):
    """A Nyström spec plus the CG options."""

    tol: float = 1e-6
    max_iter: int = 100
    validation_fraction: float = 0.1
    memory_budget: Any = None


@dataclass(frozen=True)
class CGFit:
    """``Solution.details`` of the CG solver.

    Attributes
    ----------
    single : bool
        Whether y was 1-D.
    n_iter : int
        CG iterations (each one pass over the data).
    residuals : ndarray of shape (n_iter + 1, n_alphas * n_targets)
        Relative residual history of every column (α-major).
    validation_scores : ndarray of shape (n_alphas, n_targets) or None
        Held-out mean squared error per α and target (None for one α).
    n_samples : int
        Training rows (weight > 0, not held out).
    n_features_in : int
    x_min, x_max : ndarray or None
        Training range (None: not tracked by this pass).
    """

    single: bool
    n_iter: int
    residuals: np.ndarray
    validation_scores: np.ndarray | None
    n_samples: int
    n_features_in: int
    x_min: np.ndarray | None = None
    x_max: np.ndarray | None = None


class NystroemCGSolver(NystroemSolver):
    """Falkon's CG over streamed passes (implements :class:`~bigkernel.solvers.base.Solver`).

    Parameters
    ----------
    spec : NystroemCGSpec
    device : Device or None
        The estimator's resolved device (the kernel panels are host code: the CPU).
    """

    name: ClassVar[str] = "nystroem_cg"

    @classmethod
    def from_params(cls, params: Mapping[str, Any], *, device: Any = None) -> Self:
        """The solver of an estimator's (validated) ``get_params()``."""
        names = {f.name for f in fields(NystroemCGSpec)}
        return cls(NystroemCGSpec(**{k: v for k, v in params.items() if k in names}), device)

    def prepare(self, data: Dataset, weights: Any = None, *, seed: int | None = None) -> PrimalFixed:
        """The scaling (``standardize``) and the centres (the one-pass solver's draw, as the
        raw map ``x ↦ k(x, C)``: no ``K_mm`` eigendecomposition)."""
        scaler = fit_scaler(data, weights) if self.spec.standardize else None
        return PrimalFixed(self.landmark_map(data, weights, scaler, seed, raw=True), scaler, self.device)

    def alphas(self) -> np.ndarray:
        """The α values of the spec (a float or a list; strings are refused)."""
        alpha = self.spec.alpha
        if isinstance(alpha, str):
            raise ParameterError(
                f"NystroemRidge(solver='cg') chooses α on a held-out split, not by {alpha!r}: give alpha a float "
                "or a list of floats (e.g. n · 10^-7 … n · 10^-1, n the training rows), or use solver='direct' "
                "for GCV/evidence"
            )
        return np.atleast_1d(np.asarray(alpha, dtype=np.float64))

    def state(self, fixed: PrimalFixed, solution: Solution) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The saved attributes and arrays: the raw map (centres), β as ``coef`` (k, M), the α
        path, the residual history and the held-out scores."""
        fit: CGFit = solution.details
        attrs: dict[str, Any] = {
            "feature_map": fixed.fmap.to_metadata(), "solver": "cg", "alpha_": solution.alpha,
            "n_iter_": fit.n_iter, "n_samples_fit_": fit.n_samples, "n_features_in_": fit.n_features_in,
            "single_output": fit.single, "solver_info_": solution.diagnostics,
        }  # fmt: skip
        arrays = {
            "coef": np.atleast_2d(solution.coef.T), "intercept": np.atleast_1d(np.asarray(solution.intercept, float)),
            "alphas": np.asarray(solution.alphas, float), "residuals": np.asarray(fit.residuals, float),
            **self.map_state(fixed.fmap),
        }  # fmt: skip
        if fit.validation_scores is not None:
            arrays["validation_scores"] = np.asarray(fit.validation_scores, float)
        return attrs, arrays

    def from_state(self, attrs: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[PrimalFixed, Solution]:
        """Inverse of :meth:`state` (``DataError`` when the arrays do not agree)."""
        if attrs.get("solver") != "cg":
            raise DataError("this store holds a one-pass Nyström model, not a solver='cg' one")
        fmap = self.map_from_state(attrs["feature_map"], arrays)
        coef, intercept = arrays["coef"], arrays["intercept"]
        if coef.shape[1] != fmap.n_components or coef.shape[0] != intercept.shape[0]:
            raise DataError(f"coef has shape {coef.shape}, expected (n_targets, {fmap.n_components})")
        fit = CGFit(
            single=bool(attrs["single_output"]), n_iter=int(attrs["n_iter_"]), residuals=arrays["residuals"],
            validation_scores=arrays.get("validation_scores"), n_samples=int(attrs["n_samples_fit_"]),
            n_features_in=int(attrs["n_features_in_"]),
        )  # fmt: skip
        solution = Solution(coef.T, intercept, float(attrs["alpha_"]), arrays["alphas"],
                            dict(attrs.get("solver_info_", {})), fit)  # fmt: skip
        return PrimalFixed(fmap, None, self.device), solution

    def fit(self, fixed: PrimalFixed, data: Dataset, weights: Any = None, *, in_task: bool = False) -> Solution:
        """The moments pass, the preconditioner, then one pass per CG iteration.

        Parameters
        ----------
        fixed : PrimalFixed
        data : Dataset
        weights : row weights or None
        in_task : bool, default=False
            Running inside a dask task (a bootstrap replicate): the passes run on the local
            synchronous scheduler, never on a cluster client.

        Returns
        -------
        Solution
            ``coef`` (M, k) = β at the chosen α; ``details`` a :class:`CGFit`.
        """
        # a row partition (a job's holdout split) becomes 0/1 weights
        run = _CGRun(self, fixed, data, svm_row_weights(weights), in_task=in_task)
        return run.solve()


class _CGRun:
    """One fit's state: the data references, the pass, the held-out predictions."""

    def __init__(
        self, solver: NystroemCGSolver, fixed: PrimalFixed, data: Dataset, weights: Any, *, in_task: bool
    ) -> None:
        self.spec, self.fixed, self.t0 = solver.spec, fixed, time.perf_counter()
        self.alpha_values = solver.alphas()
        self.single = data.y.ndim == 1
        self.X, self.Y = data.X, (data.y if data.y.ndim == 2 else data.y[:, np.newaxis])
        self.k = self.Y.shape[1]
        self.fmap = fixed.fmap
        self.dtype = str(np.dtype(self.spec.dtype))
        self.panel_rows = panel_rows_for(self.fmap.n_components, self.dtype)
        grid = self.alpha_values.size > 1
        seed = int_seed(self.spec.random_state)
        self.split = HoldoutSplit(seed ^ HOLDOUT_SEED_SALT, float(self.spec.validation_fraction)) if grid else None
        self.in_task = in_task
        self.client = None if in_task else active_client()
        self._persist_inputs()
        self.fmap_ref = self._reference(self.fmap, "falkon-centres")
        self.weights_ref = None if weights is None else self._reference(weights, "falkon-weights")
        self.passes, self.pass_seconds, self.last_images = 0, 0.0, None
        self.held_pred: np.ndarray | None = None
        self.prec_seconds, self.prec_bytes = 0.0, 0

    def _persist_inputs(self) -> None:
        """Keep X and Y in memory across the passes when they fit (else every pass reads them)."""
        budget = resolve_memory_budget(self.spec.memory_budget)
        nbytes = self.X.nbytes + self.Y.nbytes
        self.persisted = nbytes <= PERSIST_FRACTION * budget
        if self.in_task:
            return  # a replicate's rows are in the task's memory already
        if self.persisted:
            self.X, self.Y = persist(self.X, self.Y, client=self.client, label="falkon-persist")
        logger.info(
            "Nyström CG: data %.2f GB %s", nbytes / 1e9, "kept in memory across passes" if self.persisted else
            f"read again in every pass (over {PERSIST_FRACTION:.0%} of the {budget / 1e9:.1f} GB budget)",
        )  # fmt: skip

    def _reference(self, obj: Any, prefix: str) -> Any:
        """``obj`` as one named key of each pass's graph (it travels once per pass, to the
        workers that run its tasks, never inside every task). Not ``client.scatter``: data
        scattered to a worker that is then killed cannot be recovered, and the pass fails
        (seen with a SIGKILLed worker: "caused the cluster to lose scattered data")."""
        return dask.delayed(obj, name=f"{prefix}-{uuid.uuid4().hex}")

    def _compute(self, graph: Any, label: str) -> Any:
        if self.in_task:
            return dask.compute(graph, scheduler="sync")[0]
        return compute(graph, client=self.client, label=label)[0]

    def run_pass(self, V: np.ndarray | None, label: str) -> BlockProducts:
        """One pass over the data (the moments when ``V`` is None)."""
        t = time.perf_counter()
        graph = falkon_pass_graph(
            self.X, self.Y, self.fmap_ref, V, split=self.split, weights=self.weights_ref, dtype=self.dtype,
            panel_rows=self.panel_rows, device=self.fixed.device,
        )  # fmt: skip
        out = self._compute(graph, label)
        self.passes += 1
        self.pass_seconds += time.perf_counter() - t
        return out

    def solve(self) -> Solution:
        first = self.run_pass(None, "falkon-moments")
        n_w = float(first.sums[0])
        if not n_w > 0:
            raise DataError("no training rows of positive weight: nothing to fit")
        self.n_w, self.mu, y_mean = n_w, first.g[:, 0] / n_w, first.sums[1:-1] / n_w
        held = first.held_rows()  # [y_v | w_v]
        rhs_k = first.g[:, 1:] - n_w * np.outer(self.mu, y_mean)
        m_alpha, k = self.alpha_values.size, self.k
        if held is not None:
            self.held_pred = np.zeros((held.shape[0], m_alpha * k))
        beta, results = np.zeros((rhs_k.shape[0], m_alpha * k)), []
        for group in self._alpha_groups(rhs_k.shape[0]):
            cols = (group[:, None] * k + np.arange(k)).ravel()  # α-major: column j = (α j // k, target j % k)
            res = self._solve_group(np.tile(rhs_k, (1, group.size)), np.repeat(self.alpha_values[group], k), cols)
            beta[:, cols] = res.beta
            results.append((cols, res))
        intercept = y_mean[np.newaxis, :] - (self.mu @ beta).reshape(m_alpha, k)  # (n_alphas, k)
        scores = None if held is None else self._held_out_scores(held, intercept)
        best = 0 if scores is None else int(np.argmin(scores.mean(axis=1)))
        n_iter = sum(res.n_iter for _, res in results)
        fit = CGFit(
            single=self.single, n_iter=int(n_iter), residuals=_history(results, m_alpha * k), validation_scores=scores,
            n_samples=int(first.sums[-1]), n_features_in=int(self.X.shape[1]), x_min=first.x_min, x_max=first.x_max,
        )  # fmt: skip
        diagnostics = self._diagnostics(results, n_iter)
        alpha = float(self.alpha_values[best])
        self._warn_unconverged_choice(results, best, alpha)
        logger.info("Nyström CG: α=%.3g after %d iterations (%d passes, %.1f s)", alpha, n_iter, self.passes,
                    diagnostics["seconds"])  # fmt: skip
        sel = slice(best * k, (best + 1) * k)
        return Solution(beta[:, sel].copy(), intercept[best].copy(), alpha, self.alpha_values, diagnostics, fit)

    def _warn_unconverged_choice(self, results: list, best: int, alpha: float) -> None:
        """A held-out score of a column CG has not converged scores an early-stopped model: say
        so when such a column wins (the general ConvergenceWarning names every column)."""
        cols = set(range(best * self.k, (best + 1) * self.k))
        stopped = [
            c for group, res in results for c, ok in zip(group, np.atleast_1d(res.converged)) if c in cols and not ok
        ]
        if stopped and self.split is not None:
            warnings.warn(
                f"NystroemRidge(solver='cg'): α={alpha:.3g}, chosen on the held-out split, did not reach tol="
                f"{self.spec.tol:g} in max_iter={self.spec.max_iter} passes: its score is that of an early-stopped "
                "CG, not of the ridge solution at this α. Raise max_iter, or give a grid whose smallest α converges",
                ConvergenceWarning,
                stacklevel=4,
            )

    def _alpha_groups(self, M: int) -> list[np.ndarray]:
        """The α indices solved together: as many distinct α as the preconditioner's factors fit
        the memory budget (all of them when they fit: every α in the same passes); a group per
        budget-full otherwise, each its own CG passes. Refuses when not even one α fits."""
        budget = resolve_memory_budget(self.spec.memory_budget)
        order = np.argsort(self.alpha_values, kind="stable")
        size = self.alpha_values.size
        while size > 1 and FalkonPreconditioner.memory_bytes(M, size) > budget:
            size -= 1
        need = FalkonPreconditioner.memory_bytes(M, size)
        if need > budget:
            raise ParameterError(
                f"NystroemRidge(solver='cg') with n_components={M:,} needs about {need / 1e9:.1f} GB for the "
                f"preconditioner's M×M factors, over the memory budget of {budget / 1e9:.1f} GB: give fewer "
                "n_components or more memory"
            )
        if size < self.alpha_values.size:
            logger.warning(
                "Nyström CG: the factors of all %d α values (%.1f GB) exceed the memory budget (%.1f GB): solving "
                "them in groups of %d, each group its own passes over the data", self.alpha_values.size,
                FalkonPreconditioner.memory_bytes(M, self.alpha_values.size) / 1e9, budget / 1e9, size,
            )  # fmt: skip
        return [order[i : i + size] for i in range(0, order.size, size)]

    def _solve_group(self, rhs: np.ndarray, col_alpha: np.ndarray, cols: np.ndarray) -> Any:
        """Falkon's CG for the columns ``cols`` (their α ``col_alpha``), one pass per iteration."""
        n_w, mu = self.n_w, self.mu
        K_MM = self.fmap.kernel.block(self.fmap.landmarks, self.fmap.landmarks, np.dtype(np.float64))
        t_prec = time.perf_counter()
        # centred: the preconditioner approximates the centred K̃ᵀWK̃ (fewer iterations at small α)
        prec = FalkonPreconditioner.build(K_MM, col_alpha, n_w, mean=mu, overwrite=True)
        del K_MM
        self.prec_seconds += time.perf_counter() - t_prec
        self.prec_bytes = max(self.prec_bytes, prec.nbytes)

        def gram(V: np.ndarray) -> np.ndarray:
            out = self.run_pass(V, "falkon-cg")
            self.last_images = out.held_rows()
            return out.g - n_w * np.outer(mu, mu @ V)  # the centred K̃ᵀWK̃ V

        def step(active: np.ndarray, steps: np.ndarray) -> None:
            if self.held_pred is not None and self.last_images is not None:
                self.held_pred[:, cols[active]] += self.last_images * steps

        tol, max_iter = self.spec.tol, self.spec.max_iter
        return falkon_solve(gram, rhs, prec, col_alpha, tol=tol, max_iter=max_iter, step_hook=step)

    def _held_out_scores(self, held: np.ndarray, intercept: np.ndarray) -> np.ndarray:
        """Held-out weighted MSE per (α, target) from the tracked predictions ``K_v β``."""
        y_v, w_v = held[:, : self.k], held[:, self.k]
        if not w_v.sum() > 0:
            raise DataError(
                f"the held-out split (validation_fraction={self.spec.validation_fraction}) has no rows of positive "
                "weight: raise validation_fraction or give one α"
            )
        m_alpha = self.alpha_values.size
        pred = self.held_pred.reshape(-1, m_alpha, self.k) + intercept[np.newaxis]
        err = (y_v[:, np.newaxis, :] - pred) ** 2
        return np.einsum("i,iak->ak", w_v, err) / w_v.sum()

    def _diagnostics(self, results: list, n_iter: int) -> dict[str, Any]:
        converged = all(bool(np.all(res.converged)) for _, res in results)
        return {
            "solver": "nystroem_cg", "n_centres": int(self.fmap.n_components), "n_iter": int(n_iter),
            "passes": self.passes, "pass_seconds": round(self.pass_seconds, 3),
            "seconds": round(time.perf_counter() - self.t0, 3), "converged": converged,
            "preconditioner_seconds": round(self.prec_seconds, 3), "alpha_groups": len(results),
            "residual_max": float(max(np.max(res.residual) for _, res in results)),
            "preconditioner_bytes": int(self.prec_bytes), "panel_rows": self.panel_rows,
            "data_in_memory": self.persisted, "held_out": None if self.split is None else self.split.fraction,
        }  # fmt: skip


def _history(results: list, m: int) -> np.ndarray:
    """The residual histories of the α groups side by side, ``(longest + 1, m)``: a group that
    stopped earlier holds its last row."""
    rows = max(res.history.shape[0] for _, res in results)
    out = np.empty((rows, m))
    for cols, res in results:
        h = res.history.reshape(res.history.shape[0], -1)
        out[: h.shape[0], cols] = h
        out[h.shape[0] :, cols] = h[-1]
    return out
