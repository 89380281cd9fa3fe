"""Block sizes from a byte budget (pure functions, in the style of Falkon's ``_mmv_blk_sizes``).

Memory model of one Gram block ``K[rows, :m] = k(X[rows], Z)`` followed by a product with
``n_rhs`` vectors (all counts in bytes):

* per row: ``m · (itemsize + kernel_extra)`` — the block in its storage dtype plus the
  kernel's workspace per entry (:meth:`bigkernel.kernels.base.Kernel.extra_bytes_per_entry`)
  — plus ``8 · (2d + 1 + n_rhs)``: the row of ``X`` in float64 and its centred copy, its
  squared norm and its output entries;
* per column: the same ``8 · (2d + 1 + n_rhs)`` for ``Z`` and the vectors multiplied;
* a fixed :data:`OVERHEAD_BYTES` for small arrays and Python objects.

``tests/test_budget.py`` measures the peak (tracemalloc) of blocks sized this way.
"""

from __future__ import annotations

import math
import numbers

from bigkernel.errors import ParameterError
from bigkernel.validation import check_int

__all__ = [
    "fits_in_budget",
    "gram_block_bytes",
    "gram_block_rows",
    "gram_block_size",
    "gram_bytes",
]

_F64 = 8
#: fixed allowance for small arrays and Python objects (means, shapes, views): 64 KiB
OVERHEAD_BYTES = 64 * 1024


