"""What the dual models (ExactKernelRidge, ExactKernelRidgeCV) share beside their fits:
prediction (mean, posterior std/cov, on a GPU when one is usable) and the arrays every dual
model saves. Budgets and default ranks: :mod:`bigkernel.solvers.budget`; the checks of a
precomputed Gram matrix: :func:`bigkernel.solvers.exact.gram_input`."""

from __future__ import annotations

import logging

import numpy as np
from sklearn.utils.validation import check_is_fitted

from bigkernel.devices import Device, DeviceNamespace
from bigkernel.errors import DataError
from bigkernel.kernels.registry import is_precomputed
from bigkernel.models._base import ArrayIn
from bigkernel.models._posterior import Prediction, predict_output
from bigkernel.numerics.device_gram import DeviceExpansion
from bigkernel.numerics.gram_tiles import LocalGram
from bigkernel.numerics.posterior import CGPosterior, DensePosterior
from bigkernel.numerics.precond import rpcholesky_factor
from bigkernel.numerics.scaling import standardize_rows
from bigkernel.solvers import budget as limits
from bigkernel.solvers.budget import default_exact_rank, resolve_memory_budget
from bigkernel.solvers.dual_state import Bayes
from bigkernel.solvers.exact import gram_input
from bigkernel.validation import int_seed

logger = logging.getLogger(__name__)


def predict_namespace(device: Device) -> DeviceNamespace | None:
    """Where predictions of a dual model run: a :class:`~bigkernel.devices.DeviceNamespace`
    (resolved in each task: a dask worker's own GPU) for a GPU ``device``, else None (the host).
    ``device`` is the estimator's ``_predict_device()``: the CPU when the saved ``device`` names
    a GPU not usable here, so a model fitted on a GPU predicts on any machine."""
    return DeviceNamespace(device) if device.is_gpu else None


