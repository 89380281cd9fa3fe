"""Dense or scipy.sparse blocks, one way (shared by every layer; numpy/scipy only).

Sparse X stays sparse end to end: blocks are CSR (row slices are cheap), products with dense
matrices give dense results (``X @ W``: the feature map's projection), and every statistic that
would otherwise read ``X`` densely (finite check, per-feature range, row norms, column sums)
reads only the stored entries — memory O(nnz), never O(rows × d). Implicit zeros count as
values where it matters (the range of a column with an unstored entry includes 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from bigkernel.data.frames import is_dask_frame
from bigkernel.errors import DataError


def is_sparse(a: Any) -> bool:
    """Whether ``a`` is a scipy.sparse matrix or array (any format)."""
    return sp.issparse(a)


def has_sparse_chunks(a: Any) -> bool:
    """Whether ``a`` is a dask array of scipy.sparse chunks (dask's ``_meta``: an empty array of
    the chunks' type, part of its array protocol)."""
    return is_sparse(getattr(a, "_meta", None))


def refuse_sparse(a: Any, message: str) -> None:
    """Raise DataError(``message``) if ``a`` is sparse or a dask array of sparse chunks (a path
    that cannot serve sparse X says so, with its fix)."""
    if is_sparse(a) or has_sparse_chunks(a):
        raise DataError(message)


def as_csr(a: Any, dtype: Any = np.float64, *, copy: bool = False) -> Any:
    """``a`` (sparse, any format) as CSR of ``dtype``, the same kind (sparray or spmatrix)."""
    out = a.tocsr(copy=copy) if a.format == "csr" else a.tocsr()
    if out.dtype != np.dtype(dtype):
        out = out.astype(dtype)
    return out


def as_block(a: Any, dtype: Any = np.float64) -> Any:
    """A 2-D block of ``dtype``: CSR for sparse input, else a numpy array (no copy if possible)."""
    return as_csr(a, dtype) if is_sparse(a) else np.asarray(a, dtype=dtype)


def as_array(a: Any) -> Any:
    """``np.asarray(a)``, but a sparse block is returned as it is (never densified)."""
    return a if is_sparse(a) else np.asarray(a)


def to_dense(a: Any) -> np.ndarray:
    """A numpy array of ``a`` (sparse products of dense content, e.g. ``X Zᵀ`` blocks)."""
    return a.toarray() if is_sparse(a) else np.asarray(a)


def matmul(X: Any, W: np.ndarray, dtype: Any = None) -> np.ndarray:
    """``X @ W`` as a dense numpy array for dense or sparse ``X`` (``W`` dense).

    Sparse ``X`` is multiplied as stored (CSR × dense: O(nnz · W.shape[1])), never densified;
    ``dtype`` casts ``X`` first (the stored entries only, for sparse).
    """
    if is_sparse(X):
        if dtype is not None and X.dtype != np.dtype(dtype):
            X = X.astype(dtype)
        return np.asarray(X @ W)
    return np.asarray(X, dtype=dtype) @ W


def row_sq_norms(X: Any) -> np.ndarray:
    """``‖x_i‖²`` of every row, float64 of shape (n,)."""
    if is_sparse(X):
        return np.asarray(as_csr(X).multiply(X).sum(axis=1), dtype=np.float64).reshape(-1)
    X = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X, X)


def scale_columns(X: Any, factor: np.ndarray) -> Any:
    """``X · diag(factor)``: a sparse result for sparse ``X`` (the pattern is kept)."""
    if is_sparse(X):
        return as_csr(X @ sp.diags_array(np.asarray(factor, dtype=np.float64)))
    return np.asarray(X, dtype=np.float64) * factor


def nonfinite_rows(a: Any) -> np.ndarray | None:
    """Boolean mask of the rows of ``a`` holding NaN/inf, or None when every value is finite
    (sparse: only the stored entries can be non-finite)."""
    if is_sparse(a):
        data = a.data
        if np.isfinite(data).all():
            return None
        coo = a.tocoo()
        bad = np.zeros(a.shape[0], dtype=bool)
        bad[coo.row[~np.isfinite(coo.data)]] = True
        return bad
    if np.isfinite(a).all():
        return None
    return ~np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1)


