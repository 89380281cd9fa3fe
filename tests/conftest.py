import dask
import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _sync_scheduler_by_default():
    """Single-threaded dask unless a test asks for a cluster (dask-ml's convention)."""
    with dask.config.set(scheduler="sync"):
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def friedman(n, d=10, noise=1.0, seed=0):
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, d, noise, seed), 0, n)
    return a[:, :d], a[:, d]
