"""Stationary exact kernels, functions of ``x − y`` (layer 1: pure numpy): rbf, laplacian,
matern, periodic and constant.

Their names, parameters and allowed values are declared in :mod:`bigkernel.kernels.registry`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from bigkernel._sparse import is_sparse
from bigkernel.errors import DataError, ParameterError
from bigkernel.kernels._blocks import (
    _as_2d,
    _dists,
    _feature_scaler,
    _finish,
    _length_scale,
    _ones_diag,
    _positive,
    _sq_dists,
    manhattan,
)
from bigkernel.kernels.base import Kernel
from bigkernel.kernels.registry import kernel_spec

__all__ = ["RBF", "Constant", "Laplacian", "Matern", "Periodic"]


@dataclass(frozen=True, eq=False)
class RBF(Kernel):
    """Gaussian kernel ``exp(−½ (x−y)ᵀ A (x−y))``.

    Give exactly one of

    * ``gamma``: ``A = 2γI``, i.e. ``exp(−γ‖x−y‖²)`` (scikit-learn's ``rbf_kernel``);
    * ``length_scale``: a float ℓ (``γ = 1/(2ℓ²)``) or one ℓ per feature (ARD,
      ``A = diag(ℓ)⁻²``, as ``sklearn.gaussian_process.kernels.RBF``);
    * ``precision``: a symmetric PSD ``(d, d)`` matrix ``A``.

    Parameters
    ----------
    gamma : float, optional
    length_scale : float or sequence of float, optional
    precision : array-like of shape (d, d), optional
    """

    gamma: float | None = None
    length_scale: float | tuple[float, ...] | None = None
    precision: tuple[tuple[float, ...], ...] | None = None
    _transform: np.ndarray | None = field(default=None, init=False, repr=False)

    name: ClassVar[str] = "rbf"
    stationary: ClassVar[bool] = True

    def __post_init__(self) -> None:
        given = [k for k in ("gamma", "length_scale", "precision") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ParameterError(
                "rbf kernel: give exactly one of gamma, length_scale (float or one per feature) "
                f"or precision (a PSD matrix); found {given or 'none'}"
            )
        if self.gamma is not None:
            object.__setattr__(self, "gamma", _positive("rbf", "gamma", self.gamma))
        elif self.length_scale is not None:
            object.__setattr__(self, "length_scale", _length_scale("rbf", self.length_scale))
        else:
            A, T = _psd_matrix_factor(self.precision)
            object.__setattr__(self, "precision", tuple(tuple(float(v) for v in r) for r in A))
            object.__setattr__(self, "_transform", T)

    def transform_fn(self) -> Callable[[np.ndarray], np.ndarray]:
        """The map ``x ↦ x̃`` after which the kernel is a function of ``‖x̃ − z̃‖`` (scaling by
        the length scales): the Gram tiles' fast path applies it once to the points."""
        return self._transform_fn()

    def _transform_fn(self) -> Callable[[np.ndarray], np.ndarray]:
        """``x ↦ Tx`` with ``(x−y)ᵀA(x−y) = ‖Tx − Ty‖²``, in place where possible."""
        if self.gamma is not None:
            return _feature_scaler(1.0 / math.sqrt(2.0 * self.gamma), "rbf")
        if self.length_scale is not None:
            return _feature_scaler(self.length_scale, "rbf")
        T = self._transform

        def apply(Xc: np.ndarray) -> np.ndarray:
            if is_sparse(Xc):
                raise DataError(
                    "rbf kernel with a precision matrix cannot serve sparse X (x ↦ Tx makes it dense); "
                    "use gamma or length_scale, or pass dense X"
                )
            if T.shape[0] != Xc.shape[1]:
                raise DataError(
                    f"rbf kernel: precision matrix is {T.shape[0]}×{T.shape[0]} but the data has {Xc.shape[1]} features"
                )
            return Xc @ T

        return apply

    def _block(self, X, Z, dtype):
        out = _sq_dists(X, Z, self._transform_fn())
        out *= -0.5
        return _finish(out, np.exp, dtype)

    def diag(self, X):
        return _ones_diag(X)

    def _params(self):
        if self.gamma is not None:
            return {"gamma": self.gamma}
        if self.length_scale is not None:
            ls = self.length_scale
            return {"length_scale": list(ls) if isinstance(ls, tuple) else ls}
        return {"precision": [list(r) for r in self.precision]}


def _psd_matrix_factor(A: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Check that ``A`` is a symmetric PSD matrix; return it and ``T`` with ``A = T Tᵀ``."""
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.size == 0:
        raise ParameterError(f"rbf kernel: precision must be a square (d, d) matrix, found shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ParameterError("rbf kernel: precision contains NaN or inf")
    scale = max(float(np.abs(A).max()), np.finfo(float).tiny)
    if np.abs(A - A.T).max() > 1e-10 * scale:
        raise ParameterError("rbf kernel: precision must be symmetric; use (A + A.T) / 2")
    A = 0.5 * (A + A.T)
    w, U = np.linalg.eigh(A)
    if w.min() < -1e-10 * max(abs(w.max()), np.finfo(float).tiny):
        raise ParameterError(f"rbf kernel: precision must be positive semi-definite, found eigenvalue {w.min():.3g}")
    T = U * np.sqrt(np.clip(w, 0.0, None))
    return A, T


@dataclass(frozen=True, eq=False)
class Laplacian(Kernel):
    """Laplacian kernel ``exp(−γ‖x−y‖₁)`` (scikit-learn's ``laplacian_kernel``).

    Parameters
    ----------
    gamma : float
    """

    gamma: float = 1.0
    name: ClassVar[str] = "laplacian"
    stationary: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "gamma", _positive("laplacian", "gamma", self.gamma))

    def _block(self, X, Z, dtype):
        # a C loop: memory is the (n, m) output only, no (n, m, d) temporary
        out = manhattan(X, Z)
        out *= -self.gamma
        return _finish(out, np.exp, dtype)

    def diag(self, X):
        return _ones_diag(X)

    def _params(self):
        return {"gamma": self.gamma}


def _matern_05(t: np.ndarray) -> np.ndarray:
    np.negative(t, out=t)
    return np.exp(t, out=t)


def _matern_15(t: np.ndarray) -> np.ndarray:
    """``(1 + √3d)·exp(−√3d)`` in place on ``t = √3d``; one temporary."""
    e = np.negative(t)
    np.exp(e, out=e)
    t += 1.0
    t *= e
    return t


def _matern_25(t: np.ndarray) -> np.ndarray:
    """``(1 + √5d + 5d²/3)·exp(−√5d)`` with ``t = √5d`` (so ``5d²/3 = t²/3``); two temporaries."""
    e = np.negative(t)
    np.exp(e, out=e)
    poly = t * (1.0 / 3.0)
    poly += 1.0
    poly *= t  # t²/3 + t
    poly += 1.0
    poly *= e
    return poly


@dataclass(frozen=True, eq=False)
class Matern(Kernel):
    """Matérn kernel for ν ∈ {½, 3⁄2, 5⁄2}, as ``sklearn.gaussian_process.kernels.Matern``.

    With ``d = ‖(x−y)/ℓ‖``: ν=½ → ``exp(−d)``; ν=3⁄2 → ``(1+√3d)·exp(−√3d)``;
    ν=5⁄2 → ``(1+√5d+5d²/3)·exp(−√5d)``.

    Parameters
    ----------
    length_scale : float or sequence of float (ARD), default=1.0
    nu : {0.5, 1.5, 2.5}, default=1.5
        The values of the registry (the closed forms below).
    """

    length_scale: float | tuple[float, ...] = 1.0
    nu: float = 1.5
    name: ClassVar[str] = "matern"
    stationary: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "length_scale", _length_scale("matern", self.length_scale))
        object.__setattr__(self, "nu", kernel_spec("matern").check_choice("nu", self.nu))

    @property
    def _n_work(self) -> int:  # type: ignore[override]
        return {0.5: 0, 1.5: 1, 2.5: 2}[self.nu]

    def _block(self, X, Z, dtype):
        t = _dists(X, Z, _feature_scaler(self.length_scale, "matern"))
        if self.nu == 0.5:
            out = _matern_05(t)
        elif self.nu == 1.5:
            t *= math.sqrt(3.0)
            out = _matern_15(t)
        else:
            t *= math.sqrt(5.0)
            out = _matern_25(t)
        return out if dtype == out.dtype else out.astype(dtype)

    def diag(self, X):
        return _ones_diag(X)

    def _params(self):
        ls = self.length_scale
        return {"length_scale": list(ls) if isinstance(ls, tuple) else ls, "nu": self.nu}


@dataclass(frozen=True, eq=False)
class Periodic(Kernel):
    """Periodic kernel ``exp(−2 sin²(π‖x−y‖/p) / ℓ²)`` (``ExpSineSquared`` in scikit-learn).

    Positive semi-definite on 1-D inputs (its usual use: time). With several features this
    Euclidean-distance form, scikit-learn's, is NOT PSD in general (:func:`check_psd` shows
    it); a product of 1-D periodic kernels is the PSD alternative.

    Parameters
    ----------
    length_scale : float, default=1.0
    periodicity : float, default=1.0
    """

    length_scale: float = 1.0
    periodicity: float = 1.0
    name: ClassVar[str] = "periodic"
    stationary: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "length_scale", _positive("periodic", "length_scale", self.length_scale))
        object.__setattr__(self, "periodicity", _positive("periodic", "periodicity", self.periodicity))

    def _block(self, X, Z, dtype):
        out = _dists(X, Z)
        out *= math.pi / self.periodicity
        np.sin(out, out=out)
        np.square(out, out=out)
        out *= -2.0 / self.length_scale**2
        return _finish(out, np.exp, dtype)

    def diag(self, X):
        return _ones_diag(X)

    def _params(self):
        return {"length_scale": self.length_scale, "periodicity": self.periodicity}


@dataclass(frozen=True, eq=False)
class Constant(Kernel):
    """Constant kernel ``c`` (``c > 0``); ``k + Constant(1.0)`` is the penalised-bias trick."""

    value: float = 1.0
    name: ClassVar[str] = "constant"
    stationary: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _positive("constant", "value", self.value))

    def _block(self, X, Z, dtype):
        return np.full((X.shape[0], (X if Z is None else Z).shape[0]), self.value, dtype=dtype)

    def diag(self, X):
        return np.full(_as_2d(X, "X").shape[0], self.value)

    def _params(self):
        return {"value": self.value}