def _nonneg(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (math.isfinite(value) and value >= 0):
        raise ParameterError(f"{name} must be a finite number >= 0, found {value!r}")
    return float(value)


def _vectors(d: int, n_rhs: int) -> int:
    """Float64 bytes per point besides the block: its features twice (input and centred copy),
    its squared norm and its ``n_rhs`` vector entries."""
    return _F64 * (2 * d + 1 + n_rhs)


def _per_row(m: int, d: int, itemsize: int, kernel_extra: float, n_rhs: int) -> float:
    return m * (itemsize + kernel_extra) + _vectors(d, n_rhs)


def _fixed(m: int, d: int, n_rhs: int) -> int:
    return m * _vectors(d, n_rhs) + OVERHEAD_BYTES


def gram_block_bytes(rows: int, m: int, d: int, itemsize: int, kernel_extra: float = 8.0, *, n_rhs: int = 0) -> int:
    """Peak bytes to compute a ``(rows, m)`` Gram block (and multiply it by ``n_rhs`` vectors).

    Parameters
    ----------
    rows, m : int
        Block shape.
    d : int
        Number of features.
    itemsize : int
        Bytes per stored entry (8 for float64, 4 for float32).
    kernel_extra : float, default=8.0
        Kernel workspace in bytes per entry beyond the block (one float64 copy by default;
        ``Kernel.extra_bytes_per_entry(dtype)`` gives the exact figure).
    n_rhs : int, default=0
        Columns of the vectors the block multiplies.

    Returns
    -------
    int
    """
    rows, m, d = check_int("rows", rows, 1), check_int("m", m, 1), check_int("d", d, 1)
    itemsize, n_rhs = check_int("itemsize", itemsize, 1), check_int("n_rhs", n_rhs, 0)
    kernel_extra = _nonneg("kernel_extra", kernel_extra)
    return math.ceil(rows * _per_row(m, d, itemsize, kernel_extra, n_rhs) + _fixed(m, d, n_rhs))


def gram_block_rows(
    n: int,
    m: int,
    d: int,
    itemsize: int,
    budget_bytes: int,
    kernel_extra: float = 8.0,
    *,
    n_rhs: int = 0,
) -> int:
    """Largest number of rows (at most ``n``) whose ``(rows, m)`` block fits ``budget_bytes``.

    Parameters
    ----------
    n : int
        Rows available (the result never exceeds it).
    m, d, itemsize, kernel_extra, n_rhs
        As in :func:`gram_block_bytes`.
    budget_bytes : int
        Memory allowed for one block computation (per worker thread).

    Returns
    -------
    int
        ``rows`` with ``1 <= rows <= n`` and ``gram_block_bytes(rows, ...) <= budget_bytes``.

    Raises
    ------
    ParameterError
        If not even one row fits; the message gives the minimum budget.
    """
    n = check_int("n", n, 1)
    budget = _nonneg("budget_bytes", budget_bytes)
    need_one = gram_block_bytes(1, m, d, itemsize, kernel_extra, n_rhs=n_rhs)
    if need_one > budget:
        raise ParameterError(
            f"budget_bytes={int(budget)} is too small for a Gram block with m={m} columns and "
            f"d={d} features: one row needs at least {need_one} bytes; raise the memory budget "
            "or use fewer columns per block"
        )
    per_row = _per_row(m, d, itemsize, _nonneg("kernel_extra", kernel_extra), n_rhs)
    rows = int((budget - _fixed(m, d, n_rhs)) // per_row)
    # guard the float division: step down until the exact integer count fits
    while rows > 1 and gram_block_bytes(rows, m, d, itemsize, kernel_extra, n_rhs=n_rhs) > budget:
        rows -= 1
    return max(1, min(n, rows))


def gram_block_size(
    n: int, d: int, itemsize: int, budget_bytes: int, kernel_extra: float = 8.0, *, n_rhs: int = 0
) -> int:
    """Largest square block side ``s <= n`` with ``gram_block_bytes(s, s, ...) <= budget_bytes``.

    For a Gram operator chunked the same way along both axes (row chunks of ``X``).

    Parameters
    ----------
    n, d, itemsize, budget_bytes, kernel_extra, n_rhs
        As in :func:`gram_block_rows`.

    Returns
    -------
    int

    Raises
    ------
    ParameterError
        If not even a 1×1 block fits.
    """
    n, d = check_int("n", n, 1), check_int("d", d, 1)
    budget = _nonneg("budget_bytes", budget_bytes)
    extra = _nonneg("kernel_extra", kernel_extra)
    itemsize, n_rhs = check_int("itemsize", itemsize, 1), check_int("n_rhs", n_rhs, 0)
    need_one = gram_block_bytes(1, 1, d, itemsize, extra, n_rhs=n_rhs)
    if need_one > budget:
        raise ParameterError(
            f"budget_bytes={int(budget)} is too small for any Gram block with d={d} features: "
            f"a 1×1 block needs {need_one} bytes"
        )
    # s²·a + s·b + c <= budget, from gram_block_bytes(s, s, ...)
    a, b, c = itemsize + extra, 2 * _vectors(d, n_rhs), OVERHEAD_BYTES
    s = int((-b + math.sqrt(b * b + 4 * a * (budget - c))) / (2 * a))
    s = max(1, min(n, s))
    while s > 1 and gram_block_bytes(s, s, d, itemsize, extra, n_rhs=n_rhs) > budget:
        s -= 1
    while s < n and gram_block_bytes(s + 1, s + 1, d, itemsize, extra, n_rhs=n_rhs) <= budget:
        s += 1
    return s


def gram_bytes(n: int, itemsize: int) -> int:
    """Bytes of the full ``n × n`` Gram matrix stored with ``itemsize`` bytes per entry."""
    return check_int("n", n, 1) ** 2 * check_int("itemsize", itemsize, 1)


def fits_in_budget(n: int, itemsize: int, budget_bytes: int) -> bool:
    """Whether the whole ``n × n`` Gram matrix can be cached within ``budget_bytes``.

    Parameters
    ----------
    n : int
        Number of training points.
    itemsize : int
        8 (float64) or 4 (float32) bytes per entry.
    budget_bytes : int
        Memory allowed for the cache (> 0).

    Returns
    -------
    bool
    """
    budget = _nonneg("budget_bytes", budget_bytes)
    if budget <= 0:
        raise ParameterError(f"budget_bytes must be > 0, found {budget_bytes!r}")
    return gram_bytes(n, itemsize) <= budget
