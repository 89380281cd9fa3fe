"""A real Dask deployment: `dask scheduler` and two `dask worker` processes (each with its nanny)
on 127.0.0.1, started by these tests, and `bigkernel run` as a real subprocess against them.

What these tests prove
----------------------
* A random-feature job on an existing scheduler (``cluster.address``) saves the model of a
  LocalCluster run of the same job (coefficients to 1e-10 relative).
* SIGKILL of the worker process running a fit task: its nanny restarts it, the scheduler reruns
  the lost tasks, and the job completes with the coefficients of an undisturbed run.
* A task that kills every worker it runs on (a worker memory limit below what D=4096 needs) ends
  the job with a ClusterError naming the task and KilledWorker, exit code 2, and neither
  model.zarr nor metrics.json.
* The bootstrap through the same cluster gives the LocalCluster's replicates and percentiles;
  SIGKILL of a worker mid-bootstrap loses and duplicates no replicate (same percentiles).

Every process is started in its own process group and killed with it by a finalizer, also when
a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zarr

import bigkernel
from bigkernel.cli import main
from bigkernel.data.synthetic import SyntheticSpec, make_data

distributed = pytest.importorskip("distributed")

N_ROWS = 1_000_000  # 8 chunks of 131072 rows: ~0.5 s per fit task on one core, D=512 float32
D = 512
START_TIMEOUT = 60
JOB_TIMEOUT = 300


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``python -m <args>`` in a new process group, output to ``log``."""
    with open(log, "wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "-m", *args], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)


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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[ProcessCluster]:
    logs = tmp_path_factory.mktemp("cluster-logs")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [_spawn(["dask", "scheduler", "--host", "127.0.0.1", "--port", str(port),
                     "--no-dashboard"], logs / "scheduler.log")]
    client = None
    try:
        for i in range(2):
            procs.append(_spawn(["dask", "worker", address, "--nthreads", "1", "--nworkers", "1",
                                 "--host", "127.0.0.1", "--no-dashboard", "--name", f"w{i}"],
                                logs / f"worker{i}.log"))
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
"""


def _job(folder: Path, name: str, data: Path, cluster: str, D: int = D, dtype: str = "float32",
         extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(JOB.format(name=name, output=folder / name, data=data, cluster=cluster, D=D,
                               dtype=dtype) + textwrap.dedent(extra))
    return path


def _run_cli(job: Path, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`bigkernel run job` as a real subprocess (its own process group), output to ``log``."""
    return _spawn(["bigkernel.cli", "run", str(job)], log, env=env)


def _finish(proc: subprocess.Popen, log: Path) -> int:
    try:
        return proc.wait(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        _stop([proc])
        raise AssertionError(f"job did not finish in {JOB_TIMEOUT} s:\n{_tail(log)}") from None


def _assert_same_model(a, b, rtol: float = 1e-10) -> None:
    """Coefficients and intercept equal to ``rtol`` relative (to the largest coefficient)."""
    scale = float(np.max(np.abs(b.coef_)))
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=rtol, atol=rtol * scale)
    assert a.intercept_ == pytest.approx(b.intercept_, rel=rtol)
    assert a.alpha_ == b.alpha_ and a.n_samples_fit_ == b.n_samples_fit_


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, data):
    """The job on a LocalCluster of 2 single-thread worker processes (in-process CLI)."""
    folder = tmp_path_factory.mktemp("local")
    job = _job(folder, "local", data, "{local: {n_workers: 2, threads_per_worker: 1}}")
    assert main(["-q", "run", str(job)]) == 0
    return bigkernel.load(folder / "local" / "model.zarr"), json.loads(
        (folder / "local" / "metrics.json").read_text())


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


def test_job_on_existing_cluster_matches_local_cluster(cluster, data, local_reference, tmp_path):
    job = _job(tmp_path, "remote", data, f"{{address: '{cluster.address}'}}")
    log = tmp_path / "remote.log"
    assert _finish(_run_cli(job, log), log) == 0, _tail(log)
    model = bigkernel.load(tmp_path / "remote" / "model.zarr")
    ref, ref_metrics = local_reference
    _assert_same_model(model, ref)
    metrics = json.loads((tmp_path / "remote" / "metrics.json").read_text())
    assert metrics["scores"]["holdout"]["rmse"] == pytest.approx(
        ref_metrics["scores"]["holdout"]["rmse"], rel=1e-10)
    assert metrics["data"]["n_samples"] == N_ROWS
    assert f"connecting to the Dask scheduler at {cluster.address}" in log.read_text()


