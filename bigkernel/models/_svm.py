"""The SVM losses of the feature classifiers (``loss="squared_hinge"`` / ``"hinge"``): the
primal SVM of :func:`bigkernel.solvers.primal_svm.fit_primal_svm` fitted inside the classifier's
regressor (its feature map, standardisation, predict and saved state are reused; only the
coefficients come from the SVM instead of the least-squares path).

Penalty scaling: bigkernel's ``Σ cᵢ L(yᵢ f(xᵢ)) + α‖β‖²`` is scikit-learn's
``LinearSVC(C=1/(2α))`` on the features, except that the intercept here is not penalised.
"""

from __future__ import annotations

from numbers import Real
from typing import Any, ClassVar

import numpy as np

from bigkernel.data.sources import Dataset
from bigkernel.errors import ParameterError
from bigkernel.models._base import COUNT, POSITIVE, Weights
from bigkernel.models._classifier_base import _kept_rows
from bigkernel.models.random_features import feature_block_rows
from bigkernel.solvers.primal_svm import fit_primal_svm
from bigkernel.validation import Options

#: the losses the primal SVM serves (the feature classifiers' ``loss`` beside "squared_error")
SVM_LOSSES = ("squared_hinge", "hinge")
#: the classes that serve them (named by the errors of the classifiers that do not)
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


class _RowsOf:
    """Row weights of a row partition: 1 for the kept groups' rows, 0 otherwise."""

    def __init__(self, partition) -> None:
        self.partition = partition

    def __call__(self, start: int, stop: int) -> np.ndarray:
        g = np.asarray(self.partition.groups(start, stop))
        return np.isin(g, self.partition.keep)[np.newaxis].astype(np.float64)

    def __dask_tokenize__(self):
        from dask.base import tokenize

        return ("bigkernel._RowsOf", tokenize(self.partition))


def fit_svm_regressor(reg, ds: Dataset, weights: Weights | None, *, loss: str, tol: float, max_iter: int):
    """Fit ``reg`` (a :class:`~bigkernel.RandomFeatureRidge` or :class:`~bigkernel.NystroemRidge`,
    unfitted) as a primal SVM on ``ds`` (its ``y`` the ±1 targets); returns ``reg``.

    The feature map (and the standardisation pre-pass) is the regressor's own; the SVM takes
    ``n_iter_`` passes after it. The attributes of the α path have no SVM meaning: ``df_`` and
    ``gcv_`` are NaN, ``alphas_`` is ``[alpha]``, ``spectrum_`` and the training range are None.
    """
    reg._check_params()
    reg._fit_scaler(ds, weights)
    fmap = reg._make_map(ds, weights) if hasattr(reg, "_make_map") else reg._make_feature_map(ds.X.shape[1])
    row_w = _RowsOf(weights) if hasattr(weights, "groups") else weights
    Y = ds.y if ds.y.ndim == 2 else ds.y[:, np.newaxis]
    dtype = str(np.dtype(reg.dtype))
    sol = fit_primal_svm(
        ds, fmap, Y, weights=row_w, alpha=float(reg.alpha), loss=loss, fit_intercept=reg.fit_intercept,
        tol=tol, max_iter=max_iter, dtype=dtype, block_rows=feature_block_rows(fmap.n_components, dtype),
    )  # fmt: skip
    kept = _kept_rows(weights, ds.X.shape[0])
    single = ds.y.ndim == 1
    reg.feature_map_ = fmap
    reg.coef_ = sol.coef[:, 0].copy() if single else sol.coef.T.copy()
    reg.intercept_ = float(sol.intercept[0]) if single else sol.intercept.copy()
    reg.alpha_, reg.alphas_ = float(reg.alpha), np.array([float(reg.alpha)])
    reg.df_, reg.df_path_ = float("nan"), np.array([np.nan])
    reg.gcv_ = np.full(1 if single else (1, Y.shape[1]), np.nan)
    reg.spectrum_ = None
    reg.n_samples_fit_ = int(ds.X.shape[0] if kept is None else np.count_nonzero(kept))
    reg.n_features_in_ = ds.X.shape[1]
    reg._set_range(None, None)
    reg.n_iter_ = sol.n_passes
    reg.svm_ = sol
    return reg


class _PrimalSVMMixin:
    """``loss="squared_hinge"`` / ``"hinge"`` for a feature classifier: the solve step and the
    SVM's diagnostics (``n_iter_`` passes, ``converged_``, ``dual_gap_``) in the saved state."""

    _svm_constraints: ClassVar[dict[str, list]] = SVM_CONSTRAINTS

    def _check_params(self) -> None:
        super()._check_params()
        check_svm_alpha(self)

    def _solve(self, ds: Dataset, weights: Weights | None):
        if self.loss not in SVM_LOSSES:
            return super()._solve(ds, weights)
        return fit_svm_regressor(
            self._make_regressor(), ds, weights, loss=self.loss, tol=self.tol, max_iter=self.max_iter
        )

    def _set_inner(self, est) -> None:
        super()._set_inner(est)
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

    def _get_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        attrs, arrays = super()._get_state()
        if hasattr(self, "dual_gap_"):
            attrs["svm"] = {"n_iter": self.n_iter_}
            arrays = {**arrays, "svm_converged": self.converged_.astype(np.int8), "svm_gap": self.dual_gap_}
        return attrs, arrays

    def _set_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        svm: dict[str, Any] | None = attrs.get("svm")
        if svm is not None:
            converged, gap = arrays.pop("svm_converged"), arrays.pop("svm_gap")
        super()._set_state(attrs, arrays)
        if svm is not None:
            self._set_svm_facts(svm["n_iter"], np.asarray(converged, dtype=bool), gap)
