"""The SVM losses of the feature classifiers (``loss="squared_hinge"`` / ``"hinge"``): the
primal SVM solver (:class:`~bigkernel.solvers.primal_svm.PrimalSVMSolver`) on the feature map
of the classifier's regressor. The regressor draws the map (and its standardisation pre-pass)
and holds the fitted coefficients, so predict and the saved state are the least-squares path's;
only the coefficients come from the SVM.

Penalty scaling: bigkernel's ``Σ cᵢ L(yᵢ f(xᵢ)) + α‖β‖²`` is scikit-learn's
``LinearSVC(C=1/(2α))`` on the features, except that the intercept here is not penalised.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real
from typing import Any, ClassVar

import numpy as np

from bigkernel.data.sources import Dataset
from bigkernel.errors import ParameterError
from bigkernel.models._base import COUNT, POSITIVE, Weights
from bigkernel.models._classifier_base import kept_rows
from bigkernel.models.random_features import feature_block_rows
from bigkernel.numerics.svm_newton import SVMSolution
from bigkernel.solvers.base import Solution
from bigkernel.solvers.primal_svm import SVM_LOSSES, PrimalSVMSolver
from bigkernel.validation import Options

__all__ = ["SVM_CLASSES", "SVM_CONSTRAINTS", "SVM_LOSSES", "check_svm_alpha", "refuse_svm_loss", "svm_solver"]

#: the classes that serve the SVM losses (named by the errors of the classifiers that do not)
SVM_CLASSES = ("RandomFeatureClassifier", "NystroemClassifier")
#: the table entries the SVM adds to a feature classifier's
SVM_CONSTRAINTS: dict[str, list] = {
    "loss": [Options(str, ("squared_error", *SVM_LOSSES))],
    "tol": [POSITIVE],
    "max_iter": [COUNT],
}


def refuse_svm_loss(est) -> None:
    """The error of a classifier that does not serve the SVM losses."""
    if est.loss in SVM_LOSSES:
        raise ParameterError(
            f"{type(est).__name__} fits least squares only (loss='squared_error'); got loss={est.loss!r}. "
            f"The hinge losses are served by {' and '.join(SVM_CLASSES)} (the SVM solved in the primal "
            "on random or Nyström features)"
        )


def check_svm_alpha(est) -> None:
    """An SVM loss needs one penalty: it has no closed-form α path to score by GCV."""
    if est.loss in SVM_LOSSES and not (isinstance(est.alpha, Real) and not isinstance(est.alpha, bool)):
        raise ParameterError(
            f"loss={est.loss!r} needs one number for alpha (the SVM has no one-pass α path for GCV); "
            f"got alpha={est.alpha!r}. Choose α with loss='squared_error' (a list or 'gcv') or a grid search"
        )


def svm_solver(params: Mapping[str, Any], reg) -> PrimalSVMSolver:
    """The primal SVM solver of a feature classifier's ``params``: it draws the feature map of
    ``reg`` (the classifier's unfitted regressor, parameters checked) and carries the
    regressor's resolved device."""

    def make_map(ds: Dataset, weights: Weights | None):
        fixed = reg.make_solver().prepare(ds, weights)  # the feature path's scaling pre-pass, then its map
        reg._set_scaler(fixed.scaler)
        return fixed.fmap

    return PrimalSVMSolver.from_params(
        params, make_map=make_map, block_rows=feature_block_rows, device=getattr(reg, "_device", None)
    )


def set_svm_fit(reg, fixed, solution: Solution, ds: Dataset, weights: Weights | None):
    """Fitted attributes of ``reg`` (the regressor whose map the SVM used) from the SVM's
    ``solution``; returns ``reg``.

    The attributes of the α path have no SVM meaning: ``df_`` and ``gcv_`` are NaN, ``alphas_``
    is ``[alpha]``, ``spectrum_`` and the training range are None. ``svm_`` is the
    :class:`~bigkernel.numerics.svm_newton.SVMSolution`, ``n_iter_`` its passes.
    """
    sol: SVMSolution = solution.details
    single = ds.y.ndim == 1
    kept = kept_rows(weights, ds.X.shape[0])
    reg.feature_map_ = fixed.feature_map
    reg.coef_ = solution.coef[:, 0].copy() if single else solution.coef.T.copy()
    reg.intercept_ = float(solution.intercept[0]) if single else solution.intercept.copy()
    reg.alpha_, reg.alphas_ = float(solution.alpha), np.array(solution.alphas, dtype=np.float64)
    reg.df_, reg.df_path_ = float("nan"), np.array([np.nan])
    reg.gcv_ = np.full(1 if single else (1, solution.coef.shape[1]), np.nan)
    reg.spectrum_ = None
    reg.n_samples_fit_ = int(ds.X.shape[0] if kept is None else np.count_nonzero(kept))
    reg.n_features_in_ = ds.X.shape[1]
    reg._set_range(None, None)
    reg.n_iter_ = sol.n_passes
    reg.svm_ = sol
    return reg


class _PrimalSVMMixin:
    """``loss="squared_hinge"`` / ``"hinge"`` for a feature classifier: the solve step through
    the primal SVM solver, and the SVM's diagnostics (``n_iter_`` passes, ``converged_``,
    ``dual_gap_``) in the saved state (the solver's part of it)."""

    _svm_constraints: ClassVar[dict[str, list]] = SVM_CONSTRAINTS

    def _check_params(self) -> None:
        super()._check_params()
        check_svm_alpha(self)

    def fit_targets(self, ds: Dataset, weights: Weights | None) -> Any:
        """The SVM losses: the primal SVM on the regressor's feature map (validate → spec →
        solver → fitted attributes); ``"squared_error"``: the regressor's one-pass fit."""
        if self.loss not in SVM_LOSSES:
            return super().fit_targets(ds, weights)
        reg = self.make_regressor()
        reg._check_params()  # the regressor's rules, and its device resolved once for this fit
        solver = svm_solver(self.get_params(deep=False), reg)
        fixed = solver.prepare(ds, weights)
        return set_svm_fit(reg, fixed, solver.fit(fixed, ds, weights), ds, weights)

    def set_fitted_estimator(self, est: Any) -> None:
        super().set_fitted_estimator(est)
        sol = getattr(est, "svm_", None)
        if sol is not None:
            self._set_svm_facts(sol.n_passes, sol.converged, sol.gap)
        else:
            self.__dict__.pop("converged_", None)
            self.__dict__.pop("dual_gap_", None)

    def _set_svm_facts(self, n_passes: int, converged, gap) -> None:
        self.n_iter_ = int(n_passes)
        self.converged_ = np.asarray(converged, dtype=bool)
        self.dual_gap_ = np.asarray(gap, dtype=np.float64)

    def get_model_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The classifier's state plus, after an SVM fit, the solver's part (passes,
        convergence and duality gap per ±1 column)."""
        attrs, arrays = super().get_model_state()
        if hasattr(self, "dual_gap_"):
            solver = PrimalSVMSolver(None)  # the layout only: the parameters may have changed since the fit
            k = self.dual_gap_.shape[0]
            sol = SVMSolution(np.zeros((0, k)), np.zeros(k), self.n_iter_, self.converged_, np.full(k, np.nan),
                              self.dual_gap_)  # fmt: skip
            svm_attrs, svm_arrays = solver.state(None, solver.solution(sol))
            attrs.update(svm_attrs)
            arrays = {**arrays, **svm_arrays}
        return attrs, arrays

    def set_model_state(self, attrs: Mapping[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Inverse of :meth:`get_model_state`."""
        svm = None
        if attrs.get("svm") is not None:
            _, solution = PrimalSVMSolver(None).from_state(attrs, arrays)
            svm = solution.details
            arrays.pop("svm_converged"), arrays.pop("svm_gap")
        super().set_model_state(attrs, arrays)
        if svm is not None:
            self._set_svm_facts(svm.n_passes, svm.converged, svm.gap)
