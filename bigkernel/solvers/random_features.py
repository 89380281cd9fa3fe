"""Random features, one pass: the solver behind :class:`~bigkernel.RandomFeatureRidge` (layer 3).

``prepare`` estimates the scaling (``standardize=True``: a light pre-pass over X) and draws
the feature map from the seed — random Fourier features, or for the polynomial kernel the
explicit monomials / a TensorSketch; ``fit`` is the one pass of sums and the primal solve
(:class:`~bigkernel.solvers.primal.OnePassPrimal`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self

import numpy as np

from bigkernel.data.sources import Dataset
from bigkernel.errors import ParameterError
from bigkernel.kernels.registry import check_kernel_name, sampler_problem
from bigkernel.numerics.fourier_features import FeatureMap, make_feature_map
from bigkernel.numerics.polynomial_features import PolynomialFeatureMap, make_polynomial_map
from bigkernel.solvers.primal import OnePassPrimal, PrimalFixed, fit_scaler
from bigkernel.validation import int_seed

logger = logging.getLogger(__name__)

__all__ = [
    "RandomFeatureSolver",
    "RandomFeatureSpec",
    "draw_feature_map",
    "feature_map_arrays",
    "feature_map_from_state",
]


def spec_from_params(cls: type, params: Mapping[str, Any]) -> Any:
    """A spec dataclass ``cls`` from an estimator's ``get_params()`` (its fields only; the
    others — chunking, device, verbose — are not part of what a fit computes)."""
    return cls(**{f.name: params[f.name] for f in fields(cls) if f.name in params})


@dataclass(frozen=True)
class RandomFeatureSpec:
    """What a random-feature fit depends on besides the data (the estimator's parameters).

    ``alpha`` is a number, a list, ``"gcv"`` or ``"evidence"``; ``random_state`` an int, a
    RandomState or None (a seed is drawn from it once per ``prepare``).
    """

    kernel: str = "rbf"
    gamma: float | None = None
    length_scale: Any = None
    nu: float | None = 1.5
    degree: int = 3
    coef0: float = 1
    n_components: int = 100
    sampler: str = "iid"
    form: str = "cos"
    alpha: Any = 1.0
    fit_intercept: bool = True
    random_state: Any = None
    dtype: Any = "float64"
    standardize: bool = False


def draw_feature_map(
    spec: Any,
    n_features: int,
    seed: int,
    gamma: float | None = None,
    length_scale: Any = None,
    scaler: tuple[np.ndarray, np.ndarray] | None = None,
    owner: str = "RandomFeatureRidge",
) -> FeatureMap | PolynomialFeatureMap:
    """The random-feature map of ``spec`` (kernel, n_components, nu, sampler, form, degree,
    coef0) for ``n_features`` columns, ``seed`` and a bandwidth, scaled by ``scaler``."""
    if check_kernel_name(spec.kernel, "random_features").name == "polynomial":
        fmap = _polynomial_map(spec, n_features, seed, gamma, length_scale, owner)
    else:
        fmap = make_feature_map(
            spec.kernel, n_features, spec.n_components, seed, gamma=gamma, length_scale=length_scale,
            nu=spec.nu, sampler=spec.sampler, form=spec.form,
        )  # fmt: skip
    return fmap if scaler is None else fmap.standardized(*scaler)


def _polynomial_map(spec: Any, n_features: int, seed: int, gamma, length_scale, owner: str) -> PolynomialFeatureMap:
    """The explicit monomial map when its ``C(d + degree, degree)`` features fit
    ``n_components`` (the kernel exactly), else a TensorSketch; ``feature_map_.method``
    says which (and it is logged). ``sampler`` and ``form`` do not apply."""
    if length_scale is not None:
        raise ParameterError("the polynomial kernel has no length_scale; give gamma (default 1/n_features)")
    problem = sampler_problem("polynomial", spec.sampler)
    if problem:
        raise ParameterError(problem)
    fmap = make_polynomial_map(n_features, spec.n_components, seed, degree=spec.degree, gamma=gamma, coef0=spec.coef0)
    logger.info("%s: polynomial feature map %s with %d components", owner, fmap.method, fmap.n_components)
    return fmap


def feature_map_arrays(fm: FeatureMap | PolynomialFeatureMap) -> dict[str, np.ndarray]:
    """The saved arrays of a random-feature map (frequencies, or the polynomial map's own)."""
    if isinstance(fm, PolynomialFeatureMap):
        return fm.arrays()
    arrays = {"fmap_weights": fm.weights}
    if fm.offsets is not None:
        arrays["fmap_offsets"] = fm.offsets
    return arrays


def feature_map_from_state(meta: dict, arrays: Mapping[str, np.ndarray]) -> FeatureMap | PolynomialFeatureMap:
    """Inverse of ``to_metadata()`` + :func:`feature_map_arrays`."""
    if meta.get("kind") == "polynomial":
        return PolynomialFeatureMap.from_arrays(meta, arrays)
    return FeatureMap.from_arrays(meta, arrays["fmap_weights"], arrays.get("fmap_offsets"))


class RandomFeatureSolver(OnePassPrimal):
    """Random-feature ridge in one pass (implements :class:`~bigkernel.solvers.base.Solver`).

    Parameters
    ----------
    spec : RandomFeatureSpec
    device : Device or None
        The estimator's resolved device (None: the CPU), passed down unchanged.
    owner : str
        The estimator's class name, for log lines.
    """

    name: ClassVar[str] = "random_features"

    def __init__(self, spec: RandomFeatureSpec, device: Any = None, owner: str = "RandomFeatureRidge") -> None:
        self.spec, self.device, self.owner = spec, device, owner

    @classmethod
    def from_params(cls, params: Mapping[str, Any], *, device: Any = None, owner: str = "RandomFeatureRidge") -> Self:
        """The solver of an estimator's (validated) ``get_params()``."""
        return cls(spec_from_params(RandomFeatureSpec, params), device, owner)

    def feature_map(
        self, n_features: int, seed: int, gamma: float | None = None, length_scale: Any = None, scaler: Any = None
    ) -> FeatureMap | PolynomialFeatureMap:
        """The map for ``n_features`` columns, ``seed`` and a bandwidth (the spec's kernel)."""
        return draw_feature_map(self.spec, n_features, seed, gamma, length_scale, scaler, self.owner)

    def prepare(self, data: Dataset, weights: Any = None, *, seed: int | None = None) -> PrimalFixed:
        """The scaling (``standardize``) and the feature map a fit on ``data`` draws.

        Parameters
        ----------
        data : Dataset
        weights : RowWeights, row partition or None
            Weights the scaling's moments (one-array row weights only).
        seed : int, optional
            The map's seed; default drawn from the spec's ``random_state``.
        """
        seed = int_seed(self.spec.random_state) if seed is None else seed
        scaler = fit_scaler(data, weights) if self.spec.standardize else None
        fmap = self.feature_map(data.X.shape[1], seed, self.spec.gamma, self.spec.length_scale, scaler)
        return PrimalFixed(fmap, scaler, self.device)

    def map_state(self, fmap: Any) -> dict[str, np.ndarray]:
        """The map's saved arrays (:func:`feature_map_arrays`)."""
        return feature_map_arrays(fmap)

    def map_from_state(self, meta: dict, arrays: Mapping[str, np.ndarray]) -> Any:
        """The map read back (:func:`feature_map_from_state`)."""
        return feature_map_from_state(meta, arrays)
