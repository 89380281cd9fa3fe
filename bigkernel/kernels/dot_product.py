"""Dot-product exact kernels, functions of ``xᵀy`` (layer 1: pure numpy): linear, polynomial,
sigmoid and cosine.

Their names, parameters and defaults are declared in :mod:`bigkernel.kernels.registry`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from bigkernel._sparse import as_csr, is_sparse, row_sq_norms
from bigkernel.kernels._blocks import _as_2d, _finish, _finite, _inner, _positive, _positive_int
from bigkernel.kernels.base import Kernel

__all__ = ["Cosine", "Linear", "Polynomial", "Sigmoid"]


@dataclass(frozen=True, eq=False)
class Linear(Kernel):
    """Linear kernel ``xᵀy``."""

    name: ClassVar[str] = "linear"

    def _block(self, X, Z, dtype):
        out = _inner(X, Z)
        return out if dtype == out.dtype else out.astype(dtype)

    def diag(self, X):
        X = _as_2d(X, "X")
        return row_sq_norms(X)


@dataclass(frozen=True, eq=False)
class Polynomial(Kernel):
    """Polynomial kernel ``(γ xᵀy + coef0)^degree`` (scikit-learn's names).

    ``coef0=0`` is the homogeneous kernel: all monomials of degree exactly ``degree``;
    ``coef0 > 0`` spans all monomials up to ``degree``. ``coef0 < 0`` is not PSD in general and
    warns.

    Parameters
    ----------
    degree : int, default=3
        A positive integer (``2.0`` is accepted as 2).
    gamma : float, default=1.0
    coef0 : float, default=1.0
    """

    degree: int = 3
    gamma: float = 1.0
    coef0: float = 1.0
    name: ClassVar[str] = "polynomial"

    def __post_init__(self) -> None:
        object.__setattr__(self, "degree", _positive_int("polynomial", "degree", self.degree))
        object.__setattr__(self, "gamma", _positive("polynomial", "gamma", self.gamma))
        object.__setattr__(self, "coef0", _finite("polynomial", "coef0", self.coef0))
        if self.coef0 < 0:
            warnings.warn(
                f"polynomial kernel with coef0={self.coef0} < 0 is not positive semi-definite in "
                "general; use coef0 >= 0",
                UserWarning,
                stacklevel=3,
            )

    @property
    def psd(self) -> bool:  # type: ignore[override]
        return self.coef0 >= 0

    def _block(self, X, Z, dtype):
        out = _inner(X, Z)
        out *= self.gamma
        out += self.coef0
        np.power(out, self.degree, out=out)
        return out if dtype == out.dtype else out.astype(dtype)

    def diag(self, X):
        X = _as_2d(X, "X")
        return (self.gamma * row_sq_norms(X) + self.coef0) ** self.degree

    def _params(self):
        return {"degree": self.degree, "gamma": self.gamma, "coef0": self.coef0}


@dataclass(frozen=True, eq=False)
class Sigmoid(Kernel):
    """Sigmoid kernel ``tanh(γ xᵀy + coef0)`` — NOT positive semi-definite in general.

    Constructing one emits a ``UserWarning`` saying so; kernel ridge with it may have an
    indefinite system (CG then stops with :class:`~bigkernel.errors.NotPSDError`). Use
    :func:`check_psd` on your data.

    Parameters
    ----------
    gamma : float, default=1.0
    coef0 : float, default=1.0
    """

    gamma: float = 1.0
    coef0: float = 1.0
    name: ClassVar[str] = "sigmoid"
    psd: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "gamma", _positive("sigmoid", "gamma", self.gamma))
        object.__setattr__(self, "coef0", _finite("sigmoid", "coef0", self.coef0))
        warnings.warn(
            "the sigmoid kernel tanh(gamma <x, y> + coef0) is not positive semi-definite in "
            "general: kernel ridge with it can be ill-posed and CG can break down. Check your "
            "data with bigkernel.kernels.check_psd or use a PSD kernel (rbf, matern, ...)",
            UserWarning,
            stacklevel=3,
        )

    def _block(self, X, Z, dtype):
        out = _inner(X, Z)
        out *= self.gamma
        out += self.coef0
        return _finish(out, np.tanh, dtype)

    def diag(self, X):
        X = _as_2d(X, "X")
        return np.tanh(self.gamma * row_sq_norms(X) + self.coef0)

    def _params(self):
        return {"gamma": self.gamma, "coef0": self.coef0}


def _unit_rows(X: np.ndarray) -> np.ndarray:
    """Rows divided by their Euclidean norm; zero rows stay zero (scikit-learn's ``normalize``);
    sparse rows stay sparse."""
    norms = np.sqrt(row_sq_norms(X))
    norms[norms == 0.0] = 1.0
    if is_sparse(X):
        return as_csr(sp.diags_array(1.0 / norms) @ X)
    return X / norms[:, None]


@dataclass(frozen=True, eq=False)
class Cosine(Kernel):
    """Cosine similarity ``xᵀy / (‖x‖‖y‖)`` (scikit-learn's ``cosine_similarity``): the linear
    kernel of the rows scaled to unit length. A zero row has similarity 0 with everything,
    itself included, as in scikit-learn."""

    name: ClassVar[str] = "cosine"

    def _block(self, X, Z, dtype):
        out = _inner(_unit_rows(X), None if Z is None else _unit_rows(Z))
        return out if dtype == out.dtype else out.astype(dtype)

    def diag(self, X):
        X = _as_2d(X, "X")
        return (row_sq_norms(X) > 0).astype(np.float64)
