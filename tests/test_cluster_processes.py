"""A real Dask deployment: `dask scheduler` and two `dask worker` processes (each with its nanny)
on 127.0.0.1, started by these tests, and `bigkernel run` as a real subprocess against them.

What these tests prove
----------------------
* A random-feature fit and a bootstrap run as one job on an existing scheduler
  (``cluster.address``) save the model, the scores and the bootstrap replicates and percentiles
  of the same job on a LocalCluster (to 1e-10 relative; bitwise here).
* SIGKILL of a worker process while it runs a fit task, then of a worker while it runs a
  bootstrap task: each nanny restarts its worker, the scheduler reruns the lost tasks, and the
  job completes with the coefficients of the undisturbed run (bitwise: a recomputed task gives
  identical sums) and every replicate once, with the undisturbed percentiles.
* A task that kills every worker it runs on (a worker memory limit below what D=4096 needs) ends
  the job with a ClusterError naming the task and KilledWorker, exit code 2, and neither
  model.zarr nor metrics.json.

Every process is started in its own process group and killed with it by a finalizer, also when
a test fails.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import bigkernel
from bigkernel.data.synthetic import SyntheticSpec, make_data
from bigkernel.io.band_store import open_store

distributed = pytest.importorskip("distributed")

N_ROWS = 524_288  # 4 chunks of 131072 rows: ~0.5 s per fit task on one core at D=512 float32
D = 512
B = 4  # bootstrap replicates: 2 batches of 2, ~1 s per task
START_TIMEOUT = 60
JOB_TIMEOUT = 300


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env() -> dict[str, str]:
    """This process's environment without the BLAS thread settings a LocalCluster leaks.

    distributed's nanny writes its ``pre-spawn-environ`` (OMP/OPENBLAS/MKL_NUM_THREADS=1) into
    ``os.environ`` of the process that starts a LocalCluster, and every later subprocess inherits
    it. The D×D eigendecomposition on the client differs in its last bits with the BLAS thread
    count, which the ill-conditioned coefficients amplify to ~1e-8: two jobs compare to 1e-10
    only when their client processes run BLAS alike, as two `bigkernel run` from one shell do.
    """
    import dask

    leaked = dask.config.get("distributed.nanny.pre-spawn-environ", {})
    env = {k: v for k, v in os.environ.items() if k not in leaked}
    # ... and alike means one fixed count: with more than one BLAS thread the client's LAPACK
    # takes the cores other processes leave idle (numerics.threads.lapack_threads), which the
    # test's own scheduler and workers change from run to run (a clean CI run: 6e-9 apart)
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    """Start ``python -m <args>`` in a new process group, output to ``log``."""
    with open(log, "wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=_clean_env(),
        )


def _stop(procs: list[subprocess.Popen]) -> None:
    """Terminate each process group (nanny and worker together); SIGKILL what lingers."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        try:  # also children left behind by a process that exited (e.g. a spawned worker)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=15)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"({path} missing)"