class _DualPredictor:
    """Prediction of the dual solvers: ``k(X, X_fit) a + b`` block by block, from the fitted
    ``_expansion`` (a :class:`KernelExpansion`), ``dual_coef_`` and the optional scaling."""

    # ----------------------------------------------------------------- predict
    def _model(self):
        """The numpy predictor ``Z ↦ k(Z, X) a + b`` (standardization included): on the GPU
        when ``device`` names one that is usable here (:func:`predict_namespace`), else on
        the host — so a model fitted on a GPU predicts on any machine."""
        expansion = self._expansion
        where = predict_namespace(self._predict_device())
        if where is not None:
            expansion = DeviceExpansion(expansion, where)
        if getattr(self, "scaler_mean_", None) is not None and self.standardize:
            return _Standardized(expansion, self.scaler_mean_, self.scaler_scale_)
        return expansion

    def predict(self, X: ArrayIn, return_std: bool = False, return_cov: bool = False) -> Prediction:
        """Predict ``k(X, X_fit) a + b``, block by block (at the chosen parameters).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the posterior standard deviation of the latent f(x): with
            ``fit_intercept=False`` and ``σ² = 1`` it is scikit-learn's
            ``GaussianProcessRegressor(kernel, alpha=alpha_, optimizer=None)``; here
            ``σ² = sigma2_`` (and, with an intercept, its flat-prior uncertainty is included; see
            :mod:`bigkernel.numerics.posterior`). The first call factors ``K + αI`` (kept with the
            estimator, not saved); above :data:`~bigkernel.solvers.budget.DENSE_POSTERIOR_MAX_N` points (or when the n × n
            matrix does not fit half the memory budget) the variances come from batched CG solves
            instead — weighted fits and ``return_cov`` included. ``sigma2_`` is known at every n.
        return_cov : bool, default=False
            Also return the posterior covariance at the points (at most
            :data:`~bigkernel.numerics.posterior.COV_MAX_ROWS`).

        Returns
        -------
        y_mean : ndarray, or lazy dask array for dask input, of shape (n_samples,) or
            (n_samples, n_targets)
        y_std : the same shape, only with ``return_std``
        y_cov : ndarray of shape (n_samples, n_samples) or (n_samples, n_samples, n_targets),
            only with ``return_cov``
        """
        check_is_fitted(self, "dual_coef_")
        if is_precomputed(self.kernel):
            if return_std or return_cov:
                raise DataError(
                    "return_std / return_cov need the kernel at new points and k(x, x); a precomputed kernel "
                    "gives only k(X, X_fit): use the kernel by name (or a Kernel object) for the posterior"
                )
            X = gram_input(X, "predict", self.n_features_in_)
            return self._predict_with(X, self._model(), single=self.dual_coef_.ndim == 1)
        exp = self._expansion
        scaled = getattr(self, "scaler_mean_", None) is not None and self.standardize
        return predict_output(
            self, X, mean_model=self._model(), single=self.dual_coef_.ndim == 1, return_std=return_std,
            return_cov=return_cov, posterior=self._exact_posterior, coef=exp.coef, intercept=exp.intercept,
            transform=_Scaler(self.scaler_mean_, self.scaler_scale_) if scaled else None,
        )  # fmt: skip

    def _exact_posterior(self):
        """The unit-variance posterior at ``alpha_`` (built once, kept with the estimator)."""
        key = ("posterior", float(self.alpha_), bool(self.fit_intercept))
        cached = self.__dict__.get("_posterior_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        tiler = self._expansion.tiler
        n = tiler.n
        sw = getattr(self, "posterior_weights_", None)
        if (
            n <= limits.DENSE_POSTERIOR_MAX_N
            and 8 * n * n <= resolve_memory_budget(getattr(self, "memory_budget", None)) // 2
        ):
            post = DensePosterior(tiler, self.alpha_, self.fit_intercept, sample_weight=sw)
        else:
            post = self._cg_posterior(sw)
        self._posterior_cache = (key, post)
        return post

    def _cg_posterior(self, sample_weight: np.ndarray | None = None) -> CGPosterior:
        """Batched CG over an in-process Gram operator (the cache takes half the budget), with a
        randomly pivoted Cholesky preconditioner of the fit's default rank (of ``K``; scaled by
        the weights' square roots in :class:`CGPosterior`)."""
        tiler = self._expansion.tiler
        n = tiler.n
        budget = resolve_memory_budget(getattr(self, "memory_budget", None))
        gram = LocalGram(tiler.kernel, tiler.X, budget // 2)
        rank = min(n, default_exact_rank(n, budget))
        factor = rpcholesky_factor(gram.columns, gram.diag(), rank, random_state=int_seed(self.random_state)).L
        logger.info("posterior variance of the exact path by CG: n=%s, preconditioner rank %d", f"{n:,}", rank)
        return CGPosterior(gram, self.alpha_, self.fit_intercept, factor=factor, tol=min(getattr(self, "tol", 1e-6), 1e-8),
                           max_iter=getattr(self, "max_iter", None), sample_weight=sample_weight)  # fmt: skip

    # ----------------------------------------------------------------- persistence
    def _saved_parts(self) -> dict:
        """The fitted parts a dual solver's ``state`` reads from its fixed parts: the training
        points (None for a precomputed K), the kept columns of a precomputed K, the kernel, the
        scaling (when standardized) and the training range."""
        scaled = getattr(self, "scaler_mean_", None) is not None and self.standardize
        return {
            "X": self.X_fit_, "kernel": self.kernel_,
            "keep": getattr(self._expansion.tiler, "keep", None) if self.X_fit_ is None else None,
            "scaler": (self.scaler_mean_, self.scaler_scale_) if scaled else None,
            "data_range": (getattr(self, "data_min_", None), getattr(self, "data_max_", None)),
        }  # fmt: skip

    def _saved_solution(self) -> dict:
        """The :class:`~bigkernel.solvers.base.Solution` fields of the fitted model (its
        ``details`` aside): dual coefficients (n, k), intercept (k,), α and the α path."""
        return {
            "coef": self.dual_coef_.reshape(self.n_samples_fit_, -1),
            "intercept": np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64)),
            "alpha": self.alpha_, "alphas": self.alphas_,
        }  # fmt: skip

    def _dual_facts(self) -> dict:
        """The :class:`~bigkernel.solvers.dual_state.DualFacts` fields of the fitted model."""
        bayes = Bayes(
            getattr(self, "sigma2_", None), getattr(self, "log_marginal_likelihood_", np.nan),
            getattr(self, "log_marginal_likelihood_path_", None), getattr(self, "evidence_", None),
        )  # fmt: skip
        return {
            "tiler": self._expansion.tiler, "single": self.dual_coef_.ndim == 1, "n_samples": self.n_samples_fit_,
            "n_features_in": self.n_features_in_, "df": self.df_, "df_path": self.df_path_, "gcv": self.gcv_,
            "solver_info": self.solver_info_, "bayes": bayes,
        }  # fmt: skip

    def _set_saved(self, fixed, solution) -> None:
        """The fitted attributes every dual model reads back from its solver's ``from_state``
        (the estimator sets the rest and the expansion)."""
        f = solution.details
        self.alpha_, self.alphas_ = solution.alpha, solution.alphas
        self.df_, self.df_path_, self.gcv_ = f.df, f.df_path, f.gcv
        self.solver_info_ = f.solver_info
        self.n_features_in_, self.n_samples_fit_ = f.n_features_in, f.n_samples
        if fixed.scaler is not None:
            self.scaler_mean_, self.scaler_scale_ = fixed.scaler
        self._set_range(*fixed.data_range)
        self._set_bayes(f.bayes)

    def _set_bayes(self, bayes: Bayes) -> None:
        """``evidence_``, ``sigma2_`` and the evidence values of a saved model (NaN and no
        posterior when the store has no σ²)."""
        self.evidence_ = bayes.evidence
        self._saved_without_posterior = bayes.sigma2 is None
        if bayes.sigma2 is None:
            self.sigma2_ = self.log_marginal_likelihood_ = np.nan
            self.log_marginal_likelihood_path_ = None
            return
        self.sigma2_, self.log_marginal_likelihood_ = bayes.sigma2, bayes.lml
        self.log_marginal_likelihood_path_ = bayes.lml_path


class _Scaler:
    """``(Z − mean) / scale``: the standardization of the dual models, picklable."""

    def __init__(self, mean: np.ndarray, scale: np.ndarray) -> None:
        self.mean, self.scale = mean, scale

    def __call__(self, Z: np.ndarray) -> np.ndarray:
        return (np.asarray(Z, dtype=np.float64) - self.mean) / self.scale


class _Standardized:
    """``f((Z − mean) / scale)``: a picklable wrapper of a numpy predictor."""

    def __init__(self, model, mean: np.ndarray, scale: np.ndarray) -> None:
        self.model, self.mean, self.scale = model, mean, scale

    @property
    def n_outputs(self) -> int:
        return self.model.n_outputs

    def __call__(self, Z: np.ndarray) -> np.ndarray:
        return self.model(standardize_rows(Z, self.mean, self.scale))
