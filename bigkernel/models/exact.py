"""ExactKernelRidge: the exact kernel ridge solution by preconditioned CG over a blocked Gram.

For moderate n (up to ~10⁵): the training points are held in memory (n × d), the Gram matrix
is a grid of tiles cached within a memory budget and recomputed where the budget ends
(:class:`~bigkernel.solvers.gram_operator.GramOperator`), and CG with a randomized pivoted
Cholesky (or uniform Nyström) preconditioner solves every target and every α together
(:func:`~bigkernel.numerics.dual.solve_dual`).
"""

from __future__ import annotations

import logging
import time
from numbers import Integral, Real
from typing import Any, ClassVar, Self

import dask.array as da
import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils.validation import check_is_fitted

from bigkernel._sparse import as_block, column_min_max
from bigkernel.data.sources import Dataset
from bigkernel.errors import DataError, DeviceError, NotPSDError, ParameterError
from bigkernel.io.model_store import register_model
from bigkernel.kernels.base import Kernel
from bigkernel.kernels.factory import kernel_from_dict, make_kernel
from bigkernel.kernels.registry import PRECOMPUTED, is_precomputed
from bigkernel.models._base import (
    ALPHA,
    COUNT,
    DEVICE,
    KERNEL_CONSTRAINTS,
    MEMORY_BUDGET,
    ArrayIn,
    DeviceLike,
    Floats,
    KernelLike,
    RandomStateLike,
    Weights,
    _EstimatorBase,
    int_seed,
    single_target,
)
from bigkernel.models._dual import (
    DENSE_POSTERIOR_MAX_N,
    _DualPredictor,
    _gram_input,
    default_exact_rank,
    device_budget,
    predict_namespace,
    resolve_memory_budget,
)
from bigkernel.models._posterior import evidence_state, read_evidence_state, set_evidence
from bigkernel.numerics.device_gram import DeviceGram
from bigkernel.numerics.dual import describe_df, solve_dual
from bigkernel.numerics.evidence import cholesky_log_det
from bigkernel.numerics.gram_tiles import DTYPES, GramTiler, KernelExpansion
from bigkernel.numerics.namespace import as_namespace_array, namespace, take_rows, to_host
from bigkernel.numerics.precomputed import PrecomputedGram, check_symmetric
from bigkernel.numerics.precond import nystroem_factor, rpcholesky_factor
from bigkernel.numerics.primal import resolve_alphas
from bigkernel.numerics.scaling import standardize_moments, standardize_rows
from bigkernel.numerics.sums import check_finite
from bigkernel.runtime import compute
from bigkernel.solvers.gram_operator import GramOperator
from bigkernel.validation import Interval, Options

logger = logging.getLogger(__name__)

__all__ = [
    "DENSE_POSTERIOR_MAX_N",
    "ExactKernelRidge",
    "build_kernel",
    "default_exact_rank",
    "device_budget",
    "predict_namespace",
    "resolve_memory_budget",
]

#: up to this n, df(α) (and so GCV) is exact, from the eigenvalues of the centred Gram matrix;
#: so is the evidence of every α (its log-determinant) at no further cost
EXACT_DF_MAX_N = 2000
#: ``alpha="evidence"`` above :data:`EXACT_DF_MAX_N` and up to this n: one Cholesky factor of
#: ``K + αI`` per α of the 7-point grid gives the log-determinants (the dense K and one factor,
#: 16·n² bytes, must fit half the memory budget). Measured (``scripts/bench_exact_evidence.py``,
#: 2 cores): the evidence fit takes 1.7 s / 8.8 s / 34 s at n = 3,000 / 6,000 / 10,000 (3×, 9×,
#: 14× the fixed-α fit; 2.6 GB peak at 10,000)
EXACT_EVIDENCE_MAX_N = 10_000
#: Hutchinson probes when df is needed (several α) and ``n_probes`` is None
DEFAULT_PROBES = 8
#: ``alpha="gcv"``: these multiples of the mean diagonal of K (7 α, one CG run)
EXACT_GCV_GRID = np.logspace(-5, 1, 7)
PRECONDITIONERS = ("rpcholesky", "nystroem", None)