@dataclass
class ProcessCluster:
    """A running `dask scheduler` + 2 `dask worker` processes, and a client to watch them."""

    address: str
    client: distributed.Client
    logs: Path

    def worker_pids(self) -> dict[str, int]:
        return self.client.run(os.getpid)

    def wait_for_task(self, prefix: str, timeout: float = JOB_TIMEOUT) -> str:
        """Poll the scheduler until a worker is processing a task whose key starts with
        ``prefix``; return that worker's address."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for worker, keys in self.client.processing().items():
                if any(str(k).startswith(prefix) for k in keys):
                    return worker
            time.sleep(0.02)
        raise AssertionError(f"no {prefix!r} task was processed within {timeout} s")

    def kill_worker(self, address: str, pids: dict[str, int]) -> int:
        """SIGKILL the worker process (not its nanny) at ``address``; return its pid."""
        pid = pids[address]
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_for_restart(self, gone: str, timeout: float = START_TIMEOUT) -> None:
        """Wait until the scheduler has dropped worker ``gone`` and has two workers again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            workers = self.client.nthreads()
            if gone not in workers and len(workers) == 2:
                return
            time.sleep(0.05)
        raise AssertionError(f"worker {gone} was not replaced within {timeout} s")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[ProcessCluster]:
    logs = tmp_path_factory.mktemp("cluster-logs")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [
        _spawn(
            ["dask", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], logs / "scheduler.log"
        )
    ]
    client = None
    try:
        for i in range(2):
            procs.append(
                _spawn(
                    [
                        "dask",
                        "worker",
                        address,
                        "--nthreads",
                        "1",
                        "--nworkers",
                        "1",
                        "--host",
                        "127.0.0.1",
                        "--no-dashboard",
                        "--name",
                        f"w{i}",
                    ],
                    logs / f"worker{i}.log",
                )
            )
        client = distributed.Client(address, timeout=START_TIMEOUT, set_as_default=False)
        client.wait_for_workers(2, timeout=START_TIMEOUT)
        yield ProcessCluster(address, client, logs)
    finally:
        if client is not None:
            client.close()
        _stop(procs)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.zarr"
    return Path(make_data(SyntheticSpec("friedman1", N_ROWS, 5, 1.0, 0), path, chunk_rows=131_072))


# --------------------------------------------------------------------------------------------
# Jobs
# --------------------------------------------------------------------------------------------

JOB = """\
name: {name}
output: {output}
data:
  train: {{path: {data}}}
  holdout_fraction: 0.2
model:
  gamma: 0.5
  n_components: {D}
  alpha: 1.0e-2
  dtype: {dtype}
cluster: {cluster}
progress: false
plots: false
"""

BOOTSTRAP = f"""\
bootstrap:
  n_bootstraps: {B}
  eval_grid: {{n_points: 50, feature: 0}}
"""


