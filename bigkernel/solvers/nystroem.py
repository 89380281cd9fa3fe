"""Nyström, one pass: the solver behind :class:`~bigkernel.NystroemRidge` (layer 3).

``prepare`` estimates the scaling (``standardize=True``), builds the kernel and draws the
landmarks — ``n_components`` rows sampled (seeded) among the rows the weights keep, uniform or
randomly pivoted Cholesky pivots of a larger candidate pool — into the map
``φ(x) = K_mm^(-1/2) k_m(x)``; ``fit`` is the one pass of sums and the primal solve, exactly
as for random features (:class:`~bigkernel.solvers.primal.OnePassPrimal`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from bigkernel._sparse import as_block, is_sparse, nonfinite_rows, scale_columns
from bigkernel.data.sources import Dataset
from bigkernel.errors import DataError
from bigkernel.numerics.nystroem_features import NystroemMap, landmark_pool_size, select_landmarks
from bigkernel.runtime import compute
from bigkernel.solvers.exact import build_kernel
from bigkernel.solvers.primal import OnePassPrimal, PrimalFixed, fit_scaler
from bigkernel.solvers.random_features import spec_from_params
from bigkernel.validation import int_seed

logger = logging.getLogger(__name__)

__all__ = ["NystroemSolver", "NystroemSpec", "kernel_of_spec"]

#: the kernel of a spec: the exact solver's construction, so the solvers are comparable
kernel_of_spec = build_kernel


@dataclass(frozen=True)
class NystroemSpec:
    """What a Nyström fit depends on besides the data (the estimator's parameters)."""

    kernel: Any = "rbf"
    gamma: float | None = None
    degree: float = 3
    coef0: float = 1
    length_scale: Any = None
    nu: float | None = 1.5
    kernel_params: Any = None
    n_components: int = 100
    landmarks: str = "rpcholesky"
    alpha: Any = 1.0
    fit_intercept: bool = True
    random_state: Any = None
    dtype: Any = "float64"
    standardize: bool = False


class NystroemSolver(OnePassPrimal):
    """Nyström ridge in one pass (implements :class:`~bigkernel.solvers.base.Solver`).

    Parameters
    ----------
    spec : NystroemSpec
    device : Device or None
        The estimator's resolved device (Nyström features are host code: the CPU).
    """

    name: ClassVar[str] = "nystroem"

    def __init__(self, spec: NystroemSpec, device: Any = None) -> None:
        self.spec, self.device = spec, device

    @classmethod
    def from_params(cls, params: Mapping[str, Any], *, device: Any = None) -> Self:
        """The solver of an estimator's (validated) ``get_params()``."""
        return cls(spec_from_params(NystroemSpec, params), device)

    def prepare(self, data: Dataset, weights: Any = None, *, seed: int | None = None) -> PrimalFixed:
        """The scaling (``standardize``) and the landmarks a fit on ``data`` draws.

        Parameters
        ----------
        data : Dataset
        weights : RowWeights, row partition or None
            Landmarks are drawn among the rows it keeps; one-array weights also weight the
            scaling's moments.
        seed : int, optional
            The landmark seed; default drawn from the spec's ``random_state``.
        """
        scaler = fit_scaler(data, weights) if self.spec.standardize else None
        fmap = self.landmark_map(data, weights, scaler, seed)
        return PrimalFixed(fmap, scaler, self.device)

    def landmark_map(
        self, data: Dataset, weights: Any, scaler: Any = None, seed: int | None = None, *, raw: bool = False
    ) -> NystroemMap:
        """Sample the landmarks from ``data`` (the rows ``weights`` keeps) into the map (``raw``:
        the map ``x ↦ k(x, Z)`` of :meth:`NystroemMap.raw`, without the ``K_mm`` eigenpairs)."""
        spec = self.spec
        n, d = data.X.shape
        kernel = kernel_of_spec(spec, d)
        seed = int_seed(spec.random_state) if seed is None else seed
        rng = np.random.default_rng(seed)
        size = landmark_pool_size(n, spec.n_components, spec.landmarks)
        rows = _sample_rows(rng, n, size, weights)
        (pool,) = compute(data.X[rows], label="landmarks")
        pool = as_block(pool)  # sparse X gives sparse landmarks (CSR)
        if nonfinite_rows(pool) is not None:
            raise DataError("X contains NaN or inf in the rows sampled as Nyström landmarks; remove or impute them")
        if scaler is not None:
            pool = scale_columns(pool, 1.0 / scaler[1]) if is_sparse(pool) else (pool - scaler[0]) / scaler[1]
        pool = pool[rng.permutation(pool.shape[0])]  # sorted for the read; shuffle for "first m"
        Z = select_landmarks(kernel, pool, spec.n_components, spec.landmarks, random_state=rng)
        params = {"landmarks": spec.landmarks, "seed": seed, "pool": int(pool.shape[0])}
        fmap = NystroemMap.raw(kernel, Z, params=params) if raw else NystroemMap.from_landmarks(kernel, Z, params=params)
        logger.info(
            "Nyström map: %d %s landmarks from %d candidates, %d components",
            Z.shape[0],
            spec.landmarks,
            pool.shape[0],
            fmap.n_components,
        )
        return fmap if scaler is None else fmap.standardized(*scaler)

    def map_from_state(self, meta: dict, arrays: Mapping[str, np.ndarray]) -> NystroemMap:
        """The landmark map read back (landmarks, ``K_mm^(-1/2)``, kernel)."""
        return NystroemMap.from_arrays(meta, arrays)


def _sample_rows(rng: np.random.Generator, n: int, size: int, weights: Any) -> np.ndarray:
    """``size`` distinct row indices, uniform among the rows ``weights`` keeps (sorted)."""
    if weights is None:
        return np.sort(rng.choice(n, size=size, replace=False))
    picked: list[int] = []
    seen: set[int] = set()
    # draw in rounds: kept rows are a large fraction in practice (a training split)
    for _ in range(64):
        cand = rng.choice(n, size=min(n, 2 * size), replace=False)
        for i in cand:
            i = int(i)
            if i not in seen and _kept(weights, i):
                seen.add(i)
                picked.append(i)
                if len(picked) == size:
                    return np.sort(np.array(picked))
        if len(seen) >= n:
            break
    if not picked:
        raise DataError("no training rows to draw landmarks from (all rows are held out or weighted 0)")
    return np.sort(np.array(picked))


def _kept(weights: Any, i: int) -> bool:
    if hasattr(weights, "groups"):
        return int(np.asarray(weights.groups(i, i + 1))[0]) in tuple(weights.keep)
    return float(np.asarray(weights(i, i + 1))[0, 0]) > 0
