"""The exact-kernel base class and its algebra (layer 1: pure numpy, no dask, no files).

A kernel is a small frozen object: ``k(X, Z)`` returns the ``(len(X), len(Z))`` Gram block,
``k.diag(X)`` its diagonal ``k(x_i, x_i)``, and ``k.to_dict()`` / :func:`bigkernel.kernels.factory.kernel_from_dict` a
JSON-able description used for persistence (no pickle). Kernels combine with ``k1 + k2``,
``k1 * k2`` and ``c * k`` (``c > 0``), the construction rules that keep a kernel positive
semi-definite: :class:`Sum`, :class:`Product` and :class:`Scaled` live here, beside the base
class whose operators build them.

Memory
------
Each kernel states its peak workspace beyond the output block with
:meth:`Kernel.extra_bytes_per_entry`, which :mod:`bigkernel.numerics.budget` uses to size
blocks.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from bigkernel.errors import ParameterError
from bigkernel.kernels._blocks import _blocks, _output_dtype, _positive

__all__ = ["Kernel", "Product", "Scaled", "Sum"]


# --------------------------------------------------------------------------------------------
# base class


@dataclass(frozen=True, eq=False)
class Kernel:
    """Base class of exact kernels; subclasses implement ``_block`` and ``diag``.

    Equality and hashing follow :meth:`to_dict`, so two kernels with the same parameters
    compare equal even when they hold arrays.
    """

    name: ClassVar[str] = "kernel"
    #: positive semi-definite for every input (False for sigmoid and polynomial with coef0 < 0;
    #: True for periodic, which is PSD on 1-D inputs only — see :class:`Periodic`)
    psd: ClassVar[bool] = True
    #: ``k(x, x)`` is the same constant for every ``x``
    stationary: ClassVar[bool] = False
    #: float64 arrays of the output's shape alive at peak, besides the float64 result itself
    _n_work: ClassVar[int] = 0
    # numpy scalars defer to our __rmul__ (np.float64(2) * k is a Scaled kernel)
    __array_ufunc__ = None

    def __call__(self, X: ArrayLike, Z: ArrayLike | None = None, *, dtype: DTypeLike = np.float64) -> np.ndarray:
        """Gram block ``K[i, j] = k(X[i], Z[j])``.

        Parameters
        ----------
        X : array-like of shape (n, d)
        Z : array-like of shape (m, d), default=None
            ``None`` means ``Z = X`` (symmetric block; stationary kernels then have an exact
            diagonal).
        dtype : {np.float64, np.float32}, default=np.float64
            Output dtype. Distances and inner products are always float64.

        Returns
        -------
        ndarray of shape (n, m)
        """
        Xa, Za = _blocks(X, Z)
        return self._block(Xa, Za, _output_dtype(dtype))

    def block(self, X: np.ndarray, Z: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
        """``k(X, Z)`` of arrays already checked and converted (the Gram tiles' inner loop,
        which checks its points once, not per tile); ``dtype`` a numpy dtype."""
        return self._block(X, Z, dtype)

    def _block(self, X: np.ndarray, Z: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
        raise NotImplementedError

    def diag(self, X: ArrayLike) -> np.ndarray:
        """Diagonal ``k(X[i], X[i])`` as a float64 array of shape (n,), without the Gram matrix."""
        raise NotImplementedError

    def extra_bytes_per_entry(self, dtype: DTypeLike = np.float64) -> int:
        """Peak workspace, in bytes per entry of the output block, beyond the block itself.

        Used by :func:`bigkernel.numerics.budget.gram_block_rows` (``kernel_extra``). A float32
        output needs the float64 block it is cast from.
        """
        itemsize = _output_dtype(dtype).itemsize
        return 8 * self._n_work + (8 if itemsize != 8 else 0)

    # --- persistence ------------------------------------------------------------------------
    def _params(self) -> dict[str, Any]:
        return {}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description; :func:`bigkernel.kernels.factory.kernel_from_dict` rebuilds an equal kernel."""
        return {"name": self.name, **self._params()}

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.to_dict() == other.to_dict()  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash(repr(self.to_dict()))

    # --- algebra ----------------------------------------------------------------------------
    def __add__(self, other: object) -> Kernel:
        if not isinstance(other, Kernel):
            return NotImplemented
        return Sum((self, other))

    def __mul__(self, other: object) -> Kernel:
        if isinstance(other, Kernel):
            return Product((self, other))
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            return Scaled(other, self)
        return NotImplemented

    __rmul__ = __mul__


