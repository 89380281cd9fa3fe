"""``runtime.map_rows``: numpy ``predict`` / ``transform`` / ``return_std`` on the local threads.

The suite runs dask's sync scheduler by default (conftest), where ``map_rows`` calls the model
once; these tests switch to the threaded scheduler to exercise the pool.
"""

import threading

import dask
import numpy as np
import pytest
import scipy.sparse as sp

from bigkernel import ExactKernelRidge, RandomFeatureRidge
from bigkernel.runtime import ROW_ALIGN, THREADED_MIN_ROWS, map_rows


class _Recorder:
    """Row blocks → their row sums, remembering the thread and the rows of every call."""

    n_outputs = 1

    def __init__(self):
        self.calls, self.lock = [], threading.Lock()

    def __call__(self, X):
        with self.lock:
            self.calls.append((threading.get_ident(), X.shape[0]))
        return np.asarray(X.sum(axis=1)).reshape(-1, 1)


def test_splits_rows_over_the_threads_at_aligned_edges():
    X = np.random.default_rng(0).standard_normal((5 * ROW_ALIGN + 123, 3))
    rec = _Recorder()
    out = map_rows(rec, X, 1, threads=2)
    np.testing.assert_array_equal(out[:, 0], X.sum(axis=1))
    rows = [r for _, r in rec.calls]
    assert len(rows) >= 2 * 2 and sum(rows) == X.shape[0]
    assert all(r % ROW_ALIGN == 0 for r in sorted(rows)[1:]), rows  # only the last task is short
    assert len({t for t, _ in rec.calls}) == 2  # both threads worked
    assert threading.get_ident() not in {t for t, _ in rec.calls}


@pytest.mark.parametrize("threads, n", [(1, 4 * THREADED_MIN_ROWS), (2, THREADED_MIN_ROWS - 1)])
def test_small_inputs_and_one_thread_run_inline(threads, n):
    rec = _Recorder()
    map_rows(rec, np.ones((n, 2)), 1, threads=threads)
    assert rec.calls == [(threading.get_ident(), n)]


def test_off_the_main_thread_runs_inline():
    """Inside a dask task the cores are busy: no nested pool."""
    rec, seen = _Recorder(), []
    t = threading.Thread(target=lambda: seen.append(map_rows(rec, np.ones((4 * THREADED_MIN_ROWS, 2)), 1, threads=2)))
    t.start()
    t.join()
    assert len(rec.calls) == 1 and seen[0].shape == (4 * THREADED_MIN_ROWS, 1)


def test_a_tasks_error_reaches_the_caller():
    def boom(X):
        raise ValueError("bad block")

    with pytest.raises(ValueError, match="bad block"):
        map_rows(boom, np.ones((4 * THREADED_MIN_ROWS, 2)), 1, threads=2)


def test_sparse_rows_are_sliced_as_stored():
    X = sp.random(3 * THREADED_MIN_ROWS, 5, density=0.2, format="csr", random_state=0)
    rec = _Recorder()
    out = map_rows(rec, X, 1, threads=2)
    np.testing.assert_allclose(out[:, 0], np.asarray(X.sum(axis=1)).ravel(), rtol=1e-12)
    assert len(rec.calls) > 1


@pytest.mark.numerics
def test_threaded_predictions_equal_the_single_threaded_ones():
    """Every row's result is the same computation whatever the split (edges at multiples of
    every sub-block): predict, return_std and transform agree with the sync run to rounding
    (BLAS with 1 thread per task instead of 2 may round a row's product differently)."""
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(600, 3))
    y = np.sin(4 * X[:, 0]) + 0.1 * rng.standard_normal(600)
    Z = rng.uniform(size=(2 * THREADED_MIN_ROWS + 1000, 3))
    rf = RandomFeatureRidge(gamma=2.0, n_components=64, alpha=1e-2, random_state=0).fit(X, y)
    ex = ExactKernelRidge(gamma=2.0, alpha=1e-2).fit(X[:300], y[:300])
    with dask.config.set(scheduler="sync"):
        ref = (rf.predict(Z), rf.predict(Z, return_std=True)[1], rf.transform(Z), ex.predict(Z))
    with dask.config.set(scheduler="threads", num_workers=2):
        got = (rf.predict(Z), rf.predict(Z, return_std=True)[1], rf.transform(Z), ex.predict(Z))
    for a, b in zip(ref, got):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
