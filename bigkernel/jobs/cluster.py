"""A Dask client from the job's ``cluster:`` section: an existing scheduler, or a LocalCluster
bound to loopback. Every worker pins BLAS so that, per host, Dask threads × BLAS threads stay
within its cores.

Connecting to an existing scheduler (``cluster.address``) checks, before any work is sent, that
the scheduler answers (within ``distributed.comm.timeouts.connect``, 30 s by default), that it
has at least one worker (waiting for one, with a warning, when it has none yet — a dask-jobqueue
or Kubernetes cluster may still be starting them) and that bigkernel can be imported on every
worker. Failures are :class:`~bigkernel.errors.ClusterError` naming the address and the fix.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
from collections.abc import Iterator

from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

from bigkernel._version import __version__
from bigkernel.errors import ClusterError
from bigkernel.jobs.config import ClusterConfig
from bigkernel.models._compute import blas_threads_for

logger = logging.getLogger(__name__)


class BlasThreadsPlugin(WorkerPlugin):
    """Limit BLAS threads on each worker (also after a nanny restarts it).

    Parameters
    ----------
    host_threads : dict of str to int, optional
        Dask threads of all workers on each host, when the plugin is registered. A worker on a
        host not listed (one that joined later) gets one BLAS thread per Dask thread, the
        setting a nanny starts workers with anyway.
    """

    name = "bigkernel-blas-threads"

    def __init__(self, host_threads: dict[str, int] | None = None) -> None:
        self.host_threads = dict(host_threads or {})

    def setup(self, worker) -> None:
        """Set the worker process's BLAS thread count (process-wide: its tasks all share it)."""
        from distributed.comm.addressing import get_address_host
        from dask.system import CPU_COUNT  # honours cpusets and cgroup CPU quotas (containers)
        from threadpoolctl import threadpool_limits

        host_total = self.host_threads.get(get_address_host(worker.address))
        threads = blas_threads_for(host_total, CPU_COUNT) if host_total else 1
        threadpool_limits(limits=threads)
        worker._bigkernel_blas_threads = threads


def host_threads(client: Client) -> dict[str, int]:
    """Dask threads per host of the workers connected to ``client``'s scheduler.

    Parameters
    ----------
    client : distributed.Client

    Returns
    -------
    dict of str to int
    """
    from distributed.comm.addressing import get_address_host

    totals: dict[str, int] = {}
    for address, nthreads in client.nthreads().items():
        host = get_address_host(address)
        totals[host] = totals.get(host, 0) + int(nthreads)
    return totals


def _security(cfg: ClusterConfig):
    if cfg.security is None:
        return None
    from distributed.security import Security

    s = cfg.security
    return Security(tls_ca_file=s.tls_ca_file, tls_client_cert=s.tls_client_cert,
                    tls_client_key=s.tls_client_key, require_encryption=s.require_encryption)


def _connect(address: str, security) -> Client:
    """Connect to an existing scheduler; an unreachable one is a ClusterError."""
    import dask

    try:
        return Client(address, security=security, set_as_default=True)
    except (OSError, TimeoutError) as exc:
        timeout = dask.config.get("distributed.comm.timeouts.connect")
        raise ClusterError(
            f"could not connect to the Dask scheduler at {address} (cluster.address) within "
            f"{timeout}: {exc}. Check that `dask scheduler` runs there and that this machine can "
            "reach it (host, port, firewall; TLS files in cluster.security for tls:// "
            "addresses), or remove cluster.address to run on a local cluster"
        ) from None


def _check_workers(client: Client, address: str) -> None:
    """Wait for a first worker, then check every worker can import this bigkernel."""
    if not client.nthreads():
        logger.warning("the scheduler at %s has no workers yet; waiting for one (start them with "
                       "`dask worker %s`)", address, address)
        client.wait_for_workers(1)
    # importlib.metadata.version is pickled by reference to the standard library, so this also
    # works on a worker where bigkernel is missing (any bigkernel function would fail to unpickle)
    found = client.run(importlib.metadata.version, "bigkernel", on_error="return")
    missing = sorted(w for w, v in found.items() if isinstance(v, BaseException))
    if missing:
        raise ClusterError(
            f"bigkernel is not installed on {len(missing)} of {len(found)} workers of the "
            f"scheduler at {address} ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}):"
            f" install bigkernel {__version__} in the workers' environment (see "
            "docs/deployment.md)"
        )
    other = sorted({v for v in found.values() if v != __version__})
    if other:
        logger.warning("workers run bigkernel %s, this client %s: results may differ from a run "
                       "with one version everywhere", ", ".join(other), __version__)


@contextlib.contextmanager
def client_from_config(cfg: ClusterConfig) -> Iterator[Client]:
    """Connect to ``cfg.address`` or start a LocalCluster on loopback; close it afterwards.

    Parameters
    ----------
    cfg : ClusterConfig

    Yields
    ------
    distributed.Client
        Set as the default client while the context is open.

    Raises
    ------
    ClusterError
        The scheduler at ``cfg.address`` cannot be reached, or bigkernel is missing on a worker.
    """
    if cfg.address:
        logger.info("connecting to the Dask scheduler at %s", cfg.address)
        with _connect(cfg.address, _security(cfg)) as client:
            _check_workers(client, cfg.address)
            client.register_plugin(BlasThreadsPlugin(host_threads(client)))
            _log_cluster(client, dashboard=None)
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
        client.register_plugin(BlasThreadsPlugin(host_threads(client)))
        _log_cluster(client, dashboard=bool(local.dashboard))
        yield client


def _log_cluster(client: Client, dashboard: bool | None) -> None:
    """Log the workers and the dashboard link (``dashboard=None``: if the scheduler serves one)."""
    nthreads = client.nthreads()
    logger.info("Dask cluster: %d worker(s), %d thread(s)", len(nthreads), sum(nthreads.values()))
    if dashboard is None:
        dashboard = bool(client.scheduler_info().get("services", {}).get("dashboard"))
    if dashboard:  # a local cluster without one still serves bare HTTP routes: not a dashboard
        logger.info("Dask dashboard: %s", client.dashboard_link)
