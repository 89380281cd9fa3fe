"""The exact kernel ridge solver: preconditioned CG over a blocked Gram matrix (layer 3).

:class:`ExactSolver` implements the :class:`~bigkernel.solvers.base.Solver` protocol for
:class:`~bigkernel.ExactKernelRidge`:

``prepare(ds, weights, device=...)``
    the training rows in memory (rows of weight 0 dropped), their range, the standardization,
    the kernel, the budget (:mod:`bigkernel.solvers.budget`): an :class:`ExactFixed`;
``fit(fixed)``
    every α and every target in one CG run (:func:`~bigkernel.numerics.dual.solve_dual`) with a
    randomly pivoted Cholesky (or uniform Nyström) preconditioner, exact df / evidence from the
    eigenvalues at small n, or from Cholesky factors with ``alpha="evidence"``: a
    :class:`~bigkernel.solvers.base.Solution` whose ``details`` is an :class:`ExactDetails`.

:meth:`ExactSolver.solve` is the dual solve itself on arrays in memory; the bootstrap's
replicate tasks (:mod:`bigkernel.solvers.exact_plan`) call it with an in-task Gram operator.
:meth:`ExactSolver.state` / :meth:`ExactSolver.from_state` give the model store's layout
(format v1, :mod:`bigkernel.solvers.dual_state`); the estimator's ``get_model_state`` /
``set_model_state`` build the :class:`Solution` from its fitted attributes and call them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import dask.array as da
import numpy as np
import zarr

from bigkernel._sparse import as_block, column_min_max, refuse_sparse
from bigkernel.data.sources import Dataset, from_zarr
from bigkernel.devices import CPU, Device
from bigkernel.errors import DataError, NotPSDError, ParameterError
from bigkernel.kernels.base import Kernel
from bigkernel.kernels.factory import kernel_from_dict, make_kernel
from bigkernel.kernels.registry import PRECOMPUTED, is_precomputed
from bigkernel.numerics.dual import DualSolution, solve_dual
from bigkernel.numerics.evidence import cholesky_log_det
from bigkernel.numerics.gram_tiles import GramTiler
from bigkernel.numerics.namespace import as_namespace_array, namespace, take_rows, to_host
from bigkernel.numerics.precomputed import PrecomputedGram, check_symmetric
from bigkernel.numerics.precond import nystroem_factor, rpcholesky_factor
from bigkernel.numerics.primal import resolve_alphas
from bigkernel.numerics.scaling import standardize_moments, standardize_rows
from bigkernel.numerics.sums import check_finite
from bigkernel.runtime import compute
from bigkernel.solvers import budget as limits
from bigkernel.solvers.base import GramOperator, Solution
from bigkernel.solvers.budget import default_exact_rank, fit_budget, gram_operator, reserve_bytes
from bigkernel.solvers.dual_state import (
    ExactFacts,
    dual_arrays,
    evidence_layout,
    kernel_attr,
    read_dual_source,
    read_evidence_layout,
    saved_scaler_range,
)
from bigkernel.validation import int_seed

logger = logging.getLogger(__name__)

__all__ = [
    "EXACT_GCV_GRID",
    "PRECONDITIONERS",
    "ExactDetails",
    "ExactFixed",
    "ExactSolver",
    "ExactSpec",
    "build_kernel",
    "gram_input",
    "training_arrays",
]

#: ``alpha="gcv"``: these multiples of the mean diagonal of K (7 α, one CG run)
EXACT_GCV_GRID = np.logspace(-5, 1, 7)
PRECONDITIONERS = ("rpcholesky", "nystroem", None)


def build_kernel(params: Any, n_features: int) -> Kernel:
    """The kernel of ``kernel``, ``gamma``, ``degree``, ``coef0``, ``length_scale``, ``nu`` and
    ``kernel_params`` (attributes of an estimator or a spec; scikit-learn's rule: parameters a
    kernel does not use are ignored; ``gamma`` defaults to 1/n_features).

    Parameters
    ----------
    params : object
        Anything with those attributes (an estimator, an :class:`ExactSpec`).
    n_features : int

    Returns
    -------
    Kernel
    """
    if isinstance(params.kernel, Kernel):
        return params.kernel
    if isinstance(params.kernel, dict):
        return kernel_from_dict(params.kernel)
    values = {"gamma": params.gamma, "degree": params.degree, "coef0": params.coef0,
              "length_scale": params.length_scale, "nu": params.nu}  # fmt: skip
    if isinstance(values["length_scale"], (list, tuple, np.ndarray)):
        values["length_scale"] = tuple(float(v) for v in values["length_scale"])
    values.update(params.kernel_params or {})
    return make_kernel(params.kernel, n_features=n_features, strict=False, **values)


@dataclass(frozen=True)
class ExactSpec:
    """Everything an exact fit depends on besides the data: the estimator's parameters."""

    kernel: Any = "rbf"
    alpha: Any = 1.0
    gamma: float | None = None
    degree: float = 3
    coef0: float = 1
    length_scale: Any = None
    nu: float | None = 1.5
    kernel_params: dict | None = None
    fit_intercept: bool = True
    tol: float = 1e-6
    max_iter: int | None = None
    preconditioner: str | None = "rpcholesky"
    rank: int | None = None
    memory_budget: Any = None
    dtype: str = "auto"
    n_probes: int | None = None
    standardize: bool = False
    random_state: Any = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ExactSpec:
        """The spec of an estimator's ``get_params()`` (parameters it does not know are
        ignored: ``device``, ``verbose``)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in params.items() if k in names})

    @property
    def precomputed(self) -> bool:
        """``kernel="precomputed"``: X is the Gram matrix."""
        return is_precomputed(self.kernel)


@dataclass(frozen=True)
class TrainingArrays:
    """The training rows in memory: X (n, d), Y (n, k), row weights (None: all 1), and for a
    precomputed K its column count before rows were dropped and the kept rows (None: all)."""

    X: Any
    Y: np.ndarray
    sample_weight: np.ndarray | None
    n_columns: int
    keep: np.ndarray | None


@dataclass(frozen=True)
class ExactFixed:
    """What :meth:`ExactSolver.prepare` holds fixed for a fit (for a saved model, of
    :meth:`ExactSolver.state` / :meth:`ExactSolver.from_state`: X the saved training points,
    None for a precomputed K; Y None; ``sample_weight`` the posterior's row weights)."""

    X: Any  # scaled when standardized
    Y: np.ndarray | None
    sample_weight: np.ndarray | None
    kernel: Kernel | None  # None: precomputed
    scaler: tuple[np.ndarray, np.ndarray] | None
    data_range: tuple[Any, Any]  # per-feature (min, max) of the unscaled rows, or (None, None)
    n_features: int  # K's columns for a precomputed kernel
    keep: np.ndarray | None  # precomputed: the training columns fitted (None: all)
    device: Device
    budget: int


@dataclass(frozen=True)
class ExactDetails:
    """The exact path's own result: the dual solution, the operator's tiles' source (the fitted
    model predicts from it) and description, the preconditioner's rank and time."""

    dual: DualSolution
    tiler: Any
    gram_info: dict
    rank: int
    preconditioner_seconds: float


def gram_input(K: Any, action: str, n_columns: int | None = None) -> Any:
    """``K`` checked as the Gram matrix of ``kernel="precomputed"``: 2-D, square at fit, one
    column per training row at predict; a zarr array becomes a dask array (read by chunks)."""
    if isinstance(K, zarr.Array):
        K = from_zarr(K)
    refuse_sparse(K, "kernel='precomputed' takes a dense Gram matrix; found a sparse one: pass K.toarray()")
    if isinstance(K, da.Array) and K.ndim == 2 and K.numblocks[1] > 1:
        K = K.rechunk({1: -1})  # a square matrix is often stored in square chunks: read whole rows
    shape = getattr(K, "shape", None) or np.shape(K)
    if action == "fit" and (len(shape) != 2 or shape[0] != shape[1]):
        raise DataError(
            f"kernel='precomputed': fit takes the square Gram matrix K(X, X) of shape (n_samples, n_samples), "
            f"found shape {tuple(shape)}"
        )
    if action == "predict" and (len(shape) != 2 or shape[1] != n_columns):
        raise DataError(
            f"kernel='precomputed': predict takes K(X*, X_fit) of shape (n_samples, {n_columns}) — one column "
            f"per training row — found shape {tuple(shape)}"
        )
    return K


def row_weights(weights: Any, n: int) -> np.ndarray:
    """Row weights (n,) of a weight specification: one group of a partition (0/1), or
    ``weights(0, n)`` of shape (1, n)."""
    if hasattr(weights, "groups"):
        if len(weights.keep) != 1:
            raise ParameterError("the exact solver fits one row set; a partition must keep one group")
        return (np.asarray(weights.groups(0, n)) == weights.keep[0]).astype(np.float64)
    W = np.asarray(weights(0, n), dtype=np.float64)
    if W.ndim != 2 or W.shape != (1, n):
        raise ParameterError(
            f"the exact solver fits one set of row weights, of shape (1, {n}); found {W.shape} "
            "(several replicates at once go through bigkernel.bootstrap)"
        )
    return W[0]


def training_arrays(ds: Dataset, weights: Any = None, *, precomputed: bool = False) -> TrainingArrays:
    """X (n, d), Y (n, k) and row weights (or None) in memory (one compute for dask input).

    Rows a partition leaves out, or of weight 0, are dropped; weights that are all 0 or 1
    become None (the plain fit on the kept rows). A precomputed K is checked square and
    symmetric, and keeps the columns of its kept rows.
    """
    X, Y = ds.X, ds.y if ds.y.ndim == 2 else ds.y[:, None]
    if isinstance(X, da.Array) or isinstance(Y, da.Array):
        X, Y = compute(X, Y, label="load training data")
    X, Y = as_block(X), np.asarray(Y, dtype=np.float64)  # sparse X stays sparse (CSR)
    check_finite(X, Y, 0)
    if precomputed:
        gram_input(X, "fit")
        check_symmetric(X)
    n_columns, kept = X.shape[0], None
    sw = None if weights is None else row_weights(weights, X.shape[0])
    if sw is not None:
        keep = sw > 0
        X, Y, sw = X[keep], Y[keep], sw[keep]
        if precomputed and not keep.all():  # K of the kept rows: their columns too
            X, kept = X[:, keep], np.flatnonzero(keep)
        if X.shape[0] == 0:
            raise DataError("no rows to fit: the training set is empty (or all weights are zero)")
        if np.all(sw == 1.0):
            sw = None
    return TrainingArrays(X, Y, sw, n_columns, kept)


@dataclass(frozen=True)
class _SolvePlan:
    """What one dual solve computes, decided from n, the targets and the budget."""

    seed: int
    rank: int
    alphas: np.ndarray | None  # None: the GCV grid, from the diagonal
    by_evidence: bool
    by_cholesky: bool
    exact_df: bool
    probes: int
    n_rhs: int


class ExactSolver:
    """Exact kernel ridge by preconditioned CG (see the module docstring).

    Parameters
    ----------
    spec : ExactSpec
    """

    name: ClassVar[str] = "exact"

    def __init__(self, spec: ExactSpec) -> None:
        self.spec = spec

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ExactSolver:
        """The solver of an estimator's (validated) ``get_params()``."""
        return cls(ExactSpec.from_params(params))

    def kernel(self, n_features: int) -> Kernel | None:
        """The kernel (None for ``kernel="precomputed"``: K is given)."""
        return None if self.spec.precomputed else build_kernel(self.spec, n_features)

    # ----------------------------------------------------------------- prepare / fit
    def prepare(self, data: Dataset, weights: Any = None, *, device: Device = CPU) -> ExactFixed:
        """The training rows in memory, their range and scaling, the kernel and the budget.

        Parameters
        ----------
        data : Dataset
        weights : row partition or ``weights(start, stop) -> (1, rows)``, optional
        device : Device, default=CPU
            Where the fit computes (the estimator's resolved device, passed as is).

        Returns
        -------
        ExactFixed
        """
        arrays = training_arrays(data, weights, precomputed=self.spec.precomputed)
        X, sw = arrays.X, arrays.sample_weight
        pre = self.spec.precomputed
        # the training rows, in memory, unscaled (a Gram matrix has no input range)
        data_range = (None, None) if pre else tuple(column_min_max(X))
        scaler = None
        if self.spec.standardize:
            scaler = standardize_moments(X, sw)
            X = standardize_rows(X, *scaler)
        return ExactFixed(
            X=X, Y=arrays.Y, sample_weight=sw, kernel=self.kernel(X.shape[1]), scaler=scaler,
            data_range=data_range, n_features=arrays.n_columns if pre else X.shape[1], keep=arrays.keep,
            device=device, budget=fit_budget(self.spec.memory_budget, device),
        )  # fmt: skip

    def fit(self, fixed: ExactFixed, data: Dataset | None = None, weights: Any = None) -> Solution:
        """Solve on the rows ``fixed`` holds (``data`` and ``weights`` were read by
        :meth:`prepare`): a :class:`Solution` with :class:`ExactDetails`."""
        device = fixed.device
        where = device.activate() if device.is_gpu else contextlib.nullcontext()
        tiler = PrecomputedGram(fixed.X) if fixed.kernel is None else None
        with where:
            sol, op, rank, t_prec = self.solve(
                fixed.kernel, fixed.X, fixed.Y, device=device, budget=fixed.budget,
                sample_weight=fixed.sample_weight, tiler=tiler,
            )  # fmt: skip
        details = ExactDetails(sol, op.tiler, op.info(), rank, t_prec)
        return Solution(
            coef=sol.coef, intercept=sol.intercept, alpha=sol.alpha, alphas=sol.alphas,
            diagnostics={"preconditioner": self.spec.preconditioner, "rank": rank,
                         "preconditioner_seconds": round(t_prec, 3), "memory_budget": fixed.budget},
            details=details,
        )  # fmt: skip

    # ----------------------------------------------------------------- saved state
    def state(self, fixed: ExactFixed, solution: Solution) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The saved attributes and arrays of a fitted model (format v1: the layout of the stores
        the estimator wrote before the solver layer).

        Parameters
        ----------
        fixed : ExactFixed
            Its ``scaler``, ``data_range`` and ``sample_weight`` (the posterior's row weights).
        solution : Solution
            ``coef`` (n, k), ``intercept`` (k,); ``details`` an
            :class:`~bigkernel.solvers.dual_state.ExactFacts` (its ``tiler``: the model's kernel
            and training points, or a precomputed K's kept columns).

        Returns
        -------
        attrs : dict
        arrays : dict of ndarray
        """
        f: ExactFacts = solution.details
        attrs = {
            "kernel_": kernel_attr(f.tiler.kernel), "alpha_": solution.alpha, "df_": f.df,
            "df_stderr_": f.df_stderr, "n_iter_": np.asarray(f.n_iter).tolist(),
            "residual_": np.asarray(f.residual).tolist(), "solver_info_": f.solver_info,
            "n_features_in_": f.n_features_in, "n_samples_fit_": f.n_samples, "single_output": f.single,
        }  # fmt: skip
        arrays = {
            **dual_arrays(f.tiler, fixed.scaler, fixed.data_range, solution.coef, solution.intercept),
            "alphas": solution.alphas,
            "df_path": f.df_path, "df_stderr_path": f.df_stderr_path, "gcv": np.asarray(f.gcv),
        }  # fmt: skip
        ev_attrs, ev_arrays = evidence_layout(f.bayes)
        if fixed.sample_weight is not None:
            ev_arrays["posterior_weights"] = fixed.sample_weight
        return {**attrs, **ev_attrs}, {**arrays, **ev_arrays}

    def from_state(self, attrs: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> tuple[ExactFixed, Solution]:
        """Inverse of :meth:`state` (``DataError`` when the arrays' shapes disagree).

        Returns
        -------
        fixed : ExactFixed
            Y None, the CPU, budget 0 (a saved model is not refitted from it).
        solution : Solution
            ``details`` an :class:`ExactFacts`; ``diagnostics`` empty (``solver_info`` is in it).
        """
        kernel, tiler, coef, intercept = read_dual_source(attrs, arrays)
        single = bool(attrs["single_output"])
        scaler, data_range = saved_scaler_range(arrays)
        n_features = int(attrs["n_features_in_"])
        fixed = ExactFixed(
            X=None if kernel is None else tiler.X, Y=None, sample_weight=arrays.get("posterior_weights"),
            kernel=kernel, scaler=scaler, data_range=data_range, n_features=n_features,
            keep=getattr(tiler, "keep", None) if kernel is None else None, device=CPU, budget=0,
        )  # fmt: skip
        facts = ExactFacts(
            tiler=tiler, single=single, n_samples=int(attrs["n_samples_fit_"]), n_features_in=n_features,
            df=float(attrs["df_"]), df_path=arrays["df_path"], gcv=arrays["gcv"], solver_info=attrs["solver_info_"],
            bayes=read_evidence_layout(attrs, arrays, single), df_stderr=float(attrs["df_stderr_"]),
            df_stderr_path=arrays["df_stderr_path"],
            n_iter=attrs["n_iter_"] if single else np.asarray(attrs["n_iter_"]),
            residual=attrs["residual_"] if single else np.asarray(attrs["residual_"]),
        )  # fmt: skip
        return fixed, Solution(coef, intercept, float(attrs["alpha_"]), arrays["alphas"], {}, facts)

    # ----------------------------------------------------------------- the solve
    def log_det_source(self, n: int, budget: int) -> tuple[bool, bool, bool]:
        """``(small, by_evidence, by_cholesky)``: whether the eigenvalues of the centred Gram
        matrix are taken (exact df and evidence), whether α is chosen by the evidence and whether
        its log-determinants come from Cholesky factors instead (or a clear error when neither
        fits)."""
        # the limits are read from bigkernel.solvers.budget at each call (the tests lower them)
        EXACT_DF_MAX_N, EXACT_EVIDENCE_MAX_N = limits.EXACT_DF_MAX_N, limits.EXACT_EVIDENCE_MAX_N
        # exact df needs the dense centred Gram matrix three times over (eigvalsh): small n only
        small = n <= EXACT_DF_MAX_N and 3 * 8 * n * n <= budget // 2
        by_evidence = isinstance(self.spec.alpha, str) and self.spec.alpha == "evidence"
        # beyond the eigenvalues, the evidence of the grid from one Cholesky factor per α
        by_cholesky = by_evidence and not small
        if by_cholesky and (n > EXACT_EVIDENCE_MAX_N or 16 * n * n > budget // 2):
            raise ParameterError(
                f"alpha='evidence' on the exact path needs the log-determinant of K + alpha·I for 7 alphas: from "
                f"the eigenvalues for n <= {EXACT_DF_MAX_N}, else from one Cholesky factor per alpha for n <= "
                f"{EXACT_EVIDENCE_MAX_N:,} when the dense n × n matrix and its factor ({16 * n * n / 1e9:.2f} GB) fit half "
                f"the memory budget ({budget / 1e9:.2f} GB); here n={n:,}. Use NystroemRidge or RandomFeatureRidge with "
                "alpha='evidence' (evidence from the sums, any n), alpha='gcv', or a larger memory_budget"
            )
        return small, by_evidence, by_cholesky

    def _plan(self, n: int, n_targets: int, budget: int) -> _SolvePlan:
        """Rank, α, df method and probes of one solve (as in a fit with ``budget``)."""
        spec = self.spec
        rank = min(n, spec.rank or default_exact_rank(n, budget)) if spec.preconditioner else 0
        alphas = None if isinstance(spec.alpha, str) else resolve_alphas(spec.alpha)[0]
        n_alphas = EXACT_GCV_GRID.size if alphas is None else alphas.size
        small, by_evidence, by_cholesky = self.log_det_source(n, budget)
        asked = spec.n_probes is None and small or bool(spec.n_probes)
        want_df = asked or n_alphas > 1 or by_evidence  # GCV over several α needs df(α)
        exact_df = want_df and small
        probes = (spec.n_probes or limits.DEFAULT_PROBES) if want_df and not exact_df else 0
        if n_alphas > 1 and not exact_df and probes < 2:
            raise ParameterError(
                f"several alphas for n={n} need df(alpha) for GCV: set n_probes >= 2 (Hutchinson); "
                f"df is exact only for n <= {limits.EXACT_DF_MAX_N}"
            )
        return _SolvePlan(int_seed(spec.random_state), rank, alphas, by_evidence, by_cholesky, exact_df, probes,
                          n_alphas * (n_targets + probes))  # fmt: skip

    def _preconditioner(self, op: GramOperator, kernel: Kernel | None, rank: int, s: np.ndarray | None, seed: int):
        """The low-rank factor of the weighted Gram matrix ``diag(s) K diag(s)`` (None: none),
        with the checks that it exists."""
        if rank and np.any(to_host(op.diag()) < 0):
            raise NotPSDError(
                f"kernel {PRECOMPUTED if kernel is None else kernel.name!r} has k(x, x) < 0 on this data, so it is not positive "
                "semi-definite and no low-rank preconditioner exists; use a PSD kernel (or "
                "preconditioner=None, at the risk of a CG breakdown)"
            )
        if rank and not np.any(op.diag() > 0):  # additive_chi2: nothing to pivot on
            logger.info("the Gram matrix has no positive diagonal entry: CG without a preconditioner")
            return None
        if not rank:
            return None
        columns, diag = op.columns, op.diag()
        if s is not None:
            xp = namespace(diag)
            sd = as_namespace_array(xp, s, like=diag)
            columns = lambda idx: sd[:, None] * op.columns(idx) * take_rows(xp, sd, idx)[None, :]
            diag = diag * sd * sd
        if self.spec.preconditioner == "rpcholesky":
            return rpcholesky_factor(columns, diag, rank, random_state=seed).L
        return nystroem_factor(columns, op.n, rank, random_state=seed).L

    def solve(
        self,
        kernel: Kernel | None,
        X: Any,
        Y: np.ndarray,
        *,
        device: Device,
        budget: int,
        sample_weight: np.ndarray | None = None,
        op_budget: int | None = None,
        op_dtype: str | None = None,
        in_task: bool = False,
        tiler: Any = None,
    ) -> tuple[DualSolution, GramOperator, int, float]:
        """The dual solution on ``(X, Y)``, every α in one CG run.

        Parameters
        ----------
        kernel : Kernel or None
            None with a precomputed ``tiler`` (X is then K).
        X : ndarray of shape (n, d)
        Y : ndarray of shape (n, k)
        device : Device
            Where the Gram operator and the CG vectors live (activated by the caller).
        budget : int
            Decides rank, exact df and the evidence's source, as in a fit with this budget.
        sample_weight : ndarray of shape (n,), optional
            Row weights, all > 0 (see :func:`~bigkernel.numerics.dual.solve_dual`).
        op_budget : int, optional
            Bytes of the Gram operator (default ``budget``; a replicate task's share).
        op_dtype : str, optional
            Its cached tiles' dtype (default the spec's ``dtype``).
        in_task : bool, default=False
            An in-process operator (a bootstrap replicate task) instead of the distributed one.
        tiler : PrecomputedGram, optional
            The tiles of a precomputed K.

        Returns
        -------
        (DualSolution, GramOperator, int, float)
            The solution, the (closed) operator, the preconditioner's rank and its seconds.
        """
        n, d = X.shape
        d = 0 if kernel is None else d  # precomputed: the operator counts K itself
        plan = self._plan(n, Y.shape[1], budget)
        s = None if sample_weight is None else np.sqrt(sample_weight)
        # before the Gram cache exists, so the two never share the budget
        source = PrecomputedGram(X) if kernel is None else GramTiler(kernel, X)
        eig = _centred_eigenvalues(source, self.spec.fit_intercept, s) if plan.exact_df else None
        alphas, log_dets = plan.alphas, None
        if plan.by_cholesky:
            alphas = EXACT_GCV_GRID * float(np.mean(source.diag()))
            log_dets = _cholesky_log_dets(source, alphas, self.spec.fit_intercept, sample_weight)
        op = gram_operator(
            kernel, X, device=device, memory_budget=budget if op_budget is None else op_budget,
            dtype=op_dtype or self.spec.dtype, n_rhs=plan.n_rhs, reserve=reserve_bytes(n, d, plan.n_rhs, plan.rank),
            in_task=in_task, tiler=tiler,
        )  # fmt: skip
        try:
            t = time.perf_counter()
            factor = self._preconditioner(op, kernel, plan.rank, s, plan.seed)
            t_prec = time.perf_counter() - t
            diag = op.diag()
            if alphas is None:
                alphas = EXACT_GCV_GRID * float(to_host(diag).mean())
            sol = solve_dual(
                op.matvec, as_namespace_array(namespace(diag), Y, like=diag), alphas,  # where the operator is
                fit_intercept=self.spec.fit_intercept, factor=factor, eigenvalues=eig, n_probes=plan.probes,
                tol=self.spec.tol, max_iter=self.spec.max_iter, random_state=np.random.default_rng([plan.seed, 1]),
                sample_weight=sample_weight, criterion="evidence" if plan.by_evidence else "gcv", log_dets=log_dets,
            )  # fmt: skip
        finally:
            op.close()
        return sol, op, (0 if factor is None else int(factor.shape[1])), t_prec


def _cholesky_log_dets(source: Any, alphas: np.ndarray, fit_intercept: bool, sample_weight=None) -> np.ndarray:
    """``log|K̄ + αI|`` per α from one Cholesky factor each (the evidence beyond the eigenvalues)."""
    t = time.perf_counter()
    K = source.dense()
    out = np.array([cholesky_log_det(K, a, fit_intercept, sample_weight) for a in alphas])
    logger.info(
        "evidence by %d Cholesky factors at n=%s: %.2fs", alphas.size, f"{K.shape[0]:,}", time.perf_counter() - t
    )
    return out


def _centred_eigenvalues(tiler: Any, fit_intercept: bool, s: np.ndarray | None = None) -> np.ndarray:
    """Eigenvalues of ``HKH`` (of ``K`` without intercept), for the exact df (small n).

    With square-root weights ``s``: of ``H_s K̃ H_s``, ``K̃ = diag(s) K diag(s)``,
    ``H_s = I − s sᵀ/sᵀs`` (see :mod:`bigkernel.numerics.dual`).
    """
    K = tiler.dense()
    if s is not None:
        K *= s[:, None]
        K *= s[None, :]
    if fit_intercept:
        if s is None:
            K -= K.mean(axis=0)
            K -= K.mean(axis=1)[:, None]
        else:
            u = s / np.linalg.norm(s)
            K -= np.outer(u, u @ K)
            K -= np.outer(K @ u, u)
        K = 0.5 * (K + K.T)
    return np.linalg.eigvalsh(K)
