import dask
import numpy as np
import pytest

#: what a worker process of a test's LocalCluster starts with, imported once by the forkserver
#: it forks from: distributed's own list (distributed.utils.get_mp_context, its test suite's
#: way; names that do not import are skipped) and bigkernel, whose import is most of the start
_FORKSERVER_PRELOAD = ["distributed", "dask", "msgpack", "cloudpickle", "tornado", "toolz", "numpy", "pandas",
                       "lz4", "bigkernel"]  # fmt: skip
_START_METHOD = "distributed.worker.multiprocessing-method"


@pytest.fixture(autouse=True)
def _sync_scheduler_by_default():
    """Single-threaded dask unless a test asks for a cluster (dask-ml's convention)."""
    with dask.config.set(scheduler="sync"):
        yield


def _start_method(node) -> str:
    return "spawn" if node.get_closest_marker("spawn") else "forkserver"


@pytest.fixture(scope="session", autouse=True)
def _forked_workers():
    """Worker processes of the LocalClusters tests start fork from one preloaded forkserver.

    A spawned worker imports numpy, dask, distributed and bigkernel afresh: about 4 s of CPU on
    this project's 2-core machine, for each of the dozens of LocalClusters the default suite
    starts (a job run in-process starts one). Forked workers are still processes of their own
    under a nanny, talking TCP; the BLAS and hash-seed settings a nanny gives its workers
    (``distributed.nanny.pre-spawn-environ``) are in the forkserver's environment, set by the
    first nanny, which starts it. Tests about the worker processes themselves (kills, restarts,
    worker memory) are marked ``spawn`` and start their workers as a user's job does. Jobs run
    as a real ``bigkernel`` subprocess are not affected: their workers are spawned.
    """
    from distributed.utils import get_mp_context

    with dask.config.set({_START_METHOD: "forkserver"}):
        get_mp_context().set_forkserver_preload(_FORKSERVER_PRELOAD)  # after distributed's own
        yield


@pytest.fixture(scope="module", autouse=True)
def _spawned_workers_in_a_spawn_module(request):
    with dask.config.set({_START_METHOD: _start_method(request.node)}):
        yield


@pytest.fixture(autouse=True)
def _spawned_workers_in_a_spawn_test(request):
    with dask.config.set({_START_METHOD: _start_method(request.node)}):
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def friedman(n, d=10, noise=1.0, seed=0):
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, d, noise, seed), 0, n)
    return a[:, :d], a[:, d]
