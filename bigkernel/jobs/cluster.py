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
import importlib
import importlib.metadata
import logging
from collections.abc import Iterator

import numpy as np
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

from bigkernel._version import __version__
from bigkernel.devices import INSTALL_HINT
from bigkernel.errors import ClusterError, DeviceError
from bigkernel.graph.stream import SPLIT_EVERY
from bigkernel.jobs.config import ClusterConfig
from bigkernel.models.random_features import feature_block_rows
from bigkernel.runtime import blas_threads_for

logger = logging.getLogger(__name__)


#: what a local cluster's processes print to stderr themselves: nothing below CRITICAL. Their
#: WARNING and above ("Compute Failed" tracebacks, the nanny's on Ctrl-C) are forwarded to this
#: process's ``distributed`` logger instead, which job.log keeps and the command line shows with -v
_WORKER_STDERR_LEVEL = logging.CRITICAL

#: resident memory of an idle worker process once a first task has imported what tasks need
#: (numpy, scipy, scikit-learn, zarr, dask, distributed: 213 MiB measured, scripts/worker_memory.py)
WORKER_BASE_BYTES = 220 * 2**20


def fit_worker_memory(
    n_components: int,
    dtype: str,
    chunk_rows: int,
    n_features: int,
    *,
    threads: int = 1,
    n_targets: int = 1,
    n_sets: int = 1,
    weighted: bool = False,
) -> int:
    """Peak bytes of one Dask worker during the one-pass fit (an upper estimate).

    Derived from the code of the pass (``numerics.sums.block_stats``, ``graph.stream``): each
    running task holds its X and y chunk (float64, up to twice while dask assembles it from
    storage chunks), a feature sub-block of ``feature_block_rows(D, dtype)`` rows × D with room
    for one temporary of its size, the D×D product of that sub-block in the feature dtype and
    its float64 accumulator; the worker also keeps finished partial sums until a reduction task
    (fan-in ``SPLIT_EVERY``) combines them. Measured peaks are below it
    (``scripts/worker_memory.py``; ``tests/test_cluster_processes.py`` checks one).

    Parameters
    ----------
    n_components : int
        D.
    dtype : {"float32", "float64"}
        Feature dtype.
    chunk_rows : int
        Rows per chunk of X.
    n_features : int
        Columns of X.
    threads : int, default=1
        Dask threads of the worker (tasks running at once).
    n_targets : int, default=1
    n_sets : int, default=1
        Weight sets summed in one pass: 1 for a fit, the batch size for a bootstrap.
    weighted : bool, default=False
        Weighted sums (a bootstrap pass): two more feature sub-blocks per task, for the copies
        of the rows with non-zero weight and of their scaled features.

    Returns
    -------
    int
        Bytes, including :data:`WORKER_BASE_BYTES`.
    """
    D, s = int(n_components), np.dtype(dtype).itemsize
    stats = 8 * n_sets * (D * D + D * (n_targets + 2) + 3 * n_targets + 1)
    blocks = 4 if weighted else 2
    per_task = (
        2 * 8 * chunk_rows * (n_features + n_targets)
        + blocks * feature_block_rows(D, dtype) * D * s
        + s * D * D
        + stats
    )
    held = (SPLIT_EVERY + 1) * stats  # partials waiting for a combine, and its running total
    return WORKER_BASE_BYTES + threads * per_task + held


class BlasThreadsPlugin(WorkerPlugin):
    """Limit BLAS threads on each worker (also after a nanny restarts it).

    Parameters
    ----------
    host_threads : dict of str to int, optional
        Dask threads of all workers on each host, when the plugin is registered. A worker on a
        host not listed (one that joined later) gets one BLAS thread per Dask thread, the
        setting a nanny starts workers with anyway.

    Attributes
    ----------
    threads : int or None
        The BLAS thread count set on this worker (None before :meth:`setup`); read it on a
        worker as ``dask_worker.plugins["bigkernel-blas-threads"].threads``.
    """

    name = "bigkernel-blas-threads"

    def __init__(self, host_threads: dict[str, int] | None = None) -> None:
        self.host_threads = dict(host_threads or {})
        self.threads: int | None = None

    def setup(self, worker) -> None:
        """Set the worker process's BLAS thread count (process-wide: its tasks all share it)."""
        from dask.system import CPU_COUNT  # honours cpusets and cgroup CPU quotas (containers)
        from distributed.comm.addressing import get_address_host
        from threadpoolctl import threadpool_limits

        host_total = self.host_threads.get(get_address_host(worker.address))
        threads = blas_threads_for(host_total, CPU_COUNT) if host_total else 1
        threadpool_limits(limits=threads)
        self.threads = threads  # the worker holds its own copy of the plugin


class IgnoreInterruptPlugin(WorkerPlugin):
    """Worker processes of a local cluster ignore SIGINT.

    Ctrl-C in a terminal signals the whole process group, workers included: each interrupted
    worker printed its own ``KeyboardInterrupt`` traceback. The job's process takes the
    interrupt, stops and closes the cluster, whose nannies end the workers.
    """

    name = "bigkernel-ignore-sigint"

    def setup(self, worker) -> None:
        """Ignore SIGINT in this worker process (setup runs on its event loop, the main thread)."""
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)


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
    return Security(
        tls_ca_file=s.tls_ca_file,
        tls_client_cert=s.tls_client_cert,
        tls_client_key=s.tls_client_key,
        require_encryption=s.require_encryption,
    )


