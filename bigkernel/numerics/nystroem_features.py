"""Nyström feature maps (layer 1: numpy only).

With m landmarks ``Z`` drawn from the data, ``φ(x) = K_mmᵖ^(-1/2) k_m(x)`` where
``k_m(x) = k(Z, x)`` and ``K_mm = k(Z, Z)``, so ``φ(x)ᵀφ(x') = k_m(x)ᵀ K_mm⁺ k_m(x')``: the
Nyström approximation of ``k``. Eigen-directions of ``K_mm`` below round-off are dropped
(the pseudo-inverse square root), so the map may have fewer than m components.

A :class:`NystroemMap` offers the interface of a random-feature map
(``transform_unscaled``, ``scale``, ``n_components``, ``n_features_in``), so the streamed
one-pass statistics, the primal eigen path and the predictions apply unchanged.

Landmarks (:func:`select_landmarks`): ``"uniform"`` rows without replacement, or
``"rpcholesky"``: randomly pivoted Cholesky pivots among a uniform pool of candidates (pivots
follow the residual diagonal, so clusters and outliers get landmarks in proportion to the
approximation error they carry — better than uniform at the same m).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from bigkernel._sparse import array_or_sparse, as_block, is_sparse, model_arrays, scale_columns, to_dense
from bigkernel.errors import DataError, DeviceError, ParameterError
from bigkernel.kernels.base import Kernel
from bigkernel.kernels.factory import kernel_from_dict
from bigkernel.numerics.gram_tiles import GramTiler
from bigkernel.numerics.precond import rpcholesky_factor

__all__ = ["LANDMARK_METHODS", "NystroemMap", "landmark_pool_size", "select_landmarks"]

LANDMARK_METHODS = ("uniform", "rpcholesky")
#: RPCholesky chooses m pivots among this many candidates per landmark (at least 2000 in all)
POOL_FACTOR = 4


@dataclass(frozen=True, eq=False)
class NystroemMap:
    """Nyström features of ``kernel`` with landmarks ``landmarks``.

    Build one with :meth:`from_landmarks`; restore one with :meth:`from_arrays`.

    Attributes
    ----------
    kernel : Kernel
    landmarks : ndarray or scipy.sparse CSR matrix of shape (m, d)
        In the (standardized, if ``mean``/``std`` are set) input space; sparse when drawn
        from sparse X (saved as CSR parts).
    projection : ndarray of shape (m, r) or None
        ``U Λ^(-1/2)`` over the eigenpairs of ``K_mm`` above round-off; None for the raw
        kernel features ``φ(x) = k(x, Z)`` (:meth:`raw`: the centres of the CG solver, whose
        coefficients β carry the ``K_mm`` metric themselves).
    mean, std : ndarray of shape (d,) or None
        Input standardization applied before the kernel.
    params : dict
        Description (landmark method, seed) for the metadata.
    """

    kernel: Kernel
    landmarks: np.ndarray
    projection: np.ndarray | None
    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    params: dict[str, Any] = field(default_factory=dict)
    scale: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "_tiler", GramTiler(self.kernel, self.landmarks))

    @property
    def n_features_in(self) -> int:
        return self.landmarks.shape[1]

    @property
    def n_components(self) -> int:
        return self.landmarks.shape[0] if self.projection is None else self.projection.shape[1]

    @property
    def tiler(self) -> GramTiler:
        """The landmarks' :class:`GramTiler` (its rbf path gives the device panels their
        augmented points)."""
        return self._tiler

    def kernel_inputs(self, X: np.ndarray) -> np.ndarray:
        """``X`` as the kernel sees it (standardized when the map is; features checked)."""
        return self._inputs(X)

    @property
    def is_raw(self) -> bool:
        """Whether the features are the raw kernel columns ``k(x, Z)`` (no projection)."""
        return self.projection is None

    @classmethod
    def raw(cls, kernel: Kernel, landmarks: ArrayLike, *, params=None) -> NystroemMap:
        """The map ``φ(x) = k(x, Z)`` of centres ``Z`` (no ``K_mm`` eigendecomposition: the
        M³ step the CG solver never needs)."""
        return cls(kernel, as_block(landmarks), None, None, None, dict(params or {}))

    @classmethod
    def from_landmarks(
        cls, kernel: Kernel, landmarks: ArrayLike, *, mean=None, std=None, params=None, rtol: float | None = None
    ) -> NystroemMap:
        """Map from landmarks (already standardized when ``mean``/``std`` are given)."""
        Z = as_block(landmarks)
        W = GramTiler(kernel, Z).dense()
        w, U = np.linalg.eigh(0.5 * (W + W.T))
        top = max(float(w[-1]), 0.0)
        cut = (rtol if rtol is not None else Z.shape[0] * np.finfo(float).eps * 10) * top
        keep = w > cut
        if not keep.any():
            raise DataError("the landmarks' Gram matrix is zero: the kernel gives no features")
        P = U[:, keep] / np.sqrt(w[keep])
        return cls(kernel, Z, P[:, ::-1].copy(), mean, std, dict(params or {}))

    def _inputs(self, X: np.ndarray) -> np.ndarray:
        if X.ndim != 2 or X.shape[1] != self.n_features_in:
            raise DataError(
                f"X has {X.shape[1] if X.ndim == 2 else X.shape} features, but the feature map "
                f"expects {self.n_features_in}; pass data with the same columns as in fit"
            )
        if self.mean is None:
            return X
        if is_sparse(X) and not np.any(self.mean):
            return scale_columns(X, 1.0 / self.std)  # scaled without centring: stays sparse
        return (to_dense(X).astype(np.float64) - self.mean) / self.std

    def transform_unscaled(
        self, X: np.ndarray, dtype: DTypeLike = np.float64, out: np.ndarray | None = None
    ) -> np.ndarray:
        """``φ(X)``, shape (n, n_components), in ``dtype`` (the scale is 1); written into ``out``
        (an (n, n_components) array or view) when given.

        numpy only for now: the kernel's cross block (:class:`GramTiler`) is host code, so an
        array of another namespace (a GPU's) is refused with :class:`DeviceError` rather than
        copied to the host behind the caller's back.
        """
        if not isinstance(X, np.ndarray) and not is_sparse(X) and hasattr(X, "__array_namespace__"):
            raise DeviceError(
                f"Nyström features are computed on the host (numpy) only; got a {type(X).__module__} "
                "array. Use device='cpu' for NystroemRidge, or RandomFeatureRidge on the GPU"
            )
        dtype = np.dtype(dtype)
        C = self._tiler.cross(self._inputs(X), dtype=dtype)
        if self.projection is None:
            if out is None:
                return C
            out[...] = C
            return out
        return np.matmul(C, self._projection_as(dtype), out=out)

    transform = transform_unscaled

    def _projection_as(self, dtype: np.dtype) -> np.ndarray:
        cache = self.__dict__.setdefault("_cast_cache", {})
        if dtype not in cache:
            cache[dtype] = self.projection.astype(dtype)
        return cache[dtype]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_cast_cache", None)
        return state

    def standardized(self, mean: np.ndarray, std: np.ndarray) -> NystroemMap:
        """The same map, applied to ``(x − mean) / std``."""
        return NystroemMap(
            self.kernel, self.landmarks, self.projection, np.asarray(mean, float), np.asarray(std, float), self.params
        )

    # ------------------------------------------------------------------ persistence
    def to_metadata(self) -> dict[str, Any]:
        """JSON-able description (arrays are saved separately)."""
        meta = {
            "kind": "nystroem", "kernel": self.kernel.to_dict(), "n_features_in": self.n_features_in,
            "n_components": self.n_components, "n_landmarks": int(self.landmarks.shape[0]),
            "standardized": self.mean is not None, "params": self.params,
        }  # fmt: skip
        if self.projection is None:
            meta["projection"] = "none"  # only raw maps carry the key: v1 metadata unchanged
        return meta

    def arrays(self) -> dict[str, np.ndarray]:
        out = model_arrays("nystroem_landmarks", self.landmarks)
        if self.projection is not None:
            out["nystroem_projection"] = self.projection
        if self.mean is not None:
            out["nystroem_mean"], out["nystroem_std"] = self.mean, self.std
        return out

    @classmethod
    def from_arrays(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> NystroemMap:
        """Rebuild a map from :meth:`to_metadata` and :meth:`arrays` output."""
        Z = as_block(array_or_sparse("nystroem_landmarks", arrays))
        raw = meta.get("projection") == "none"
        P = None if raw else np.asarray(arrays["nystroem_projection"], float)
        if raw and (Z.ndim != 2 or Z.shape[0] != int(meta["n_components"])):
            raise DataError(f"Nyström centres {Z.shape} do not agree with n_components={meta['n_components']}")
        if not raw and (Z.ndim != 2 or P.shape != (Z.shape[0], int(meta["n_components"]))):
            raise DataError(
                f"Nyström landmarks {Z.shape} and projection {P.shape} do not agree: expected (m, d) "
                f"and (m, {meta['n_components']})"
            )
        return cls(
            kernel_from_dict(meta["kernel"]),
            Z,
            P,
            arrays.get("nystroem_mean"),
            arrays.get("nystroem_std"),
            dict(meta.get("params", {})),
        )


def landmark_pool_size(n: int, m: int, method: str) -> int:
    """Candidate rows to draw: ``m`` (uniform) or ``max(POOL_FACTOR·m, 2000)`` (rpcholesky)."""
    if method == "uniform":
        return min(n, m)
    return min(n, max(POOL_FACTOR * m, 2000))


def select_landmarks(kernel: Kernel, pool: np.ndarray, m: int, method: str, *, random_state=None) -> np.ndarray:
    """Rows of ``pool`` (a uniform sample of the data) used as landmarks, shape (≤ m, d).

    ``"uniform"`` keeps the first ``m`` pool rows; ``"rpcholesky"`` keeps the RPCholesky pivots
    of the pool's Gram matrix (columns computed on demand; memory ``O(pool · m)``), or the
    uniform rows when the kernel's diagonal is 0 (additive_chi2: no pivot has any weight).
    """
    if method not in LANDMARK_METHODS:
        raise ParameterError(f"landmarks must be one of {list(LANDMARK_METHODS)}, found {method!r}")
    pool = as_block(pool)
    if method == "uniform" or pool.shape[0] <= m:
        return pool[:m]
    tiler = GramTiler(kernel, pool)
    diag = tiler.diag()
    if not np.any(diag > 0):  # k(x, x) = 0 everywhere (additive_chi2): nothing to pivot on
        return pool[:m]
    factor = rpcholesky_factor(tiler.columns, diag, m, random_state=random_state)
    return pool[np.sort(factor.pivots)]
