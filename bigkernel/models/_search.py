"""``cv_results_`` and the choice of the best point: moved to :mod:`bigkernel.solvers.search`
(the solvers build the table); the names stay importable from here for the estimators."""

from bigkernel.solvers.search import best_index, cv_results, search_params

__all__ = ["best_index", "cv_results", "search_params"]
