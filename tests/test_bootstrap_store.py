"""Bootstrap results store: creation, resume, refusal of foreign/mismatched paths, band."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import pickle
from pathlib import Path

import numpy as np
import pytest
import zarr

from bigkernel.errors import (
    DataError,
    DataNotFoundError,
    IncompleteStoreError,
    ModelFormatError,
    OutputExistsError,
    ParameterError,
    StoreMismatchError,
)
from bigkernel.io.band_store import (
    FORMAT,
    BootstrapStore,
    array_digest,
    open_or_create_store,
    open_store,
)
from bigkernel.numerics.resample import percentile_band

B, N_EVAL, K, P = 6, 5, 2, 3


def _fingerprint(**changes):
    fp = {
        "data": {"n": 1000, "d": 1, "k": K, "dtype": "float64", "digest": "sha256:abc"},
        "seed": 2**100 + 7,  # entropies are large ints; must round-trip exactly
        "estimator": {"alpha": 0.1, "gamma": np.float64(2.0), "n_components": 64},
        "resampling": {"method": "multinomial", "block_rows": 65536},
        "n_bootstraps": B,
        "eval": {"n_eval": N_EVAL, "digest": array_digest(np.linspace(0, 1, N_EVAL))},
        "tags": ("a", "b"),
    }
    for key, value in changes.items():
        section, _, leaf = key.partition("__")
        if leaf:
            fp[section] = {**fp[section], leaf: value}
        else:
            fp[section] = value
    return fp


def _values(r):
    """Deterministic per-replicate values, as a real replicate's would be."""
    rng = np.random.default_rng([7, r])
    return rng.normal(size=(N_EVAL, K)), rng.normal(size=(P, K))


def _create(path, **changes):
    return open_or_create_store(path, _fingerprint(**changes), B, N_EVAL, K, P)


def _snapshot(path: Path):
    if path.is_file():
        return path.read_bytes()
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in sorted(path.rglob("*"))}


def test_create_layout(tmp_path):
    store = _create(tmp_path / "bs.zarr")
    group = zarr.open_group(store.path, mode="r")
    assert group.attrs["format"] == FORMAT and group.attrs["format_version"] == 1
    assert group.attrs["fingerprint"]["seed"] == 2**100 + 7
    assert group.attrs["layout"] == {"n_replicates": B, "n_eval": N_EVAL, "n_targets": K, "n_coef": P}
    assert group["predictions"].shape == (B, N_EVAL, K)
    assert group["predictions"].chunks == (1, N_EVAL, K)
    assert group["coef"].chunks == (1, P, K)
    assert group["done"].dtype == np.uint8 and group["done"].chunks == (1,)
    assert store.missing() == list(range(B)) and store.completed() == []
    assert np.isnan(store.read_predictions()).all()


def test_resume_lists_exactly_the_missing_replicates(tmp_path):
    path = tmp_path / "bs.zarr"
    store = _create(path)
    for r in (0, 3, 4):
        store.write_replicate(r, *_values(r))
    again = _create(str(path))  # same job, str path this time
    assert again == store
    assert again.missing() == [1, 2, 5] and again.completed() == [0, 3, 4]
    assert np.array_equal(again.read_predictions([3])[0], _values(3)[0])
    assert np.array_equal(zarr.open_array(again.path, path="coef", mode="r")[4], _values(4)[1])
    with pytest.raises(IncompleteStoreError, match=r"3 of 6 .*1, 2, 5"):
        again.read_band()


def test_done_flag_is_written_last(tmp_path):
    store = _create(tmp_path / "bs.zarr")
    # A task killed after writing its values but before its flag: values are on disk...
    preds, coef = _values(2)
    zarr.open_array(store.path, path="predictions", mode="r+")[2] = preds
    zarr.open_array(store.path, path="coef", mode="r+")[2] = coef
    # ...yet the replicate is still missing after reopening, and gets recomputed.
    assert 2 in _create(store.path).missing()
    # A rejected write (bad shape) leaves nothing behind, flag included.
    with pytest.raises(DataError, match=r"must have shape \(5, 2\); found \(4, 2\)"):
        store.write_replicate(1, np.zeros((4, K)), coef)
    assert store.missing() == list(range(B))


