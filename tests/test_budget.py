"""Block sizes from a byte budget: never over budget, maximal, monotone, clear errors."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest

from bigkernel.errors import ParameterError
from bigkernel.kernels import RBF, Matern
from bigkernel.numerics.budget import (
    fits_in_budget,
    gram_block_bytes,
    gram_block_rows,
    gram_block_size,
    gram_bytes,
)

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set

MiB = 2**20
CASES = list(itertools.product([1, 7, 1000, 100_000], [1, 500, 20_000], [1, 10, 300], [4, 8], [0.0, 8.0, 24.0], [0, 3]))


@pytest.mark.parametrize("budget", [64 * MiB, 1024 * MiB])
def test_block_rows_fit_and_are_maximal(budget):
    for n, m, d, itemsize, extra, n_rhs in CASES:
        try:
            rows = gram_block_rows(n, m, d, itemsize, budget, extra, n_rhs=n_rhs)
        except ParameterError:
            assert gram_block_bytes(1, m, d, itemsize, extra, n_rhs=n_rhs) > budget
            continue
        assert 1 <= rows <= n
        assert gram_block_bytes(rows, m, d, itemsize, extra, n_rhs=n_rhs) <= budget
        if rows < n:  # one more row would not fit
            assert gram_block_bytes(rows + 1, m, d, itemsize, extra, n_rhs=n_rhs) > budget


def test_block_rows_monotone():
    budgets = [2**k for k in range(20, 34)]
    rows = [gram_block_rows(10**6, 5000, 10, 8, b) for b in budgets]
    assert rows == sorted(rows)
    # more columns, features, bytes per entry or kernel workspace: never more rows
    base = gram_block_rows(10**6, 5000, 10, 4, 512 * MiB, 8)
    assert gram_block_rows(10**6, 10000, 10, 4, 512 * MiB, 8) <= base
    assert gram_block_rows(10**6, 5000, 100, 4, 512 * MiB, 8) <= base
    assert gram_block_rows(10**6, 5000, 10, 8, 512 * MiB, 8) <= base
    assert gram_block_rows(10**6, 5000, 10, 4, 512 * MiB, 16) <= base
    assert gram_block_rows(10**6, 5000, 10, 4, 512 * MiB, 8, n_rhs=10) <= base


def test_block_rows_capped_by_n():
    assert gram_block_rows(10, 10, 2, 8, 10**9) == 10


def test_impossible_budget_says_how_much_is_needed():
    need = gram_block_bytes(1, 20_000, 10, 8, 8.0)
    with pytest.raises(ParameterError, match=f"at least {need} bytes"):
        gram_block_rows(100, 20_000, 10, 8, need - 1)
    assert gram_block_rows(100, 20_000, 10, 8, need) == 1
    with pytest.raises(ParameterError, match="too small"):
        gram_block_size(100, 10, 8, 10)


@pytest.mark.parametrize("budget", [200_000, 64 * MiB, 3 * 1024 * MiB])
@pytest.mark.parametrize(
    "n,d,itemsize,extra,n_rhs",
    [(1, 1, 8, 0.0, 0), (20_000, 10, 4, 8.0, 1), (10**6, 300, 8, 16.0, 4)],
)
def test_square_block_fits_and_is_maximal(budget, n, d, itemsize, extra, n_rhs):
    s = gram_block_size(n, d, itemsize, budget, extra, n_rhs=n_rhs)
    assert 1 <= s <= n
    assert gram_block_bytes(s, s, d, itemsize, extra, n_rhs=n_rhs) <= budget
    if s < n:
        assert gram_block_bytes(s + 1, s + 1, d, itemsize, extra, n_rhs=n_rhs) > budget


def test_square_blocks_monotone_in_budget():
    sizes = [gram_block_size(10**6, 10, 8, 2**k) for k in range(17, 34)]
    assert sizes == sorted(sizes)


def test_fits_in_budget():
    assert gram_bytes(20_000, 8) == 3_200_000_000
    assert fits_in_budget(20_000, 8, 3_200_000_000)
    assert not fits_in_budget(20_000, 8, 3_199_999_999)
    assert fits_in_budget(20_000, 4, 2 * 1024**3)
    assert not fits_in_budget(100_000, 4, 16 * 1024**3)  # 40 GB
    assert fits_in_budget(1, 8, 8)


@pytest.mark.parametrize(
    "call",
    [
        lambda: fits_in_budget(10, 8, 0),
        lambda: fits_in_budget(0, 8, 100),
        lambda: fits_in_budget(10, 8, -1),
        lambda: gram_block_rows(10, 10, 2, 8, float("nan")),
        lambda: gram_block_rows(10, 10, 2, 0, 1000),
        lambda: gram_block_rows(10, 10, 2, 8, 1000, -1.0),
        lambda: gram_block_rows(10, 10, 2, 8, 1000, n_rhs=-1),
        lambda: gram_block_rows(10, 10, True, 8, 1000),
        lambda: gram_block_bytes(0, 10, 2, 8),
    ],
)
def test_bad_arguments(call):
    with pytest.raises(ParameterError):
        call()


@pytest.mark.parametrize("kernel", [RBF(gamma=0.5), Matern(1.0, 2.5)], ids=["rbf", "matern52"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_measured_block_peak_within_budget(kernel, dtype):
    """Compute the block the budget allows, measure its peak memory: it must fit."""
    rng = np.random.default_rng(0)
    m, d, budget = 400, 8, 4 * MiB
    X, Z = rng.normal(size=(5000, d)), rng.normal(size=(m, d))
    itemsize = np.dtype(dtype).itemsize
    extra = kernel.extra_bytes_per_entry(dtype)
    rows = gram_block_rows(len(X), m, d, itemsize, budget, extra)
    assert rows < len(X)  # the budget binds
    block_X = X[:rows].copy()  # the row block is part of the budget
    del X
    tracemalloc.start()
    try:
        held = block_X.copy()  # counted: the row block as a worker would receive it
        out = kernel(held, Z, dtype=dtype)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.shape == (rows, m)
    assert peak + Z.nbytes <= budget, (peak, budget)
