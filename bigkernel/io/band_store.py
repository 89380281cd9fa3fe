"""On-disk results store of a bootstrap run (layer 3: zarr I/O), resumable.

Layout (a zarr v3 group at a local path or an fsspec URL)::

    <store>/
      zarr.json        group attrs, written once by the client at creation (see below)
      predictions      (L, n_eval, k) float64, chunks (1, n_eval, k), fill NaN
      coef             (L, p, k)      float64, chunks (1, p, k), fill NaN   (absent when p == 0)
      done             (L,)           uint8,   chunks (1,),      fill 0
      eval_points      (n_eval, d)    float64, one chunk   (optional; written once at creation)
      data_min         (d,)           float64   per-feature range of the training X (optional;
      data_max         (d,)           float64   written by the client once, when first known)
      residual_center  (n_eval, k)    float64   f̂(X_eval) of the original fit       (optional:
      residual_rows    (s,)           int64     rows of the sampled residuals          a run with
      residuals        (s, k)         float64   centred, inflated residual sample;     interval=
                                                attrs n, df, scale, mean, rss, scheme  "prediction")

Each replicate owns one chunk of every array, so replicates written concurrently by different
workers never touch the same object. The arrays hold ``L >= B`` replicates, ``B`` being the
``layout``'s ``n_replicates``: a run asking for more replicates than the store holds grows the
arrays (the client, before any task runs) and records the larger B in ``layout`` only once all
of them are complete (:meth:`BootstrapStore.mark_complete`), so an interrupted growth leaves the
store's complete B-replicate result readable. A run asking for fewer uses the first B
(replicate ``r``'s values depend on ``r`` only, so they are those of a fresh run with that B). A replicate writes its predictions, then its coefficients,
then ``done[r] = 1`` — last, so a replicate interrupted anywhere before the flag is simply
recomputed on resume. Values depend only on the replicate's seed, hence a resumed store holds
the same bytes as an uninterrupted one, and so does the band computed from it.

The optional arrays are added by the client only (never by replicate tasks) and never change
the group's ``zarr.json``: a store written before they existed still loads (range unknown, no
residual sample), and a confidence-only store gains the residual sample when a run with
``interval="prediction"`` reuses it — its replicates are the same either way. The residual
sample is complete once the ``complete`` attribute of ``residuals`` is set (written last).

Group attributes are written by the client only, at creation and *after* the arrays (zarr
v3 rewrites the whole ``zarr.json`` on an attribute update, so concurrent writers would lose
updates; and a creation interrupted before the attributes leaves a group that is refused rather
than half-trusted). They hold ``format``, ``format_version``, library versions, the ``layout``
(B, n_eval, k, p) and the caller's ``fingerprint`` (data digest, seed, estimator parameters,
resampling scheme, evaluation-points digest, ...). Reopening compares ``layout`` (but B) and
``fingerprint`` and refuses any difference with :class:`~bigkernel.errors.StoreMismatchError`;
B alone may differ (the arrays grow, see above). ``layout`` is rewritten by the client only,
after every replicate of a larger B is complete.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import operator
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import fsspec
import numpy as np
import zarr
import zarr.errors

from bigkernel._version import __version__
from bigkernel.errors import (
    DataError,
    DataNotFoundError,
    IncompleteStoreError,
    ModelFormatError,
    OutputExistsError,
    ParameterError,
    StoreMismatchError,
)
from bigkernel.numerics.resample import Band, percentile_band
from bigkernel.numerics.residuals import (
    DRAWS_PER_REPLICATE,
    ResidualSample,
    prediction_interval,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "BootstrapStore",
    "array_digest",
    "open_or_create_store",
    "open_store",
]

logger = logging.getLogger(__name__)

#: Value of the ``format`` group attribute that marks a bootstrap store.
FORMAT = "bigkernel-bootstrap"
#: Layout version written by this library; stores with a larger version are refused.
FORMAT_VERSION = 1

_PREDICTIONS = "predictions"
_COEF = "coef"
_DONE = "done"
_EVAL_POINTS = "eval_points"
_DATA_MIN, _DATA_MAX = "data_min", "data_max"
_RES_CENTER, _RES_ROWS, _RESIDUALS = "residual_center", "residual_rows", "residuals"
_ABSENT = "<absent>"


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def _normalise_path(path: str | os.PathLike[str]) -> str:
    path = os.fspath(path)
    if not isinstance(path, str):
        raise ParameterError(f"store path must be a str or os.PathLike; found {type(path).__name__}.")
    # file:// goes through zarr's LocalStore: fsspec's local backend does not create the
    # chunk folders on write (no auto_mkdir).
    path = path.removeprefix("file://")
    # Local paths are made absolute so worker processes with another cwd find the same store.
    return path if "://" in path else os.path.abspath(path)


def _zarr_kwargs(storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    # zarr refuses storage_options for plain local paths, so pass them only when given.
    return {} if not storage_options else {"storage_options": dict(storage_options)}


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _normalise_fingerprint(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """JSON round trip, so the comparison sees exactly what zarr stores (tuples → lists...)."""
    if not isinstance(fingerprint, Mapping):
        raise ParameterError(f"fingerprint must be a mapping (dict); found {type(fingerprint).__name__}.")
    try:
        text = json.dumps(dict(fingerprint), default=_json_default, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ParameterError(
            f"fingerprint must hold JSON values (str, finite numbers, bool, None, lists, dicts): "
            f"{exc}. Convert the offending value (e.g. to a string or a digest)."
        ) from None
    return json.loads(text)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, sub in value.items():
            out.update(_flatten(sub, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _short(value: Any, limit: int = 80) -> str:
    text = value if value is _ABSENT else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _diff(expected: Mapping[str, Any], found: Mapping[str, Any]) -> list[str]:
    """Dotted keys whose values differ, as ``key: expected X, found Y`` lines."""
    fe, ff = _flatten(expected), _flatten(found)
    lines = []
    for key in sorted(set(fe) | set(ff)):
        e, f = fe.get(key, _ABSENT), ff.get(key, _ABSENT)
        # 1 == 1.0 is the same parameter value; True == 1 is not the same setting.
        if e != f or isinstance(e, bool) != isinstance(f, bool):
            lines.append(f"  {key}: expected {_short(e)}, found {_short(f)}")
    return lines


def _summarise(indices: Sequence[int], limit: int = 10) -> str:
    shown = ", ".join(str(i) for i in indices[:limit])
    return shown + (f", ... ({len(indices) - limit} more)" if len(indices) > limit else "")


def _library_versions() -> dict[str, str]:
    # numpy too: Generator streams (hence replicate values) may change across numpy releases.
    return {"bigkernel": __version__, "numpy": np.__version__, "zarr": zarr.__version__}


def _positive(name: str, value: int, minimum: int) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise ParameterError(f"{name} must be an integer; found {type(value).__name__}.") from None
    if v < minimum:
        raise ParameterError(f"{name} must be >= {minimum}; found {v}.")
    return v


def array_digest(array: Any) -> str:
    """Content digest of an in-memory array (dtype, shape and bytes), for store fingerprints.

    Parameters
    ----------
    array : array-like
        Typically the evaluation points ``X_eval``.

    Returns
    -------
    str
        ``"sha256:<hex>"``.
    """
    a = np.ascontiguousarray(np.asarray(array))
    h = hashlib.sha256()
    h.update(f"{a.dtype.str}|{a.shape}|".encode())
    h.update(a.data)
    return "sha256:" + h.hexdigest()


# --------------------------------------------------------------------------------------------
# Store
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BootstrapStore:
    """Handle on a bootstrap results store; small and picklable (holds no open zarr objects).

    Obtain one with :func:`open_or_create_store` (client, before the run) or :func:`open_store`
    (reading back). Every method opens the arrays by path, so a copy sent to a worker process
    can call :meth:`write_replicate` directly.

    Attributes
    ----------
    path : str
        Local absolute path or fsspec URL of the zarr group.
    n_replicates, n_eval, n_targets, n_coef : int
        ``B``, evaluation points, targets ``k`` and coefficients per target ``p``. The arrays may
        hold more than ``B`` replicates (a store grown by another run); this handle reads and
        writes the first ``B``.
    storage_options : dict or None
        fsspec options for URLs.
    """

    path: str
    n_replicates: int
    n_eval: int
    n_targets: int
    n_coef: int
    storage_options: dict[str, Any] | None = field(default=None, hash=False)

    # -- zarr access --------------------------------------------------------------------------
    def _array(self, name: str, mode: str = "r") -> zarr.Array:
        kwargs = _zarr_kwargs(self.storage_options)
        return zarr.open_array(self.path, path=name, mode=mode, **kwargs)

    @property
    def attrs(self) -> dict[str, Any]:
        """Group attributes (format, versions, layout, fingerprint)."""
        group = zarr.open_group(self.path, mode="r", **_zarr_kwargs(self.storage_options))
        return group.attrs.asdict()

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The fingerprint recorded at creation."""
        return self.attrs["fingerprint"]

    # -- completion ---------------------------------------------------------------------------
    def done_mask(self) -> np.ndarray:
        """Boolean mask of shape (B,): replicate ``r`` is complete (one read of ``done``)."""
        return self._array(_DONE)[: self.n_replicates] == 1

    def missing(self) -> list[int]:
        """Replicates whose completion flag is not set, in increasing order."""
        return np.flatnonzero(~self.done_mask()).tolist()

    def completed(self) -> list[int]:
        """Replicates whose completion flag is set, in increasing order."""
        return np.flatnonzero(self.done_mask()).tolist()

    # -- writing (worker side) ----------------------------------------------------------------
    def _check_block(self, name: str, values: Any, rows: int, r: int) -> np.ndarray:
        a = np.asarray(values, dtype=np.float64)
        if a.ndim == 1 and self.n_targets == 1:
            a = a[:, None]
        if a.shape != (rows, self.n_targets):
            raise DataError(f"replicate {r}: {name} must have shape ({rows}, {self.n_targets}); found {a.shape}.")
        if not np.isfinite(a).all():
            raise DataError(
                f"replicate {r}: {name} contain NaN or inf; refusing to store them (check the "
                "fit of this replicate, e.g. a larger alpha)."
            )
        return a

    def write_replicate(self, r: int, predictions: Any, coef: Any = None) -> None:
        """Write replicate ``r``: predictions, then coefficients, then the completion flag.

        Parameters
        ----------
        r : int
            Replicate index in ``[0, B)``.
        predictions : array-like of shape (n_eval, k) (or (n_eval,) when k == 1)
            Predictions at the evaluation points, finite.
        coef : array-like of shape (p, k) (or (p,) when k == 1), or None
            Coefficients; must be None (or empty) when the store has ``p == 0``.

        Notes
        -----
        Safe to call concurrently for different ``r`` from any process; rewriting a complete
        replicate with the same values (a retried task) is harmless.
        """
        r = _positive("r", r, 0)
        if r >= self.n_replicates:
            raise ParameterError(f"replicate index must be < {self.n_replicates}; found {r}.")
        preds = self._check_block("predictions", predictions, self.n_eval, r)
        if self.n_coef > 0:
            if coef is None:
                raise ParameterError(
                    f"replicate {r}: the store expects coefficients of shape "
                    f"({self.n_coef}, {self.n_targets}); found None."
                )
            coefs = self._check_block("coefficients", coef, self.n_coef, r)
        elif coef is not None and np.size(coef) > 0:
            raise ParameterError(
                f"replicate {r}: the store was created with n_coef=0 and keeps no coefficients; "
                f"found coefficients of shape {np.shape(coef)}. Pass coef=None."
            )
        self._array(_PREDICTIONS, "r+")[r] = preds
        if self.n_coef > 0:
            self._array(_COEF, "r+")[r] = coefs
        # Last: only a replicate whose values are fully written is ever marked complete.
        self._array(_DONE, "r+")[r] = 1
        logger.debug("bootstrap store %s: replicate %d written", self.path, r)

    # -- reading (client side) ----------------------------------------------------------------
    def _require_complete(self) -> None:
        missing = self.missing()
        if missing:
            raise IncompleteStoreError(
                f"bootstrap store {self.path!r}: {len(missing)} of {self.n_replicates} "
                f"replicates are not complete (replicates {_summarise(missing)}). Rerun the "
                "bootstrap with the same store to compute only those."
            )

    def read_predictions(self, replicates: Sequence[int] | None = None) -> np.ndarray:
        """Predictions of the given replicates (default: all), shape (m, n_eval, k).

        Replicates that are not complete read as NaN (the fill value).
        """
        arr = self._array(_PREDICTIONS)
        if replicates is None:
            return arr[: self.n_replicates]
        idx = [_positive("replicate", r, 0) for r in replicates]
        return arr.get_orthogonal_selection((idx, slice(None), slice(None)))

    def read_band(self, confidence_level: float = 0.9, *, max_bytes: int = 2**28) -> Band:
        """Pointwise mean and percentile band over all replicates.

        Parameters
        ----------
        confidence_level : float, default=0.9
            Central coverage; see :func:`bigkernel.numerics.resample.percentile_band`.
        max_bytes : int, default=2**28
            Memory budget for the replicate values held at once; evaluation points are processed
            in slabs that fit it. Slabs only change speed, not values.

        Returns
        -------
        Band
            ``(mean, lower, upper)``, each of shape (n_eval, k).

        Raises
        ------
        IncompleteStoreError
            If some replicate is not complete.
        """
        self._require_complete()
        arr = self._array(_PREDICTIONS)
        step = max(1, int(max_bytes) // (self.n_replicates * self.n_targets * 8))
        shape = (self.n_eval, self.n_targets)
        mean, lower, upper = np.empty(shape), np.empty(shape), np.empty(shape)
        for i0 in range(0, self.n_eval, step):
            i1 = min(i0 + step, self.n_eval)
            band = percentile_band(arr[: self.n_replicates, i0:i1, :], confidence_level)
            mean[i0:i1], lower[i0:i1], upper[i0:i1] = band.mean, band.lower, band.upper
        return Band(mean=mean, lower=lower, upper=upper)

    def read_prediction_interval(
        self,
        sample: ResidualSample,
        seed: int,
        confidence_level: float = 0.9,
        *,
        max_bytes: int = 2**28,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Bootstrap prediction interval per evaluation point from the stored replicates.

        Parameters
        ----------
        sample : ResidualSample
            The original fit's centre and residual sample (:meth:`read_residuals`).
        seed : int
            The run's seed (draws of the residuals, see
            :func:`bigkernel.numerics.residuals.residual_draws`).
        confidence_level : float, default=0.9
            Central coverage.
        max_bytes : int, default=2**28
            Memory budget for replicate values held at once (slabs change speed, not values).

        Returns
        -------
        lower, upper : ndarray of shape (n_eval, k)

        Raises
        ------
        IncompleteStoreError
            If some replicate is not complete.
        """
        self._require_complete()
        arr = self._array(_PREDICTIONS)
        # a slab holds the replicates and DRAWS_PER_REPLICATE prediction errors per replicate
        per_point = (1 + DRAWS_PER_REPLICATE) * self.n_replicates * self.n_targets * 8
        step = max(1, int(max_bytes) // per_point)
        shape = (self.n_eval, self.n_targets)
        lower, upper = np.empty(shape), np.empty(shape)
        for i0 in range(0, self.n_eval, step):
            i1 = min(i0 + step, self.n_eval)
            lower[i0:i1], upper[i0:i1] = prediction_interval(
                arr[: self.n_replicates, i0:i1, :], sample.center[i0:i1], sample.residuals, seed, i0, confidence_level
            )
        return lower, upper

    def _optional(self, name: str) -> zarr.Array | None:
        group = zarr.open_group(self.path, mode="r", **_zarr_kwargs(self.storage_options))
        try:
            node = group[name]
        except KeyError:
            return None
        return node if isinstance(node, zarr.Array) else None

    def read_eval_points(self) -> np.ndarray | None:
        """The evaluation points recorded at creation, shape (n_eval, d), or None if absent."""
        node = self._optional(_EVAL_POINTS)
        return None if node is None else np.asarray(node[:])

    # -- optional arrays (client side) --------------------------------------------------------
    def _write_array(self, name: str, values: np.ndarray, attrs: Mapping[str, Any] | None = None) -> None:
        group = zarr.open_group(self.path, mode="r+", **_zarr_kwargs(self.storage_options))
        a = np.ascontiguousarray(values)
        node = group.create_array(name, shape=a.shape, chunks=a.shape or None, dtype=a.dtype, overwrite=True)
        node[...] = a
        if attrs:
            node.attrs.update(dict(attrs))  # after the values: attributes mark them complete

    def read_range(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Per-feature ``(data_min, data_max)`` of the training X, or ``(None, None)`` when the
        store does not record it (stores written before it existed)."""
        lo, hi = self._optional(_DATA_MIN), self._optional(_DATA_MAX)
        if lo is None or hi is None or "complete" not in hi.attrs:
            return None, None
        return np.asarray(lo[:], dtype=np.float64), np.asarray(hi[:], dtype=np.float64)

    def write_range(self, data_min: Any, data_max: Any) -> None:
        """Record the training range (client only; ``data_max`` is written last and marks it)."""
        lo = np.asarray(data_min, dtype=np.float64).reshape(-1)
        hi = np.asarray(data_max, dtype=np.float64).reshape(-1)
        if lo.shape != hi.shape:
            raise ParameterError(f"data_min and data_max must have the same shape; found {lo.shape}, {hi.shape}.")
        self._write_array(_DATA_MIN, lo)
        self._write_array(_DATA_MAX, hi, {"complete": True})

    def read_residuals(self) -> tuple[ResidualSample, dict[str, Any]] | None:
        """The original fit's residual sample and its attributes, or None when the store has
        no complete one (a store of confidence runs only, or an interrupted write)."""
        node = self._optional(_RESIDUALS)
        if node is None or not node.attrs.get("complete"):
            return None
        info = node.attrs.asdict()
        center, rows = self._optional(_RES_CENTER), self._optional(_RES_ROWS)
        sample = ResidualSample(
            center=np.asarray(center[:], dtype=np.float64), residuals=np.asarray(node[:]),
            rows=np.asarray(rows[:]), n=int(info["n"]), df=float(info["df"]),
            scale=float(info["scale"]), mean=np.asarray(info["mean"], dtype=np.float64),
            rss=np.asarray(info["rss"], dtype=np.float64),
        )  # fmt: skip
        return sample, info

    def write_residuals(self, sample: ResidualSample, identity: Mapping[str, Any]) -> None:
        """Record the original fit's residual sample (client only).

        ``identity`` (JSON values: the sampling scheme and capacity) is stored with it and
        compared by :func:`bigkernel.bootstrap` before the sample is reused. The ``complete``
        attribute is written last.
        """
        if sample.center.shape != (self.n_eval, self.n_targets):
            raise DataError(
                f"residual centre must have shape ({self.n_eval}, {self.n_targets}); found {sample.center.shape}."
            )
        self._write_array(_RES_CENTER, sample.center)
        self._write_array(_RES_ROWS, sample.rows)
        info = {
            **_normalise_fingerprint(identity), "n": sample.n, "df": sample.df,
            "scale": sample.scale, "mean": sample.mean.tolist(), "rss": sample.rss.tolist(),
            "complete": True,
        }  # fmt: skip
        self._write_array(_RESIDUALS, sample.residuals, info)

    def predictions_dask(self, *, complete_only: bool = False) -> da.Array:
        """Lazy dask array over the stored predictions, one chunk per replicate.

        Parameters
        ----------
        complete_only : bool, default=False
            Keep only complete replicates (decided now, from one read of ``done``). Otherwise
            all B replicates, incomplete ones reading as NaN.

        Returns
        -------
        dask.array.Array of shape (B or n_complete, n_eval, k)
        """
        arr = da.from_zarr(self._array(_PREDICTIONS))[: self.n_replicates]
        return arr[np.asarray(self.completed(), dtype=np.intp)] if complete_only else arr

    def coef_dask(self) -> da.Array:
        """Lazy dask array over the stored coefficients, shape (B, p, k)."""
        if self.n_coef == 0:
            raise ParameterError(f"bootstrap store {self.path!r} was created with n_coef=0 and keeps no coefficients.")
        return da.from_zarr(self._array(_COEF))[: self.n_replicates]

    def mark_complete(self) -> None:
        """Record this handle's B in ``layout`` once its replicates are all complete (client only).

        Does nothing when the layout already records B or more: ``layout.n_replicates`` is the
        largest complete run, what :func:`open_store` reads back.
        """
        self._require_complete()
        group = zarr.open_group(self.path, mode="r+", **_zarr_kwargs(self.storage_options))
        layout = dict(group.attrs["layout"])
        if layout["n_replicates"] < self.n_replicates:
            group.attrs["layout"] = {**layout, "n_replicates": self.n_replicates}
            logger.info("bootstrap store %s now holds %d complete replicates", self.path, self.n_replicates)


# --------------------------------------------------------------------------------------------
# Opening / creating
# --------------------------------------------------------------------------------------------
def _describe_existing(path: str, storage_options: Mapping[str, Any] | None) -> str | None:
    """None if nothing exists at ``path``; otherwise what is there, when it is not a zarr group."""
    fs, fs_path = fsspec.core.url_to_fs(path, **dict(storage_options or {}))
    if not fs.exists(fs_path):
        return None
    if fs.isfile(fs_path):
        return "a file"
    if not fs.ls(fs_path, detail=False):
        return "an empty folder"
    return ""  # a non-empty folder: let zarr tell what it is


def _open_existing_group(path: str, storage_options: Mapping[str, Any] | None, *, for_writing: bool) -> zarr.Group:
    """Open an existing bootstrap store group read-only.

    A path holding anything else raises OutputExistsError when we meant to write there (it is
    never modified), ModelFormatError when we only meant to read it.
    """
    error: type[Exception] = OutputExistsError if for_writing else ModelFormatError
    hint = " Choose another store path; bigkernel never overwrites it." if for_writing else ""
    what = _describe_existing(path, storage_options)
    if what:
        raise error(f"{path!r} exists but is {what}, not a bootstrap store.{hint}")
    try:
        group = zarr.open_group(path, mode="r", **_zarr_kwargs(storage_options))
    except zarr.errors.ContainsArrayError:
        raise error(f"{path!r} is a zarr array, not a bootstrap store.{hint}") from None
    except (zarr.errors.GroupNotFoundError, FileNotFoundError, zarr.errors.NodeTypeValidationError):
        raise error(f"{path!r} exists but is a folder that is not a zarr group, not a bootstrap store.{hint}") from None
    fmt = group.attrs.get("format")
    if fmt != FORMAT:
        raise error(
            f"{path!r} is a zarr group but not a bootstrap store (attribute 'format': expected "
            f"{FORMAT!r}, found {fmt!r}; a foreign group, or a store whose creation was "
            f"interrupted — delete it if so).{hint}"
        )
    version = group.attrs.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise StoreMismatchError(
            f"bootstrap store {path!r} has format_version {version!r}; this bigkernel reads "
            f"format_version <= {FORMAT_VERSION}. Upgrade bigkernel, or use a new store path."
        )
    return group


def _check_arrays(group: zarr.Group, store: BootstrapStore, layout_replicates: int) -> int:
    """Check the replicate arrays' shapes; return their length L (>= the layout's B)."""
    e, k, p = store.n_eval, store.n_targets, store.n_coef
    length = None
    expected = {_PREDICTIONS: (e, k), _DONE: ()}
    if p > 0:
        expected[_COEF] = (p, k)
    for name, tail in expected.items():
        try:
            found = tuple(group[name].shape)
        except KeyError:
            found = None
        if found is None or found[1:] != tail or found[0] < layout_replicates or found[0] != (length or found[0]):
            raise StoreMismatchError(
                f"bootstrap store {store.path!r} is damaged: array {name!r} expected shape "
                f"{(length or layout_replicates, *tail)}, found {found if found is not None else 'no such array'}. "
                "Delete the store or use a new store path."
            )
        length = found[0]
    return int(length)


def _grow(path: str, group: zarr.Group, length: int, n_replicates: int) -> None:
    """Lengthen the replicate arrays to ``n_replicates`` (client only, before any task runs)."""
    logger.info("bootstrap store %s: growing from %d to %d replicates", path, length, n_replicates)
    for name in (_PREDICTIONS, _COEF, _DONE):
        if name in group:
            node = group[name]
            node.resize((n_replicates, *node.shape[1:]))


def open_store(path: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None) -> BootstrapStore:
    """Open an existing bootstrap store (no fingerprint check), e.g. to read results back.

    Parameters
    ----------
    path : str or os.PathLike
        Local path or fsspec URL.
    storage_options : dict, optional
        fsspec options for URLs.

    Returns
    -------
    BootstrapStore

    Raises
    ------
    DataNotFoundError
        Nothing exists at ``path``.
    ModelFormatError
        ``path`` holds something that is not a bootstrap store.
    """
    path = _normalise_path(path)
    if _describe_existing(path, storage_options) is None:
        raise DataNotFoundError(f"no bootstrap store at {path!r}.")
    group = _open_existing_group(path, storage_options, for_writing=False)
    layout = group.attrs.get("layout")
    try:
        store = BootstrapStore(
            path=path,
            n_replicates=int(layout["n_replicates"]),
            n_eval=int(layout["n_eval"]),
            n_targets=int(layout["n_targets"]),
            n_coef=int(layout["n_coef"]),
            storage_options=dict(storage_options) if storage_options else None,
        )
    except (TypeError, KeyError, ValueError):
        raise ModelFormatError(
            f"bootstrap store {path!r} is damaged: attribute 'layout' expected "
            f"{{n_replicates, n_eval, n_targets, n_coef}}, found {layout!r}."
        ) from None
    _check_arrays(group, store, store.n_replicates)
    return store


def open_or_create_store(
    path: str | os.PathLike[str],
    fingerprint: Mapping[str, Any],
    n_replicates: int,
    n_eval: int,
    n_targets: int,
    n_coef: int,
    *,
    eval_points: Any = None,
    storage_options: Mapping[str, Any] | None = None,
) -> BootstrapStore:
    """Create a bootstrap store, or reopen it if it was made by the same job.

    Call this on the client, before any replicate task runs: it is the only writer of the
    group metadata.

    Parameters
    ----------
    path : str or os.PathLike
        Local path or fsspec URL of the store (a zarr v3 group).
    fingerprint : dict
        JSON-serialisable identity of the job: data (n, d, k, dtype, content digest), seed,
        estimator parameters, resampling scheme (method, block_rows, scheme name), B, n_eval and
        an evaluation-points digest (see :func:`array_digest`). Nested dicts are compared key by
        key.
    n_replicates : int
        Number of replicates ``B >= 1``.
    n_eval : int
        Number of evaluation points ``>= 1``.
    n_targets : int
        Number of targets ``k >= 1``.
    n_coef : int
        Coefficients per target ``p >= 0`` stored per replicate; 0 stores none.
    eval_points : array-like of shape (n_eval, d), optional
        Evaluation points, kept in the store (array ``eval_points``) so that results can be
        read back and plotted without them. Written only at creation; on reopening they are not
        compared (put their digest in ``fingerprint`` for that).
    storage_options : dict, optional
        fsspec options for URLs.

    Returns
    -------
    BootstrapStore

    Raises
    ------
    StoreMismatchError
        The store exists but was made by a different job; the message lists every differing
        field with the expected and found values.
    OutputExistsError
        ``path`` exists but is not a bootstrap store (a file, an empty or foreign folder, a foreign
        zarr node). Nothing is modified.

    Notes
    -----
    One function on purpose: creating a store and checking an existing one against the
    fingerprint must stay side by side, so that the two can never disagree about what makes
    a store the same run.
    """
    path = _normalise_path(path)
    store = BootstrapStore(
        path=path,
        n_replicates=_positive("n_replicates", n_replicates, 1),
        n_eval=_positive("n_eval", n_eval, 1),
        n_targets=_positive("n_targets", n_targets, 1),
        n_coef=_positive("n_coef", n_coef, 0),
        storage_options=dict(storage_options) if storage_options else None,
    )
    expected = {  # B is not compared: a store of the same job serves any B (grown if needed)
        "layout": {
            "n_eval": store.n_eval,
            "n_targets": store.n_targets,
            "n_coef": store.n_coef,
        },
        "fingerprint": _normalise_fingerprint(fingerprint),
    }
    kwargs = _zarr_kwargs(storage_options)
    points = None
    if eval_points is not None:
        points = np.asarray(eval_points, dtype=np.float64)
        if points.ndim == 1:
            points = points[:, np.newaxis]
        if points.ndim != 2 or points.shape[0] != store.n_eval:
            raise ParameterError(f"eval_points must have shape ({store.n_eval}, d); found {points.shape}.")

    if _describe_existing(path, storage_options) is None:
        group = zarr.open_group(path, mode="w-", **kwargs)
        B, e, k, p = store.n_replicates, store.n_eval, store.n_targets, store.n_coef
        group.create_array(_PREDICTIONS, shape=(B, e, k), chunks=(1, e, k), dtype="float64", fill_value=np.nan)
        if p > 0:
            group.create_array(_COEF, shape=(B, p, k), chunks=(1, p, k), dtype="float64", fill_value=np.nan)
        group.create_array(_DONE, shape=(B,), chunks=(1,), dtype="uint8", fill_value=0)
        if points is not None:
            group.create_array(_EVAL_POINTS, shape=points.shape, chunks=points.shape, dtype="float64")[...] = points
        # Attributes last: they are what makes the group a valid store.
        group.attrs.update(
            {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "versions": _library_versions(),
                "created_utc": datetime.datetime.now(datetime.UTC).isoformat(),
                "layout": {"n_replicates": B, **expected["layout"]},
                "fingerprint": expected["fingerprint"],
            }
        )
        logger.info("created bootstrap store %s (B=%d, n_eval=%d, k=%d, p=%d)", path, B, e, k, p)
        return store

    group = _open_existing_group(path, storage_options, for_writing=True)
    attrs = group.attrs.asdict()
    layout = dict(attrs.get("layout", {}))
    recorded = layout.pop("n_replicates", None)
    found = {"layout": layout, "fingerprint": attrs.get("fingerprint", {})}
    diffs = _diff(expected, found)
    if diffs:
        raise StoreMismatchError(
            f"bootstrap store {path!r} was made by a different job; it cannot be reused. "
            "Differing fields:\n" + "\n".join(diffs) + "\nUse a new store path, or delete the "
            "old store to recompute all replicates (n_bootstraps alone may differ: a store of "
            "the same job is grown, or its first replicates used)."
        )
    if not isinstance(recorded, int):
        raise ModelFormatError(f"bootstrap store {path!r} is damaged: 'layout.n_replicates' is {recorded!r}.")
    length = _check_arrays(group, store, recorded)
    if length < store.n_replicates:
        _grow(path, zarr.open_group(path, mode="r+", **kwargs), length, store.n_replicates)
    logger.info("reusing bootstrap store %s (%d replicates stored, %d asked for)", path, length, store.n_replicates)
    return store