def build_kernel(est, n_features: int) -> Kernel:
    """The kernel of an estimator's ``kernel``, ``gamma``, ``degree``, ``coef0``,
    ``length_scale``, ``nu`` and ``kernel_params`` (scikit-learn's rule: parameters a kernel
    does not use are ignored; ``gamma`` defaults to 1/n_features)."""
    if isinstance(est.kernel, Kernel):
        return est.kernel
    if isinstance(est.kernel, dict):
        return kernel_from_dict(est.kernel)
    params = {"gamma": est.gamma, "degree": est.degree, "coef0": est.coef0,
              "length_scale": est.length_scale, "nu": est.nu}  # fmt: skip
    if isinstance(params["length_scale"], (list, tuple, np.ndarray)):
        params["length_scale"] = tuple(float(v) for v in params["length_scale"])
    params.update(est.kernel_params or {})
    return make_kernel(est.kernel, n_features=n_features, strict=False, **params)


@register_model
class ExactKernelRidge(_DualPredictor, _EstimatorBase):
    """Exact kernel ridge regression, blocked and preconditioned, for n up to ~10⁵.

    Solves ``(K + αI) a = y`` (or its centred form with an intercept) by conjugate gradients:
    the Gram matrix ``K`` is never formed whole unless it fits ``memory_budget``; its tiles
    are cached while the budget lasts and recomputed on every matvec beyond it. Predictions
    ``k(X*, X) a + b`` are computed block by block (dask in → lazy dask out).

    Parameters
    ----------
    kernel : str, Kernel or dict, default="rbf"
        ``"rbf"``, ``"laplacian"``, ``"matern"``, ``"polynomial"``, ``"linear"``,
        ``"sigmoid"`` (not PSD: warns), ``"periodic"``, ``"constant"``; or a
        :class:`~bigkernel.kernels.base.Kernel` (sums, products, scalings, ARD).
    alpha : float, list of float, "gcv" or "evidence", default=1.0
        Ridge penalty (scikit-learn's scaling). A list is scored by GCV: exact for
        n <= 2000 (eigenvalues), else with the Hutchinson estimate of df; ``"gcv"`` scores
        α = c·mean(diag K) for c in 1e-5 … 10 (7 values). All α share one CG run.
        ``"evidence"``: the same grid by the largest evidence (n <= 2000: the log-determinant
        comes from the eigenvalues; up to n = 10,000, when the dense n × n matrix and one factor
        fit half the memory budget, from one Cholesky factor of ``K + αI`` per α, O(n³) each:
        the fit takes ~3× a fixed-α fit at n = 3,000, ~9× at 6,000, ~14× at 10,000; larger n
        raises, naming the estimators that can).
    gamma : float, default=None
        Kernel bandwidth (scikit-learn's meaning); default 1/n_features.
    degree : int, default=3
        Polynomial degree.
    coef0 : float, default=1
        Polynomial and sigmoid offset.
    length_scale : float or array-like, default=None
        Alternative bandwidth (rbf, laplacian, matern); an array gives ARD scales.
    nu : {0.5, 1.5, 2.5}, default=1.5
        Matérn smoothness.
    kernel_params : dict, default=None
        Further kernel parameters (e.g. ``periodicity``, ``precision``).
    fit_intercept : bool, default=True
        Unpenalized intercept by centring the kernel (``HKH``, ``H`` never formed).
    tol : float, default=1e-6
        CG stops at this relative residual ``‖y − (K + αI)a‖ / ‖y‖``.
    max_iter : int, default=None
        CG iterations; default 10·n.
    preconditioner : {"rpcholesky", "nystroem"} or None, default="rpcholesky"
        Low-rank preconditioner: randomly pivoted Cholesky or uniform Nyström.
    rank : int, default=None
        Preconditioner rank; default ``min(n, max(100, ⌈7√n⌉))`` (see
        :func:`default_exact_rank`).
    memory_budget : int, str or None, default=None
        Bytes (or ``"4GB"``) for the Gram cache and the solver's working memory; default half
        the physical memory (with a distributed client: half of the smaller of that and the
        workers' total memory limit). Decides what is cached (see ``dtype``).
    dtype : {"auto", "float64", "float32"}, default="auto"
        Cached Gram tiles: ``"auto"`` stores float64 when the whole (upper) Gram matrix fits
        the budget, else float32 (predictions then differ from float64 by ~1e-5 relative).
        Tiles beyond the budget are recomputed in float64; products accumulate in float64.
    n_probes : int or None, default=None
        Degrees of freedom df(α): exact (eigenvalues of the centred Gram matrix) for
        n <= 2000, else a Hutchinson estimate whose probes ride along in the same CG run.
        ``None``: exact df for n <= 2000, none above (``df_`` is NaN) unless several α need
        it for GCV (then 8 probes); an int > 0: always, with that many probes above 2000 (each
        probe column makes the first CG iterations dearer: ~+40 % fit time for 8 probes at
        n = 20,000); 0: never, unless several α need it.
    standardize : bool, default=False
        Standardize each feature to mean 0, standard deviation 1 first (sparse X: scaled to
        standard deviation 1 without centring, so it stays sparse).
    random_state : int, RandomState instance or None, default=None
        Seeds the preconditioner's pivots and the probes.

    device : {"cpu", "cuda", "cuda:N", "auto"}, default="cpu"
        Where the fit computes: on a GPU, Gram tiles (``memory_budget`` is then GPU memory),
        preconditioner and CG vectors live there; ``"auto"``: a GPU when CuPy sees one
        (logged). An unusable GPU raises DeviceError at fit start; fitted arrays are host numpy
        arrays (``docs/guide/gpu.rst``).

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    dual_coef_ : ndarray of shape (n_samples,) or (n_samples, n_targets)
    intercept_ : float or ndarray of shape (n_targets,)
    X_fit_ : ndarray of shape (n_samples, n_features)
        Training points (prediction needs them; they are saved with the model).
    kernel_ : Kernel
    alpha_ : float
    alphas_ : ndarray of shape (n_alphas,)
    df_ : float
        Degrees of freedom at ``alpha_`` (intercept included); NaN when not computed.
    df_stderr_ : float
        Standard error of ``df_`` (0 when exact).
    df_path_, df_stderr_path_ : ndarray of shape (n_alphas,)
    gcv_ : ndarray of shape (n_alphas,) or (n_alphas, n_targets)
    n_iter_ : int or ndarray of shape (n_targets,)
        CG iterations at ``alpha_``.
    residual_ : float or ndarray of shape (n_targets,)
        True relative residual of the returned solution.
    solver_info_ : dict
        Preconditioner, Gram cache (tiles, dtype, bytes, fraction), matvecs and timings.
    sigma2_ : float or ndarray of shape (n_targets,)
        Maximum-evidence signal variance at ``alpha_`` (see :class:`RandomFeatureRidge`),
        ``ycᵀ(K̄ + αI)⁻¹yc / (n − 1)`` (``/ n`` without intercept) from the fit's dual solution:
        known at every n, so ``predict(X, return_std=True)`` works at every n.
    log_marginal_likelihood_ : float
        The profile evidence at ``alpha_``. It needs ``log|K + αI|``: computed for n <= 2000
        (eigenvalues, every α) and with ``alpha="evidence"`` (see ``alpha``); NaN otherwise —
        one Cholesky factor costs O(n³) (with the dense Gram matrix 0.9× the fixed-α fit's time
        at n = 3,000, 2.7× at 6,000, 3.8× at 10,000), too much to spend on every fit.
    log_marginal_likelihood_path_ : ndarray of shape (n_alphas,) or None
        The evidence along ``alphas_``; None when not computed.
    evidence_ : EvidencePath
        Quadratic forms and log-determinants along ``alphas_`` (log-determinants NaN where
        not computed).
    posterior_weights_ : ndarray of shape (n_samples,) or None
        The row weights of a weighted fit (the posterior's noise is ``σ²α/cᵢ``; saved).
    n_features_in_ : int
    n_samples_fit_ : int
    data_min_, data_max_ : ndarray of shape (n_features,) or None
        Per-feature minimum and maximum of the training rows (rows of weight > 0, before
        standardization); None for a model saved before they were recorded.
    """

    def __init__(
        self,
        kernel: KernelLike = "rbf",
        *,
        alpha: float | Floats | str = 1.0,
        gamma: float | None = None,
        degree: float = 3,
        coef0: float = 1,
        length_scale: float | ArrayLike | None = None,
        nu: float | None = 1.5,
        kernel_params: dict[str, Any] | None = None,
        fit_intercept: bool = True,
        tol: float = 1e-6,
        max_iter: int | None = None,
        preconditioner: str | None = "rpcholesky",
        rank: int | None = None,
        memory_budget: float | str | None = None,
        dtype: str = "auto",
        n_probes: int | None = None,
        standardize: bool = False,
        random_state: RandomStateLike = None,
        device: DeviceLike = "cpu",
        verbose: int = 0,
    ) -> None:
        self.kernel = kernel
        self.alpha = alpha
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.length_scale = length_scale
        self.nu = nu
        self.kernel_params = kernel_params
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.preconditioner = preconditioner
        self.rank = rank
        self.memory_budget = memory_budget
        self.dtype = dtype
        self.n_probes = n_probes
        self.standardize = standardize
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    # ----------------------------------------------------------------- parameters
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **KERNEL_CONSTRAINTS,
        "alpha": ALPHA,
        "fit_intercept": ["boolean"],
        "tol": [Interval(Real, 0, 1, closed="neither")],
        "max_iter": [COUNT, None],
        "preconditioner": [Options(str, tuple(p for p in PRECONDITIONERS if p)), None],
        "rank": [COUNT, None],
        "memory_budget": MEMORY_BUDGET,
        "dtype": [Options(str, DTYPES)],
        "n_probes": [Interval(Integral, 0, None, closed="left"), None],
        "standardize": ["boolean"],
        "random_state": ["random_state"],
        "device": DEVICE,
    }

    def _check_rules(self) -> None:
        self._check_memory_budget()
        self._check_precomputed()

    def _check_precomputed(self) -> None:
        """``kernel="precomputed"``: X is the Gram matrix, so nothing may transform it."""
        if is_precomputed(self.kernel) and self.standardize:
            raise ParameterError(
                "standardize=True scales the columns of X, but with kernel='precomputed' X is the Gram matrix "
                "K: standardize the data before computing K, and set standardize=False"
            )

    def _check_memory_budget(self) -> None:
        """A size given as text must parse (``"4GB"``)."""
        resolve_memory_budget(self.memory_budget)

    def _make_kernel(self, n_features: int) -> Kernel | None:
        """The kernel (None for ``kernel="precomputed"``: K is given)."""
        return None if is_precomputed(self.kernel) else build_kernel(self, n_features)

    def fit(self, X: ArrayIn, y: ArrayIn, sample_weight: ArrayIn | None = None) -> Self:
        """Fit (see the class docstring); with ``kernel="precomputed"``, X is the Gram matrix
        ``K(X, X)`` of shape (n, n) — numpy, dask or zarr, never modified.

        Parameters
        ----------
        X : array-like, dask or zarr array of shape (n_samples, n_features) or (n, n)
        y : array-like or dask array of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like or dask array of shape (n_samples,), optional
            Row weights (see :meth:`bigkernel.models._base._EstimatorBase.fit`).

        Returns
        -------
        self
        """
        if is_precomputed(self.kernel):
            X = _gram_input(X, "fit")
        return super().fit(X, y, sample_weight)

    # ----------------------------------------------------------------- data
    def _training_arrays(self, ds: Dataset, weights=None):
        """X (n, d), Y (n, k) and row weights (or None) in memory (one compute for dask input).

        Rows a partition leaves out, or of weight 0, are dropped; weights that are all 0 or 1
        become None (the plain fit on the kept rows).
        """
        X, Y = ds.X, ds.y if ds.y.ndim == 2 else ds.y[:, None]
        if isinstance(X, da.Array) or isinstance(Y, da.Array):
            X, Y = compute(X, Y, label="load training data")
        X, Y = as_block(X), np.asarray(Y, dtype=np.float64)  # sparse X stays sparse (CSR)
        check_finite(X, Y, 0)
        pre = is_precomputed(self.kernel)
        if pre:
            _gram_input(X, "fit")
            check_symmetric(X)
        self._precomputed_keep, self._precomputed_n = None, X.shape[0]
        sw = None if weights is None else _row_weights(weights, X.shape[0])
        if sw is not None:
            keep = sw > 0
            X, Y, sw = X[keep], Y[keep], sw[keep]
            if pre and not keep.all():  # K of the kept rows: their columns too
                X, self._precomputed_keep = X[:, keep], np.flatnonzero(keep)
            if X.shape[0] == 0:
                raise DataError("no rows to fit: the training set is empty (or all weights are zero)")
            if np.all(sw == 1.0):
                sw = None
        return X, Y, sw

    def fit_dataset(self, ds: Dataset, weights: Weights | None = None) -> Self:
        """Fit from a validated :class:`~bigkernel.data.sources.Dataset` (for orchestrators).

        ``weights`` may be a row partition keeping one group (a holdout split's training rows)
        or ``weights(start, stop) -> (1, rows)`` (0/1 entries select rows; others weight them,
        as ``sample_weight``).
        """
        self._check_params()
        device = self._device
        if device.is_gpu and is_precomputed(self.kernel):
            raise DeviceError(
                f"kernel={PRECOMPUTED!r} with device={self.device!r}: a precomputed Gram matrix is "
                "read on the CPU in this version; use device='cpu' (or a kernel by name on the GPU)"
            )
        t0 = time.perf_counter()
        X, Y, sw = self._training_arrays(ds, weights)
        if device.is_gpu:
            with device.activate():
                self._fit_arrays(X, Y, single=ds.y.ndim == 1, t0=t0, sample_weight=sw, xp=device.xp)
        else:
            self._fit_arrays(X, Y, single=ds.y.ndim == 1, t0=t0, sample_weight=sw)
        return self

    def _fit_arrays(
        self,
        X: np.ndarray,
        Y: np.ndarray,
        *,
        single: bool,
        t0: float,
        sample_weight: np.ndarray | None = None,
        xp: Any = None,
    ) -> None:
        """Fit on arrays in memory; ``xp`` (an array namespace) puts the Gram operator, the
        preconditioner and the CG vectors on that namespace's device (:class:`DeviceGram`,
        CuPy on a GPU); None: the host :class:`GramOperator`."""
        d = X.shape[1]
        pre = is_precomputed(self.kernel)
        self.n_features_in_ = self._precomputed_n if pre else d  # K's columns, before rows of weight 0 went
        # the training rows, in memory, unscaled (a Gram matrix has no input range)
        self._set_range(*((None, None) if pre else column_min_max(X)))
        if self.standardize:
            self.scaler_mean_, self.scaler_scale_ = standardize_moments(X, sample_weight)
            X = standardize_rows(X, self.scaler_mean_, self.scaler_scale_)
        kernel = self._make_kernel(d)
        budget = (
            resolve_memory_budget(self.memory_budget) if xp is None else device_budget(self.memory_budget, self._device)
        )
        ops: list = []

        def operator(n_rhs: int, reserve: int):
            if xp is None:
                op = GramOperator(kernel, X, memory_budget=budget, dtype=self.dtype, n_rhs=n_rhs, reserve_bytes=reserve,
                                  tiler=PrecomputedGram(X) if pre else None)  # fmt: skip
            else:
                op = DeviceGram(kernel, X, xp=xp, memory_budget=budget, dtype=self.dtype, n_rhs=n_rhs,
                                reserve_bytes=reserve)  # fmt: skip
            ops.append(op)
            return ops[0]

        try:
            sol, rank, t_prec = self._solve(kernel, X, Y, operator, budget, sample_weight)
        finally:
            for op in ops:
                op.close()
        # the posterior of a weighted fit needs the weights of its rows (saved with the model)
        self.posterior_weights_ = sample_weight
        self._set_fitted(sol, ops[0], kernel, single, {
            "preconditioner": self.preconditioner, "rank": rank,
            "preconditioner_seconds": round(t_prec, 3), "memory_budget": budget,
            "fit_seconds": round(time.perf_counter() - t0, 3), "device": str(self._device),
        })  # fmt: skip

    def _log_det_source(self, n: int, budget: int) -> tuple[bool, bool, bool]:
        """``(small, by_evidence, by_cholesky)``: whether the eigenvalues of the centred Gram
        matrix are taken (exact df and evidence), whether α is chosen by the evidence and whether
        its log-determinants come from Cholesky factors instead (or a clear error when neither
        fits)."""
        # exact df needs the dense centred Gram matrix three times over (eigvalsh): small n only
        small = n <= EXACT_DF_MAX_N and 3 * 8 * n * n <= budget // 2
        by_evidence = isinstance(self.alpha, str) and self.alpha == "evidence"
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

    def _solve(
        self,
        kernel: Kernel,
        X: np.ndarray,
        Y: np.ndarray,
        operator,
        budget: int,
        sample_weight: np.ndarray | None = None,
    ):
        """The dual solution on ``(X, Y)``, every α in one CG run: ``(DualSolution, rank, seconds
        spent on the preconditioner)``.

        ``operator(n_rhs, reserve_bytes)`` returns the Gram operator (``matvec``, ``columns``,
        ``diag``): distributed for a fit, in-process for a bootstrap replicate; the caller
        closes it. ``sample_weight`` (all > 0) weights the rows (see :func:`solve_dual`).
        """
        n, d = X.shape
        d = 0 if kernel is None else d  # precomputed: the operator counts K itself
        seed = int_seed(self.random_state)
        rank = min(n, self.rank or default_exact_rank(n, budget)) if self.preconditioner else 0
        alphas_fixed = None if isinstance(self.alpha, str) else resolve_alphas(self.alpha)[0]
        n_alphas = EXACT_GCV_GRID.size if alphas_fixed is None else alphas_fixed.size
        small, by_evidence, by_cholesky = self._log_det_source(n, budget)
        asked = self.n_probes is None and small or bool(self.n_probes)
        want_df = asked or n_alphas > 1 or by_evidence  # GCV over several α needs df(α)
        exact_df = want_df and small
        probes = (self.n_probes or DEFAULT_PROBES) if want_df and not exact_df else 0
        if n_alphas > 1 and not exact_df and probes < 2:
            raise ParameterError(
                f"several alphas for n={n} need df(alpha) for GCV: set n_probes >= 2 (Hutchinson); "
                f"df is exact only for n <= {EXACT_DF_MAX_N}"
            )
        m = n_alphas * (Y.shape[1] + probes)
        s = None if sample_weight is None else np.sqrt(sample_weight)
        # before the Gram cache exists, so the two never share the budget
        source = PrecomputedGram(X) if kernel is None else GramTiler(kernel, X)
        eig = _centred_eigenvalues(source, self.fit_intercept, s) if exact_df else None
        log_dets = None
        if by_cholesky:
            alphas_fixed = EXACT_GCV_GRID * float(np.mean(source.diag()))
            log_dets = _cholesky_log_dets(source, alphas_fixed, self.fit_intercept, sample_weight)
        op = operator(m, _reserve_bytes(n, d, m, rank))
        t = time.perf_counter()
        factor = None
        diag_host = to_host(op.diag())
        if rank and np.any(diag_host < 0):
            raise NotPSDError(
                f"kernel {PRECOMPUTED if kernel is None else kernel.name!r} has k(x, x) < 0 on this data, so it is not positive "
                "semi-definite and no low-rank preconditioner exists; use a PSD kernel (or "
                "preconditioner=None, at the risk of a CG breakdown)"
            )
        if rank and not np.any(op.diag() > 0):  # additive_chi2: nothing to pivot on
            logger.info("the Gram matrix has no positive diagonal entry: CG without a preconditioner")
            rank = 0
        if rank:
            # the preconditioner approximates the weighted Gram matrix diag(s) K diag(s)
            columns, diag = op.columns, op.diag()
            if s is not None:
                xp = namespace(diag)
                sd = as_namespace_array(xp, s, like=diag)
                columns = lambda idx: sd[:, None] * op.columns(idx) * take_rows(xp, sd, idx)[None, :]
                diag = diag * sd * sd
            if self.preconditioner == "rpcholesky":
                factor = rpcholesky_factor(columns, diag, rank, random_state=seed).L
            else:
                factor = nystroem_factor(columns, n, rank, random_state=seed).L
        t_prec = time.perf_counter() - t
        alphas = alphas_fixed if alphas_fixed is not None else EXACT_GCV_GRID * float(diag_host.mean())
        Yd = as_namespace_array(namespace(op.diag()), Y, like=op.diag())  # where the operator is
        sol = solve_dual(
            op.matvec, Yd, alphas, fit_intercept=self.fit_intercept, factor=factor,
            eigenvalues=eig, n_probes=probes, tol=self.tol, max_iter=self.max_iter,
            random_state=np.random.default_rng([seed, 1]), sample_weight=sample_weight,
            criterion="evidence" if by_evidence else "gcv", log_dets=log_dets,
        )  # fmt: skip
        return sol, (0 if factor is None else int(factor.shape[1])), t_prec

    def _set_fitted(self, sol, op: GramOperator, kernel: Kernel, single: bool, extra: dict) -> None:
        self.kernel_ = kernel
        self.X_fit_ = op.tiler.X if kernel is not None else None  # precomputed: K is not kept
        self.n_samples_fit_ = op.n
        self.dual_coef_ = single_target(sol.coef, single)
        self.intercept_ = float(sol.intercept[0]) if single else sol.intercept
        self.alpha_, self.alphas_ = sol.alpha, sol.alphas
        best = int(np.flatnonzero(sol.alphas == sol.alpha)[0])
        self.df_path_, self.df_stderr_path_ = sol.df, sol.df_stderr
        self.df_, self.df_stderr_ = float(sol.df[best]), float(sol.df_stderr[best])
        set_evidence(self, sol.evidence, best, single)
        self.__dict__.pop("_posterior_cache", None)
        self.gcv_ = single_target(sol.gcv, single)
        self.n_iter_ = int(sol.n_iter[0]) if single else sol.n_iter
        self.residual_ = float(sol.residual[0]) if single else sol.residual
        self.solver_info_ = {
            **extra, "df_method": sol.df_method, "converged": sol.converged,
            "n_matvec": sol.n_matvec, **sol.info, "gram": op.info(),
        }  # fmt: skip
        source = (
            op.tiler
            if kernel is not None
            else PrecomputedGram.columns_only(self.n_features_in_, self._precomputed_keep)
        )
        self._expansion = KernelExpansion(source, sol.coef, sol.intercept)
        logger.info(
            "fitted ExactKernelRidge: n=%s alpha=%.3g %s, %d CG iterations, residual %.2g, %.2fs",
            f"{op.n:,}", self.alpha_, describe_df(self.df_, self.df_stderr_), int(np.max(sol.n_iter)),
            float(np.max(sol.residual)), extra["fit_seconds"],
        )  # fmt: skip

    # ----------------------------------------------------------------- persistence
    def _get_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        check_is_fitted(self, "dual_coef_")
        attrs = {
            "kernel_": {"name": PRECOMPUTED} if self.kernel_ is None else self.kernel_.to_dict(),
            "alpha_": self.alpha_, "df_": self.df_,
            "df_stderr_": self.df_stderr_, "n_iter_": np.asarray(self.n_iter_).tolist(),
            "residual_": np.asarray(self.residual_).tolist(), "solver_info_": self.solver_info_,
            "n_features_in_": self.n_features_in_, "n_samples_fit_": self.n_samples_fit_,
            "single_output": self.dual_coef_.ndim == 1,
        }  # fmt: skip
        arrays = {
            **self._dual_arrays(), "alphas": self.alphas_, "df_path": self.df_path_,
            "df_stderr_path": self.df_stderr_path_, "gcv": np.asarray(self.gcv_),
        }  # fmt: skip
        ev_attrs, ev_arrays = evidence_state(self)
        if getattr(self, "posterior_weights_", None) is not None:
            ev_arrays["posterior_weights"] = self.posterior_weights_
        return {**attrs, **ev_attrs}, {**arrays, **ev_arrays}

    def _set_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        self.posterior_weights_ = arrays.get("posterior_weights")
        if is_precomputed(attrs["kernel_"].get("name")):
            coef, intercept = arrays["dual_coef"], arrays["intercept"]
            self.kernel_, self.X_fit_ = None, None
            tiler = PrecomputedGram.columns_only(int(attrs["n_features_in_"]), arrays.get("precomputed_keep"))
            if coef.shape != (tiler.n, intercept.shape[0]):
                raise DataError(f"dual_coef {coef.shape} does not fit the {tiler.n} training rows of the saved model")
        else:
            X, coef, intercept = self._read_dual_arrays(arrays)
            self.kernel_ = kernel_from_dict(attrs["kernel_"])
            tiler = GramTiler(self.kernel_, X)
            self.X_fit_ = tiler.X
        single = bool(attrs["single_output"])
        self.dual_coef_ = single_target(coef, single)
        self.intercept_ = float(intercept[0]) if single else intercept
        self.alpha_, self.alphas_ = float(attrs["alpha_"]), arrays["alphas"]
        self.df_, self.df_stderr_ = float(attrs["df_"]), float(attrs["df_stderr_"])
        self.df_path_, self.df_stderr_path_, self.gcv_ = arrays["df_path"], arrays["df_stderr_path"], arrays["gcv"]
        self.n_iter_ = attrs["n_iter_"] if single else np.asarray(attrs["n_iter_"])
        self.residual_ = attrs["residual_"] if single else np.asarray(attrs["residual_"])
        self.solver_info_ = attrs["solver_info_"]
        self.n_features_in_, self.n_samples_fit_ = int(attrs["n_features_in_"]), int(attrs["n_samples_fit_"])
        if "scaler_mean" in arrays:
            self.scaler_mean_, self.scaler_scale_ = arrays["scaler_mean"], arrays["scaler_scale"]
        self._read_range(arrays)
        self._expansion = KernelExpansion(tiler, coef, intercept)
        read_evidence_state(self, attrs, arrays, single)
        self.__dict__.pop("_posterior_cache", None)


