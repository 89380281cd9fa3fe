"""Empty tables are one clear DataError, through the API and the CLI: a 0-byte CSV (pandas would
raise EmptyDataError), a header-only CSV (it would read as text: "non-numeric columns") and a
Parquet source of 0 rows."""

import gzip

import numpy as np
import pandas as pd
import pytest

from bigkernel import open_source
from bigkernel.cli import main
from bigkernel.errors import DataError


def _empty_csv(d):
    (d / "t.csv").write_bytes(b"")
    return d / "t.csv"


def _header_only_csv(d):
    (d / "t.csv").write_text("a,b,y\n")
    return d / "t.csv"


def _empty_parquet(d):
    pd.DataFrame({c: np.array([], dtype=float) for c in ("a", "b", "y")}).to_parquet(d / "t.parquet")
    return d / "t.parquet"


@pytest.mark.parametrize(
    "make, message",
    [
        (_empty_csv, "file is empty: expected a header row and data rows"),
        (_header_only_csv, r"has a header row \(a, b, y\) but no data rows"),
        (_empty_parquet, "has no rows"),
    ],
)
def test_an_empty_table_is_a_clear_data_error(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(DataError, match=message):
        open_source(str(path), ["a", "b"], "y")


def test_a_compressed_csv_of_nothing_and_a_header_only_csv_glob(tmp_path):
    with gzip.open(tmp_path / "z.csv.gz", "wb"):
        pass
    with pytest.raises(DataError, match="file is empty"):
        open_source(str(tmp_path / "z.csv.gz"), ["a"], "y")
    for i in range(2):
        (tmp_path / f"part{i}.csv").write_text("a,y\n")
    with pytest.raises(DataError, match="has 2 files, each with a header row"):
        open_source(str(tmp_path / "part*.csv"), ["a"], "y")
    (tmp_path / "part0.csv").write_text("a,y\n1.0,2.0\n")  # a file with a row: a table
    assert open_source(str(tmp_path / "part*.csv"), ["a"], "y").X.shape == (1, 1)


@pytest.mark.parametrize("make", [_empty_csv, _header_only_csv, _empty_parquet])
def test_the_cli_says_it_in_one_line(tmp_path, capfd, make):
    path = make(tmp_path)
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: t\noutput: out\ndata:\n  train: {{path: {path}, x: [a, b], y: y}}\n"
        "model: {gamma: 0.5, n_components: 8, alpha: 0.1}\n"
    )
    assert main(["run", str(job)]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ERROR bigkernel: DataError: ") and "rows" in err[0], err


def test_a_missing_package_is_one_line_naming_the_fix(tmp_path, capfd, monkeypatch):
    """`make-data ... f.parquet` without dask.dataframe (pandas) importable: one line, no traceback."""
    import sys

    monkeypatch.setitem(sys.modules, "dask.dataframe", None)  # `import dask.dataframe` now fails
    assert main(["-q", "make-data", "friedman1", str(tmp_path / "f.parquet"), "--n-samples", "100"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "dask.dataframe is not installed" in err[0] and 'pip install "dask[dataframe]"' in err[0]
    ), err
    monkeypatch.setitem(sys.modules, "dask_cuda", None)
    from bigkernel.cli import _missing_package

    try:
        import dask_cuda  # noqa: F401
    except ImportError as exc:
        assert 'pip install "bigkernel[gpu]"' in _missing_package(exc)


def test_pandas_and_pyarrow_are_core_dependencies_and_the_tables_extra_still_exists():
    """Tables are a core input: `pip install bigkernel` reads CSV and Parquet; `[tables]` resolves."""
    import os
    import re
    import tomllib

    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    core = {re.split(r"[<>=\[ ]", dep)[0] for dep in project["dependencies"]}
    assert {"pandas", "pyarrow"} <= core
    assert project["optional-dependencies"]["tables"] == []
