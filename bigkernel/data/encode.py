"""Real tables as features: categorical string columns one-hot encoded and missing values
dropped or imputed, per partition inside the pass (never a whole table in memory).

:class:`TableEncoder` is a scikit-learn transformer on pandas and dask DataFrames; its fitted
state (categories, fill values) is plain JSON, saved with the model (no pickle).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from bigkernel.errors import DataError, NonFiniteError
from bigkernel.validation import Options, validate_params

#: a pandas DataFrame (pandas is the tables extra: imported where a frame is handled)
Frame = Any

logger = logging.getLogger(__name__)

MISSING = ("error", "drop", "impute")

#: the fix named by a NaN report in a job
MISSING_HINT = (
    "give the data source `missing: drop` (those rows are dropped) or `missing: impute` (X filled "
    "with the training column mean, rows with a missing y dropped), or clean the data"
)


#: the fix named when prediction data has a missing value
PREDICT_MISSING_HINT = (
    "a model fitted with `missing: error` or `missing: drop` predicts rows with every value "
    "present (as scikit-learn estimators do); fill or remove those rows, or fit with "
    "`missing: impute` so the training means fill them"
)


def numeric_dtype(t: Any) -> bool:
    """numpy numeric dtypes only: pandas string/object/category columns are not features."""
    try:
        return np.dtype(t).kind in "fiub"
    except TypeError:
        return False


class TableEncoder(TransformerMixin, BaseEstimator):
    """One-hot encoding of categorical columns and imputation of missing values of a table.

    Parameters
    ----------
    categorical : list of str, "auto" or None, default="auto"
        Columns to one-hot encode; "auto": every non-numeric column; None: none (a non-numeric
        column is then an error at ``fit``).
    missing : {"error", "drop", "impute"}, default="error"
        What :meth:`transform` does with a missing value: "error" and "drop" leave NaN (the
        fit's pass then refuses it, or the table reader drops the row); "impute" fills a
        numeric column with its training mean and a categorical one with its most frequent
        training category. The mean, not the median: it is exact from one streamed pass of sums
        (a median of a table that does not fit in memory is an approximate sketch), and with
        ``standardize`` it fills the neutral value 0.

    Attributes
    ----------
    feature_names_in_ : ndarray of str
    categories_ : dict of str to list of str
        Sorted categories seen at ``fit`` per categorical column.
    fill_values_ : dict of str to float or str
        ``impute`` only: the fill value per column.

    Notes
    -----
    Output columns keep the input order; a categorical column ``city`` becomes ``city_<c>`` for
    each category ``c`` (scikit-learn's ``OneHotEncoder`` names). A category not seen at fit is
    a :class:`~bigkernel.errors.DataError` naming the column and the values; a missing
    categorical value is NaN in all its columns (so ``error`` and ``drop`` treat it as any
    missing value).
    """

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "categorical": [Options(str, ("auto",)), list, tuple, None],
        "missing": [Options(str, MISSING)],
    }

    def __init__(self, categorical: Sequence[str] | str | None = "auto", missing: str = "error") -> None:
        self.categorical = categorical
        self.missing = missing

    # -- fit -----------------------------------------------------------------------------

    def categorical_columns(self, columns: Sequence[str], dtypes: Any) -> list[str]:
        """The columns this encoder one-hot encodes among ``columns`` (in their order).

        Parameters
        ----------
        columns : sequence of str
            A table's feature columns.
        dtypes : mapping of str to dtype
            Their dtypes (a DataFrame's ``dtypes``).

        Returns
        -------
        list of str
            ``categorical="auto"``: the non-numeric columns; else the declared ones.

        Raises
        ------
        DataError
            A declared column is not among ``columns``, or a non-numeric column is not declared.
        """
        validate_params(self._parameter_constraints, self.get_params(deep=False), type(self).__name__)
        text = [c for c in columns if not numeric_dtype(dtypes[c])]
        if self.categorical == "auto":
            return text
        declared = [] if self.categorical is None else list(self.categorical)
        unknown = [c for c in declared if c not in columns]
        if unknown:
            raise DataError(f"categorical columns {unknown} are not among the features {list(columns)}")
        undeclared = [c for c in text if c not in declared]
        if undeclared:
            raise DataError(
                f"non-numeric feature columns {undeclared} ({', '.join(str(dtypes[c]) for c in undeclared)}): "
                "declare them categorical (a job's `categorical: [..]`) to one-hot encode them, or convert them"
            )
        return [c for c in columns if c in declared]

    def fit(self, X: Any, y: Any = None) -> TableEncoder:
        """Find the categories (and fill values) from a pandas or dask DataFrame ``X``."""
        import pandas as pd

        validate_params(self._parameter_constraints, self.get_params(deep=False), type(self).__name__)
        if not hasattr(X, "columns"):
            raise DataError(f"TableEncoder fits a pandas or dask DataFrame (named columns); got {type(X).__name__}")
        if isinstance(X, pd.DataFrame):
            xs = list(X.columns)
            summary = combine_summaries(
                [partition_summary(X, xs, [], self.categorical_columns(xs, X.dtypes), self.missing)]
            )
        else:
            summary = summarize_frames(X, self, [])
        return self.fit_from_summary(list(X.columns), X.dtypes, summary)

    def fit_from_summary(self, columns: list[str], dtypes: Any, summary: dict) -> TableEncoder:
        """Fit from a table's summary (:func:`combine_summaries` of :func:`partition_summary`),
        as :meth:`fit` does after its pass; the table reader fits from the summary of its own
        scan so that the table is read once.

        Parameters
        ----------
        columns : list of str
            The feature columns, in order.
        dtypes : mapping of str to dtype
        summary : dict
            Counts per category, sums and counts per numeric column.

        Returns
        -------
        TableEncoder
            ``self``, fitted.
        """
        cats = self.categorical_columns(columns, dtypes)
        self.feature_names_in_ = np.asarray(columns, dtype=object)
        self.n_features_in_ = len(columns)
        self.categories_ = {c: sorted(summary["counts"].get(c, {})) for c in cats}
        empty = [c for c, v in self.categories_.items() if not v]
        if empty:
            raise DataError(f"categorical columns {empty} hold no values (every value is missing)")
        self.fill_values_ = {}
        if self.missing == "impute":
            for c in columns:
                if c in self.categories_:
                    counts = summary["counts"][c]
                    self.fill_values_[c] = max(sorted(counts), key=lambda k: counts[k])
                else:
                    n = summary["n"].get(c, 0)
                    if n == 0:
                        raise DataError(f"column {c!r} holds no values to impute from (every value is missing)")
                    self.fill_values_[c] = summary["sum"][c] / n
        return self

    # -- transform -----------------------------------------------------------------------

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Output column names: numeric columns as they are, ``<column>_<category>`` for each
        category of a categorical one, in the input order."""
        check_is_fitted(self, "categories_")
        names: list[str] = []
        for c in self.feature_names_in_:
            names += [f"{c}_{v}" for v in self.categories_[c]] if c in self.categories_ else [str(c)]
        return np.asarray(names, dtype=object)

    def onehot_groups(self) -> list[list[int]]:
        """The output column indices of each categorical column's one-hot block, in the input
        order (for holding a categorical feature at one category, e.g. in :func:`eval_grid`)."""
        check_is_fitted(self, "categories_")
        groups, at = [], 0
        for c in self.feature_names_in_:
            width = len(self.categories_[c]) if c in self.categories_ else 1
            if c in self.categories_:
                groups.append(list(range(at, at + width)))
            at += width
        return groups

    def transform(self, X: Any) -> Any:
        """Encoded float64 DataFrame (pandas in, pandas out; dask in, dask out, per partition)."""
        import pandas as pd

        check_is_fitted(self, "categories_")
        names = list(self.get_feature_names_out())
        if isinstance(X, pd.DataFrame):
            return pd.DataFrame(self.encode(X), columns=names, index=X.index)
        meta = pd.DataFrame({n: pd.Series(dtype="float64") for n in names})
        return X.map_partitions(_encode_frame, self, meta=meta)

    def encode(self, frame: Frame) -> np.ndarray:
        """One partition (pandas) as a float64 array (rows, n_features_out)."""
        import pandas as pd

        check_is_fitted(self, "categories_")
        cols = list(self.feature_names_in_)
        absent = [c for c in cols if c not in frame.columns]
        if absent:
            raise DataError(f"columns {absent} are missing; the encoder was fitted on {cols}")
        out = []
        for c in cols:
            s = frame[c]
            if self.missing == "impute" and c in self.fill_values_:
                s = s.fillna(self.fill_values_[c])
            if c not in self.categories_:
                out.append(pd.to_numeric(s, errors="raise").to_numpy(dtype=np.float64)[:, None])
                continue
            cats = self.categories_[c]
            text = s.astype(object)
            present = text.notna().to_numpy()
            values = text[present].astype(str)
            unseen = sorted(set(values) - set(cats))
            if unseen:
                raise DataError(
                    f"column {c!r} has categories {unseen[:10]}{' …' if len(unseen) > 10 else ''} not seen at "
                    f"fit (known: {cats[:20]}{' …' if len(cats) > 20 else ''}); refit with data that has them, "
                    "or map them to a known category"
                )
            block = np.zeros((len(s), len(cats)))
            block[np.flatnonzero(present), np.searchsorted(cats, values.to_numpy())] = 1.0
            block[~present] = np.nan  # missing: NaN, refused or dropped as any missing value
            out.append(block)
        return np.hstack(out) if out else np.empty((len(frame), 0))

    # -- JSON ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The fitted state as JSON-able data (saved in the model's metadata)."""
        check_is_fitted(self, "categories_")
        return {
            "missing": self.missing,
            "columns": [str(c) for c in self.feature_names_in_],
            "categories": self.categories_,
            "fill_values": {k: (v if isinstance(v, str) else float(v)) for k, v in self.fill_values_.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableEncoder:
        """Rebuild a fitted encoder from :meth:`to_dict`'s output."""
        enc = cls(categorical=list(d["categories"]), missing=d["missing"])
        enc.feature_names_in_ = np.asarray(d["columns"], dtype=object)
        enc.n_features_in_ = len(d["columns"])
        enc.categories_ = {k: list(v) for k, v in d["categories"].items()}
        enc.fill_values_ = dict(d["fill_values"])
        return enc


def _encode_frame(frame: Frame, enc: TableEncoder) -> Frame:
    import pandas as pd

    return pd.DataFrame(enc.encode(frame), columns=list(enc.get_feature_names_out()), index=frame.index)


def kept_rows(frame: Frame, xs: Sequence[str], ys: Sequence[str], missing: str) -> np.ndarray:
    """Rows a fit keeps: all but those with a missing y (any mode but "error") or a missing x
    ("drop")."""
    keep = np.ones(len(frame), dtype=bool)
    if missing == "error":
        return keep
    for c in list(ys) + (list(xs) if missing == "drop" else []):
        keep &= frame[c].notna().to_numpy()
    return keep


def partition_summary(
    frame: Frame, xs: Sequence[str], ys: Sequence[str], cats: Sequence[str], missing: str, sums: bool = True
) -> dict:
    """Rows, kept rows, category counts and (over the kept rows) numeric sums and counts of one
    partition: what fitting a :class:`TableEncoder` and dropping rows need, in one read."""
    keep = kept_rows(frame, xs, ys, missing)
    kept = frame[keep]
    out = {"rows": len(frame), "kept": int(keep.sum()), "counts": {}, "sum": {}, "n": {}}
    for c in xs:
        s = kept[c].dropna()
        if c in cats:
            out["counts"][c] = s.astype(str).value_counts().to_dict()
        elif missing == "impute" and sums:
            out["sum"][c], out["n"][c] = float(s.to_numpy(dtype=np.float64).sum()), len(s)
    return out


def combine_summaries(parts: list[dict]) -> dict:
    """Add partition summaries (rows and kept rows stay per partition)."""
    total = {"rows": [p["rows"] for p in parts], "kept": [p["kept"] for p in parts], "counts": {}, "sum": {}, "n": {}}
    for p in parts:
        for c, counts in p["counts"].items():
            acc = total["counts"].setdefault(c, {})
            for k, v in counts.items():
                acc[k] = acc.get(k, 0) + int(v)
        for c, v in p["sum"].items():
            total["sum"][c] = total["sum"].get(c, 0.0) + v  # float64 sums
            total["n"][c] = total["n"].get(c, 0) + p["n"][c]
    return total


def summarize_frames(frame, enc: TableEncoder, ys: Sequence[str], *, rows_only: bool = False) -> dict:
    """The combined :func:`partition_summary` of a dask DataFrame's partitions, in one
    lightweight pass (``runtime.compute``); ``rows_only``: rows and kept rows only (an encoder
    already fitted)."""
    import dask

    from bigkernel.runtime import compute

    xs = [c for c in frame.columns if c not in ys]
    cats = [] if rows_only else enc.categorical_columns(xs, frame.dtypes)
    mode = enc.missing
    # read only the columns the summary needs: the categorical ones for "error" (every row is
    # kept); every x and y for "drop"; y (and every x, for the fill values) for "impute"
    if mode == "error":
        need, ys = list(cats), []
    elif mode == "drop" or not rows_only:
        need = xs
    else:
        need = []
    frame = frame[(need + list(ys)) or xs[:1]]
    parts = [dask.delayed(partition_summary)(p, need, ys, cats, mode, not rows_only) for p in frame.to_delayed()]
    return combine_summaries(list(compute(*parts, label="scan table")))


@contextlib.contextmanager
def nonfinite_named(columns: Sequence[str] | None, hint: str | None = None) -> Iterator[None]:
    """Re-raise a pass's :class:`NonFiniteError` with X's columns by name (``columns``) and
    ``hint`` as the fix (default: remove or impute the rows)."""
    try:
        yield
    except NonFiniteError as exc:
        bad = getattr(exc, "bad_rows", None)
        if bad is None:
            raise
        raise NonFiniteError(bad.message(names=columns, hint=hint), bad_rows=bad) from None


def table_facts(ds: Any) -> dict[str, Any]:
    """What a :class:`~bigkernel.data.sources.Dataset`'s encoder did, for metrics.json: the
    ``missing`` mode, rows dropped, categories per one-hot encoded column; {} without one."""
    enc = ds.encoder
    if enc is None:
        return {}
    return {
        "missing": enc.missing,
        "rows_dropped": int(ds.n_dropped),
        "categorical": {c: len(v) for c, v in enc.categories_.items()},
    }