def _row_weights(weights, n: int) -> np.ndarray:
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


def _reserve_bytes(n: int, d: int, m: int, rank: int) -> int:
    """Memory the solver holds besides the Gram operator (bytes).

    CG: about 8 ``(n, m)`` float64 arrays (right-hand sides, solutions, residuals, directions,
    preconditioned residuals, products, temporaries). Preconditioner: 3 ``(n, r)`` arrays at
    peak (factor, centred copy, Woodbury basis) plus one block of candidate columns. Data: the
    training X and Y (the Gram operator counts its own copy of the points).
    """
    cg = 8 * n * m * 8
    prec = (3 * n * rank + n * 100) * 8 if rank else 0
    points = 2 * n * (d + 1) * 8
    return cg + prec + points


def _cholesky_log_dets(source, alphas: np.ndarray, fit_intercept: bool, sample_weight=None) -> np.ndarray:
    """``log|K̄ + αI|`` per α from one Cholesky factor each (the evidence beyond the eigenvalues)."""
    t = time.perf_counter()
    K = source.dense()
    out = np.array([cholesky_log_det(K, a, fit_intercept, sample_weight) for a in alphas])
    logger.info(
        "evidence by %d Cholesky factors at n=%s: %.2fs", alphas.size, f"{K.shape[0]:,}", time.perf_counter() - t
    )
    return out


def _centred_eigenvalues(tiler: GramTiler, fit_intercept: bool, s: np.ndarray | None = None) -> np.ndarray:
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
