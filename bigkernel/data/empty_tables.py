"""An empty CSV or Parquet source is refused before dask reads it: a 0-byte CSV would fail in
pandas (``EmptyDataError``) and a header-only CSV would read as text columns ("non-numeric")."""

from __future__ import annotations

import glob
import os

from bigkernel.errors import DataError

_CSV = (".csv", ".csv.gz")


def check_has_rows(path: str) -> None:
    """Raise :class:`~bigkernel.errors.DataError` when a local table source has no data rows.

    Reads at most the first row of each CSV file and the footer of each Parquet file, and stops
    at the first file with a row. Remote sources (``s3://...``) are left to the reader.

    Parameters
    ----------
    path : str
        A CSV file or glob, a Parquet file, glob or folder of parts.

    Raises
    ------
    DataError
        A 0-byte CSV file, or no data row in any of the source's files.
    """
    p = str(path).rstrip("/")
    if "://" in p:
        return
    files = sorted(glob.glob(os.path.join(p, "*.parquet")) if os.path.isdir(p) else glob.glob(p))
    if not files:
        return  # nothing to check: the caller reports a missing source
    if p.endswith(_CSV):
        for f in files:
            if os.path.getsize(f) == 0:
                raise DataError(
                    f"{f!r}: file is empty: expected a header row and data rows (write the table "
                    "with its header, or remove the file from the source)"
                )
        header: list[str] = []
        for f in files:
            header, n = _csv_head(f)
            if n:
                return
        what = "has a header row" if len(files) == 1 else f"has {len(files)} files, each with a header row"
        raise DataError(
            f"{path!r} {what} ({', '.join(header)}) but no data rows: expected at least one row "
            "of values below the header"
        )
    if not any(_parquet_rows(f) for f in files):
        raise DataError(
            f"{path!r} has no rows ({len(files)} Parquet file{'s' if len(files) > 1 else ''}, "
            "0 rows in all): expected at least one row"
        )


def _csv_head(f: str) -> tuple[list[str], int]:
    """The header of a CSV file and whether it has a data row (0 or 1)."""
    import pandas as pd

    try:
        head = pd.read_csv(f, nrows=1)
    except pd.errors.EmptyDataError:  # a compressed file of nothing
        raise DataError(f"{f!r}: file is empty: expected a header row and data rows") from None
    return [str(c) for c in head.columns], len(head)


def _parquet_rows(f: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(f).metadata.num_rows
