"""ExactKernelClassifier and KernelClassifier: one-vs-rest least squares on ±1 targets with the
exact (blocked CG) solver, or with the solver :meth:`KernelClassifier.choose_solver` picks (the
rule of :func:`~bigkernel.solvers.budget.solver_rule`; :mod:`bigkernel.models._classifier_base`)."""

from __future__ import annotations

from typing import Any, ClassVar

from numpy.typing import ArrayLike

from bigkernel.io.model_store import register_model
from bigkernel.models._base import DeviceLike, Floats, KernelLike, RandomStateLike
from bigkernel.models._classifier_base import CLASSIFIER_CONSTRAINTS, _ClassifierBase, store_init_params
from bigkernel.models._svm import SVM_CONSTRAINTS, refuse_svm_loss
from bigkernel.models.exact import ExactKernelRidge
from bigkernel.models.kernel_ridge import KernelRidge

__all__ = ["ExactKernelClassifier", "KernelClassifier"]


@register_model
class ExactKernelClassifier(_ClassifierBase):
    """Exact kernel classifier: kernel least squares on ±1 targets, one-vs-rest, for n up to ~10⁵.

    The labels become one ±1 target column per class (one for two classes) and
    :class:`~bigkernel.ExactKernelRidge` solves every column and every α in one preconditioned
    CG run over the blocked Gram matrix.

    Parameters
    ----------
    kernel, alpha, gamma, degree, coef0, length_scale, nu, kernel_params, fit_intercept, tol,
    max_iter, preconditioner, rank, memory_budget, dtype, n_probes, standardize, random_state, device
        As in :class:`~bigkernel.ExactKernelRidge`.
    class_weight : dict, "balanced" or None, default=None
        Weight per class, multiplying ``sample_weight`` (see
        :class:`~bigkernel.RandomFeatureClassifier`).
    loss : {"squared_error"}, default="squared_error"
        Least squares on ±1 targets. The hinge losses (``"squared_hinge"``, ``"hinge"``) are
        refused with an error naming the classifiers that serve them
        (:class:`~bigkernel.RandomFeatureClassifier`, :class:`~bigkernel.NystroemClassifier`).

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    class_weight_ : ndarray of shape (n_classes,)
    estimator_ : ExactKernelRidge
        Fitted on the ±1 targets.
    dual_coef_, intercept_, alpha_, alphas_, df_, gcv_, n_iter_, n_samples_fit_, n_features_in_
        As in the regressor.
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
        class_weight: dict | str | None = None,
        loss: str = "squared_error",
        verbose: int = 0,
    ) -> None:
        store_init_params(self, locals())

    _regressor: ClassVar[type] = ExactKernelRidge
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **ExactKernelRidge._parameter_constraints,
        **CLASSIFIER_CONSTRAINTS,
        "loss": SVM_CONSTRAINTS["loss"],  # the hinge losses are named, then refused with the classes serving them
    }

    def _check_params(self) -> None:
        super()._check_params()
        refuse_svm_loss(self)
        self.make_regressor()._check_rules()


@register_model
class KernelClassifier(_ClassifierBase):
    """Kernel classifier with the solver chosen from n and the memory budget, as
    :class:`~bigkernel.KernelRidge` chooses it (the same rule, logged, counting every class
    column of the exact solver's matvecs; with ``"cg"`` every class's ±1 column rides
    the same CG passes).

    Parameters
    ----------
    kernel, alpha, gamma, degree, coef0, length_scale, nu, kernel_params, fit_intercept, solver,
    memory_budget, n_components, landmarks, tol, max_iter, preconditioner, rank, n_probes,
    dtype, standardize, random_state, device
        As in :class:`~bigkernel.KernelRidge`.
    class_weight : dict, "balanced" or None, default=None
        Weight per class, multiplying ``sample_weight``.
    loss : {"squared_error"}, default="squared_error"
        Least squares on ±1 targets. The hinge losses (``"squared_hinge"``, ``"hinge"``) are
        refused with an error naming the classifiers that serve them
        (:class:`~bigkernel.RandomFeatureClassifier`, :class:`~bigkernel.NystroemClassifier`).

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    class_weight_ : ndarray of shape (n_classes,)
    estimator_ : KernelRidge
        Fitted on the ±1 targets; its ``solver_`` and ``solver_reason_`` say which solver ran.
    solver_, solver_reason_ : str
    alpha_, df_, gcv_, intercept_, n_iter_, n_features_in_
        As in the regressor.
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
        class_weight: dict | str | None = None,
        loss: str = "squared_error",
        verbose: int = 0,
    ) -> None:
        store_init_params(self, locals())

    _regressor: ClassVar[type] = KernelRidge
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **KernelRidge._parameter_constraints,
        **CLASSIFIER_CONSTRAINTS,
        "loss": SVM_CONSTRAINTS["loss"],  # the hinge losses are named, then refused with the classes serving them
    }

    def _check_params(self) -> None:
        super()._check_params()
        refuse_svm_loss(self)

    def choose_solver(self, n: int, d: int, n_targets: int) -> tuple[str, str]:
        """The solver a fit on n rows of d features would run, and why (KernelRidge's rule).

        Parameters
        ----------
        n, d : int
            Rows and features of the training data.
        n_targets : int
            ±1 target columns: the number of classes (1 for two classes); the exact solver's
            matvecs count every column.

        Returns
        -------
        solver : {"exact", "nystroem", "cg", "random_features"}
        reason : str
        """
        self._check_params()
        reg = self.make_regressor()
        return reg.choose_solver(n, d, n_targets)

    def make_solver_estimator(self, solver: str, n_samples: int | None = None) -> Any:
        """The unfitted regressor of ``solver`` that fits the ±1 targets, with this classifier's
        parameters (``ExactKernelRidge``, ``NystroemRidge`` or ``RandomFeatureRidge``;
        ``n_samples`` as in :meth:`KernelRidge.make_solver_estimator`)."""
        return self.make_regressor().make_solver_estimator(solver, n_samples)

    def set_fitted_estimator(self, est: Any) -> None:
        super().set_fitted_estimator(est)
        self.solver_, self.solver_reason_ = est.solver_, est.solver_reason_