def test_sigkill_of_a_worker_mid_fit_gives_the_same_coefficients(cluster, data, local_reference,
                                                                  tmp_path):
    pids = cluster.worker_pids()
    job = _job(tmp_path, "killed", data, f"{{address: '{cluster.address}'}}")
    log = tmp_path / "killed.log"
    proc = _run_cli(job, log)
    try:
        victim = cluster.wait_for_task("block_stats")  # a fit task is running on this worker
        killed_pid = cluster.kill_worker(victim, pids)
        assert _finish(proc, log) == 0, _tail(log)
    finally:
        _stop([proc])
    _assert_same_model(bigkernel.load(tmp_path / "killed" / "model.zarr"), local_reference[0])
    # the nanny brought the worker back (a new process); the scheduler saw the old one go
    cluster.client.wait_for_workers(2, timeout=START_TIMEOUT)
    assert killed_pid not in cluster.worker_pids().values()
    assert victim in (cluster.logs / "scheduler.log").read_text().split("Remove worker", 1)[-1]


def test_a_task_that_keeps_killing_workers_is_a_clear_error(tmp_path):
    """A worker memory limit below what D=4096 float64 needs (~330 MiB per task on top of the
    worker's ~180 MiB): the nanny kills the worker at 95 % of its limit on every attempt."""
    small = tmp_path / "small.zarr"
    make_data(SyntheticSpec("friedman1", 4096, 5, 1.0, 0), small, chunk_rows=4096)
    job = _job(tmp_path, "dies", small, "{local: {n_workers: 1, threads_per_worker: 1, "
               "memory_limit: 400MB}}", D=4096, dtype="float64")
    log = tmp_path / "dies.log"
    assert _finish(_run_cli(job, log), log) == 2, _tail(log)
    text = log.read_text()
    assert "ClusterError: the fit pass failed: task 'block_stats-" in text, _tail(log)
    assert "killed every worker that ran it (4 attempts" in text and "KilledWorker" in text
    assert "Memory per worker" in text
    out = tmp_path / "dies"
    assert not (out / "model.zarr").exists() and not (out / "metrics.json").exists()


# --------------------------------------------------------------------------------------------
# Bootstrap through the same cluster (API: the job section is not there yet)
# --------------------------------------------------------------------------------------------

B = 8


def _bootstrap(data: Path, store: Path, client):
    from bigkernel.models.bootstrap import bootstrap

    ds = bigkernel.open_source(data)
    est = bigkernel.RandomFeatureRidge(gamma=0.5, n_components=128, alpha=1e-2, dtype="float32",
                                       random_state=0)
    X_eval = zarr.open_group(data, mode="r")["X"][:64]
    return bootstrap(est, ds.X, ds.y, X_eval, n_bootstraps=B, random_state=11, store=store,
                     batch_size=4, client=client)


def _assert_same_band(a, b) -> None:
    for name in ("mean", "lower", "upper"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a.predictions.compute(), b.predictions.compute(), rtol=1e-10,
                               atol=1e-12)


@pytest.fixture(scope="module")
def bootstrap_reference(tmp_path_factory, data):
    from bigkernel.jobs.cluster import client_from_config
    from bigkernel.jobs.config import ClusterConfig, LocalClusterConfig

    store = tmp_path_factory.mktemp("boot") / "local.zarr"
    local = ClusterConfig(local=LocalClusterConfig(n_workers=2, threads_per_worker=1))
    with client_from_config(local) as client:
        return _bootstrap(data, store, client)


def test_bootstrap_on_existing_cluster_matches_local_cluster(cluster, data, bootstrap_reference,
                                                             tmp_path):
    with distributed.Client(cluster.address, set_as_default=False) as client:
        res = _bootstrap(data, tmp_path / "remote.zarr", client)
    assert res.n_computed == B
    _assert_same_band(res, bootstrap_reference)


def test_sigkill_of_a_worker_mid_bootstrap_loses_no_replicate(cluster, data, bootstrap_reference,
                                                              tmp_path):
    from bigkernel.models.bootstrap_store import open_store

    pids = cluster.worker_pids()
    store = tmp_path / "killed.zarr"
    result: dict[str, object] = {}

    def run() -> None:
        try:
            with distributed.Client(cluster.address, set_as_default=False) as client:
                result["res"] = _bootstrap(data, store, client)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    victim = cluster.wait_for_task("block_stats")
    killed_pid = cluster.kill_worker(victim, pids)
    thread.join(JOB_TIMEOUT)
    assert not thread.is_alive(), "the bootstrap did not finish"
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    res = result["res"]
    assert res.n_computed == B and open_store(store).missing() == []
    _assert_same_band(res, bootstrap_reference)  # replicate by replicate: none lost or doubled
    cluster.client.wait_for_workers(2, timeout=START_TIMEOUT)
    assert killed_pid not in cluster.worker_pids().values()