def _connect(address: str, security) -> Client:
    """Connect to an existing scheduler; an unreachable one or a bad address is a ClusterError."""
    import dask

    try:
        # not set as the default here: distributed would keep a failed client registered as the
        # default (it hangs every later compute); the caller makes it current once connected
        return Client(address, security=security, set_as_default=False)
    except ValueError as exc:  # e.g. an unknown scheme: distributed names the known ones
        raise ClusterError(f"{address!r} is not a Dask scheduler address: {exc}") from None
    except TypeError as exc:  # distributed's way of saying a tls:// address got no TLS context
        raise ClusterError(
            f"the scheduler at {address} speaks TLS but no credentials were given: set "
            f"cluster.security (tls_ca_file, tls_client_cert, tls_client_key) ({exc})"
        ) from None
    except (OSError, TimeoutError) as exc:
        timeout = dask.config.get("distributed.comm.timeouts.connect")
        raise ClusterError(
            f"could not connect to the Dask scheduler at {address} within {timeout}: {exc}. "
            "Check that `dask scheduler` runs there and that this machine can reach it (host, "
            "port, firewall; TLS files in cluster.security for tls:// addresses), or leave the "
            "address out (cluster.address, --address) to run on this machine"
        ) from None


def _check_workers(client: Client, address: str) -> None:
    """Wait for a first worker, then check every worker can import this bigkernel."""
    if not client.nthreads():
        logger.warning(
            "the scheduler at %s has no workers yet; waiting for one (start them with `dask worker %s`)",
            address,
            address,
        )
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
        logger.warning(
            "workers run bigkernel %s, this client %s: results may differ from a run with one version everywhere",
            ", ".join(other),
            __version__,
        )


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
        with _connect(cfg.address, _security(cfg)) as client, client.as_current():
            _check_workers(client, cfg.address)
            client.register_plugin(BlasThreadsPlugin(host_threads(client)))
            _log_cluster(client, dashboard=None)
            yield client
        return
    local = cfg.local
    if local.gpus is not None:
        with _cuda_cluster(local) as cluster, Client(cluster, set_as_default=True) as client:
            client.register_plugin(BlasThreadsPlugin(host_threads(client)))
            client.register_plugin(IgnoreInterruptPlugin())
            client.forward_logging("distributed", level=logging.WARNING)
            _log_cluster(client, dashboard=bool(local.dashboard))
            yield client
        return
    kwargs = dict(
        n_workers=local.n_workers, threads_per_worker=local.threads_per_worker,
        memory_limit=local.memory_limit, host=local.host, processes=True,
        # dashboard_address=None does not disable the scheduler's HTTP server (dask/distributed#8136):
        # without a dashboard, keep the bare HTTP routes on a free loopback port instead of :8787
        dashboard_address=f"{local.host}:8787" if local.dashboard else f"{local.host}:0",
        scheduler_kwargs={"dashboard": bool(local.dashboard)},
        silence_logs=_WORKER_STDERR_LEVEL,
    )  # fmt: skip
    logger.info(
        "starting a LocalCluster: %d worker(s) × %d thread(s) on %s",
        local.n_workers,
        local.threads_per_worker,
        local.host,
    )
    with LocalCluster(**kwargs) as cluster, Client(cluster, set_as_default=True) as client:
        client.register_plugin(BlasThreadsPlugin(host_threads(client)))
        client.register_plugin(IgnoreInterruptPlugin())
        client.forward_logging("distributed", level=logging.WARNING)  # into job.log
        _log_cluster(client, dashboard=bool(local.dashboard))
        yield client


def _cuda_cluster(local):
    """A dask-cuda ``LocalCUDACluster``: one worker process per GPU of ``local.gpus``.

    dask-cuda is imported here only (never by a CPU job); without it, one :class:`DeviceError`
    says how to install it.
    """
    try:
        dask_cuda = importlib.import_module("dask_cuda")
    except ImportError as exc:
        raise DeviceError(
            f"cluster.local.gpus needs dask-cuda, which is not installed ({exc}); install the GPU "
            f"extra with {INSTALL_HINT}, or remove cluster.local.gpus for a CPU cluster"
        ) from None
    kwargs = dict(
        threads_per_worker=local.threads_per_worker, memory_limit=local.memory_limit, host=local.host,
        dashboard_address=f"{local.host}:8787" if local.dashboard else f"{local.host}:0",
        scheduler_kwargs={"dashboard": bool(local.dashboard)},
        silence_logs=_WORKER_STDERR_LEVEL,
    )  # fmt: skip
    if local.gpus != "all":
        kwargs["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in local.gpus)
    logger.info("starting a LocalCUDACluster: one worker per GPU (%s), %d thread(s) each on %s",
                local.gpus, local.threads_per_worker, local.host)  # fmt: skip
    return dask_cuda.LocalCUDACluster(**kwargs)


def _log_cluster(client: Client, dashboard: bool | None) -> None:
    """Log the workers and, when a dashboard is served, its link (``dashboard=None``: probe)."""
    nthreads = client.nthreads()
    logger.info("Dask cluster: %d worker(s), %d thread(s)", len(nthreads), sum(nthreads.values()))
    if dashboard is None:
        dashboard = dashboard_served(client.dashboard_link)
    if dashboard:
        logger.info("Dask dashboard: %s", client.dashboard_link)


def dashboard_served(link: str, timeout: float = 2.0) -> bool:
    """Whether the Dask dashboard at ``link`` answers.

    A scheduler started without its dashboard still serves other HTTP routes on the dashboard
    port (dask/distributed#8136), so the port alone does not tell; the status page does.

    Parameters
    ----------
    link : str
        ``client.dashboard_link``.
    timeout : float, default=2.0
        Seconds to wait for the answer.

    Returns
    -------
    bool
    """
    import urllib.request

    try:
        with urllib.request.urlopen(link, timeout=timeout) as answer:
            return answer.status == 200
    except (OSError, ValueError):  # refused, 404 (HTTPError is an OSError), not a URL
        return False