# --------------------------------------------------------------------------------------------
# combinations


def _flatten(cls: type, kernels: tuple[Kernel, ...]) -> tuple[Kernel, ...]:
    flat: list[Kernel] = []
    for k in kernels:
        if not isinstance(k, Kernel):
            raise ParameterError(f"{cls.name} of kernels: every term must be a Kernel, found {type(k).__name__}")
        flat.extend(k.kernels if isinstance(k, cls) else (k,))
    if len(flat) < 2:
        raise ParameterError(f"{cls.name} of kernels needs at least two kernels, found {len(flat)}")
    return tuple(flat)


@dataclass(frozen=True, eq=False)
class Sum(Kernel):
    """Sum ``k₁ + k₂ + …`` (PSD when every term is)."""

    kernels: tuple[Kernel, ...]
    name: ClassVar[str] = "sum"

    def __post_init__(self) -> None:
        object.__setattr__(self, "kernels", _flatten(Sum, tuple(self.kernels)))

    @property
    def psd(self) -> bool:  # type: ignore[override]
        return all(k.psd for k in self.kernels)

    @property
    def stationary(self) -> bool:  # type: ignore[override]
        return all(k.stationary for k in self.kernels)

    @property
    def _n_work(self) -> int:  # type: ignore[override]
        # the accumulator stays alive while each later term is computed
        return 1 + max(k._n_work for k in self.kernels)

    def _block(self, X, Z, dtype):
        out = self.kernels[0]._block(X, Z, np.dtype(np.float64))
        for k in self.kernels[1:]:
            out += k._block(X, Z, np.dtype(np.float64))
        return out if dtype == out.dtype else out.astype(dtype)

    def diag(self, X):
        return sum(k.diag(X) for k in self.kernels)

    def to_dict(self):
        return {"name": "sum", "kernels": [k.to_dict() for k in self.kernels]}


@dataclass(frozen=True, eq=False)
class Product(Kernel):
    """Product ``k₁ · k₂ · …`` (PSD when every factor is: Schur product theorem)."""

    kernels: tuple[Kernel, ...]
    name: ClassVar[str] = "product"

    def __post_init__(self) -> None:
        object.__setattr__(self, "kernels", _flatten(Product, tuple(self.kernels)))

    psd = Sum.psd
    stationary = Sum.stationary
    _n_work = Sum._n_work

    def _block(self, X, Z, dtype):
        out = self.kernels[0]._block(X, Z, np.dtype(np.float64))
        for k in self.kernels[1:]:
            out *= k._block(X, Z, np.dtype(np.float64))
        return out if dtype == out.dtype else out.astype(dtype)

    def diag(self, X):
        out = self.kernels[0].diag(X)
        for k in self.kernels[1:]:
            out = out * k.diag(X)
        return out

    def to_dict(self):
        return {"name": "product", "kernels": [k.to_dict() for k in self.kernels]}


@dataclass(frozen=True, eq=False)
class Scaled(Kernel):
    """Positive scaling ``c · k`` with ``c > 0`` (``c ≤ 0`` is a ParameterError)."""

    scale: float
    kernel: Kernel
    name: ClassVar[str] = "scaled"

    def __post_init__(self) -> None:
        scale = _positive("scaled", "scale c in c * kernel", self.scale)
        if not isinstance(self.kernel, Kernel):
            raise ParameterError(f"c * kernel needs a Kernel, found {type(self.kernel).__name__}")
        if isinstance(self.kernel, Scaled):  # c·(c'·k) = (c·c')·k
            scale, inner = scale * self.kernel.scale, self.kernel.kernel
            object.__setattr__(self, "kernel", inner)
        object.__setattr__(self, "scale", scale)

    @property
    def psd(self) -> bool:  # type: ignore[override]
        return self.kernel.psd

    @property
    def stationary(self) -> bool:  # type: ignore[override]
        return self.kernel.stationary

    @property
    def _n_work(self) -> int:  # type: ignore[override]
        return self.kernel._n_work

    def _block(self, X, Z, dtype):
        out = self.kernel._block(X, Z, dtype)
        out *= out.dtype.type(self.scale)
        return out

    def diag(self, X):
        return self.scale * self.kernel.diag(X)

    def to_dict(self):
        return {"name": "scaled", "scale": self.scale, "kernel": self.kernel.to_dict()}
