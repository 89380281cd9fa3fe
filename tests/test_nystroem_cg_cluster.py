"""NystroemRidge(solver="cg") on a real distributed.LocalCluster of 2 worker processes: the same
coefficients as the threaded fit, and a worker SIGKILLed mid-fit (its nanny restarts it, the
scheduler reruns its tasks) changes nothing."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import bigkernel
from bigkernel import NystroemRidge
from bigkernel.data.synthetic import SyntheticSpec, make_data

distributed = pytest.importorskip("distributed")

#: workers started as a user's job starts them: these tests are about the worker processes
pytestmark = pytest.mark.spawn

KW = dict(gamma=0.5, n_components=200, landmarks="uniform", random_state=0, solver="cg", tol=1e-8,
          alpha=[3.0, 30.0])  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def _sampled_preconditioner():
    """The sampled preconditioner, as large M get: at M = 200 every row costs fewer than
    SKETCH_EXACT_BUDGET passes, the exact one would converge in one pass, and no CG pass would
    be left to kill a worker in."""
    import bigkernel.solvers.nystroem_cg as nystroem_cg

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nystroem_cg, "SKETCH_EXACT_BUDGET", 0)
        mp.setattr(nystroem_cg, "SKETCH_SMALL_RELATIVE_ALPHA", 0.0)
        yield


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("cg") / "train.zarr"
    return str(make_data(SyntheticSpec("friedman1", 24_000, 5, 1.0, 0), path, chunk_rows=3_000))


@pytest.fixture(scope="module")
def threaded(store):
    src = bigkernel.open_source(store)
    return NystroemRidge(**KW).fit(src.X, src.y)


def _wait_for_task(client, prefix: str, after: int = 0, timeout: float = 120.0) -> str:
    """The worker running a task named ``prefix…`` once more than ``after`` such tasks were seen
    (passes run one after the other: more than one pass's tasks seen means a later pass runs)."""
    deadline, seen = time.monotonic() + timeout, set()
    while time.monotonic() < deadline:
        for worker, keys in client.processing().items():
            running = {str(k) for k in keys if str(k).startswith(prefix)}
            seen |= running
            if running and len(seen) > after:
                return worker
        time.sleep(0.002)
    raise AssertionError(f"no {prefix!r} task beyond the first {after} ran within {timeout} s (saw {len(seen)})")


def test_cluster_fit_equals_threaded_and_survives_a_worker_kill(store, threaded):
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1"
        ) as cluster,  # fmt: skip
        distributed.Client(cluster) as client,
    ):
        src = bigkernel.open_source(store)
        plain = NystroemRidge(**KW).fit(src.X, src.y)
        rel = np.abs(plain.coef_ - threaded.coef_).max() / np.abs(threaded.coef_).max()
        assert rel < 1e-10 and plain.alpha_ == threaded.alpha_ and plain.n_iter_ == threaded.n_iter_

        result, errors = {}, []

        def fit():
            try:
                result["est"] = NystroemRidge(**KW).fit(src.X, src.y)
            except Exception as exc:  # reported below
                errors.append(exc)

        pids = client.run(os.getpid)
        runner = threading.Thread(target=fit)
        runner.start()
        # a CG iteration's pass, not the moments pass (its tasks are falkon-block tasks too): past
        # the first pass's tasks, one per chunk (a fixed 1 s wait lost the race: the whole fit
        # takes 1.04 s on today's machine, 10 CG passes)
        victim = _wait_for_task(client, "falkon-block", after=len(src.X.chunks[0]))
        os.kill(pids[victim], signal.SIGKILL)
        runner.join(timeout=600)
        assert not errors, errors
        killed = result["est"]
        assert pids[victim] not in client.run(os.getpid).values()  # the worker really was replaced
    rel = np.abs(killed.coef_ - threaded.coef_).max() / np.abs(threaded.coef_).max()
    assert rel < 1e-10 and killed.alpha_ == threaded.alpha_
