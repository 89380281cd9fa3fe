"""RandomFeatureClassifierCV: (γ, α) chosen by K-fold cross-validated accuracy in two passes.

Pass 1 (as :class:`~bigkernel.RandomFeatureRidgeCV`): one feature map per γ, per-fold
statistics of the ±1 targets; each fold's training system is the total minus the fold, and one
eigendecomposition per (γ, fold) gives its coefficients for every α. Accuracy needs per-row
predictions, so pass 2 reads the data once more: per chunk, each row's features under every γ
meet the coefficients of the fold that held it out, for every α at once (one product of
D × (α · classes) columns), and correct predictions are counted per (γ, fold, α). The best
point is refitted from the pass-1 totals: two passes whatever the grid size.
"""

from __future__ import annotations

import logging
from numbers import Integral
from typing import Any, ClassVar

import dask.array as da
import numpy as np
from numpy.typing import DTypeLike

from bigkernel.data.sources import Dataset
from bigkernel.errors import ParameterError
from bigkernel.graph.stream import block_sums_graph, split_row_tasks
from bigkernel.io.model_store import register_model
from bigkernel.kernels.registry import document_kernels
from bigkernel.models._base import GRID, DeviceLike, Grid, RandomStateLike, Weights
from bigkernel.models._classifier_base import CLASSIFIER_CONSTRAINTS, _ClassifierBase, kept_rows, store_init_params
from bigkernel.models.random_features import feature_block_rows
from bigkernel.models.random_features_cv import RandomFeatureRidgeCV
from bigkernel.numerics.cv import FoldDecisions, fold_correct_counts
from bigkernel.numerics.primal import eigen_path
from bigkernel.numerics.splits import FoldSplit
from bigkernel.numerics.sums import sums_precision
from bigkernel.runtime import compute
from bigkernel.validation import Interval

logger = logging.getLogger(__name__)

__all__ = ["RandomFeatureClassifierCV"]


class _WeightedFolds:
    """Fold statistics under row weights: ``(K, rows)`` weights, row i's weight in its fold's
    row and 0 elsewhere; :meth:`folds_of` gives each row's fold (K when its weight is 0)."""

    def __init__(self, split: FoldSplit, values: np.ndarray) -> None:
        self.split, self.values = split, np.asarray(values, dtype=np.float64)

    def __call__(self, start: int, stop: int) -> np.ndarray:
        f = self.folds_of(start, stop)
        return (f[np.newaxis] == np.arange(self.split.n_groups)[:, np.newaxis]) * self.values[np.newaxis, start:stop]

    def folds_of(self, start: int, stop: int) -> np.ndarray:
        return np.where(self.values[start:stop] > 0, self.split.groups(start, stop), self.split.n_groups)

    def __dask_tokenize__(self):
        from dask.base import tokenize

        return ("bigkernel._WeightedFolds", self.split, tokenize(self.values))


