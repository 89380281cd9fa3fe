"""Exact kernels evaluated on numpy blocks (layer 1: pure numpy, no dask, no files).

A kernel is a small frozen object: ``k(X, Z)`` returns the ``(len(X), len(Z))`` Gram block,
``k.diag(X)`` its diagonal ``k(x_i, x_i)``, and ``k.to_dict()`` / :meth:`Kernel.from_dict` a
JSON-able description used for persistence (no pickle). Kernels combine with ``k1 + k2``,
``k1 * k2`` and ``c * k`` (``c > 0``), the construction rules that keep a kernel positive
semi-definite.

Numerical care
--------------
Squared Euclidean distances use ``‖x‖² + ‖z‖² − 2xᵀz`` (one GEMM, no ``(n, m, d)``
temporary) after shifting both blocks by the same point (distances are translation invariant,
and the shift reduces cancellation for data far from the origin); negative round-off is
clipped to 0 and, for ``k(X)`` with ``Z`` omitted, the diagonal is set to exactly 0.
L1 distances use :func:`scipy.spatial.distance.cdist` (C loop, no ``(n, m, d)`` temporary).
Arithmetic is float64; ``dtype=np.float32`` casts before the final elementwise function so the
output block is float32 (the float32 ``exp`` is ~2× faster) while distances stay float64.

Memory
------
Each kernel states its peak workspace beyond the output block with
:meth:`Kernel.extra_bytes_per_entry`, which :mod:`bigkernel.numerics.budget` uses to size
blocks.
"""

from __future__ import annotations

import difflib
import logging
import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, DTypeLike
from scipy.spatial.distance import cdist

from bigkernel.errors import DataError, ParameterError

logger = logging.getLogger(__name__)

__all__ = [
    "Kernel",
    "RBF",
    "Laplacian",
    "Matern",
    "Polynomial",
    "Linear",
    "Sigmoid",
    "Periodic",
    "Constant",
    "Sum",
    "Product",
    "Scaled",
    "KERNEL_NAMES",
    "make_kernel",
    "PSDCheck",
    "check_psd",
]

_OUTPUT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


# --------------------------------------------------------------------------------------------
# validation helpers


