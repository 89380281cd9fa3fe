"""A Dask client from the job's ``cluster:`` section: an existing scheduler, or a LocalCluster
bound to loopback. Every worker pins BLAS so that Dask threads × BLAS threads <= its cores."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

from bigkernel.jobs.config import ClusterConfig
from bigkernel.models._compute import blas_threads_for

logger = logging.getLogger(__name__)


class BlasThreadsPlugin(WorkerPlugin):
    """Limit BLAS threads on each worker (also after a nanny restarts it)."""

    name = "bigkernel-blas-threads"

    def __init__(self, workers_per_host: int = 1):
        self.workers_per_host = workers_per_host

    def setup(self, worker) -> None:
        from threadpoolctl import threadpool_limits

        per_worker_cores = max(1, (os.cpu_count() or 1) // self.workers_per_host)
        threads = blas_threads_for(worker.state.nthreads, per_worker_cores)
        threadpool_limits(limits=threads)  # process-wide: the worker's tasks all share it
        worker._bigkernel_blas_threads = threads


def _security(cfg: ClusterConfig):
    if cfg.security is None:
        return None
    from distributed.security import Security

    s = cfg.security
    return Security(tls_ca_file=s.tls_ca_file, tls_client_cert=s.tls_client_cert,
                    tls_client_key=s.tls_client_key, require_encryption=s.require_encryption)


@contextlib.contextmanager
def client_from_config(cfg: ClusterConfig) -> Iterator[Client]:
    """Connect to ``cfg.address`` or start a LocalCluster on loopback; close it afterwards."""
    if cfg.address:
        logger.info("connecting to the Dask scheduler at %s", cfg.address)
        with Client(cfg.address, security=_security(cfg), set_as_default=True) as client:
            client.register_plugin(BlasThreadsPlugin(1))
            _log_dashboard(client)
            yield client
        return
    local = cfg.local
    kwargs = dict(
        n_workers=local.n_workers, threads_per_worker=local.threads_per_worker,
        memory_limit=local.memory_limit, host=local.host, processes=True,
        # dashboard_address=None does not disable the scheduler's HTTP server (dask/distributed#8136):
        # without a dashboard, keep the bare HTTP routes on a free loopback port instead of :8787
        dashboard_address=f"{local.host}:8787" if local.dashboard else f"{local.host}:0",
        scheduler_kwargs={"dashboard": bool(local.dashboard)},
    )  # fmt: skip
    logger.info("starting a LocalCluster: %d worker(s) × %d thread(s) on %s", local.n_workers,
                local.threads_per_worker, local.host)
    with LocalCluster(**kwargs) as cluster, Client(cluster, set_as_default=True) as client:
        client.register_plugin(BlasThreadsPlugin(local.n_workers))
        if local.dashboard:
            _log_dashboard(client)
        yield client


def _log_dashboard(client: Client) -> None:
    if client.scheduler_info().get("services", {}).get("dashboard"):
        logger.info("Dask dashboard: %s", client.dashboard_link)
