"""RandomFeatureClassifier and NystroemClassifier: one-vs-rest least squares on ±1 targets
through the streamed one-pass primal path (:mod:`bigkernel.models._classifier_base`)."""

from __future__ import annotations

from typing import Any, ClassVar

from numpy.typing import ArrayLike, DTypeLike

from bigkernel.errors import ParameterError
from bigkernel.io.model_store import register_model
from bigkernel.models._base import DeviceLike, Floats, KernelLike, RandomStateLike
from bigkernel.models._classifier_base import CLASSIFIER_CONSTRAINTS, _ClassifierBase, store_init_params
from bigkernel.models._svm import SVM_LOSSES, _PrimalSVMMixin
from bigkernel.models.nystroem import NystroemRidge
from bigkernel.models.random_features import RandomFeatureRidge

__all__ = ["NystroemClassifier", "RandomFeatureClassifier"]

#: what the fitted classifiers add to their regressor's attributes (shared docstring text)
_FITTED_DOC = """
    classes_ : ndarray of shape (n_classes,)
        The distinct labels, sorted (any dtype: ints, strings, bools).
    class_weight_ : ndarray of shape (n_classes,)
        The weight of each class used (1 without ``class_weight``).
    estimator_ : regressor
        The regressor fitted on the ±1 targets (one column per class; one for two classes).
    coef_ : ndarray of shape (n_components,) or (n_classes, n_components)
    intercept_ : float or ndarray of shape (n_classes,)
    alpha_, alphas_, df_, gcv_, n_samples_fit_, n_features_in_
        As in the regressor (GCV of the least-squares fit to the ±1 targets; NaN for the SVM
        losses, which have no α path).
    n_iter_ : int
        Passes over the data of the fit (1 for ``"squared_error"``; the SVM's passes).
    converged_, dual_gap_ : ndarray of shape (n_columns,)
        SVM losses only: per ±1 column, whether it met ``tol`` and its relative duality gap.
"""


@register_model
class RandomFeatureClassifier(_PrimalSVMMixin, _ClassifierBase):
    """Kernel classifier on random Fourier features: least squares on ±1 targets, one-vs-rest.

    The labels become one ±1 target column per class (one column for two classes) and
    :class:`~bigkernel.RandomFeatureRidge` is fitted on them in its one streamed pass — the
    k extra target columns add only Φᵀy products to the pass. Every α of a list (or
    ``"gcv"``) comes from the one eigendecomposition, chosen by GCV averaged over classes.

    Parameters
    ----------
    kernel, gamma, length_scale, nu, degree, coef0, n_components, sampler, form, alpha,
    fit_intercept, random_state, dtype, chunk_rows, standardize, device
        As in :class:`~bigkernel.RandomFeatureRidge`.
    class_weight : dict, "balanced" or None, default=None
        Weight per class, multiplying ``sample_weight``: a dict ``{label: weight}``, or
        ``"balanced"``: ``n / (n_classes · count(class))`` (scikit-learn's rule).
    loss : {"squared_error", "squared_hinge", "hinge"}, default="squared_error"
        ``"squared_error"``: least squares on ±1 targets (regularised least-squares
        classification, one pass, every α). ``"squared_hinge"`` / ``"hinge"``: the kernel SVM,
        solved in the primal on the features, one pass per Newton iteration (``"hinge"`` on
        small data, features kept in memory and n ≤ 10·D: in the dual, one pass; see
        :doc:`/guide/classification`, "The SVM"); the objective
        ``Σ cᵢ L(yᵢ f(xᵢ)) + α‖β‖²`` is scikit-learn's ``LinearSVC(C=1/(2α))`` on the same
        features, with an unpenalised intercept. ``alpha`` must then be one number.
    tol : float, default=1e-4
        SVM losses: stop when the relative duality gap of the exact problem is ≤ ``tol``
        (which bounds ``α‖β − β*‖² ≤ tol·P``). Unused by ``"squared_error"``.
    max_iter : int, default=100
        SVM losses: the most passes over the data (``n_iter_`` reports those taken); the
        hinge's dual on small data: at most ``max_iter · n`` SMO steps.

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    feature_map_ : FeatureMap
    """

    __doc__ += _FITTED_DOC

    def __init__(
        self,
        kernel: str = "rbf",
        *,
        gamma: float | None = None,
        length_scale: float | ArrayLike | None = None,
        nu: float | None = 1.5,
        degree: int = 3,
        coef0: float = 1,
        n_components: int = 100,
        sampler: str = "iid",
        form: str = "cos",
        alpha: float | Floats | str = 1.0,
        fit_intercept: bool = True,
        random_state: RandomStateLike = None,
        device: DeviceLike = "cpu",
        dtype: DTypeLike = "float64",
        chunk_rows: int | None = None,
        standardize: bool = False,
        class_weight: dict | str | None = None,
        loss: str = "squared_error",
        tol: float = 1e-4,
        max_iter: int = 100,
        verbose: int = 0,
    ) -> None:
        store_init_params(self, locals())

    _regressor: ClassVar[type] = RandomFeatureRidge
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **RandomFeatureRidge._parameter_constraints,
        **CLASSIFIER_CONSTRAINTS,
        **_PrimalSVMMixin._svm_constraints,
    }

    def _check_params(self) -> None:
        super()._check_params()
        self.make_regressor()._check_rules()  # the kernel must have a random-feature sampler

    @property
    def feature_map_(self):
        """The fitted feature map (the inner regressor's)."""
        return self.estimator_.feature_map_


