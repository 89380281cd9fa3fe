"""Array namespaces of the numerics (layer 1: no dask): one code path for numpy, CuPy and
array-api-strict.

The exact/Nyström numerics (:mod:`~bigkernel.numerics.cg`, :mod:`~bigkernel.numerics.precond`,
:mod:`~bigkernel.numerics.dual`, :mod:`~bigkernel.numerics.device_gram`,
:mod:`~bigkernel.numerics.resample`) take their namespace from their inputs
(:func:`namespace`, i.e. ``array_api_compat.array_namespace``) and use only the array API
standard, so CI runs them on numpy and on array-api-strict (which refuses anything outside the
standard) and a numpy-only call fails there, not first on a GPU. numpy stays the fast path:
where numpy has a faster route (``einsum``, fancy indexing, scipy's triangular solve) the code
asks :func:`is_numpy` and takes it.

LAPACK beyond the standard is dispatched here, in one place:

* ``eigh``, ``cholesky``, ``solve``: ``xp.linalg`` (the standard's ``linalg`` extension; CuPy
  and array-api-strict have it).
* :func:`solve_triangular`: scipy for numpy, ``cupyx.scipy.linalg`` for CuPy, a general
  ``xp.linalg.solve`` for any other namespace (array-api-strict: slower, same result to
  rounding).

Small host-side decisions (pivot sampling, rejection loops, breakdown checks) copy a few
numbers to the host with :func:`to_host`; everything of size ``n`` stays on the device.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import array_api_compat
import numpy as np

from bigkernel.devices import to_host

__all__ = [
    "as_namespace_array",
    "device_of",
    "eigh_on",
    "is_cupy",
    "is_numpy",
    "namespace",
    "solve_triangular",
    "take_rows",
    "to_host",
]


def namespace(*arrays: Any) -> ModuleType:
    """The array namespace of ``arrays`` (numpy arrays and Python scalars give numpy's)."""
    arrays = tuple(a for a in arrays if a is not None and not isinstance(a, (int, float)))
    if not arrays:
        return array_api_compat.array_namespace(np.empty(0))
    return array_api_compat.array_namespace(*arrays)


def is_numpy(xp: ModuleType) -> bool:
    """Whether ``xp`` is numpy (or array-api-compat's numpy wrapper): the fast path."""
    return array_api_compat.is_numpy_namespace(xp)


def is_cupy(xp: ModuleType) -> bool:
    """Whether ``xp`` is CuPy (never imports CuPy)."""
    return array_api_compat.is_cupy_namespace(xp)


def device_of(a: Any) -> Any:
    """The device of array ``a`` (for allocations beside it)."""
    return array_api_compat.device(a)


def as_namespace_array(xp: ModuleType, a: Any, *, like: Any = None, dtype: Any = None) -> Any:
    """``a`` (host or device) as an array of namespace ``xp``, on the device of ``like``."""
    if is_numpy(xp):
        return np.asarray(a, dtype=dtype)
    if not isinstance(a, (np.ndarray, list, tuple, float, int)) and namespace(a) is xp:
        return a if dtype is None or a.dtype == dtype else xp.astype(a, dtype)  # no copy when it is
    if isinstance(a, np.ndarray) and not is_cupy(xp):
        a = a.copy()  # array-api-strict wraps numpy memory: keep the caller's array its own
    device = None if like is None else device_of(like)
    return xp.asarray(a, dtype=dtype, device=device) if device is not None else xp.asarray(a, dtype=dtype)


def take_rows(xp: ModuleType, a: Any, idx: Any, axis: int = 0) -> Any:
    """``a[idx]`` along ``axis`` for integer indices (numpy fancy indexing; ``xp.take`` else)."""
    if is_numpy(xp):
        return np.take(a, np.asarray(idx), axis=axis)
    return xp.take(a, as_namespace_array(xp, np.asarray(idx, dtype=np.int64), like=a), axis=axis)


def eigh_on(xp: ModuleType) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``eigh(M) -> (w, V)`` computed in namespace ``xp`` (``xp.linalg.eigh``, e.g. on a GPU),
    returned as host arrays; reads the upper triangle of ``M`` (as the host ``scipy`` call in
    :mod:`~bigkernel.numerics.loo` does, through ``M.T``)."""

    def eigh(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Md = as_namespace_array(xp, np.ascontiguousarray(np.asarray(M).T))  # lower of Mᵀ = upper of M
        w, V = xp.linalg.eigh(Md)
        return to_host(w), to_host(V)

    return eigh


def solve_triangular(xp: ModuleType, R: Any, B: Any, *, lower: bool, trans: bool = False) -> Any:
    """``op(R)⁻¹ B`` for triangular ``R`` (``op`` = transpose when ``trans``).

    The standard has no triangular solve: scipy for numpy, ``cupyx.scipy.linalg`` for CuPy,
    a general solve elsewhere (the same solution to rounding).
    """
    if is_numpy(xp):
        from scipy.linalg import solve_triangular as scipy_solve

        return scipy_solve(R, B, lower=lower, trans="T" if trans else "N")
    if is_cupy(xp):
        cupy_linalg = importlib.import_module("cupyx.scipy.linalg")
        return cupy_linalg.solve_triangular(R, B, lower=lower, trans="T" if trans else "N")
    A = xp.matrix_transpose(R) if trans else R
    return xp.linalg.solve(A, B)
