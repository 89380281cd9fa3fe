"""KernelRidge: one estimator that picks the exact, Nyström or random-feature solver.

The rule (:meth:`KernelRidge.choose_solver`, which applies
:func:`bigkernel.solvers.budget.solver_rule`), from n, the kernel and the memory budget:

1. **exact** when the whole Gram matrix is cached within the budget (float64 tiles, or
   float32 when only those fit) next to the solver's working memory: then every CG matvec is
   a read of memory and the exact solution costs seconds to minutes.
2. **nystroem** otherwise, when n <= :data:`NYSTROEM_MAX_N` or the kernel has no random-feature
   sampler (sigmoid, cosine, chi2, periodic, sums and products, …): the streamed primal path
   with Nyström features, more accurate than random features at the same number of features,
   at the price of one extra read of the sampled landmark rows.
3. **random_features** for larger n: one streamed pass, nothing else read.

Nyström (chosen by the rule or asked for) with more centres ``n_components`` than the one-pass
solver holds (:func:`bigkernel.solvers.budget.nystroem_direct_limit`: its M×M arrays within the
memory budget, and :data:`~bigkernel.solvers.budget.NYSTROEM_DIRECT_MAX_COMPONENTS`) becomes
**cg**: :class:`~bigkernel.NystroemRidge` with ``solver="cg"`` (Falkon's preconditioned
CG, one pass per iteration, every α of a list in the same passes), logged with the reason.

Two kernels settle the choice before that rule: ``kernel="precomputed"`` (X is the Gram
matrix) goes to the exact solver, the only one that takes K; a polynomial kernel whose
explicit monomial map (``C(d + degree, degree)`` features) fits ``n_components`` goes to
random features, where that map is the kernel exactly, in one pass, at O(n·D²) instead of
the exact solver's O(n²).

``solver="exact" | "nystroem" | "cg" | "random_features"`` forces a solver (:data:`SOLVERS`,
the one table of the names, which a job's ``model.solver`` takes too). ``"cg"`` is Nyström by
Falkon's CG, as ``NystroemRidge(solver="cg")`` (the exact solver's own CG is ``"exact"``).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Self

import dask.array as da
import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils.validation import check_is_fitted

from bigkernel._sparse import check_real
from bigkernel.data.frames import validate_data
from bigkernel.data.sources import Dataset
from bigkernel.diagnostics import log_fit
from bigkernel.errors import DataError, ParameterError
from bigkernel.io.model_store import register_model
from bigkernel.kernels.registry import check_kernel_name, document_kernels, is_precomputed, kernel_serves, kernel_spec
from bigkernel.models._base import (
    SPARSE_OK,
    ArrayIn,
    DeviceLike,
    Floats,
    KernelLike,
    RandomStateLike,
    RowWeights,
    Weights,
    _EstimatorBase,
    _init_defaults,
    check_sample_weight,
)
from bigkernel.models._posterior import Prediction
from bigkernel.models.exact import ExactKernelRidge
from bigkernel.models.nystroem import NystroemRidge
from bigkernel.models.random_features import RandomFeatureRidge
from bigkernel.numerics.polynomial_features import n_monomials
from bigkernel.solvers.base import ReplicatePlan
from bigkernel.solvers.budget import (
    NYSTROEM_MAX_N,
    fit_budget,
    nystroem_direct_limit,
    resolve_memory_budget,
    solver_rule,
)
from bigkernel.solvers.exact import gram_input
from bigkernel.solvers.nystroem_cg import DEFAULT_RELATIVE_ALPHAS
from bigkernel.validation import Options

logger = logging.getLogger(__name__)

__all__ = ["NYSTROEM_MAX_N", "SOLVERS", "KernelRidge"]

#: the kernel registry's path of each solver name that is not a path's own name
_PATHS = {"cg": "nystroem"}

#: the solvers of ``KernelRidge(solver=...)`` (and ``solver_``; a job's ``model.solver`` is checked
#: against it): "auto" chooses among the others; "cg" is Nyström by Falkon's CG
SOLVERS = ("auto", "exact", "nystroem", "cg", "random_features")


@document_kernels("exact")
@register_model
class KernelRidge(_EstimatorBase):
    """Kernel ridge regression with the solver chosen from n and the memory budget.

    Parameters
    ----------
    kernel : str or Kernel, default="rbf"
        One of {kernels} or a Kernel (any kernel of :class:`~bigkernel.ExactKernelRidge`);
        names without a random-feature sampler (and kernel objects) rule out the random-feature
        solver.
    alpha : float, list of float, "gcv" or "evidence", default=1.0
        Ridge penalty (scikit-learn's scaling); a list or ``"gcv"`` is scored by GCV, as by
        the chosen solver. ``"cg"`` scores a list on a held-out 10% of the rows
        instead, and takes ``"gcv"`` as the list ``n · 10^-7 … n · 10^-1`` (n rows, logged);
        ``"evidence"`` is refused there.
    gamma, degree, coef0, length_scale, nu, kernel_params
        Kernel parameters (scikit-learn's names; unused ones are ignored).
    fit_intercept : bool, default=True
        Fit an unpenalized intercept.
    solver : {"auto", "exact", "nystroem", "cg", "random_features"}, default="auto"
        ``"auto"`` applies :meth:`choose_solver` and logs its reason. ``"cg"``:
        :class:`~bigkernel.NystroemRidge` with ``solver="cg"`` (Falkon's CG), also chosen for
        ``"auto"`` and ``"nystroem"`` when ``n_components`` is past what the one-pass
        Nyström solver holds (:func:`~bigkernel.solvers.budget.nystroem_direct_limit`).
    memory_budget : int, str or None, default=None
        Bytes (or ``"8GB"``); default half the physical memory.
    n_components : int, default=1024
        Features of the approximate solvers (landmarks for Nyström).
    landmarks : {"uniform", "rpcholesky"}, default="rpcholesky"
        Nyström landmark choice.
    tol, max_iter, preconditioner, rank, n_probes
        Exact solver options (see :class:`~bigkernel.ExactKernelRidge`); ``tol`` and
        ``max_iter`` (None: 100) are also the ``"cg"`` solver's.
    dtype : {"auto", "float64", "float32"}, default="auto"
        Exact solver: Gram tile dtype. Approximate solvers: feature dtype (``"auto"``:
        Nyström float64; random features float32 checked after the pass and redone in float64
        when float32 could move the model, see :class:`~bigkernel.RandomFeatureRidge`).
    standardize : bool, default=False
        Standardize each feature to mean 0, standard deviation 1 first (sparse X: scaled to
        standard deviation 1 without centring, so it stays sparse).
    random_state : int, RandomState instance or None, default=None
        Seeds the chosen solver (feature map, landmarks or preconditioner).

    device : {"cpu", "cuda", "cuda:N", "auto"}, default="cpu"
        Passed to the chosen solver; on a GPU the GPU's memory decides exact against random
        features (Nyström is host code); ``"auto"``: a GPU when CuPy sees one
        (logged). An unusable GPU raises DeviceError at fit start; fitted arrays are host numpy
        arrays (``docs/guide/gpu.rst``).

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    solver_ : str
        The solver used.
    solver_reason_ : str
        Why (for ``solver="auto"``).
    estimator_ : ExactKernelRidge, NystroemRidge or RandomFeatureRidge
        The fitted estimator; ``alpha_``, ``df_``, ``intercept_`` and ``gcv_`` are its values
        (``df_`` and ``gcv_`` None for ``"cg"``, which has no α path).
    sigma2_, log_marginal_likelihood_, log_marginal_likelihood_path_
        The fitted estimator's (see :class:`RandomFeatureRidge`); ``predict(X, return_std=True)``
        uses them.
    n_iter_ : int or ndarray
        CG iterations of the exact solver and of ``"cg"``; 1 (one pass) for the one-pass
        ones.
    n_features_in_ : int
    data_min_, data_max_ : ndarray of shape (n_features,) or None
        The training range, as recorded by the fitted solver.
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
        solver: str = "auto",
        memory_budget: float | str | None = None,
        n_components: int = 1024,
        landmarks: str = "rpcholesky",
        tol: float = 1e-6,
        max_iter: int | None = None,
        preconditioner: str | None = "rpcholesky",
        rank: int | None = None,
        n_probes: int | None = None,
        dtype: str = "auto",
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
        self.solver = solver
        self.memory_budget = memory_budget
        self.n_components = n_components
        self.landmarks = landmarks
        self.tol = tol
        self.max_iter = max_iter
        self.preconditioner = preconditioner
        self.rank = rank
        self.n_probes = n_probes
        self.dtype = dtype
        self.standardize = standardize
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    # ----------------------------------------------------------------- parameters
    #: the solvers' own entries, read from their tables (one rule each), and the solver choice;
    #: the chosen solver checks its cross-parameter rules when it is fitted
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **{
            name: ExactKernelRidge._parameter_constraints[name]
            for name in (
                "kernel",
                "alpha",
                "gamma",
                "degree",
                "coef0",
                "length_scale",
                "nu",
                "kernel_params",
                "fit_intercept",
                "memory_budget",
                "tol",
                "max_iter",
                "preconditioner",
                "rank",
                "n_probes",
                "dtype",
                "standardize",
                "random_state",
                "device",
            )
        },
        **{name: NystroemRidge._parameter_constraints[name] for name in ("n_components", "landmarks")},
        "solver": [Options(str, SOLVERS)],
    }

    def make_solver_estimator(
        self, solver: str, n_samples: int | None = None
    ) -> ExactKernelRidge | NystroemRidge | RandomFeatureRidge:
        """The unfitted estimator of ``solver`` with this model's parameters.

        Parameters
        ----------
        solver : {"exact", "nystroem", "cg", "random_features"}
        n_samples : int, optional
            Rows of the fit: ``"cg"`` turns ``alpha="gcv"`` into the grid
            ``n · 10^-7 … n · 10^-1`` (None: ``alpha`` unchanged, as for a loaded model).

        Returns
        -------
        ExactKernelRidge, NystroemRidge or RandomFeatureRidge
        """
        common = dict(alpha=self.alpha, gamma=self.gamma, length_scale=self.length_scale, nu=self.nu,
                      fit_intercept=self.fit_intercept, random_state=self.random_state,
                      standardize=self.standardize, device=self.device)  # fmt: skip
        feature_dtype = "float64" if self.dtype == "auto" else self.dtype
        if solver == "exact":
            return ExactKernelRidge(
                self.kernel, degree=self.degree, coef0=self.coef0, kernel_params=self.kernel_params,
                tol=self.tol, max_iter=self.max_iter, preconditioner=self.preconditioner, rank=self.rank,
                memory_budget=self.memory_budget, dtype=self.dtype, n_probes=self.n_probes, **common,
            )  # fmt: skip
        if solver in ("nystroem", "cg"):
            if solver == "cg":
                max_iter = self.max_iter or _init_defaults(NystroemRidge)["max_iter"]
                common.update(solver="cg", tol=self.tol, max_iter=max_iter, alpha=self._cg_alpha(n_samples),
                              memory_budget=self.memory_budget)  # fmt: skip
            return NystroemRidge(
                self.kernel, degree=self.degree, coef0=self.coef0, kernel_params=self.kernel_params,
                n_components=self.n_components, landmarks=self.landmarks, dtype=feature_dtype, **common,
            )  # fmt: skip
        check_kernel_name(self.kernel, "random_features")
        if self.kernel_params:
            raise ParameterError("kernel_params do not apply to solver='random_features'")
        return RandomFeatureRidge(
            self.kernel, degree=self.degree, coef0=self.coef0, n_components=self.n_components, dtype=self.dtype,
            **common,
        )  # fmt: skip

    def _cg_alpha(self, n_samples: int | None) -> float | Floats | str:
        """``alpha`` for ``"cg"``, which scores a list on a held-out split: ``"gcv"``
        becomes :data:`~bigkernel.solvers.nystroem_cg.DEFAULT_RELATIVE_ALPHAS` times the rows
        (logged); ``"evidence"`` is refused."""
        if not isinstance(self.alpha, str) or n_samples is None:
            return self.alpha
        if self.alpha == "evidence":
            raise ParameterError(
                f"KernelRidge: alpha='evidence' needs the one-pass Nyström solver, but n_components="
                f"{self.n_components:,} is past what it holds, so Falkon's CG (solver 'cg') fits, and it "
                "has no marginal likelihood; give alpha a number or a list (scored on a held-out split), or lower "
                "n_components"
            )
        grid = [float(a) for a in n_samples * DEFAULT_RELATIVE_ALPHAS]
        logger.info("KernelRidge: alpha=%r with solver cg: the %d α from %.3g to %.3g, chosen on a "
                    "held-out split", self.alpha, len(grid), grid[0], grid[-1])  # fmt: skip
        return grid

    def _nystroem_by_size(self, solver: str, reason: str) -> tuple[str, str]:
        """Nyström with more centres than the one-pass solver holds becomes ``"cg"``."""
        if solver != "nystroem":
            return solver, reason
        budget = resolve_memory_budget(self.memory_budget)  # Nyström's M×M system is host memory
        limit = nystroem_direct_limit(budget)
        if self.n_components <= limit:
            return solver, reason
        return "cg", (
            f"{reason}; n_components={self.n_components:,} is past the {limit:,} centres the one-pass Nyström "
            f"solver takes (its n·M² time, and its M×M arrays within the {budget / 1e9:.3g} GB memory budget: "
            "bigkernel.solvers.budget.nystroem_direct_limit): Falkon's preconditioned CG, one pass per iteration"
        )

    def choose_solver(self, n: int, d: int, n_targets: int) -> tuple[str, str]:
        """``(solver, reason)`` for n points in d dimensions and ``n_targets`` targets (see the
        module docstring): ``solver`` when one is forced, else
        :func:`~bigkernel.solvers.budget.solver_rule` within the host's (or the GPU's) budget.

        Parameters
        ----------
        n, d, n_targets : int

        Returns
        -------
        (str, str)
            The solver's name and the reason, for the log.
        """
        if self.solver != "auto":
            if is_precomputed(self.kernel):
                check_kernel_name(self.kernel, _PATHS.get(self.solver, self.solver))  # the exact path or a clear error
            return self._nystroem_by_size(self.solver, f"solver={self.solver!r} was asked for")
        if is_precomputed(self.kernel):
            return "exact", "kernel='precomputed': the exact solver is the one that takes a Gram matrix"
        monomials = self._explicit_polynomial_features(d)
        if monomials is not None:
            return "random_features", (
                f"the explicit monomial map of the polynomial kernel has {monomials:,} features <= n_components="
                f"{self.n_components}: the kernel exactly, in one streamed pass"
            )
        n_alphas = 7 if isinstance(self.alpha, str) else np.atleast_1d(self.alpha).size
        device = getattr(self, "_device", None) or self._fit_device()  # a plan may ask before a fit
        # on a GPU the exact solver's cache lives there: its memory decides
        budget = fit_budget(self.memory_budget, device)
        solver, reason = solver_rule(n, d, self.kernel, budget, n_rhs=n_alphas * n_targets)
        if device.is_gpu and solver == "nystroem" and kernel_serves(self.kernel, "random_features"):
            return "random_features", f"{reason}; on the GPU random features instead (Nyström features are host code)"
        return self._nystroem_by_size(solver, reason)

    def _explicit_polynomial_features(self, d: int) -> int | None:
        """The explicit map's feature count when the kernel is polynomial (by name, with no
        ``kernel_params``, ``coef0 >= 0``) and that count fits ``n_components``; else None."""
        if not isinstance(self.kernel, str) or self.kernel_params or is_precomputed(self.kernel):
            return None
        if kernel_spec(self.kernel).name != "polynomial" or self.coef0 < 0:
            return None
        m = n_monomials(d, int(self.degree), float(self.coef0))
        return m if m <= self.n_components else None

    def fit(self, X: ArrayIn, y: ArrayIn, sample_weight: ArrayIn | None = None) -> Self:
        """Choose the solver from the data's shape and the budget, then fit with it.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        y : array-like or dask array of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), optional
            Row weights (see :meth:`ExactKernelRidge.fit`); every solver takes them.

        Returns
        -------
        self
        """
        self._check_params()
        if y is None:
            raise DataError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        if is_precomputed(self.kernel):
            X = gram_input(X, "fit")  # the square Gram matrix K (numpy, dask or zarr)
        ds, _ = self._as_dataset(X, y, reset=True)
        weights = None if sample_weight is None else RowWeights(check_sample_weight(sample_weight, ds.X.shape[0]))
        self.fit_dataset(ds, weights)
        log_fit(self)  # α on a grid edge, feature scales far apart, logged
        return self

    def fit_dataset(self, ds: Dataset, weights: Weights | None = None) -> Self:
        """Fit from a validated dataset (for orchestrators); see the solvers' ``fit_dataset``."""
        self._check_params()
        n, d = ds.X.shape
        k = 1 if ds.y.ndim == 1 else ds.y.shape[1]
        solver, reason = self.choose_solver(n, d, k)
        logger.info("KernelRidge: solver %s — %s", solver, reason)
        est = self.make_solver_estimator(solver, n_samples=n)
        est.fit_dataset(ds, weights=weights)
        self.set_fitted_estimator(est, solver, reason)
        return self

    def set_fitted_estimator(self, est: Any, solver: str, reason: str) -> None:
        """Take ``est`` (fitted with ``solver``) as this model's solver and copy its results.

        Parameters
        ----------
        est : ExactKernelRidge, NystroemRidge or RandomFeatureRidge
            Fitted (or loaded, or updated by :mod:`bigkernel.jobs.update`).
        solver : str
            Its solver's name.
        reason : str
            Why that solver (logged and saved).
        """
        self.estimator_, self.solver_, self.solver_reason_ = est, solver, reason
        self.n_features_in_ = est.n_features_in_
        for name in ("alpha_", "intercept_", "data_min_", "data_max_"):
            setattr(self, name, getattr(est, name))
        for name in ("df_", "gcv_"):  # no α path in the CG solver
            setattr(self, name, getattr(est, name, None))
        for name in ("sigma2_", "log_marginal_likelihood_", "log_marginal_likelihood_path_"):
            setattr(self, name, getattr(est, name, None))
        self.n_iter_ = getattr(est, "n_iter_", 1)  # the approximate solvers: one pass

    def predict(self, X: ArrayIn, return_std: bool = False, return_cov: bool = False) -> Prediction:
        """Predict with the fitted solver (numpy in → numpy out, dask in → lazy dask out).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        return_std, return_cov : bool, default=False
            Also return the posterior standard deviation (or covariance) of f, as the fitted
            solver does (:meth:`RandomFeatureRidge.predict`, :meth:`ExactKernelRidge.predict`).

        Returns
        -------
        ndarray or dask array of shape (n_samples,) or (n_samples, n_targets); with
        ``return_std`` / ``return_cov`` a tuple (mean, std) / (mean, cov)
        """
        check_is_fitted(self, "estimator_")
        if is_precomputed(self.kernel):
            X = gram_input(X, "predict", self.n_features_in_)
        if not isinstance(X, da.Array):
            check_real(X, "X")
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32], **SPARSE_OK)
        return self.estimator_.predict(X, return_std=return_std, return_cov=return_cov)

    # ----------------------------------------------------------------- bootstrap
    def replicate_plan(self, ds: Dataset, X_eval: np.ndarray, *, seed_entropy: int, workers: int = 1) -> ReplicatePlan:
        """The bootstrap's replicate plan of the fitted solver (fitted) or of the one
        :meth:`choose_solver` would choose for ``ds`` (unfitted).

        Parameters
        ----------
        ds : Dataset
        X_eval : ndarray of shape (n_eval, n_features)
        seed_entropy : int
        workers : int, default=1
            See :meth:`ExactKernelRidge.replicate_plan`.

        Returns
        -------
        ReplicatePlan
        """
        if hasattr(self, "estimator_"):
            inner = self.estimator_
        else:
            n, d = ds.X.shape
            solver = self.choose_solver(n, d, 1 if ds.y.ndim == 1 else int(ds.y.shape[1]))[0]
            inner = self.make_solver_estimator(solver, n_samples=n)
        return inner.replicate_plan(ds, X_eval, seed_entropy=seed_entropy, workers=workers)

    # ----------------------------------------------------------------- persistence
    def get_model_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted state: the solver's name and reason, and the solver's own state."""
        check_is_fitted(self, "estimator_")
        attrs, arrays = self.estimator_.get_model_state()
        return {"solver_": self.solver_, "solver_reason_": self.solver_reason_, "inner": attrs}, arrays

    def set_model_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        """Set the fitted state read back by the model store (inverse of :meth:`get_model_state`)."""
        solver = attrs["solver_"]
        if solver not in SOLVERS[1:]:
            raise DataError(f"unknown solver {solver!r} in the saved KernelRidge")
        est = self.make_solver_estimator(solver)
        est.set_model_state(attrs["inner"], arrays)
        self.set_fitted_estimator(est, solver, attrs["solver_reason_"])