def _positive(kernel: str, name: str, value: Any) -> float:
    """Return ``value`` as a float, or raise ParameterError unless it is finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"{kernel} kernel: {name} must be a float > 0, found {value!r}")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ParameterError(f"{kernel} kernel: {name} must be a finite float > 0, found {value}")
    return value


def _finite(kernel: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ParameterError(f"{kernel} kernel: {name} must be a finite float, found {value!r}")
    return float(value)


def _length_scale(kernel: str, value: Any) -> float | tuple[float, ...]:
    """A scalar length scale, or one per feature (ARD); every entry finite and > 0."""
    if np.ndim(value) == 0:
        return _positive(kernel, "length_scale", value)
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ParameterError(
            f"{kernel} kernel: length_scale must be a float or a 1-D sequence of one float per "
            f"feature, found shape {arr.shape}"
        )
    if not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise ParameterError(
            f"{kernel} kernel: every length_scale must be finite and > 0, found {arr.tolist()}"
        )
    return tuple(float(v) for v in arr)


def _as_2d(X: ArrayLike, name: str) -> np.ndarray:
    """Return ``X`` as a 2-D float64 array (no copy when it already is one)."""
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise DataError(
            f"{name}: expected a 2-D array of shape (n_samples, n_features), found shape "
            f"{arr.shape}; reshape a single feature with {name}.reshape(-1, 1)"
        )
    if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
        raise DataError(f"{name}: expected real numbers, found dtype {arr.dtype}")
    return np.asarray(arr, dtype=np.float64)


def _blocks(X: ArrayLike, Z: ArrayLike | None) -> tuple[np.ndarray, np.ndarray | None]:
    Xa = _as_2d(X, "X")
    if Z is None:
        return Xa, None
    Za = _as_2d(Z, "Z")
    if Za.shape[1] != Xa.shape[1]:
        raise DataError(
            f"X and Z must have the same number of features: X has {Xa.shape[1]}, "
            f"Z has {Za.shape[1]}"
        )
    return Xa, Za


def _output_dtype(dtype: DTypeLike) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in _OUTPUT_DTYPES:
        raise ParameterError(f"dtype must be float64 or float32, found {dt}")
    return dt


# --------------------------------------------------------------------------------------------
# distance and inner-product blocks (float64, in place where possible)


def _sq_dists(
    X: np.ndarray, Z: np.ndarray | None, transform: Callable[[np.ndarray], np.ndarray] | None = None
) -> np.ndarray:
    """Squared Euclidean distances ``‖T(x) − T(z)‖²``, shape ``(len(X), len(Z))``, float64.

    Both blocks are shifted by the mean of the reference block first: distances do not change
    but ``‖x‖²`` shrinks, and with it the cancellation in ``‖x‖² + ‖z‖² − 2xᵀz``. The linear
    ``transform`` (feature scaling) may work in place on the centred copy, so one copy of each
    input is alive at a time. Round-off below 0 is clipped; with ``Z`` omitted the result is
    exactly symmetric with a zero diagonal.
    """
    ref = X if Z is None else Z
    centre = ref.mean(axis=0) if len(ref) else np.zeros(ref.shape[1])
    Xc = X - centre
    if transform is not None:
        Xc = transform(Xc)
    xx = np.einsum("ij,ij->i", Xc, Xc)
    if Z is None:
        out = _gram_self(Xc, symmetrize=False)  # symmetrized below, after the adds
        zz = xx
    else:
        Zc = Z - centre
        if transform is not None:
            Zc = transform(Zc)
        zz = np.einsum("ij,ij->i", Zc, Zc)
        out = Xc @ Zc.T
        del Zc
    del Xc
    out *= -2.0
    out += xx[:, None]
    out += zz[None, :]
    np.maximum(out, 0.0, out=out)
    if Z is None:
        _symmetrize_upper(out)
        np.fill_diagonal(out, 0.0)
    return out


def _symmetrize_upper(A: np.ndarray, tile: int = 128) -> None:
    """Copy the upper triangle of square ``A`` onto the lower one, in place, tile by tile.

    ``xx_i + xx_j`` and ``xx_j + xx_i`` round differently; CG wants an exactly symmetric
    operator. Tiles bound the temporaries to one ``tile × tile`` array (128 KiB).
    """
    n = A.shape[0]
    for i in range(0, n, tile):
        ie = min(i + tile, n)
        for j in range(0, i, tile):
            A[i:ie, j : j + tile] = A[j : j + tile, i:ie].T
        for r in range(i + 1, ie):  # inside the diagonal tile, row by row
            A[r, i:r] = A[i:r, r]


def _dists(
    X: np.ndarray, Z: np.ndarray | None, transform: Callable[[np.ndarray], np.ndarray] | None = None
) -> np.ndarray:
    out = _sq_dists(X, Z, transform)
    np.sqrt(out, out=out)
    return out


def _inner(X: np.ndarray, Z: np.ndarray | None) -> np.ndarray:
    return _gram_self(X) if Z is None else X @ Z.T


def _gram_self(X: np.ndarray, *, symmetrize: bool = True) -> np.ndarray:
    """``X Xᵀ``, exactly symmetric unless ``symmetrize=False``.

    Through GEMM on a copy: numpy's syrk path for ``X @ X.T`` measured ~7× slower here for
    thin ``X`` (4000×10), and the triangle copy afterwards is cheap.
    """
    out = X @ X.copy().T
    if symmetrize:
        _symmetrize_upper(out)
    return out


def _feature_scaler(
    length_scale: float | tuple[float, ...], kernel: str
) -> Callable[[np.ndarray], np.ndarray]:
    """In-place ``x ↦ x / ℓ`` (one ℓ or one per feature) for a centred copy."""
    inv = 1.0 / np.asarray(length_scale, dtype=np.float64)

    def scale(Xc: np.ndarray) -> np.ndarray:
        if inv.ndim == 1 and inv.size != Xc.shape[1]:
            raise DataError(
                f"{kernel} kernel: length_scale has {inv.size} entries (ARD, one per feature) "
                f"but the data has {Xc.shape[1]} features"
            )
        Xc *= inv
        return Xc

    return scale


def _finish(arg: np.ndarray, func, dtype: np.dtype) -> np.ndarray:
    """Apply the elementwise ``func`` in place after casting the float64 ``arg`` to ``dtype``."""
    out = arg if dtype == arg.dtype else arg.astype(dtype)
    func(out, out=out)
    return out


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

    def __call__(
        self, X: ArrayLike, Z: ArrayLike | None = None, *, dtype: DTypeLike = np.float64
    ) -> np.ndarray:
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
        """JSON-able description; :meth:`Kernel.from_dict` rebuilds an equal kernel."""
        return {"name": self.name, **self._params()}

    @staticmethod
    def from_dict(spec: dict[str, Any]) -> Kernel:
        """Rebuild a kernel from :meth:`to_dict` output."""
        if not isinstance(spec, dict) or "name" not in spec:
            raise ParameterError(
                f"a kernel description is a dict with a 'name' key, found {spec!r}"
            )
        params = {k: v for k, v in spec.items() if k != "name"}
        name = spec["name"]
        if name in ("sum", "product"):
            cls = Sum if name == "sum" else Product
            return cls(tuple(Kernel.from_dict(k) for k in params["kernels"]))
        if name == "scaled":
            return Scaled(params["scale"], Kernel.from_dict(params["kernel"]))
        return make_kernel(name, **params)

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


def _ones_diag(X: ArrayLike) -> np.ndarray:
    return np.ones(_as_2d(X, "X").shape[0])


# --------------------------------------------------------------------------------------------
# stationary kernels


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

    def _transform_fn(self) -> Callable[[np.ndarray], np.ndarray]:
        """``x ↦ Tx`` with ``(x−y)ᵀA(x−y) = ‖Tx − Ty‖²``, in place where possible."""
        if self.gamma is not None:
            return _feature_scaler(1.0 / math.sqrt(2.0 * self.gamma), "rbf")
        if self.length_scale is not None:
            return _feature_scaler(self.length_scale, "rbf")
        T = self._transform

        def apply(Xc: np.ndarray) -> np.ndarray:
            if T.shape[0] != Xc.shape[1]:
                raise DataError(
                    f"rbf kernel: precision matrix is {T.shape[0]}×{T.shape[0]} but the data "
                    f"has {Xc.shape[1]} features"
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
        raise ParameterError(
            f"rbf kernel: precision must be a square (d, d) matrix, found shape {A.shape}"
        )
    if not np.all(np.isfinite(A)):
        raise ParameterError("rbf kernel: precision contains NaN or inf")
    scale = max(float(np.abs(A).max()), np.finfo(float).tiny)
    if np.abs(A - A.T).max() > 1e-10 * scale:
        raise ParameterError("rbf kernel: precision must be symmetric; use (A + A.T) / 2")
    A = 0.5 * (A + A.T)
    w, U = np.linalg.eigh(A)
    if w.min() < -1e-10 * max(abs(w.max()), np.finfo(float).tiny):
        raise ParameterError(
            f"rbf kernel: precision must be positive semi-definite, found eigenvalue {w.min():.3g}"
        )
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
        # cdist loops in C: memory is the (n, m) output only, no (n, m, d) temporary
        out = cdist(X, X if Z is None else Z, metric="cityblock")
        out *= -self.gamma
        return _finish(out, np.exp, dtype)

    def diag(self, X):
        return _ones_diag(X)

    def _params(self):
        return {"gamma": self.gamma}


_MATERN_NUS = (0.5, 1.5, 2.5)


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
    """

    length_scale: float | tuple[float, ...] = 1.0
    nu: float = 1.5
    name: ClassVar[str] = "matern"
    stationary: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "length_scale", _length_scale("matern", self.length_scale))
        if (
            isinstance(self.nu, bool)
            or not isinstance(self.nu, numbers.Real)
            or float(self.nu) not in _MATERN_NUS
        ):
            raise ParameterError(
                f"matern kernel: nu must be one of {_MATERN_NUS} (the closed forms), found {self.nu!r}"
            )
        object.__setattr__(self, "nu", float(self.nu))

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
        object.__setattr__(
            self, "length_scale", _positive("periodic", "length_scale", self.length_scale)
        )
        object.__setattr__(
            self, "periodicity", _positive("periodic", "periodicity", self.periodicity)
        )

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
        return np.full((len(X), len(X if Z is None else Z)), self.value, dtype=dtype)

    def diag(self, X):
        return np.full(_as_2d(X, "X").shape[0], self.value)

    def _params(self):
        return {"value": self.value}


