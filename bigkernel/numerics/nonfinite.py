"""Rows holding NaN or inf (layer 1): found per block, combined across blocks, reported once.

Each task of a pass summarises the non-finite rows of its block as a :class:`BadRows` (global
row ranges, counts, columns) instead of raising; the summaries add up like the statistics, so
the error raised at the end of the pass names the true first bad row and every bad range of
the whole data set, from the one pass that runs anyway (nothing extra when the data are clean).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from bigkernel._sparse import is_sparse
from bigkernel.devices import to_host
from bigkernel.errors import NonFiniteError

#: bad row ranges named in a message; the rest are counted
MAX_RANGES = 10


@dataclass
class BadRows:
    """The rows of some blocks that hold NaN or inf.

    Attributes
    ----------
    n_rows : int
        Rows with a non-finite value in X or y.
    head : list of (int, int)
        The first :data:`MAX_RANGES` ranges ``[lo, hi)`` of consecutive bad rows (global
        indices, sorted).
    last : (int, int)
        The last bad range (to merge ranges that continue across blocks).
    n_ranges : int
        Number of ranges of consecutive bad rows.
    x_columns, y_columns : set of int
        Columns of X and of y holding a non-finite value.
    """

    n_rows: int
    head: list[tuple[int, int]]
    last: tuple[int, int]
    n_ranges: int
    x_columns: set[int] = field(default_factory=set)
    y_columns: set[int] = field(default_factory=set)

    @property
    def first(self) -> int:
        """int : The first bad row."""
        return self.head[0][0]

    def __add__(self, other: BadRows) -> BadRows:
        a, b = (self, other) if self.first <= other.first else (other, self)
        touching = a.last[1] == b.first  # one range cut by a block boundary
        ranges = _merge(a.head + b.head)
        return BadRows(
            a.n_rows + b.n_rows,
            ranges[:MAX_RANGES],
            b.last if b.last[0] >= a.last[0] else a.last,
            a.n_ranges + b.n_ranges - int(touching),
            a.x_columns | b.x_columns,
            a.y_columns | b.y_columns,
        )

    def message(
        self,
        action: str = "fitting",
        names: Sequence[str] | None = None,
        hint: str | None = None,
    ) -> str:
        """What was found and where (columns by ``names`` when known), and how to fix it."""
        where = []
        if self.x_columns:
            cols = sorted(self.x_columns)
            shown = [repr(str(names[j])) for j in cols] if names is not None else [str(j) for j in cols]
            where.append(f"X column{'s' if len(cols) > 1 else ''} {', '.join(shown)}")
        if self.y_columns:
            where.append("y")
        subject = " and ".join(
            ("X", "y") if self.x_columns and self.y_columns else ("y",) if self.y_columns else ("X",)
        )
        verb = "contain" if self.x_columns and self.y_columns else "contains"
        ranges = ", ".join(f"[{lo}, {hi})" for lo, hi in self.head)
        more = self.n_ranges - len(self.head)
        if more > 0:
            ranges += f" and {more} more range{'s' if more > 1 else ''}"
        rows = f"{self.n_rows} bad row{'s' if self.n_rows != 1 else ''}"
        fix = hint or f"remove or impute those rows before {action}"
        return (
            f"{subject} {verb} NaN or inf ({'; '.join(where)}): {rows}, first at row {self.first}; "
            f"bad rows {ranges}. {fix[0].upper()}{fix[1:]}"
        )

    def error(self, action: str = "fitting", names: Sequence[str] | None = None) -> NonFiniteError:
        """The :class:`NonFiniteError` to raise; it carries this summary as ``.bad_rows``."""
        return NonFiniteError(self.message(action, names), bad_rows=self)


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


def _bad_mask(a: Any) -> np.ndarray | None:
    """Host boolean mask (rows × columns) of non-finite entries, or None when all are finite
    (one reduction in the array's namespace; the mask is built only when there is one).
    Integer, boolean and text arrays (class labels) hold no NaN: None."""
    try:
        kind = np.dtype(a.dtype).kind
    except TypeError:  # a namespace's own dtype objects (array-api-strict): checked below
        kind = "f"
    if kind not in "fc":
        return None
    if is_sparse(a):
        if np.isfinite(a.data).all():
            return None
        coo = a.tocoo()
        mask = np.zeros(a.shape, dtype=bool)  # only on the error path: one block
        mask[coo.row, coo.col] = ~np.isfinite(coo.data)
        return mask
    if not isinstance(a, np.ndarray):
        xp = array_namespace(a)
        if bool(xp.all(xp.isfinite(a))):
            return None
        a = to_host(a)
    if np.isfinite(a).all():
        return None
    return ~np.isfinite(np.asarray(a).reshape(a.shape[0], -1))


def find_nonfinite(X: Any, Y: Any | None, start: int) -> BadRows | None:
    """The non-finite rows of a block that starts at global row ``start``, or None.

    ``X`` (rows, d) and ``Y`` (rows,) / (rows, k) may be numpy, any array-API namespace, or
    sparse ``X`` (its stored entries); ``Y`` may be None.
    """
    mx = _bad_mask(X)
    my = None if Y is None else _bad_mask(Y)
    if mx is None and my is None:
        return None
    rows = np.zeros(X.shape[0], dtype=bool)
    for m in (mx, my):
        if m is not None:
            rows |= m.any(axis=1)
    idx = np.flatnonzero(rows)
    cut = np.flatnonzero(np.diff(idx) > 1)  # consecutive bad rows form one range
    los = np.concatenate([[idx[0]], idx[cut + 1]]) + start
    his = np.concatenate([idx[cut], [idx[-1]]]) + start + 1
    ranges = list(zip(los.tolist(), his.tolist()))
    return BadRows(
        int(idx.size),
        ranges[:MAX_RANGES],
        ranges[-1],
        len(ranges),
        set() if mx is None else set(np.flatnonzero(mx.any(axis=0)).tolist()),
        set() if my is None else set(np.flatnonzero(my.any(axis=0)).tolist()),
    )


def check_finite(X: Any, y: Any | None, start: int, action: str = "fitting") -> None:
    """Raise :class:`NonFiniteError` naming the bad rows if X or y of a block holds NaN/inf.

    For one block (numpy input, prediction chunks); a pass over many blocks combines their
    :func:`find_nonfinite` summaries instead, and raises once. ``action`` completes "remove
    or impute those rows before ...".
    """
    bad = find_nonfinite(X, y, start)
    if bad is not None:
        raise bad.error(action)


__all__ = ["MAX_RANGES", "BadRows", "check_finite", "find_nonfinite"]