@document_kernels("random_features", searched="gamma")
@register_model
class RandomFeatureClassifierCV(_ClassifierBase):
    """Random-feature kernel classifier with (γ, α) chosen by K-fold cross-validated accuracy.

    Least squares on ±1 targets, one-vs-rest (as :class:`~bigkernel.RandomFeatureClassifier`);
    every (γ, α) of the grid is scored in two passes over the data in all (see the module
    docstring): the statistics pass, then one scoring pass that counts each fold's correct
    held-out predictions for every point at once. Folds are a seeded hash of the row index
    (:class:`~bigkernel.numerics.splits.FoldSplit`), independent of the chunking.

    Parameters
    ----------
    kernel : str, default="rbf"
        A random-feature kernel with a bandwidth to search: one of {searched_kernels}.
    gammas, length_scales, alphas : sequence of float, default=None
        The grid, as in :class:`~bigkernel.RandomFeatureRidgeCV`.
    cv : int, default=5
        Number of folds (at least 2).
    nu, degree, coef0, n_components, sampler, form, fit_intercept, random_state, dtype,
    chunk_rows, standardize, device
        As in :class:`~bigkernel.RandomFeatureRidge`.
    class_weight : dict, "balanced" or None, default=None
        Weights the fits (multiplying ``sample_weight``); the score is plain accuracy.
    loss : {"squared_error"}, default="squared_error"

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    class_weight_ : ndarray of shape (n_classes,)
    cv_results_ : dict of ndarray
        Like scikit-learn's: ``params``, ``param_gamma``, ``param_alpha``,
        ``mean_test_score`` (mean over folds of the held-out accuracy), ``std_test_score``,
        ``rank_test_score``, ``split{k}_test_score``, ``df``. Not saved with the model.
    best_params_ : dict
    best_score_ : float
    gamma_, alpha_ : float
        The chosen point.
    estimator_ : RandomFeatureRidgeCV
        Fitted on the ±1 targets at the chosen point (its ``cv_results_`` are the accuracies).
    coef_, intercept_, df_, feature_map_, n_features_in_, n_samples_fit_
        As in :class:`~bigkernel.RandomFeatureClassifier`.
    """

    def __init__(
        self,
        kernel: str = "rbf",
        *,
        gammas: Grid = None,
        length_scales: Grid = None,
        alphas: Grid = None,
        cv: int = 5,
        nu: float | None = 1.5,
        degree: int = 3,
        coef0: float = 1,
        n_components: int = 100,
        sampler: str = "iid",
        form: str = "cos",
        fit_intercept: bool = True,
        random_state: RandomStateLike = None,
        device: DeviceLike = "cpu",
        dtype: DTypeLike = "float64",
        chunk_rows: int | None = None,
        standardize: bool = False,
        class_weight: dict | str | None = None,
        loss: str = "squared_error",
        verbose: int = 0,
    ) -> None:
        store_init_params(self, locals())

    _regressor: ClassVar[type] = RandomFeatureRidgeCV
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **RandomFeatureRidgeCV._parameter_constraints,
        "gammas": GRID,
        "cv": [Interval(Integral, 2, None, closed="left")],
        **CLASSIFIER_CONSTRAINTS,
    }

    def _check_params(self) -> None:
        super()._check_params()
        self.make_regressor()._check_rules()

    def fit_targets(self, ds: Dataset, weights: Weights | None) -> RandomFeatureRidgeCV:
        """Search (γ, α) by cross-validated accuracy in two passes, refit at the best point."""
        inner = self.make_regressor()
        n, d = ds.X.shape
        K = int(self.cv)
        if n < K:
            raise ParameterError(f"cv={K} folds need at least {K} samples, got n_samples={n}")
        seed = inner._seed()
        split = FoldSplit(seed, K)
        values = kept_rows(weights, n)
        parts = split if values is None else _WeightedFolds(split, values)
        inner._fit_scaler(ds)
        gammas = inner._bandwidths(d)
        fmaps = [inner._feature_map(d, seed, gamma=g) for g in gammas]
        (stats,) = compute(inner.stats_graph(ds, fmaps, parts), label="cv-fit")
        eps = sums_precision(self.dtype)
        alphas = [inner._alpha_grid(eigen_path(st.total(), self.fit_intercept, eps)) for st in stats]
        dfs = [eigen_path(st.total(), self.fit_intercept, eps).df(a) for st, a in zip(stats, alphas)]
        acc = self._fold_accuracy(
            ds, fmaps, stats, alphas, split.groups if values is None else parts.folds_of, eps
        )  # (G, K, A)
        nan = [np.full(a.size, np.nan) for a in alphas]
        inner._set_cv_results(gammas, alphas, [a.mean(axis=0) for a in acc], list(acc), nan)
        inner.cv_results_.pop("mean_test_r2")
        inner.cv_results_["df"] = np.concatenate(dfs)
        gi, _ = inner._best_index
        self.cv_results_, self.best_params_, self.best_score_ = inner.cv_results_, inner.best_params_, inner.best_score_
        return inner._refit_best(stats[gi].total(), fmaps, gammas, alphas, ds.y.ndim, eps)

    def _fold_accuracy(self, ds: Dataset, fmaps, stats, alphas, folds_of, eps: float) -> np.ndarray:
        """Held-out accuracy (G, K, A) of every (γ, fold, α): the scoring pass (``folds_of(start,
        stop)``: each row's fold, K or more for rows in none)."""
        if len({a.size for a in alphas}) != 1:
            raise ParameterError("every bandwidth must search the same number of alphas")
        decisions = FoldDecisions.from_folds(
            [(st, a, f.scale) for st, a, f in zip(stats, alphas, fmaps)], self.fit_intercept, eps
        )
        codes = self._codes(ds)
        dtype = str(np.dtype(self.dtype))
        block_rows = feature_block_rows(self.n_components, dtype)
        X, codes = split_row_tasks(ds.X, codes, block_rows)
        graph = block_sums_graph(
            X, codes, fold_correct_counts, fmaps, decisions, folds_of=folds_of, dtype=dtype, block_rows=block_rows
        )
        (counts,) = compute(graph, label="cv-score")
        n = counts[0, :, -1]
        logger.info("scored %d (γ, α) points on %d folds in one pass", counts.shape[0] * (counts.shape[2] - 1), n.size)
        return counts[:, :, :-1] / np.maximum(n, 1.0)[np.newaxis, :, np.newaxis]

    def _codes(self, ds: Dataset) -> da.Array:
        """Class codes (0 … n_classes − 1) of the rows, X's chunks, from the ±1 targets."""
        Y = ds.y
        if Y.ndim == 1:
            return (Y > 0).astype(np.int32)
        return da.argmax(Y, axis=1).astype(np.int32)

    def set_fitted_estimator(self, est: Any) -> None:
        super().set_fitted_estimator(est)
        self.gamma_ = getattr(est, "gamma_", None)  # a loaded inner model: set by set_model_state

    def get_model_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        attrs, arrays = super().get_model_state()
        attrs.update(gamma_=self.gamma_, best_params_=self.best_params_, best_score_=self.best_score_)
        return attrs, arrays

    def set_model_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        super().set_model_state(attrs, arrays)
        # the inner search estimator saves its fit, not the bandwidth it chose
        self.gamma_ = self.estimator_.gamma_ = float(attrs["gamma_"])
        self.best_params_, self.best_score_ = attrs["best_params_"], float(attrs["best_score_"])

    @property
    def feature_map_(self):
        """The fitted feature map (the inner regressor's)."""
        return self.estimator_.feature_map_