# --------------------------------------------------------------------------------------------
# inner-product kernels


@dataclass(frozen=True, eq=False)
class Linear(Kernel):
    """Linear kernel ``xᵀy``."""

    name: ClassVar[str] = "linear"

    def _block(self, X, Z, dtype):
        out = _inner(X, Z)
        return out if dtype == out.dtype else out.astype(dtype)

    def diag(self, X):
        X = _as_2d(X, "X")
        return np.einsum("ij,ij->i", X, X)


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
        return (self.gamma * np.einsum("ij,ij->i", X, X) + self.coef0) ** self.degree

    def _params(self):
        return {"degree": self.degree, "gamma": self.gamma, "coef0": self.coef0}


def _positive_int(kernel: str, name: str, value: Any) -> int:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, numbers.Real)
        and math.isfinite(value)
        and float(value) == int(value)
        and int(value) >= 1
    )
    if not ok:
        raise ParameterError(f"{kernel} kernel: {name} must be a positive integer, found {value!r}")
    return int(value)


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
            "data with bigkernel.kernels.functions.check_psd or use a PSD kernel (rbf, matern, ...)",
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
        return np.tanh(self.gamma * np.einsum("ij,ij->i", X, X) + self.coef0)

    def _params(self):
        return {"gamma": self.gamma, "coef0": self.coef0}