def test_band_from_resumed_store_is_bitwise_equal(tmp_path):
    clean = _create(tmp_path / "clean.zarr")
    for r in range(B):
        clean.write_replicate(r, *_values(r))
    resumed = _create(tmp_path / "resumed.zarr")
    for r in (4, 1):  # first run, "killed" after two replicates
        resumed.write_replicate(r, *_values(r))
    resumed = _create(tmp_path / "resumed.zarr")
    for r in reversed(resumed.missing()):  # second run, another order
        resumed.write_replicate(r, *_values(r))
    a, b = clean.read_band(0.9), resumed.read_band(0.9)
    for x, y in zip(a, b):
        assert x.shape == (N_EVAL, K) and x.tobytes() == y.tobytes()
    reference = percentile_band(np.stack([_values(r)[0] for r in range(B)]), 0.9)
    for x, y in zip(a, reference):
        assert x.tobytes() == y.tobytes()
    # Evaluation points processed in slabs (tiny budget) give the same bytes.
    for x, y in zip(clean.read_band(0.9, max_bytes=1), a):
        assert x.tobytes() == y.tobytes()
    lazy = clean.predictions_dask()
    assert lazy.chunksize == (1, N_EVAL, K)
    assert np.array_equal(lazy.compute(scheduler="sync"), clean.read_predictions())
    assert clean.coef_dask().shape == (B, P, K)


def test_different_job_is_refused_naming_the_fields(tmp_path):
    path = tmp_path / "bs.zarr"
    store = _create(path)
    store.write_replicate(0, *_values(0))
    before = _snapshot(path)
    with pytest.raises(StoreMismatchError) as info:
        _create(path, seed=1, estimator__alpha=0.2)
    msg = str(info.value)
    assert "fingerprint.seed: expected 1, found 1267650600228229401496703205383" in msg
    assert "fingerprint.estimator.alpha: expected 0.2, found 0.1" in msg
    assert "digest" not in msg  # unchanged fields are not listed
    assert "new store path" in msg and "delete" in msg
    absent = r"fingerprint\.data\.extra: expected 1, found <absent>"
    with pytest.raises(StoreMismatchError, match=absent):
        _create(path, data__extra=1)
    with pytest.raises(StoreMismatchError, match=r"layout\.n_eval: expected 4, found 5"):
        open_or_create_store(path, _fingerprint(), B, N_EVAL - 1, K, P)
    assert _snapshot(path) == before  # refusals never modify the store
    assert _create(path).completed() == [0]


def test_more_replicates_grow_the_store_fewer_use_the_first(tmp_path):
    """Same job, another B: grown (layout B recorded once complete) or read as its first B."""
    path = tmp_path / "bs.zarr"
    store = _create(path)
    for r in range(B):
        store.write_replicate(r, *_values(r))
    grown = open_or_create_store(path, _fingerprint(), B + 3, N_EVAL, K, P)
    assert grown.missing() == [B, B + 1, B + 2] and grown.completed() == list(range(B))
    assert zarr.open_array(str(path), path="predictions", mode="r").shape == (B + 3, N_EVAL, K)
    # interrupted growth: the store still reads back as its complete B-replicate run
    grown.write_replicate(B, *_values(B))
    assert open_store(path).n_replicates == B and open_store(path).missing() == []
    with pytest.raises(IncompleteStoreError):
        grown.mark_complete()
    for r in (B + 1, B + 2):
        grown.write_replicate(r, *_values(r))
    grown.mark_complete()
    assert open_store(path).n_replicates == B + 3
    every = np.stack([_values(r)[0] for r in range(B + 3)])
    assert np.array_equal(open_store(path).read_predictions(), every)
    # fewer: the first B - 2 replicates, band bitwise that of those values alone
    fewer = open_or_create_store(path, _fingerprint(), B - 2, N_EVAL, K, P)
    assert fewer.missing() == [] and fewer.read_predictions().shape == (B - 2, N_EVAL, K)
    expected = percentile_band(every[: B - 2], 0.9)
    band = fewer.read_band(0.9)
    assert np.array_equal(band.lower, expected.lower) and np.array_equal(band.upper, expected.upper)
    assert fewer.predictions_dask().shape == (B - 2, N_EVAL, K)
    fewer.mark_complete()  # never lowers the recorded B
    assert open_store(path).n_replicates == B + 3


@pytest.mark.parametrize("kind", ["file", "empty", "folder", "group", "array", "unfinished"])
def test_foreign_path_is_refused_and_untouched(tmp_path, kind):
    path = tmp_path / "target"
    if kind == "file":
        path.write_bytes(b"not a store")
    elif kind == "empty":
        path.mkdir()
    elif kind == "folder":
        path.mkdir()
        (path / "notes.txt").write_text("keep me")
    elif kind == "group":
        zarr.open_group(str(path), mode="w-", attributes={"owner": "someone else"})
    elif kind == "array":
        zarr.create_array(str(path), shape=(3,), dtype="float64")
    else:  # a store whose creation stopped before the attributes were written
        zarr.open_group(str(path), mode="w-").create_array("done", shape=(B,), dtype="uint8")
    before = _snapshot(path)
    with pytest.raises(OutputExistsError, match="not a bootstrap store"):
        _create(path)
    with pytest.raises(ModelFormatError, match="not a bootstrap store"):
        open_store(path)
    assert _snapshot(path) == before