def column_min_max(X: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-column minimum and maximum (float64, shape (d,)) of a non-empty block; for sparse
    blocks the unstored zeros count (scipy's ``min``/``max`` include them)."""
    if is_sparse(X):
        lo = np.asarray(X.min(axis=0).toarray(), dtype=np.float64).reshape(-1)
        hi = np.asarray(X.max(axis=0).toarray(), dtype=np.float64).reshape(-1)
        return lo, hi
    return X.min(axis=0), X.max(axis=0)


def column_sums(X: Any, w: np.ndarray | None = None) -> np.ndarray:
    """``[Σw, Σ w x, Σ w x²]`` per column, float64 of shape (3, d) (Σw repeated per column):
    what ``standardize`` needs of a block, from the stored entries only for sparse ``X``."""
    n, d = X.shape
    w = np.ones(n) if w is None else np.asarray(w, dtype=np.float64).reshape(-1)
    out = np.empty((3, d))
    out[0] = w.sum()
    if is_sparse(X):
        X = as_csr(X)
        out[1] = np.asarray(X.T @ w).reshape(-1)
        out[2] = np.asarray(X.multiply(X).T @ w).reshape(-1)
    else:
        X = np.asarray(X, dtype=np.float64)
        out[1] = w @ X
        out[2] = w @ (X * X)
    return out


def scale_from_sums(sums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, std)`` per column from :func:`column_sums` totals (population std)."""
    total = sums[0]
    mean = sums[1] / total
    var = np.maximum(sums[2] / total - mean * mean, 0.0)
    return mean, np.sqrt(var)


# --------------------------------------------------------------------------------------------
# saving sparse arrays as plain arrays (the model store holds numpy arrays only)


def sparse_to_arrays(name: str, X: Any) -> dict[str, np.ndarray]:
    """CSR parts of ``X`` as arrays ``{name}_csr_data``, ``_indices``, ``_indptr``, ``_shape``."""
    X = as_csr(X)
    return {
        f"{name}_csr_data": X.data,
        f"{name}_csr_indices": X.indices.astype(np.int64),
        f"{name}_csr_indptr": X.indptr.astype(np.int64),
        f"{name}_csr_shape": np.asarray(X.shape, dtype=np.int64),
    }


def array_or_sparse(name: str, arrays: dict[str, np.ndarray]) -> Any:
    """``arrays[name]``, or the CSR array saved by :func:`sparse_to_arrays` under ``name``."""
    if name in arrays:
        return arrays[name]
    try:
        parts = [arrays[f"{name}_csr_{k}"] for k in ("data", "indices", "indptr", "shape")]
    except KeyError:
        raise DataError(f"the saved model has no array {name!r} (dense or CSR)") from None
    data, indices, indptr, shape = parts
    return sp.csr_array((np.asarray(data, dtype=np.float64), indices, indptr), shape=tuple(int(s) for s in shape))


def model_arrays(name: str, X: Any) -> dict[str, np.ndarray]:
    """``{name: X}`` for dense ``X``, or its CSR parts (:func:`sparse_to_arrays`)."""
    return sparse_to_arrays(name, X) if is_sparse(X) else {name: X}


# --------------------------------------------------------------------------------------------
# refusing what is not real numbers


def check_real(a: Any, name: str = "X") -> None:
    """Refuse strings (even of numbers), complex numbers and objects that are not numbers as
    data, clearly.

    Accepts numpy arrays, lists, pandas DataFrames/Series, sparse and dask arrays. Text and
    complex dtypes are refused from the dtype alone. A numpy object array (or object column)
    is scanned for the types it holds: strings, bytes and complex numbers are refused, while
    real numbers pass and are converted, as scikit-learn does (its ``check_dtype_object``
    requires it); dask arrays of objects are refused (their values are not read here).
    Converting text of numbers silently would hide a parsing problem upstream.
    """
    dtypes = getattr(a, "dtypes", None)  # a DataFrame: one dtype per column
    if dtypes is not None and not isinstance(dtypes, np.dtype) and hasattr(dtypes, "items"):
        lazy = is_dask_frame(a)  # its dtypes only (object columns refused): the values are not read here

        def problem(c: Any, t: Any) -> Any:
            return _kind(t) == "O" if lazy else _object_problem(a[c].to_numpy(), t)

        bad = {str(c): str(t) for c, t in dtypes.items() if _bad_kind(t) or problem(c, t)}
        if bad:
            raise DataError(
                f"{name} must hold real numbers; found non-numeric columns {bad}. Convert them "
                f"(e.g. pandas.to_numeric, or drop/encode text columns) before fitting"
            )
        return
    dtype = getattr(a, "dtype", None)
    if dtype is None:
        if a is None or np.isscalar(a):
            return
        try:
            a = np.asarray(a)
        except (ValueError, TypeError):
            return  # ragged lists and the like: scikit-learn's validation says what is wrong
        dtype = a.dtype
    lazy = not isinstance(a, np.ndarray) and hasattr(a, "dask")
    found = _describe(dtype) if _bad_kind(dtype) else None
    if found is None and _kind(dtype) == "O":
        found = _describe(dtype) if lazy else _object_problem(np.asarray(a), dtype)
    if found:
        raise DataError(f"{name} must hold real numbers (float or int); found {found}. {_fix(found, name)}")


def _kind(t: Any) -> str | None:
    """numpy's dtype kind, or None for a pandas extension dtype."""
    try:
        return np.dtype(t).kind
    except TypeError:
        return None


def _bad_kind(t: Any) -> bool:
    try:
        kind = np.dtype(t).kind
    except TypeError:  # pandas extension dtypes: string, category hold no numbers; Int64 etc. do
        name = str(t).lower()
        return name.startswith(("string", "category")) or name == "str"
    return kind in "USTc"  # T: numpy's variable-width StringDType (zarr text arrays)


#: element types an object array may not hold (others that are not numbers fail in numpy)
_TEXT_OR_COMPLEX = (str, bytes, complex, np.str_, np.bytes_, np.complexfloating)


def _object_problem(values: np.ndarray, dtype: Any) -> str | None:
    """What is wrong in an object array (strings, bytes, complex among its elements), or None."""
    if _kind(dtype) != "O":
        return None
    types = set(map(type, values.ravel()))  # one C-speed sweep
    bad = sorted(t.__name__ for t in types if issubclass(t, _TEXT_OR_COMPLEX))
    return f"{' and '.join(bad)} values in an object array" if bad else None


def _describe(dtype: Any) -> str:
    kind = _kind(dtype)
    if kind is None:
        return f"text values (dtype {dtype})"
    what = {"U": "strings", "T": "strings", "S": "byte strings", "O": "Python objects", "c": "complex numbers"}
    return f"{what.get(kind, 'values')} (dtype {dtype})"


def _fix(found: str, name: str) -> str:
    if "complex" in found:
        return (
            "Complex data not supported: pass the real and imaginary parts as separate columns "
            f"(np.hstack([{name}.real, {name}.imag]))"
        )
    return f"Convert to numbers first (e.g. {name}.astype('float64') after checking the values parse)"