# --------------------------------------------------------------------------------------------
# combinations


def _flatten(cls: type, kernels: tuple[Kernel, ...]) -> tuple[Kernel, ...]:
    flat: list[Kernel] = []
    for k in kernels:
        if not isinstance(k, Kernel):
            raise ParameterError(
                f"{cls.name} of kernels: every term must be a Kernel, found {type(k).__name__}"
            )
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


# --------------------------------------------------------------------------------------------
# factory


_REGISTRY: dict[str, type[Kernel]] = {
    "rbf": RBF,
    "laplacian": Laplacian,
    "matern": Matern,
    "polynomial": Polynomial,
    "linear": Linear,
    "sigmoid": Sigmoid,
    "periodic": Periodic,
    "constant": Constant,
}
_ALIASES = {"poly": "polynomial", "gaussian": "rbf", "exp_sine_squared": "periodic"}
#: names accepted by :func:`make_kernel` (aliases: ``poly``, ``gaussian``, ``exp_sine_squared``)
KERNEL_NAMES: tuple[str, ...] = tuple(_REGISTRY)
_PARAMS = {
    "rbf": ("gamma", "length_scale", "precision"),
    "laplacian": ("gamma", "length_scale"),
    "matern": ("length_scale", "nu", "gamma"),
    "polynomial": ("degree", "gamma", "coef0"),
    "linear": (),
    "sigmoid": ("gamma", "coef0"),
    "periodic": ("length_scale", "periodicity"),
    "constant": ("value",),
}
# kernels whose default bandwidth is scikit-learn's gamma = 1 / n_features
_GAMMA_DEFAULTS = ("rbf", "laplacian", "matern", "polynomial", "sigmoid")


def _did_you_mean(word: str, options: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=2)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def make_kernel(
    name: str | Kernel,
    *,
    n_features: int | None = None,
    strict: bool = True,
    **params: Any,
) -> Kernel:
    """Build a kernel from a scikit-learn style name and parameters.

    Parameters
    ----------
    name : str or Kernel
        One of :data:`KERNEL_NAMES` (case-insensitive; ``"poly"`` is an alias of
        ``"polynomial"``). A :class:`Kernel` is returned unchanged (``params`` must then be
        empty or None when ``strict``).
    n_features : int, optional
        Resolves scikit-learn's default ``gamma = 1 / n_features`` for rbf, laplacian, matern,
        polynomial and sigmoid when no bandwidth (``gamma``, ``length_scale``, ``precision``)
        is given; without it a missing bandwidth is a ParameterError.
    strict : bool, default=True
        If False, parameters this kernel does not use are ignored, as scikit-learn's
        ``KernelRidge`` does with ``gamma``, ``degree`` and ``coef0``.
    **params
        The kernel's parameters; ``None`` values count as not given. laplacian and matern
        accept ``gamma`` or ``length_scale`` (laplacian ``γ = 1/ℓ``, matern ``ℓ = 1/√(2γ)``),
        the conventions of :mod:`bigkernel.numerics.fourier_features`.

    Returns
    -------
    Kernel

    Raises
    ------
    ParameterError
        Unknown name or parameter (with close matches), or a bad value.
    """
    given = {k: v for k, v in params.items() if v is not None}
    if isinstance(name, Kernel):
        if given and strict:
            raise ParameterError(
                f"parameters {sorted(given)} cannot be applied to a Kernel instance"
            )
        return name
    if not isinstance(name, str):
        raise ParameterError(f"kernel must be a name or a Kernel, found {type(name).__name__}")
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _REGISTRY:
        raise ParameterError(
            f"unknown kernel {name!r}; valid kernels are {', '.join(KERNEL_NAMES)}."
            + _did_you_mean(name.lower(), list(KERNEL_NAMES) + list(_ALIASES))
        )
    allowed = _PARAMS[key]
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        if strict:
            hint = "".join(_did_you_mean(u, allowed) for u in unknown)
            raise ParameterError(
                f"{key} kernel: unknown parameter(s) {unknown}; valid: {list(allowed) or 'none'}.{hint}"
            )
        given = {k: v for k, v in given.items() if k in allowed}
    if key in _GAMMA_DEFAULTS and not set(given) & {"gamma", "length_scale", "precision"}:
        given["gamma"] = _default_gamma(key, n_features)
    return _REGISTRY[key](**_bandwidth_as_stored(key, given))