def test_open_store_reads_layout(tmp_path):
    with pytest.raises(DataNotFoundError):
        open_store(tmp_path / "absent.zarr")
    created = _create(tmp_path / "bs.zarr")
    opened = open_store(tmp_path / "bs.zarr")
    assert opened == created
    assert opened.fingerprint["tags"] == ["a", "b"]


def test_write_validation_and_no_coef(tmp_path):
    store = _create(tmp_path / "bs.zarr")
    preds, coef = _values(0)
    with pytest.raises(DataError, match="NaN or inf"):
        store.write_replicate(0, np.full((N_EVAL, K), np.nan), coef)
    with pytest.raises(ParameterError, match="found None"):
        store.write_replicate(0, preds)
    with pytest.raises(ParameterError, match="< 6"):
        store.write_replicate(B, preds, coef)
    assert store.missing() == list(range(B))

    single = open_or_create_store(tmp_path / "k1.zarr", _fingerprint(), 3, N_EVAL, 1, 0)
    assert "coef" not in zarr.open_group(single.path, mode="r")
    single.write_replicate(1, preds[:, 0])  # (n_eval,) accepted when k == 1
    assert single.missing() == [0, 2]
    assert single.predictions_dask(complete_only=True).shape == (1, N_EVAL, 1)
    with pytest.raises(ParameterError, match="n_coef=0"):
        single.write_replicate(2, preds[:, 0], coef[:, 0])
    with pytest.raises(ParameterError, match="JSON"):
        open_or_create_store(tmp_path / "x.zarr", {"alpha": float("nan")}, 3, N_EVAL, 1, 0)
    assert not (tmp_path / "x.zarr").exists()


def _write_in_worker(store: BootstrapStore, r: int) -> None:
    store.write_replicate(r, *_values(r))


def test_write_from_another_process(tmp_path):
    store = _create(tmp_path / "bs.zarr")
    assert pickle.loads(pickle.dumps(store)) == store
    # forked from the suite's preloaded forkserver (tests/conftest.py): the store is pickled to a
    # process of its own all the same, without a fresh interpreter's imports
    ctx = multiprocessing.get_context("forkserver")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        list(pool.map(_write_in_worker, [store] * 2, [2, 5]))
    assert store.missing() == [0, 1, 3, 4]
    assert np.array_equal(store.read_predictions([5])[0], _values(5)[0])


def test_write_order_predictions_coef_then_flag(tmp_path, monkeypatch):
    store = _create(tmp_path / "bs.zarr")
    order = []
    real_array = BootstrapStore._array

    class Recorder:
        def __init__(self, arr, name):
            self._arr, self._name = arr, name

        def __setitem__(self, key, value):
            order.append(self._name)
            self._arr[key] = value

    def recording_array(self, name, mode="r"):
        arr = real_array(self, name, mode)
        return Recorder(arr, name) if mode != "r" else arr

    monkeypatch.setattr(BootstrapStore, "_array", recording_array)
    store.write_replicate(3, *_values(3))
    assert order == ["predictions", "coef", "done"]


def test_fsspec_url_store(tmp_path):
    url = f"memory://bigkernel-tests/{tmp_path.name}/bs.zarr"
    store = open_or_create_store(url, _fingerprint(), B, N_EVAL, K, P)
    assert store.path == url
    store.write_replicate(1, *_values(1))
    assert open_or_create_store(url, _fingerprint(), B, N_EVAL, K, P).missing() == [0, 2, 3, 4, 5]
    with pytest.raises(StoreMismatchError, match="fingerprint.seed"):
        open_or_create_store(url, _fingerprint(seed=3), B, N_EVAL, K, P)
    local = open_or_create_store(f"file://{tmp_path}/f.zarr", _fingerprint(), B, N_EVAL, K, P)
    assert local.path == str(tmp_path / "f.zarr")


def test_eval_points_are_kept(tmp_path):
    points = np.linspace(0, 1, N_EVAL)
    store = open_or_create_store(tmp_path / "e.zarr", _fingerprint(), B, N_EVAL, K, P, eval_points=points)
    assert np.array_equal(store.read_eval_points(), points[:, None])
    assert np.array_equal(open_store(store.path).read_eval_points(), points[:, None])
    assert _create(tmp_path / "none.zarr").read_eval_points() is None
    with pytest.raises(ParameterError, match=r"eval_points must have shape \(5, d\)"):
        open_or_create_store(tmp_path / "bad.zarr", _fingerprint(), B, N_EVAL, K, P, eval_points=np.zeros((4, 2)))
    assert not (tmp_path / "bad.zarr").exists()
