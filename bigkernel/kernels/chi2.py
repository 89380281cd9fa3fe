"""Chi-squared exact kernels on non-negative data such as histograms (layer 1: pure numpy):
additive_chi2 and chi2, scikit-learn's ``additive_chi2_kernel`` and ``chi2_kernel``.

With ``D(x, y) = Σᵢ (xᵢ − yᵢ)² / (xᵢ + yᵢ)`` (terms with ``xᵢ + yᵢ = 0`` count 0):
``additive_chi2 = −D`` and ``chi2 = exp(−γ D)``. Negative entries are refused (the terms can
then divide by zero or change sign), as scikit-learn refuses them.

``D`` is conditionally negative definite, so ``chi2`` is PSD for every γ > 0, and
``additive_chi2`` is conditionally PSD: PSD on vectors summing to zero, i.e. after the
centring of a fit with an intercept; without one, ``K + αI`` is positive definite only for α
above ``additive_chi2``'s one negative eigenvalue.

Their names and parameters are declared in :mod:`bigkernel.kernels.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bigkernel._sparse import is_sparse
from bigkernel.errors import DataError
from bigkernel.kernels._blocks import _as_2d, _finish, _positive, symmetrize_upper
from bigkernel.kernels.base import Kernel

__all__ = ["AdditiveChi2", "Chi2"]


def _non_negative(kernel: str, name: str, X: np.ndarray) -> None:
    if X.size and X.min() < 0:
        row = int(np.unravel_index(np.argmin(X), X.shape)[0])
        raise DataError(
            f"{kernel} kernel: {name} must be non-negative (histograms, counts), found {X.min():.6g} in row "
            f"{row}; shift or clip the data, or use another kernel"
        )


def _chi2_distance(kernel: str, X: np.ndarray, Z: np.ndarray | None) -> np.ndarray:
    """``D(x, z) = Σᵢ (xᵢ − zᵢ)² / (xᵢ + zᵢ)``, float64 ``(len(X), len(Z))``: one feature at
    a time, so the workspace is two blocks of the output's size (no ``(n, m, d)`` temporary).
    With ``Z`` omitted the result is exactly symmetric with a zero diagonal."""
    if is_sparse(X) or is_sparse(Z):  # as scikit-learn's chi2 kernels
        raise DataError(f"{kernel} kernel: sparse X is not supported (nor by scikit-learn); pass X.toarray()")
    _non_negative(kernel, "X", X)
    ref = X
    if Z is not None:
        _non_negative(kernel, "Z", Z)
        ref = Z
    out = np.zeros((X.shape[0], ref.shape[0]))
    num = np.empty_like(out)
    den = np.empty_like(out)
    for j in range(X.shape[1]):
        np.subtract(X[:, j, None], ref[None, :, j], out=num)
        np.square(num, out=num)
        np.add(X[:, j, None], ref[None, :, j], out=den)
        np.divide(num, den, out=num, where=den > 0)  # xᵢ = zᵢ = 0: num is already 0
        out += num
    if Z is None:
        symmetrize_upper(out)
        np.fill_diagonal(out, 0.0)
    return out


@dataclass(frozen=True, eq=False)
class AdditiveChi2(Kernel):
    """Additive chi-squared kernel ``−Σᵢ (xᵢ − yᵢ)² / (xᵢ + yᵢ)`` for ``x, y ≥ 0``.

    Not positive semi-definite: ``k(x, x) = 0`` and every other entry is ≤ 0; it is
    conditionally PSD (see the module docstring), so a fit with an intercept is well posed.
    Its zero diagonal leaves nothing for a pivoted-Cholesky preconditioner to pick: the exact
    solver runs CG without one.
    """

    name: ClassVar[str] = "additive_chi2"
    psd: ClassVar[bool] = False
    _n_work: ClassVar[int] = 2

    def _block(self, X, Z, dtype):
        out = _chi2_distance("additive_chi2", X, Z)
        np.negative(out, out=out)
        return out if dtype == out.dtype else out.astype(dtype)

    def diag(self, X):
        X = _as_2d(X, "X")
        _non_negative("additive_chi2", "X", X)
        return np.zeros(X.shape[0])


@dataclass(frozen=True, eq=False)
class Chi2(Kernel):
    """Exponentiated chi-squared kernel ``exp(−γ Σᵢ (xᵢ − yᵢ)² / (xᵢ + yᵢ))`` for ``x, y ≥ 0``.

    Parameters
    ----------
    gamma : float, default=1.0
        scikit-learn's default (not ``1 / n_features``).
    """

    gamma: float = 1.0
    name: ClassVar[str] = "chi2"
    _n_work: ClassVar[int] = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "gamma", _positive("chi2", "gamma", self.gamma))

    def _block(self, X, Z, dtype):
        out = _chi2_distance("chi2", X, Z)
        out *= -self.gamma
        return _finish(out, np.exp, dtype)

    def diag(self, X):
        X = _as_2d(X, "X")
        _non_negative("chi2", "X", X)
        return np.ones(X.shape[0])

    def _params(self):
        return {"gamma": self.gamma}
