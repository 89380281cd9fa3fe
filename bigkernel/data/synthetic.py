"""Synthetic data sets written to zarr, CSV or Parquet chunk by chunk (memory O(chunk), any n).

Rows are generated in fixed blocks of :data:`GEN_ROWS` rows, block ``j`` from
``SeedSequence(seed, spawn_key=(j,))``, so the data depend on the seed alone — not on the
storage chunking, the worker count or the task order.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass

import dask.array as da
import numpy as np
import zarr

from bigkernel.data.tables import is_table, write_table
from bigkernel.errors import OutputExistsError, ParameterError
from bigkernel.io.atomic import atomic_folder

logger = logging.getLogger(__name__)

GEN_ROWS = 2**16
DATA_FORMAT = "bigkernel-data"
KINDS = ("friedman1", "sine", "classes")
#: default noise standard deviation of each kind (the CLI's make-data and job configs read it)
DEFAULT_NOISE = {"friedman1": 1.0, "sine": 0.3, "classes": 1.0}
#: ``"classes"``: the class of a row is the bin of its noisy Friedman #1 value between these
#: edges (about a third of the rows each)
CLASS_EDGES = (12.0, 17.0)


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate. ``noise`` is the standard deviation of the Gaussian noise on y.

    Parameters
    ----------
    kind : {"friedman1", "sine", "classes"}, default="friedman1"
        Friedman #1 (``10 sin(π x₁x₂) + 20 (x₃ − ½)² + 10 x₄ + 5 x₅``, needs n_features >= 5),
        the 1-D sine ``sin(2π x)``, or ``"classes"``: three classes 0, 1, 2, the bin of the
        noisy Friedman #1 value between :data:`CLASS_EDGES` (a classification problem);
        X is uniform on [0, 1].
    n_samples : int, default=100000
    n_features : int, default=10
        1 for ``"sine"``.
    noise : float or None, default=None
        None: the kind's :data:`DEFAULT_NOISE` (friedman1 1.0, sine 0.3).
    seed : int, default=0
    """

    kind: str = "friedman1"
    n_samples: int = 100_000
    n_features: int = 10
    noise: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ParameterError(f"unknown synthetic data kind {self.kind!r}; choose one of {list(KINDS)}")
        if self.noise is None:
            object.__setattr__(self, "noise", DEFAULT_NOISE[self.kind])
        if int(self.n_samples) <= 0:
            raise ParameterError(f"n_samples must be positive, got {self.n_samples}")
        if self.kind in ("friedman1", "classes") and self.n_features < 5:
            raise ParameterError(f"{self.kind} needs n_features >= 5, got {self.n_features}")
        if self.kind == "sine" and self.n_features != 1:
            raise ParameterError(f"sine is 1-D: n_features must be 1, got {self.n_features}")
        if not (np.isfinite(self.noise) and self.noise >= 0):
            raise ParameterError(f"noise must be >= 0, got {self.noise}")


def _gen_block(spec: SyntheticSpec, j: int) -> np.ndarray:
    """Generation block ``j`` as an array [X | y] of shape (rows, d + 1)."""
    lo = j * GEN_ROWS
    rows = min(GEN_ROWS, spec.n_samples - lo)
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(j,)))
    X = rng.uniform(0.0, 1.0, size=(rows, spec.n_features))
    f = true_function("friedman1" if spec.kind == "classes" else spec.kind, X)
    y = f + spec.noise * rng.standard_normal(rows)
    if spec.kind == "classes":
        y = np.digitize(y, CLASS_EDGES).astype(np.float64)
    return np.column_stack([X, y])