def _bandwidth_as_stored(kernel: str, params: dict[str, Any]) -> dict[str, Any]:
    """Accept ``gamma`` or ``length_scale`` for laplacian and matern, as the random-feature maps
    do (``bigkernel.numerics.fourier_features.length_scale_from_gamma``): laplacian ``γ = 1/ℓ``,
    matern ``ℓ = 1/√(2γ)`` (the rbf limit ν → ∞). Each class stores one of the two."""
    if kernel not in ("laplacian", "matern"):
        return params
    params = dict(params)
    if "gamma" in params and "length_scale" in params:
        raise ParameterError(f"{kernel} kernel: give gamma or length_scale, not both")
    if kernel == "laplacian" and "length_scale" in params:
        params["gamma"] = 1.0 / _positive("laplacian", "length_scale", params.pop("length_scale"))
    elif kernel == "matern" and "gamma" in params:
        params["length_scale"] = 1.0 / math.sqrt(
            2.0 * _positive("matern", "gamma", params.pop("gamma"))
        )
    return params


def _default_gamma(kernel: str, n_features: int | None) -> float:
    if n_features is None:
        extra = " or length_scale" if kernel == "rbf" else ""
        raise ParameterError(
            f"{kernel} kernel: give gamma{extra}, or n_features for scikit-learn's default "
            "gamma = 1 / n_features"
        )
    return 1.0 / _positive_int(kernel, "n_features", n_features)


# --------------------------------------------------------------------------------------------
# PSD check


@dataclass(frozen=True)
class PSDCheck:
    """Result of :func:`check_psd`.

    Attributes
    ----------
    min_eigenvalue, max_eigenvalue : float
        Extreme eigenvalues of the sample Gram matrix.
    n_sample : int
        Rows used.
    is_psd : bool
        ``min_eigenvalue >= -rtol * |max_eigenvalue|`` (round-off allowance).
    """

    min_eigenvalue: float
    max_eigenvalue: float
    n_sample: int
    is_psd: bool


def check_psd(
    kernel: Kernel,
    X: ArrayLike,
    *,
    n_sample: int = 1000,
    random_state: int | np.random.Generator | None = None,
    rtol: float = 1e-10,
) -> PSDCheck:
    """Smallest eigenvalue of the Gram matrix of a random row sample of ``X``.

    A negative value beyond round-off proves the kernel is not PSD on this data; a value
    >= 0 is evidence, not proof, for the whole data set.

    Parameters
    ----------
    kernel : Kernel
    X : array-like of shape (n, d)
    n_sample : int, default=1000
        Rows sampled without replacement (all rows if ``n <= n_sample``); cost O(n_sample³).
    random_state : int, Generator or None
    rtol : float, default=1e-10

    Returns
    -------
    PSDCheck
    """
    X = _as_2d(X, "X")
    if isinstance(n_sample, bool) or not isinstance(n_sample, numbers.Integral) or n_sample < 2:
        raise ParameterError(f"check_psd: n_sample must be an integer >= 2, found {n_sample!r}")
    rng = np.random.default_rng(random_state)
    rows = (
        np.sort(rng.choice(len(X), size=n_sample, replace=False))
        if len(X) > n_sample
        else slice(None)
    )
    K = kernel(X[rows])
    w = np.linalg.eigvalsh(0.5 * (K + K.T))
    lo, hi = float(w[0]), float(w[-1])
    result = PSDCheck(lo, hi, K.shape[0], lo >= -rtol * max(abs(hi), np.finfo(float).tiny))
    logger.debug("check_psd(%s): %s", kernel.name, result)
    return result