@register_model
class NystroemClassifier(_PrimalSVMMixin, _ClassifierBase):
    """Kernel classifier on Nyström features: least squares on ±1 targets, one-vs-rest.

    As :class:`RandomFeatureClassifier`, with :class:`~bigkernel.NystroemRidge` inside: any
    exact kernel, landmarks sampled from the (training) rows.

    Parameters
    ----------
    kernel, gamma, degree, coef0, length_scale, nu, kernel_params, n_components, landmarks,
    alpha, fit_intercept, random_state, dtype, chunk_rows, standardize, device
        As in :class:`~bigkernel.NystroemRidge`.
    class_weight : dict, "balanced" or None, default=None
        As in :class:`RandomFeatureClassifier`.
    loss : {"squared_error", "squared_hinge", "hinge"}, default="squared_error"
        ``"squared_error"``: least squares on ±1 targets (regularised least-squares
        classification, one pass, every α). ``"squared_hinge"`` / ``"hinge"``: the kernel SVM,
        solved in the primal on the features, one pass per Newton iteration (``"hinge"`` on
        small data, features kept in memory and n ≤ 10·D: in the dual, one pass; see
        :doc:`/guide/classification`, "The SVM"); the objective
        ``Σ cᵢ L(yᵢ f(xᵢ)) + α‖β‖²`` is scikit-learn's ``LinearSVC(C=1/(2α))`` on the same
        features, with an unpenalised intercept. ``alpha`` must then be one number.
    solver : {"direct", "cg"}, default="direct"
        As in :class:`~bigkernel.NystroemRidge`, for ``loss="squared_error"``: ``"cg"`` fits
        every class's ±1 column (and every α of a list) in the same CG passes, α chosen on the
        held-out ``validation_fraction`` of the rows by the mean squared error averaged over
        the columns. The SVM losses need ``"direct"`` (they solve on the Nyström features
        ``K_mm^(-1/2) k_m(x)``, which the CG solver does not form): refused otherwise.
    tol : float, default=1e-4
        SVM losses: stop when the relative duality gap of the exact problem is ≤ ``tol``
        (which bounds ``α‖β − β*‖² ≤ tol·P``). ``solver="cg"``: the relative residual every
        column must reach. Give 1e-6 (:class:`~bigkernel.NystroemRidge`'s default) when the
        decision values matter, not only the labels: measured on 1,200 digits (M = 300, 10
        classes), 1e-4 took 24 passes and left the decision values within 5e-3 of their scale
        of the direct solution (the same labels), 1e-6 took 29 passes and 1.4e-6. Unused by
        ``"squared_error"`` with ``solver="direct"``.
    max_iter : int, default=100
        SVM losses: the most passes over the data (``n_iter_`` reports those taken); the
        hinge's dual on small data: at most ``max_iter · n`` SMO steps.
        ``solver="cg"``: the most CG iterations (one pass each).
    validation_fraction : float, default=0.1
        ``solver="cg"`` with a list of α: the held-out share of the rows that chooses α.
    memory_budget : int, str or None, default=None
        ``solver="cg"``: the client's memory for the preconditioner (see
        :class:`~bigkernel.NystroemRidge`).

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    feature_map_ : NystroemMap
    residuals_, validation_scores_
        ``solver="cg"``: as in :class:`~bigkernel.NystroemRidge` (one column per class's ±1
        target and α; ``n_iter_`` counts CG iterations).
    """

    __doc__ += _FITTED_DOC

    def __init__(
        self,
        kernel: KernelLike = "rbf",
        *,
        gamma: float | None = None,
        degree: float = 3,
        coef0: float = 1,
        length_scale: float | ArrayLike | None = None,
        nu: float | None = 1.5,
        kernel_params: dict[str, Any] | None = None,
        n_components: int = 100,
        landmarks: str = "rpcholesky",
        alpha: float | Floats | str = 1.0,
        fit_intercept: bool = True,
        random_state: RandomStateLike = None,
        device: DeviceLike = "cpu",
        dtype: DTypeLike = "float64",
        chunk_rows: int | None = None,
        standardize: bool = False,
        class_weight: dict | str | None = None,
        loss: str = "squared_error",
        solver: str = "direct",
        tol: float = 1e-4,
        max_iter: int = 100,
        validation_fraction: float = 0.1,
        memory_budget: float | str | None = None,
        verbose: int = 0,
    ) -> None:
        store_init_params(self, locals())

    _regressor: ClassVar[type] = NystroemRidge
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **NystroemRidge._parameter_constraints,
        **CLASSIFIER_CONSTRAINTS,
        **_PrimalSVMMixin._svm_constraints,
    }

    def _check_params(self) -> None:
        super()._check_params()
        if self.solver == "cg" and self.loss in SVM_LOSSES:
            raise ParameterError(
                f"NystroemClassifier(loss={self.loss!r}, solver='cg'): the SVM losses are solved by Newton passes "
                "on the Nyström features K_mm^(-1/2) k_m(x), which the CG solver never forms; use solver='direct' "
                "for the SVM, or loss='squared_error' with solver='cg'"
            )

    @property
    def feature_map_(self):
        """The fitted feature map (the inner regressor's)."""
        return self.estimator_.feature_map_