def generate_rows(spec: SyntheticSpec, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of the data set as [X | y], shape (stop - start, d + 1)."""
    blocks = [_gen_block(spec, j) for j in range(start // GEN_ROWS, (stop - 1) // GEN_ROWS + 1)]
    a = np.concatenate(blocks, axis=0)
    off = (start // GEN_ROWS) * GEN_ROWS
    return a[start - off : stop - off]


def true_function(kind: str, X: np.ndarray) -> np.ndarray:
    """The noise-free regression function of a synthetic kind."""
    X = np.asarray(X, dtype=np.float64)
    if kind == "friedman1":
        return 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    if kind == "sine":
        return np.sin(2 * np.pi * X[:, 0])
    if kind == "classes":  # the class without noise
        return np.digitize(true_function("friedman1", X), CLASS_EDGES).astype(np.float64)
    raise ParameterError(f"unknown synthetic data kind {kind!r}")


def _rows_block(spec: SyntheticSpec, block_info=None) -> np.ndarray:
    lo, hi = block_info[None]["array-location"][0]
    return generate_rows(spec, lo, hi)


def table_columns(n_features: int) -> tuple[tuple[str, ...], str]:
    """Column names of a synthetic table: X's ``x0, x1, ...`` and the target ``y``."""
    return tuple(f"x{i}" for i in range(n_features)), "y"


def _marker(path: str) -> str:
    """The sidecar file that marks a synthetic table finished (a CSV has no attributes)."""
    return f"{path}.bigkernel.json"


def is_complete(path: str, spec: SyntheticSpec | None = None) -> bool:
    """Whether ``path`` holds a finished data set (of ``spec``, if given)."""
    try:
        if is_table(str(path)):
            if not os.path.exists(path):
                return False
            with open(_marker(str(path))) as f:
                attrs = json.load(f)
        else:
            attrs = zarr.open_group(str(path), mode="r").attrs.asdict()
    except Exception:
        return False
    if attrs.get("format") != DATA_FORMAT or not attrs.get("complete"):
        return False
    return spec is None or attrs.get("spec") == asdict(spec)


def make_data(spec: SyntheticSpec, path: str, chunk_rows: int = 131_072, overwrite: bool = False) -> str:
    """Write ``spec`` to a zarr group at ``path`` with arrays ``X`` (n, d) and ``y`` (n,), or,
    when ``path`` ends in ``.csv`` or ``.parquet``, to a table with columns ``x0 … x{d-1}, y``.

    The data is written into a temporary sibling and renamed into place at the end, so an
    interrupted run never leaves data that looks complete (a table is marked finished by a
    sidecar ``<path>.bigkernel.json`` holding the spec, written last). Existing complete data
    with the same spec is reused; anything else at ``path`` is an error unless ``overwrite``.

    Parameters
    ----------
    spec : SyntheticSpec
    path : str
        The zarr group to write.
    chunk_rows : int, default=131072
        Rows per zarr chunk.
    overwrite : bool, default=False
        Replace whatever is at ``path``.

    Returns
    -------
    str
        ``path``.
    """
    path = str(path)
    if is_complete(path, spec):
        logger.info("reusing existing data set %s", path)
        return path
    if os.path.exists(path) and not overwrite:
        raise OutputExistsError(
            f"{path!r} exists and is not a complete data set made with these parameters; "
            "choose another path or pass overwrite=True (--overwrite)"
        )
    n, d = int(spec.n_samples), int(spec.n_features)
    chunk_rows = max(1, min(int(chunk_rows), n))
    rows = da.map_blocks(
        _rows_block, spec, chunks=(_chunks(n, chunk_rows), (d + 1,)), dtype=np.float64, meta=np.empty((0, d + 1))
    )
    logger.info("writing %s rows of %s (d=%d) to %s", f"{n:,}", spec.kind, d, path)
    if is_table(path):
        return _make_table(spec, rows, path)
    with atomic_folder(path, overwrite=True, what="data set") as tmp:
        group = zarr.open_group(tmp, mode="w")
        zX = group.create_array("X", shape=(n, d), chunks=(chunk_rows, d), dtype="float64", compressors=None)
        zy = group.create_array("y", shape=(n,), chunks=(chunk_rows,), dtype="float64", compressors=None)
        da.store([rows[:, :d], rows[:, d]], [zX, zy], lock=False)
        group.attrs.update({"format": DATA_FORMAT, "spec": asdict(spec), "complete": True})
    return path


def _make_table(spec: SyntheticSpec, rows: da.Array, path: str) -> str:
    """Rows [X | y] as a CSV file or Parquet folder, then the sidecar that marks it finished."""
    marker = _marker(path)
    if os.path.exists(marker):
        os.remove(marker)  # removed first: a failed rewrite must not look finished
    xs, y = table_columns(spec.n_features)
    write_table(rows, [*xs, y], path, overwrite=True, what="data set")
    with open(marker + ".partial", "w") as f:
        json.dump(
            {"format": DATA_FORMAT, "spec": asdict(spec), "complete": True, "columns": {"x": list(xs), "y": y}}, f
        )
    os.replace(marker + ".partial", marker)
    return path


def _chunks(n: int, rows: int) -> tuple[int, ...]:
    return (rows,) * (n // rows) + ((n % rows,) if n % rows else ())
