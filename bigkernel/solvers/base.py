"""The declared interfaces of the solver layer (layer 3): what every fitting path implements,
and what the layers above (estimators, the bootstrap, the model store) may ask of it.

A **solver** is one fitting path — random features (one pass, and its CV variant), Nyström one
pass, exact CG / Cholesky, exact CV (LOO/GCV/evidence), the primal SVM. It is built from an
estimator's ``get_params()`` into a frozen **spec**, and fits in two steps:

``prepare(data, weights) -> fixed``
    everything that is drawn or estimated once and then held fixed — feature map, landmarks /
    centres, scaler, kernel, device. A bootstrap holds the same ``fixed`` for every replicate.
``fit(fixed, data, weights) -> Solution``
    the coefficients, intercept and α path (and the solver's diagnostics).

``state(fixed, solution)`` / ``from_state(attrs, arrays)`` give the model store the JSON
attributes and numeric arrays to save (the store's format is the estimators' public
``get_model_state`` / ``set_model_state``, which call these), and ``replicate_plan`` gives the
bootstrap its replicate tasks. An estimator is a thin shell: validate its parameters → build
the spec → ``prepare`` → ``fit`` → fitted attributes. See docs/dev/adding_a_solver.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, TypeVar, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # typing only: the protocols name these, nothing here runs them
    from dask.delayed import Delayed

    from bigkernel.data.sources import Dataset
    from bigkernel.io.band_store import BootstrapStore
    from bigkernel.numerics.resample import BootstrapWeights

__all__ = ["GramOperator", "ModelStateful", "ReplicatePlan", "Solution", "Solver"]

FixedT = TypeVar("FixedT")


@dataclass(frozen=True)
class Solution:
    """What a solver's ``fit`` returns, whatever the path.

    Attributes
    ----------
    coef : ndarray of shape (p, n_targets)
        Primal coefficients over the p features, or dual coefficients over the p training
        rows (float64).
    intercept : ndarray of shape (n_targets,)
    alpha : float
        The penalty used (the chosen one when a grid was scored).
    alphas : ndarray of shape (n_alphas,)
        The α path scored (one value when α was fixed).
    diagnostics : dict
        JSON-able facts of the fit: passes, iterations, residuals, timings, the reason of a
        choice. Logged and reported; never needed to predict.
    details : object, optional
        The path's own result (``PrimalSolution``, ``DualSolution``, ``SVMSolution``, …) from
        which the estimator sets its path-specific attributes (df, GCV, evidence, posterior).
    """

    coef: np.ndarray
    intercept: np.ndarray
    alpha: float
    alphas: np.ndarray
    diagnostics: dict[str, Any] = field(default_factory=dict)
    details: Any = None


@runtime_checkable
class Solver(Protocol[FixedT]):
    """One fitting path behind one interface.

    Attributes
    ----------
    name : str
        The path's name as the estimators, logs and saved models spell it
        (``"random_features"``, ``"nystroem"``, ``"exact"``, ``"exact_cv"``, ``"primal_svm"``…).
    spec : frozen dataclass
        Everything the fit depends on besides the data, built by :meth:`from_params`.
    """

    name: ClassVar[str]
    spec: Any

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        """The solver for an estimator's (validated) ``get_params()``."""
        ...

    def prepare(self, data: Dataset, weights: Any = None) -> FixedT:
        """Draw or estimate the parts a fit holds fixed (map, centres, scaler, kernel, device)."""
        ...

    def fit(self, fixed: FixedT, data: Dataset, weights: Any = None) -> Solution:
        """Solve with ``fixed`` on ``data`` (optionally row-weighted or partitioned)."""
        ...

    def state(self, fixed: FixedT, solution: Solution) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON attributes and numeric arrays that :meth:`from_state` reads back."""
        ...

    def from_state(self, attrs: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> tuple[FixedT, Solution]:
        """Inverse of :meth:`state`; a damaged state raises ``ValueError``/``KeyError``."""
        ...


@runtime_checkable
class GramOperator(Protocol):
    """``V ↦ K V`` for the Gram matrix of the training points, whatever holds its tiles: in
    memory (:class:`~bigkernel.numerics.gram_tiles.LocalGram`), recomputed and cached on the
    cluster (:class:`~bigkernel.solvers.gram_operator.DistributedGram`), or on a GPU (:class:`~bigkernel.numerics.device_gram.DeviceGram`). CG, the preconditioners and
    the df probes see only this."""

    @property
    def n(self) -> int:
        """Rows (= columns) of K."""
        ...

    def matvec(self, V: Any) -> Any:
        """``K V`` for ``V`` of shape (n,) or (n, k), in float64."""
        ...

    def columns(self, idx: Any) -> Any:
        """``K[:, idx]`` in float64 (low-rank preconditioners)."""
        ...

    def diag(self) -> Any:
        """The diagonal of K."""
        ...

    def info(self) -> dict:
        """JSON-able description: tiles, cache, matvec counts and times."""
        ...

    def close(self) -> None:
        """Free the cached tiles."""
        ...


@runtime_checkable
class ReplicatePlan(Protocol):
    """What :func:`bigkernel.bootstrap` needs from an estimator: it calls the estimator's
    public ``replicate_plan(ds, X_eval, *, seed_entropy, workers)``, which returns one of these
    (the solver builds it). A new solver gets bootstrap support by implementing it.

    Attributes
    ----------
    fingerprint : dict
        JSON-able identity of everything that changes a replicate's values besides the data, the
        seed and the resampling (estimator class and parameters, feature map digest, precision,
        block sizes...). Recorded in the store and compared on resume.
    n_coef : int
        Coefficients per target stored per replicate (0 stores none).
    max_batch_size : int
        Most replicates one batch may hold (memory bound of the plan).

    Notes
    -----
    Optional, for ``interval="prediction"``: a method ``residual_task(ds, seed, capacity) ->
    Delayed`` returning the :class:`~bigkernel.numerics.residuals.ResidualSample` of the fit
    with unit weights. Plans without it serve confidence bands only. Optional
    ``task_per_replicate = True``: a batch runs as one task per replicate (not per chunk).
    """

    fingerprint: dict[str, Any]
    n_coef: int
    max_batch_size: int

    def batch_tasks(
        self,
        ds: Dataset,
        weights: BootstrapWeights,
        store: BootstrapStore,
        after: Sequence[Delayed] = (),
    ) -> list[Delayed]:
        """Delayed tasks, one per replicate of ``weights.replicates``; each one fits its
        replicate, predicts at the evaluation points and calls
        :meth:`BootstrapStore.write_replicate` (flag last). The batch's data pass must not
        start before the ``after`` tasks are done (this bounds the memory of the graph; e.g.
        make the per-chunk tasks depend on them). Must not compute anything."""
        ...


@runtime_checkable
class ModelStateful(Protocol):
    """What the model store (:mod:`bigkernel.io.model_store`) needs from an estimator: its
    fitted state as JSON attributes plus numeric arrays, and back. No pickle."""

    def get_model_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The fitted state: JSON-able attributes and numeric arrays."""
        ...

    def set_model_state(self, attrs: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Set the fitted state read back from a store (``ValueError``/``KeyError`` when damaged)."""
        ...