def _job(
    folder: Path, name: str, data: Path, cluster: str, D: int = D, dtype: str = "float32", extra: str = BOOTSTRAP
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(JOB.format(name=name, output=folder / name, data=data, cluster=cluster, D=D, dtype=dtype) + extra)
    return path


def _run_cli(job: Path, log: Path) -> subprocess.Popen:
    """`bigkernel run job` as a real subprocess (its own process group), output to ``log``."""
    return _spawn(["bigkernel.cli", "run", str(job)], log)


def _finish(proc: subprocess.Popen, log: Path) -> int:
    try:
        return proc.wait(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        _stop([proc])
        raise AssertionError(f"job did not finish in {JOB_TIMEOUT} s:\n{_tail(log)}") from None


@dataclass
class JobResult:
    """What a finished job wrote: model, metrics and bootstrap run."""

    model: object
    metrics: dict
    boot: object


def _result(output: Path) -> JobResult:
    from bigkernel.bands.bootstrap import load_bootstrap

    return JobResult(
        bigkernel.load(output / "model.zarr"),
        json.loads((output / "metrics.json").read_text()),
        load_bootstrap(output / "bootstrap.zarr"),
    )


def _assert_same_job(a: JobResult, b: JobResult, rtol: float = 1e-10) -> None:
    """Coefficients (relative to the largest), scores, replicates and percentiles to ``rtol``."""
    scale = float(np.max(np.abs(b.model.coef_)))
    np.testing.assert_allclose(a.model.coef_, b.model.coef_, rtol=rtol, atol=rtol * scale)
    assert a.model.intercept_ == pytest.approx(b.model.intercept_, rel=rtol)
    assert a.model.alpha_ == b.model.alpha_ and a.model.n_samples_fit_ == b.model.n_samples_fit_
    for group in ("train", "holdout"):
        assert a.metrics["scores"][group]["rmse"] == pytest.approx(b.metrics["scores"][group]["rmse"], rel=rtol)
    assert a.boot.n_bootstraps == b.boot.n_bootstraps == B
    np.testing.assert_allclose(
        a.boot.predictions.compute(), b.boot.predictions.compute(), rtol=rtol, atol=1e-12
    )  # replicate by replicate
    for name in ("mean", "lower", "upper"):
        np.testing.assert_allclose(getattr(a.boot, name), getattr(b.boot, name), rtol=rtol, atol=1e-12)


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, data) -> JobResult:
    """The job on a LocalCluster of 2 single-thread worker processes."""
    folder = tmp_path_factory.mktemp("local")
    job = _job(folder, "local", data, "{local: {n_workers: 2, threads_per_worker: 1}}")
    log = folder / "local.log"
    assert _finish(_run_cli(job, log), log) == 0, _tail(log)
    return _result(folder / "local")


def _wait_for_log(path: Path, text: str, proc: subprocess.Popen, timeout: float = JOB_TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"the job ended before logging {text!r}"
        time.sleep(0.02)
    raise AssertionError(f"{text!r} not logged within {timeout} s")


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


@pytest.mark.slow  # the default suite: the same job, killed twice, equals the LocalCluster one (below)
def test_job_on_existing_cluster_matches_local_cluster(cluster, data, local_reference, tmp_path):
    """Undisturbed, on the running scheduler: the LocalCluster job's results and the log of a
    job on a scheduler address. test_sigkill_of_workers_mid_fit_and_mid_bootstrap asserts the
    same of a job whose workers are killed (a recomputed task gives the identical sums)."""
    job = _job(tmp_path, "remote", data, f"{{address: '{cluster.address}'}}")
    log = tmp_path / "remote.log"
    assert _finish(_run_cli(job, log), log) == 0, _tail(log)
    res = _result(tmp_path / "remote")
    _assert_same_job(res, local_reference)
    assert res.metrics["data"]["n_samples"] == N_ROWS
    assert res.metrics["bootstrap"]["n_computed"] == B
    text = log.read_text()
    assert f"connecting to the Dask scheduler at {cluster.address}" in text
    assert "Dask cluster: 2 worker(s), 2 thread(s)" in text
    assert "Dask dashboard" not in text  # the scheduler runs with --no-dashboard
    # the job pinned BLAS per host: 2 single-thread workers share this machine's cores
    from dask.system import CPU_COUNT

    blas = cluster.client.run(lambda dask_worker: dask_worker.plugins["bigkernel-blas-threads"].threads)
    assert set(blas.values()) == {max(1, CPU_COUNT // 2)}


def test_sigkill_of_workers_mid_fit_and_mid_bootstrap(cluster, data, local_reference, tmp_path):
    """A job on the running scheduler whose worker is SIGKILLed mid-fit, then one mid-bootstrap,
    saves the LocalCluster job's model (bitwise), scores and replicates; its log is a scheduler
    address job's (test_job_on_existing_cluster_matches_local_cluster, -m slow, runs it
    undisturbed)."""
    job = _job(tmp_path, "killed", data, f"{{address: '{cluster.address}'}}")
    log, job_log = tmp_path / "killed.log", tmp_path / "killed" / "job.log"
    killed = []
    pids = cluster.worker_pids()
    proc = _run_cli(job, log)
    try:
        # 1. while the fit runs: a one-pass statistics task is on this worker
        victim = cluster.wait_for_task("block_stats")
        killed.append((victim, cluster.kill_worker(victim, pids)))
        cluster.wait_for_restart(victim)  # its nanny starts a new worker process
        pids = cluster.worker_pids()
        # 2. while the bootstrap runs: its weighted statistics tasks
        _wait_for_log(job_log, "replicates already in the store, computing", proc)
        victim = cluster.wait_for_task("block_stats")
        killed.append((victim, cluster.kill_worker(victim, pids)))
        assert _finish(proc, log) == 0, _tail(log)
    finally:
        _stop([proc])
    res = _result(tmp_path / "killed")
    _assert_same_job(res, local_reference)
    assert res.metrics["data"]["n_samples"] == N_ROWS
    text = log.read_text()
    assert f"connecting to the Dask scheduler at {cluster.address}" in text
    assert "Dask cluster: 2 worker(s), 2 thread(s)" in text
    assert "Dask dashboard" not in text  # the scheduler runs with --no-dashboard
    # a recomputed task gives the identical sums: the coefficients are bitwise those of the
    # undisturbed run (same BLAS threads per worker)
    assert np.array_equal(res.model.coef_, local_reference.model.coef_)
    assert res.metrics["bootstrap"]["n_computed"] == B
    assert open_store(tmp_path / "killed" / "bootstrap.zarr").missing() == []
    # both kills really happened, and the nannies brought the workers back
    cluster.wait_for_restart(killed[-1][0])
    scheduler_log = (cluster.logs / "scheduler.log").read_text()
    for victim, pid in killed:
        assert f"Remove worker addr: {victim}" in scheduler_log
        assert pid not in cluster.worker_pids().values()
    # the job pinned BLAS per host, in the restarted workers too: 2 single-thread workers share
    # this machine's cores
    from dask.system import CPU_COUNT

    blas = cluster.client.run(lambda dask_worker: dask_worker.plugins["bigkernel-blas-threads"].threads)
    assert set(blas.values()) == {max(1, CPU_COUNT // 2)}


def test_a_task_that_keeps_killing_workers_is_a_clear_error(tmp_path, monkeypatch):
    """A worker memory limit below what D=4096 float64 needs (~330 MiB per task on top of the
    worker's ~180 MiB): the nanny kills the worker at 95 % of its limit on every attempt. The
    scheduler gives up after 2 attempts here (allowed-failures 1, set for the job's process; the
    default 3 would start two more workers to kill), and the error counts the attempts made."""
    monkeypatch.setenv("DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES", "1")
    small = tmp_path / "small.zarr"
    make_data(SyntheticSpec("friedman1", 4096, 5, 1.0, 0), small, chunk_rows=4096)
    job = _job(
        tmp_path,
        "dies",
        small,
        "{local: {n_workers: 1, threads_per_worker: 1, memory_limit: 400MB}}",
        D=4096,
        dtype="float64",
        extra="",
    )
    log = tmp_path / "dies.log"
    assert _finish(_run_cli(job, log), log) == 2, _tail(log)
    text = log.read_text()
    assert "ClusterError: the fit pass failed: task 'block_stats-" in text, _tail(log)
    assert "killed every worker that ran it (2 attempts" in text and "KilledWorker" in text
    assert "more memory than the worker's limit of 381 MiB" in text and "Memory per worker" in text
    out = tmp_path / "dies"
    assert not (out / "model.zarr").exists() and not (out / "metrics.json").exists()


def test_dashboard_link_is_logged_when_enabled(caplog):
    """A local cluster logs its link when ``dashboard: true``; for a scheduler address the link
    is logged when the status page answers (the `dask scheduler --no-dashboard` here has none,
    and the job log of test_sigkill_of_workers_mid_fit_and_mid_bootstrap shows no link)."""
    from bigkernel.jobs.cluster import client_from_config, dashboard_served
    from bigkernel.jobs.config import ClusterConfig, LocalClusterConfig

    for dashboard in (True, False):
        caplog.clear()
        config = ClusterConfig(local=LocalClusterConfig(n_workers=1, threads_per_worker=1, dashboard=dashboard))
        with caplog.at_level(logging.INFO, logger="bigkernel"), client_from_config(config) as client:
            link = client.dashboard_link
            # not probed without a dashboard: an in-process scheduler serves the status page
            # once any dashboard has run in the same process
            if dashboard:
                assert dashboard_served(link)
        logged = [r.getMessage() for r in caplog.records if r.name == "bigkernel.jobs.cluster"]
        assert (f"Dask dashboard: {link}" in logged) is dashboard, logged
        assert link.startswith("http://127.0.0.1:")  # loopback unless asked otherwise


def test_worker_without_bigkernel_is_a_cluster_error():
    """Checked before any work is sent (a stub client: installing a bigkernel-free environment
    for a real worker is out of reach of a test)."""
    from importlib.metadata import PackageNotFoundError

    from bigkernel.errors import ClusterError
    from bigkernel.jobs.cluster import _check_workers

    class Stub:
        def nthreads(self):
            return {"tcp://10.0.0.7:4000": 2, "tcp://10.0.0.8:4000": 2}

        def run(self, function, *args, on_error="raise"):
            return {
                "tcp://10.0.0.7:4000": bigkernel.__version__,
                "tcp://10.0.0.8:4000": PackageNotFoundError("bigkernel"),
            }

    with pytest.raises(
        ClusterError,
        match=r"bigkernel is not installed on 1 of 2 workers .*"
        r"tcp://10\.0\.0\.8:4000.*install bigkernel",
    ):
        _check_workers(Stub(), "tcp://10.0.0.5:8786")


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))


def _reset_peak_rss() -> int:
    """Reset this process's peak RSS (Linux VmHWM) to its current RSS; return that RSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_bytes("VmRSS:")


def _peak_rss() -> int:
    return _status_bytes("VmHWM:")


@pytest.mark.spawn  # the worker's memory as a user's job starts it (not forked from the suite's forkserver)
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
def test_worker_peak_memory_is_within_the_documented_estimate(data):
    """docs/deployment.md sizes workers with fit_worker_memory: a real worker's peak resident
    memory during a fit (D=1024 float32, 2 threads, 4 chunks of 131072 rows) stays below it.
    The estimator is given no client: it runs on the active one (the job's way, and the API's)."""
    from bigkernel.jobs.cluster import client_from_config, fit_worker_memory
    from bigkernel.jobs.config import ClusterConfig, LocalClusterConfig
    from bigkernel.models.random_features import feature_block_rows
    from bigkernel.numerics.splits import HoldoutSplit

    ds = bigkernel.open_source(data)
    est = bigkernel.RandomFeatureRidge(gamma=0.5, n_components=1024, alpha=1e-2, dtype="float32", random_state=0)
    config = ClusterConfig(local=LocalClusterConfig(n_workers=1, threads_per_worker=2))
    with client_from_config(config) as client:
        bigkernel.RandomFeatureRidge(n_components=8).fit(ds.X[:4096], ds.y[:4096])  # imports
        idle = max(client.run(_reset_peak_rss).values())
        est.fit_dataset(ds, weights=HoldoutSplit(0, 0.2))
        peak = max(client.run(_peak_rss).values())
    bound = fit_worker_memory(1024, "float32", 131_072, 5, threads=2)
    assert peak - idle >= feature_block_rows(1024, "float32") * 1024 * 4  # the fit ran there
    assert peak <= bound, f"peak {peak / 2**20:.0f} MiB > estimate {bound / 2**20:.0f} MiB"


@pytest.mark.slow
def test_large_job_survives_a_worker_kill(cluster, tmp_path):
    """n = 2**24 rows (16.8 million; d = 5, 128 chunks), D = 512 float32 on the two workers: an
    undisturbed run and a run whose worker is SIGKILLed mid-fit save bitwise the same model."""
    n = 2**24
    data = Path(make_data(SyntheticSpec("friedman1", n, 5, 1.0, 0), tmp_path / "big.zarr", chunk_rows=131_072))
    models = {}
    for name in ("undisturbed", "killed"):
        job = _job(tmp_path, name, data, f"{{address: '{cluster.address}'}}", extra="")
        log = tmp_path / f"{name}.log"
        pids = cluster.worker_pids()
        proc = _run_cli(job, log)
        try:
            if name == "killed":
                victim = cluster.wait_for_task("block_stats")
                cluster.kill_worker(victim, pids)
            assert _finish(proc, log) == 0, _tail(log)
        finally:
            _stop([proc])
        if name == "killed":
            cluster.wait_for_restart(victim)
        models[name] = bigkernel.load(tmp_path / name / "model.zarr")
        assert json.loads((tmp_path / name / "metrics.json").read_text())["data"]["n_samples"] == n
    assert np.array_equal(models["killed"].coef_, models["undisturbed"].coef_)
    assert models["killed"].intercept_ == models["undisturbed"].intercept_
