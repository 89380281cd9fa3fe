"""Nyström by Falkon's preconditioned CG, one Dask pass per iteration: the solver behind
``NystroemRidge(solver="cg")`` (layer 3).

The model is ``f(x) = k(x, C) β + b`` over M centres C (the same landmark draw as the one-pass
solver). With weights w (sample weights or bootstrap counts) over the training rows, β solves

    (K̃ᵀ W K̃ + α K_MM) β = K̃ᵀ W (y − ȳ),    K̃ = K_nM − 1 μᵀ,  b = ȳ − μᵀβ

(μ, ȳ the weighted means: the unpenalised intercept by centring). ``prepare`` draws the
centres; ``fit`` runs

1. one pass for the moments: ``K_nMᵀ[w, w ⊙ y]`` and ``[Σw, Σwy]`` (μ, ȳ and the right-hand
   sides), plus the held-out rows' targets when α is a grid, and a seeded uniform sample of
   about 8 training rows per centre, or every row when that costs at most 25 passes
   (:func:`sketch_rows`). With every row (the exact preconditioner) on the host, ``T`` is
   factored before the pass and the pass's tasks form ``Σ w_i T⁻ᵀk_i k_iᵀT⁻¹`` from the same
   kernel panels as the moments (:func:`~bigkernel.numerics.nystroem_block.moments_and_inner`):
   the kernel block is computed once for both, and no rows travel to the client. Data of fewer
   than :data:`SPLIT_PARTS` row chunks are split into that many (:func:`split_rows`), so that a
   pass over an in-memory array is not one task on one core;
2. the preconditioner on the client: :class:`~bigkernel.numerics.falkon.FalkonPreconditioner`
   (Cholesky factors of ``K_MM`` and, per α, of ``T⁻ᵀST⁻¹ + α/n_w I``, ``S`` the sample's
   estimate of ``K̃ᵀWK̃ / n_w``, exact when every row is sampled; Falkon's centres when too
   few rows per centre fit the cost of 10 passes) when they fit the memory budget, else
   :class:`~bigkernel.numerics.falkon_eigen.EigenFalkonPreconditioner` (Falkon's centres, one
   eigendecomposition of ``K_MM`` for every α: ``2·M²·8`` bytes at the peak);
3. CG (:func:`~bigkernel.numerics.falkon.falkon_solve`), every iteration one pass
   (:func:`~bigkernel.graph.nystroem_pass.falkon_pass_graph`) that computes
   ``K_nMᵀ W K_nM V`` for every column at once — one column per (α, target) — and the held-out
   rows' ``K_v V``, so their predictions for every α follow the iterates at no extra pass.

α is chosen by the held-out mean squared error (weighted by the held-out rows' weights, mean
over targets); the model is the one fitted on the training rows at that α. An α whose CG
stopped at ``max_iter`` must score :data:`EARLY_STOPPED_MARGIN` lower than the best converged
α to be chosen; an α whose CG broke down (round-off at a tiny α/n) stops its column and is
left out (one α alone: ``NotPSDError``).
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
from bigkernel.errors import DataError, NotPSDError, ParameterError
from bigkernel.graph.nystroem_pass import falkon_pass_graph
from bigkernel.numerics.falkon import FalkonPreconditioner, factor_kmm, falkon_solve
from bigkernel.numerics.falkon_eigen import EigenFalkonPreconditioner
from bigkernel.numerics.nystroem_block import BlockProducts, centred_inner, panel_rows_for, sketch_panels
from bigkernel.numerics.splits import HoldoutSplit, row_weights_of
from bigkernel.runtime import ROW_ALIGN, active_client, compute, persist
from bigkernel.solvers.base import Solution
from bigkernel.solvers.budget import resolve_memory_budget
from bigkernel.solvers.nystroem import NystroemSolver, NystroemSpec
from bigkernel.solvers.primal import PrimalFixed, fit_scaler
from bigkernel.validation import int_seed

logger = logging.getLogger(__name__)

__all__ = ["CGFit", "NystroemCGSolver", "NystroemCGSpec"]

#: α/n of the grid the iteration-count targets are stated for (issue 21): 10⁻⁷ … 10⁻¹
DEFAULT_RELATIVE_ALPHAS = 10.0 ** np.arange(-7.0, 0.0)

#: a grid of this many distinct α or more uses the eigendecomposition route even when every α's
#: Cholesky factor fits: one ``eigh`` costs about as much as 20 Cholesky factorisations of the same
#: order (measured at M = 4000, 2 cores: 12.2 s against 0.59 s), the Cholesky route ``2 + #α``
EIGEN_MIN_ALPHAS = 16

#: the Cholesky route estimates K̃ᵀWK̃ from this many sampled training rows per centre (seeded,
#: uniform, taken in the moments pass) instead of Falkon's centres: measured (8,000 rows, 5-d,
#: M = 300, α/n = 1e-7 … 1e-3) 62–81 → 24–27 iterations with 4M rows, 10 with 16M
SKETCH_ROWS_PER_CENTRE = 8
#: ... used only when at least this many per centre were drawn (1M rows did worse than the centres)
SKETCH_MIN_ROWS_PER_CENTRE = 2
#: ... and only as many as cost (2·m·M² flops) at most this many passes (see PASS_ENTRY_FLOPS)
SKETCH_PASS_BUDGET = 10
#: every training row is sampled (the preconditioner is then exact: 1–2 iterations for every α,
#: however small) when that costs at most this many passes: the iteration target of issue 21 ...
SKETCH_EXACT_BUDGET = 25
#: ... or at most half of ``max_iter`` when the grid reaches below this α/n, where a sample of 8
#: rows per centre no longer holds the iterations near 25 (diamonds, M = 4,000, 9,700 sampled
#: rows: more than 100 passes at α/n ≤ 2e-9)
SKETCH_SMALL_RELATIVE_ALPHA = 1e-7
#: a CPU pass's cost per kernel entry beside its products (``2d + 4·columns`` flops), counted in
#: flops of the client's BLAS-3: the exp, the float32→float64 cast and the panel's trips through
#: memory. Measured on the 2-core machine (diamonds, M = 1,000): 13 ns per entry in a pass
#: against ~0.03 ns per flop of a trsm/syrk of order 1,000, so 100 undercounts the pass (the
#: rule stays on the side of fewer sampled rows). A GPU pass counts its products only.
PASS_ENTRY_FLOPS = 100
#: bytes of one panel of the sampled rows (the preconditioner's build)
SKETCH_PANEL_BYTES = 32 * 2**20
SKETCH_SEED_SALT = 0x5CE7C4

#: the moments pass forms the exact preconditioner's inner matrix in its tasks (each returns one
#: ``M × M`` partial sum) when it takes at most this many bytes; else the client forms it from
#: the sampled rows the pass returns
INNER_IN_PASS_BYTES = 64 * 2**20

#: a fit splits data of fewer row chunks into this many (2 tasks per thread of a 2-core machine)
SPLIT_PARTS = 4

#: an α whose CG stopped at ``max_iter`` above ``tol`` is chosen over the best converged α only
#: when its held-out MSE is at least this fraction lower. The held-out rows lie among the training
#: rows, where CG has shrunk the iterate's error; away from them it can be large. Measured
#: (diamonds, M = 8,000, α/n = 2.3e-10, residual 2.5e-4 after 100 passes): held-out MSE 0.00989
#: against 0.01003 for the next, converged α (1.4 % lower), while its predictions part from the
#: converged solution's at that α by 1e-3 RMS on the held-out rows but by 15.5 (log price) at a
#: test diamond 11 standardized units from every training row (a table/depth outlier): test
#: RMSE 0.197 (0.097 without that row; the converged α: 0.100)
EARLY_STOPPED_MARGIN = 0.1

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
        run = _CGRun(self, fixed, data, row_weights_of(weights), in_task=in_task)
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
        self.panel_rows = panel_rows_for(self.fmap.n_components, np.float64)  # float32 panels are multiplied in float64
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
        self.prec_seconds, self.prec_bytes, self.sketch_used = 0.0, 0, 0
        self.factor, self.inner, self.n_samples = None, None, 0
        self.choice_note: dict[str, Any] = {}

    def _persist_inputs(self) -> None:
        """Keep X and Y in memory across the passes when they fit (else every pass reads them)."""
        budget = resolve_memory_budget(self.spec.memory_budget)
        nbytes = self.X.nbytes + self.Y.nbytes
        self.persisted = nbytes <= PERSIST_FRACTION * budget
        if self.in_task:
            return  # a replicate's rows are in the task's memory already
        self.X, self.Y = split_rows(self.X, self.Y)
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

    def run_pass(self, V: np.ndarray | None, label: str, sketch: Any = None, factor: Any = None) -> BlockProducts:
        """One pass over the data (the moments, and the ``sketch`` rows or with ``factor`` the
        preconditioner's inner matrix, when ``V`` is None)."""
        t = time.perf_counter()
        rows = (
            self.panel_rows
            if factor is None
            else panel_rows_for(self.fmap.n_components, np.float64, SKETCH_PANEL_BYTES)
        )
        graph = falkon_pass_graph(
            self.X, self.Y, self.fmap_ref, V, split=self.split, weights=self.weights_ref, dtype=self.dtype,
            panel_rows=rows, device=self.fixed.device, sketch=sketch, factor=factor,
        )  # fmt: skip
        out = self._compute(graph, label)
        self.passes += 1
        self.pass_seconds += time.perf_counter() - t
        return out

    def solve(self) -> Solution:
        M, cols = self.fmap.n_components, self.alpha_values.size * self.k
        self.route = self._route(M)
        gpu = self.fixed.device is not None and self.fixed.device.is_gpu
        entry = 0.0 if gpu else PASS_ENTRY_FLOPS
        cholesky = self.route == "cholesky"
        n_rows = self.X.shape[0]
        small = float(np.min(self.alpha_values)) / n_rows < SKETCH_SMALL_RELATIVE_ALPHA
        exact = max(SKETCH_EXACT_BUDGET, self.spec.max_iter // 2) if small else SKETCH_EXACT_BUDGET
        self.sketch_target = sketch_rows(n_rows, M, self.X.shape[1], cols, entry, exact) if cholesky else 0
        first = self._first_pass(gpu)
        n_w = float(first.sums[0])
        if not n_w > 0:
            raise DataError("no training rows of positive weight: nothing to fit")
        self.n_w, self.mu, y_mean = n_w, first.g[:, 0] / n_w, first.sums[1:-1] / n_w
        self.n_samples = int(first.sums[-1])
        held = first.held_rows()  # [y_v | w_v]
        rhs_k = first.g[:, 1:] - n_w * np.outer(self.mu, y_mean)
        m_alpha, k = self.alpha_values.size, self.k
        if held is not None:
            self.held_pred = np.zeros((held.shape[0], m_alpha * k))
        # α-major: column j = (α j // k, target j % k); every column rides the same passes
        res = self._solve_columns(np.tile(rhs_k, (1, m_alpha)), np.repeat(self.alpha_values, k))
        beta = res.beta
        intercept = y_mean[np.newaxis, :] - (self.mu @ beta).reshape(m_alpha, k)  # (n_alphas, k)
        broken = np.asarray(res.breakdown).reshape(m_alpha, k).any(axis=1)
        converged = np.asarray(res.converged).reshape(m_alpha, k)
        scores = None if held is None else self._held_out_scores(held, intercept)
        best = 0 if scores is None else self._choose(scores, converged, broken)
        sel = slice(best * k, (best + 1) * k)
        fit = CGFit(
            single=self.single, n_iter=int(res.n_iter), residuals=res.history, validation_scores=scores,
            n_samples=int(first.sums[-1]), n_features_in=int(self.X.shape[1]), x_min=first.x_min, x_max=first.x_max,
        )  # fmt: skip
        diagnostics = self._diagnostics(res)
        if scores is not None:  # for the useless-fit check: the chosen α against predicting the mean
            y_v, w_v = held[:, :k], held[:, k]
            constant = np.einsum("i,ik->k", w_v, (y_v - y_mean) ** 2) / w_v.sum()
            diagnostics.update(held_out_mse=float(scores[best].mean()), held_out_constant_mse=float(constant.mean()),
                               **self.choice_note)  # fmt: skip
        alpha = float(self.alpha_values[best])
        diagnostics["chosen_converged"] = bool(converged[best].all())
        self._warn_broken(broken, diagnostics)
        self._warn_unconverged_choice(res, best, alpha)
        logger.info("Nyström CG: α=%.3g after %d iterations (%d passes, %.1f s)", alpha, res.n_iter, self.passes,
                    diagnostics["seconds"])  # fmt: skip
        return Solution(beta[:, sel].copy(), intercept[best].copy(), alpha, self.alpha_values, diagnostics, fit)

    def _first_pass(self, gpu: bool) -> BlockProducts:
        """The moments pass. When every training row is sampled on the host and ``M²·8`` bytes
        fit :data:`INNER_IN_PASS_BYTES`, ``T`` is factored first and the pass's tasks form the
        preconditioner's inner matrix from the same kernel panels as the moments (the kernel
        block once, not again on the client; the triangular solves and rank-k updates spread
        over the tasks); else the pass returns the sampled rows (``sketch``)."""
        M, n_rows = self.fmap.n_components, self.X.shape[0]
        self.factor = None
        if self.sketch_target >= n_rows and not gpu and M * M * 8 <= INNER_IN_PASS_BYTES:
            t = time.perf_counter()
            K_MM = self.fmap.kernel.block(self.fmap.landmarks, self.fmap.landmarks, np.dtype(np.float64))
            self.factor = factor_kmm(K_MM, overwrite=True)
            self.prec_seconds += time.perf_counter() - t
            first = self.run_pass(None, "falkon-moments", factor=self._reference(self.factor[0], "falkon-factor"))
            self.inner, self.sketch = first.inner, None
            return first
        sketch = None
        if self.sketch_target:
            seed = int_seed(self.spec.random_state) ^ SKETCH_SEED_SALT
            sketch = HoldoutSplit(seed, min(1.0, self.sketch_target / n_rows))
        first = self.run_pass(None, "falkon-moments", sketch)
        self.sketch = first.sketch_rows()
        return first

    def _warn_unconverged_choice(self, res: Any, best: int, alpha: float) -> None:
        """A held-out score of a column CG has not converged scores an early-stopped model: say
        so when such a column wins (the general ConvergenceWarning names every column)."""
        stopped = not np.all(np.atleast_1d(res.converged)[best * self.k : (best + 1) * self.k])
        if stopped and self.split is not None:
            warnings.warn(
                f"NystroemRidge(solver='cg'): α={alpha:.3g}, chosen on the held-out split, did not reach tol="
                f"{self.spec.tol:g} in max_iter={self.spec.max_iter} passes: its score is that of an early-stopped "
                "CG, not of the ridge solution at this α (chosen since no converged α came within 10 % of its held-out "
                "score; away from the training rows its predictions can be far off). Raise max_iter, or give a grid "
                "whose smallest α converges",
                ConvergenceWarning,
                stacklevel=4,
            )

    def _route(self, M: int) -> str:
        """``"cholesky"`` (T and one factor per distinct α: ``(2 + #α)·M²·8`` bytes at the peak)
        when it fits the memory budget and the grid has fewer than ``EIGEN_MIN_ALPHAS`` values;
        else ``"eigen"`` (one eigendecomposition serves every α: ``2·M²·8``); refused when not
        even that fits. Either way every α rides the same passes."""
        budget = resolve_memory_budget(self.spec.memory_budget)
        n_distinct = np.unique(self.alpha_values).size
        cholesky = FalkonPreconditioner.memory_bytes(M, n_distinct)
        if cholesky <= budget and n_distinct < EIGEN_MIN_ALPHAS:
            return "cholesky"
        need = EigenFalkonPreconditioner.memory_bytes(M)
        if need > budget:
            raise ParameterError(
                f"NystroemRidge(solver='cg') with n_components={M:,} needs about {need / 1e9:.1f} GB for the "
                f"preconditioner's M×M matrices, over the memory budget of {budget / 1e9:.1f} GB: give fewer "
                "n_components or more memory"
            )
        logger.info(
            "Nyström CG: one eigendecomposition of K_MM serves all %d α (%.1f GB at the peak; one Cholesky factor "
            "per α would take %.1f GB of the %.1f GB budget)", n_distinct, need / 1e9, cholesky / 1e9, budget / 1e9,
        )  # fmt: skip
        return "eigen"

    def _solve_columns(self, rhs: np.ndarray, col_alpha: np.ndarray) -> Any:
        """Falkon's CG for every column (its α in ``col_alpha``), one pass per iteration."""
        n_w, mu = self.n_w, self.mu
        t_prec = time.perf_counter()
        prec = self._preconditioner(col_alpha)
        self.prec_seconds += time.perf_counter() - t_prec
        self.prec_bytes = prec.nbytes

        def gram(V: np.ndarray) -> np.ndarray:
            out = self.run_pass(V, "falkon-cg")
            self.last_images = out.held_rows()
            return out.g - n_w * np.outer(mu, mu @ V)  # the centred K̃ᵀWK̃ V

        def step(active: np.ndarray, steps: np.ndarray) -> None:
            if self.held_pred is not None and self.last_images is not None:
                self.held_pred[:, active] += self.last_images * steps

        tol, max_iter = self.spec.tol, self.spec.max_iter
        grid = self.alpha_values.size > 1  # a breakdown stops its column (its α is left out); one α: raised
        try:
            return falkon_solve(gram, rhs, prec, col_alpha, tol=tol, max_iter=max_iter, step_hook=step,
                                on_breakdown="stop" if grid else "raise")  # fmt: skip
        except NotPSDError as e:
            text = f"α={self.alpha_values[0]:.3g} (α/n={self.alpha_values[0] / n_w:.2g})"
            raise NotPSDError(f"{self._breakdown_text(text, 'the only α')} ({e})") from e

    def _preconditioner(self, col_alpha: np.ndarray) -> Any:
        """The route's preconditioner, centred for the intercept. The Cholesky route takes the
        sampled rows' estimate of ``K̃ᵀWK̃`` when there are enough of them (measured: 55–61 → 16
        iterations at α/n = 1e-7, M = 200); the eigendecomposition route and too small a sample
        take Falkon's centres."""
        n_w, mu, M = self.n_w, self.mu, self.fmap.n_components
        if self.factor is not None:  # every training row, formed in the moments pass
            T, jitter = self.factor
            self.sketch_used = int(self.n_samples)
            P = centred_inner(T, self.inner, mu * n_w, n_w)
            self.inner = None
            return FalkonPreconditioner.from_inner(T, P, col_alpha, n_w, jitter)
        K_MM = self.fmap.kernel.block(self.fmap.landmarks, self.fmap.landmarks, np.dtype(np.float64))
        if self.route == "eigen":
            return EigenFalkonPreconditioner.build(K_MM, col_alpha, n_w, mean=mu, overwrite=True)
        rows = self.sketch
        everything = self.sketch_target >= self.X.shape[0]  # every training row sampled: S = G / n_w
        enough = rows is not None and (everything or rows[1].size >= SKETCH_MIN_ROWS_PER_CENTRE * M)
        self.sketch_used = rows[1].size if enough else 0
        if not self.sketch_used:
            return FalkonPreconditioner.build(K_MM, col_alpha, n_w, mean=mu, overwrite=True)
        # taller panels than a pass's: the trsm and syrk they feed run at 13 GFlop/s on 262-row
        # panels, 61 on 2,048 (M = 1,000, 2 cores)
        tall = panel_rows_for(M, np.float64, SKETCH_PANEL_BYTES)
        panels = sketch_panels(self.fmap, rows[0], rows[1], mu, panel_rows=tall, dtype=self.dtype)
        return FalkonPreconditioner.build(K_MM, col_alpha, n_w, sketch=panels, overwrite=True)

    def _held_out_scores(self, held: np.ndarray, intercept: np.ndarray) -> np.ndarray:
        """Held-out weighted MSE per (α, target) from the tracked predictions ``K_v β`` (the
        returned β's own: measured on diamonds, M = 8,000, α/n = 2.3e-10, early-stopped, the
        tracked predictions, ``K_v β`` and ``predict`` agreed to 2e-8)."""
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

    def _choose(self, scores: np.ndarray, converged: np.ndarray, broken: np.ndarray) -> int:
        """The α of the lowest held-out MSE, leaving out the broken-down columns; an α whose CG
        stopped early is passed over for the best converged one unless it scores at least
        :data:`EARLY_STOPPED_MARGIN` lower. The held-out rows cannot see an early-stopped
        iterate's error where there are no training rows (see the constant)."""
        mean = np.where(broken, np.inf, scores.mean(axis=1))
        best = int(np.argmin(mean))
        done = converged.all(axis=1) & ~broken
        if done[best] or not done.any():
            return best
        ok = int(np.argmin(np.where(done, mean, np.inf)))
        if mean[best] <= (1.0 - EARLY_STOPPED_MARGIN) * mean[ok]:
            return best
        a, b = float(self.alpha_values[best]), float(self.alpha_values[ok])
        self.choice_note = {"early_stopped_alpha_passed_over": a}
        logger.info(
            "Nyström CG: α=%.3g scored %.4g on the held-out rows but stopped early (less than %.0f%% better than the "
            "converged α=%.3g, %.4g): α=%.3g chosen", a, mean[best], 100 * EARLY_STOPPED_MARGIN, b, mean[ok], b,
        )  # fmt: skip
        return ok

    def _warn_broken(self, broken: np.ndarray, diagnostics: dict[str, Any]) -> None:
        """Name the α whose CG broke down (left out of the choice); all of them: raise."""
        if not broken.any():
            return
        bad = self.alpha_values[broken]
        diagnostics["breakdown_alphas"] = [float(a) for a in bad]
        text = ", ".join(f"α={a:.3g} (α/n={a / self.n_w:.2g})" for a in bad)
        if broken.all():
            raise NotPSDError(self._breakdown_text(text, "every α of the grid"))
        warnings.warn(self._breakdown_text(text, "left out of the held-out choice"), ConvergenceWarning, stacklevel=5)

    def _breakdown_text(self, alphas: str, what: str) -> str:
        return (
            f"NystroemRidge(solver='cg'): CG broke down (pᵀAp or rᵀM⁻¹r <= 0) at {alphas}: {what}. In float64 "
            f"the system is not positive definite at so small a penalty with these {self.fmap.n_components} "
            "centres (a near-singular K_MM: smooth kernel, few features, close centres). Give larger α (α/n of 1e-9 or more "
            "is usually safe), fewer n_components, or landmarks='rpcholesky'"
        )

    def _diagnostics(self, res: Any) -> dict[str, Any]:
        return {
            "solver": "nystroem_cg", "n_centres": int(self.fmap.n_components), "n_iter": int(res.n_iter),
            "passes": self.passes, "pass_seconds": round(self.pass_seconds, 3),
            "seconds": round(time.perf_counter() - self.t0, 3), "converged": bool(np.all(res.converged | res.breakdown)),
            "preconditioner": self.route, "preconditioner_seconds": round(self.prec_seconds, 3),
            "preconditioner_rows": int(self.sketch_used), "inner_in_pass": self.factor is not None,
            "residual_max": float(np.max(res.residual)),
            "preconditioner_bytes": int(self.prec_bytes), "panel_rows": self.panel_rows,
            "data_in_memory": self.persisted, "held_out": None if self.split is None else self.split.fraction,
        }  # fmt: skip


def sketch_rows(
    n_rows: int,
    M: int,
    d: int,
    columns: int,
    entry_flops: float = PASS_ENTRY_FLOPS,
    exact_budget: float = SKETCH_EXACT_BUDGET,
) -> int:
    """Rows to sample for the preconditioner's estimate of K̃ᵀWK̃.

    Every row when there are at most ``SKETCH_ROWS_PER_CENTRE · M`` or when all of them cost
    (``2·n·M²`` flops) at most ``exact_budget`` passes (``n·M·(2d + 4·columns +
    entry_flops)`` each): the preconditioner is then exact. Else ``SKETCH_ROWS_PER_CENTRE · M``,
    at most what ``SKETCH_PASS_BUDGET`` passes cost, 0 when that is below
    ``SKETCH_MIN_ROWS_PER_CENTRE · M`` (Falkon's centres then)."""
    pass_flops = float(n_rows) * M * (2 * d + 4 * columns + entry_flops)
    row_flops = 2.0 * M * M
    if n_rows <= SKETCH_ROWS_PER_CENTRE * M or n_rows * row_flops <= exact_budget * pass_flops:
        return n_rows
    m = int(min(SKETCH_ROWS_PER_CENTRE * M, SKETCH_PASS_BUDGET * pass_flops / row_flops))
    return m if m >= SKETCH_MIN_ROWS_PER_CENTRE * M else 0


def split_rows(X: Any, Y: Any, parts: int = SPLIT_PARTS) -> tuple[Any, Any]:
    """``X`` and ``Y`` in ``parts`` row chunks of at least :data:`ROW_ALIGN` rows when they have
    fewer chunks: a pass is one task per chunk, so a numpy input (one chunk: diamonds' 43k rows)
    ran every pass on one core. The rule depends on the data only, never on the scheduler, so a
    cluster's fit sums the same chunks as the threaded one (and equals it to round-off).

    Parameters
    ----------
    X, Y : dask arrays with the same row chunks
    parts : int, default=SPLIT_PARTS

    Returns
    -------
    X, Y
    """
    n = X.shape[0]
    if X.numblocks[0] >= parts or n < 2 * ROW_ALIGN:
        return X, Y
    rows = max(ROW_ALIGN, -(-n // parts))
    return X.rechunk({0: rows}), Y.rechunk({0: rows})
