"""The one place that runs dask graphs (``compute``, ``persist``): picks the active distributed
client or the local scheduler, shows progress bars when asked, and keeps Dask threads × BLAS
threads <= cores."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import dask
import numpy as np

from bigkernel.errors import ClusterError
from bigkernel.numerics.threads import measured_pass, threadpool_controller

logger = logging.getLogger(__name__)

_progress: contextvars.ContextVar[bool] = contextvars.ContextVar("bigkernel_progress", default=False)
_progress_rows: contextvars.ContextVar[int | None] = contextvars.ContextVar("bigkernel_progress_rows", default=None)

#: seconds between two progress log lines of a pass when stderr is not a terminal
PROGRESS_INTERVAL_S = 10.0
#: how often a local pass's progress is polled (a pass shorter than this logs no line)
PROGRESS_POLL_S = 0.5


@contextlib.contextmanager
def progress_bars(enabled: bool = True, *, rows: int | None = None) -> Iterator[None]:
    """Report the progress of every pass (graph computation) run inside this context.

    On a terminal (stderr is a TTY), a progress bar per pass: dask's on the local scheduler,
    distributed's on a cluster. Otherwise (output redirected to a file, CI, a job's log), a
    log line every :data:`PROGRESS_INTERVAL_S` seconds (logger ``bigkernel.runtime``, INFO)::

        fit: 412/1024 tasks (40 %), 45 s

    or, with ``rows``, ``fit: ≈ 1,200,000 / 2,000,000 rows (60 %; 610/1024 tasks), 31 s``
    (rows estimated from the share of tasks done). The estimators' ``verbose=1`` turns this on
    for their own fit and predict; jobs turn it on unless ``progress: false`` or ``-q``.

    Parameters
    ----------
    enabled : bool, default=True
        False: no progress inside (also when an outer context turned it on).
    rows : int, optional
        Rows of the data the passes read, for the log lines.

    Examples
    --------
    >>> import bigkernel
    >>> with bigkernel.progress_bars():  # doctest: +SKIP
    ...     model.fit(X, y)
    """
    token = _progress.set(enabled)
    rows_token = _progress_rows.set(rows if rows is not None else _progress_rows.get())
    try:
        yield
    finally:
        _progress_rows.reset(rows_token)
        _progress.reset(token)


def progress_rows(rows: int) -> None:
    """Set the rows that the next passes read, for their progress lines, until the enclosing
    :func:`progress_bars` context ends (a job sets its training rows, then its prediction rows)."""
    _progress_rows.set(int(rows))


def progress_line(label: str, done: int, total: int, elapsed: float, rows: int | None = None) -> str:
    """One progress log line of a pass (see :func:`progress_bars`)."""
    frac = done / total if total else 1.0
    tasks = f"{done:,}/{total:,} tasks"
    if rows:
        return f"{label}: ≈ {round(frac * rows):,} / {rows:,} rows ({100 * frac:.0f} %; {tasks}), {elapsed:.0f} s"
    return f"{label}: {tasks} ({100 * frac:.0f} %), {elapsed:.0f} s"


class _Throttle:
    """Logs a pass's progress at most every :data:`PROGRESS_INTERVAL_S` seconds."""

    def __init__(self, label: str) -> None:
        self.label, self.rows = label, _progress_rows.get()
        self.start = self.last = time.monotonic()

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_INTERVAL_S and done < total:
            self.last = now
            logger.info("%s", progress_line(self.label, done, total, now - self.start, self.rows))


def active_client():
    """The current distributed Client, or None when dask runs on the local scheduler.

    A default client that never connected is ignored, with a warning: distributed leaves one
    registered when ``Client(address)`` fails on a malformed address, and computing on it would
    wait forever.
    """
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        return None
    if client.status != "running":
        logger.warning(
            "ignoring the default Dask client %s: its status is %r, not running; running on the local scheduler",
            client,
            client.status,
        )
        return None
    return client


def _local_scheduler() -> str | None:
    """dask's configured scheduler, unless that is distributed without a usable client (the
    config a client that never connected leaves behind): then the local threaded scheduler."""
    if dask.config.get("scheduler", None) in ("dask.distributed", "distributed"):
        return "threads"
    return None


def local_threads() -> int:
    """Threads the local (non-distributed) scheduler will use."""
    if dask.config.get("scheduler", None) in ("sync", "synchronous", "single-threaded"):
        return 1
    return int(dask.config.get("num_workers", None) or dask.system.CPU_COUNT)


def blas_threads_for(dask_threads: int, cores: int | None = None) -> int:
    """BLAS threads per Dask thread so that their product does not exceed the cores.

    The cores are dask's count (``dask.system.CPU_COUNT``: the CPU affinity mask and a cgroup
    quota, as the threaded scheduler's default pool), not ``os.cpu_count()``, which counts every
    CPU of the machine under ``taskset``, in a container or a batch job's CPU allocation."""
    cores = cores or dask.system.CPU_COUNT
    return max(1, cores // max(1, dask_threads))


#: numpy inputs with fewer rows are predicted on the calling thread (a pool costs more than it saves)
THREADED_MIN_ROWS = 16_384
#: row tasks of :func:`map_rows` start at multiples of this: a multiple of every feature
#: sub-block and kernel tile, so each row is computed the same way for any split
ROW_ALIGN = 8192
#: a task's output is at most about this many bytes (``transform`` returns n × D features)
ROW_TASK_BYTES = 64 * 2**20


def map_rows(fn: Callable, X, n_outputs: int, dtype=np.float64, *, threads: int | None = None) -> np.ndarray:
    """``fn`` over row slices of an in-memory ``X`` on the local threads, into one array.

    What the threaded scheduler does for a dask array, without a graph, for numpy (or
    scipy.sparse) inputs of ``predict`` / ``transform``: their cosines and kernel tiles are
    single-threaded numpy, so one call would leave all cores but one idle. Rows are cut at
    multiples of :data:`ROW_ALIGN`, two tasks per thread or more, and BLAS gets
    ``cores // threads`` threads per task (as in :func:`compute`).

    Runs ``fn(X)`` directly for fewer than :data:`THREADED_MIN_ROWS` rows, with one local
    thread (``scheduler="sync"``), and off the main thread: inside a dask task (a worker's or
    the threaded scheduler's thread) the cores are already busy.

    Parameters
    ----------
    fn : callable
        numpy rows (m, d) → array (m, n_outputs); must be thread-safe (it is what dask's
        threaded scheduler runs per chunk).
    X : ndarray or scipy.sparse matrix of shape (n, d)
    n_outputs : int
    dtype : dtype, default=float64
        Of the output.
    threads : int, optional
        Default: :func:`local_threads`.

    Returns
    -------
    ndarray of shape (n, n_outputs)
    """
    threads = local_threads() if threads is None else int(threads)
    n = X.shape[0]
    if threads <= 1 or n < THREADED_MIN_ROWS or threading.current_thread() is not threading.main_thread():
        return fn(X)
    cap = max(ROW_ALIGN, ROW_TASK_BYTES // max(1, n_outputs * np.dtype(dtype).itemsize))
    rows = max(ROW_ALIGN, min(-(-n // (2 * threads)), cap) // ROW_ALIGN * ROW_ALIGN)
    out = np.empty((n, n_outputs), dtype=dtype)

    def task(lo: int) -> None:
        out[lo : lo + rows] = fn(X[lo : lo + rows])

    with _blas_limits(blas_threads_for(threads)), ThreadPoolExecutor(threads) as pool:
        list(pool.map(task, range(0, n, rows)))  # list(): re-raise a task's error here
    return out


def compute(*graphs, client=None, label: str = "pass"):
    """Compute ``graphs`` with a distributed ``client`` (default: the active one) or locally.

    Parameters
    ----------
    *graphs : dask collections or Delayed
    client : distributed.Client, optional
        Default: the active client (``with Client(...):``), else dask's local scheduler.
    label : str, default="pass"
        Name of the pass in logs and error messages.

    Returns
    -------
    tuple
        One result per graph.

    Raises
    ------
    ClusterError
        A task killed every worker that ran it (``distributed.KilledWorker``): the message names
        the task, the last worker and the usual causes.
    """
    client = client or active_client()
    show = _progress_mode()
    if client is not None:
        from distributed import KilledWorker

        futures = (
            client.compute(list(graphs))
            if _has_dataframe(graphs)
            else client.compute(_optimized(graphs), optimize_graph=False)
        )
        try:
            if show == "bars":
                from distributed import progress

                logger.info("%s: running on %s", label, client.scheduler.address)
                progress(futures)
            elif show == "log":
                _cluster_progress_log(futures, label)
            return tuple(client.gather(futures))
        except KilledWorker as exc:
            raise ClusterError(_killed_worker_message(exc, label, client)) from exc
        finally:
            running = [f for f in futures if not f.done()]
            if running:  # a failed or interrupted pass must not keep running on the cluster
                client.cancel(running)
    # worker processes' CPU time is not this process's own: only a threaded pass measures the load
    processes = dask.config.get("scheduler", None) in ("processes", "multiprocessing")
    window = contextlib.nullcontext() if processes else measured_pass()
    with _blas_limits(blas_threads_for(local_threads())), _local_progress(show, label), window:
        return dask.compute(*graphs, scheduler=_local_scheduler())


def _progress_mode() -> str | None:
    """How to show the progress of a pass: ``"bars"`` on a terminal, ``"log"`` lines when
    stderr is not one (bars are noise in logs and CI output), None when progress is off."""
    if not _progress.get():
        return None
    return "bars" if sys.stderr.isatty() else "log"


def _cluster_progress_log(futures, label: str) -> None:
    """Wait for ``futures``, logging the share of their tasks done every interval (what
    ``distributed.progress`` draws as a bar)."""
    from distributed.diagnostics.progressbar import TextProgressBar

    throttle = _Throttle(label)

    class LogBar(TextProgressBar):
        def _draw_bar(self, remaining, all, **kwargs):
            throttle.update(all - remaining, all)

        def _draw_stop(self, **kwargs):
            pass

    LogBar(futures, interval="500ms")


def _has_dataframe(graphs) -> bool:
    """Whether a graph is a dask DataFrame collection (an expression the client must lower
    itself, e.g. a Parquet write): those are computed with dask's own optimization."""
    return any(type(g).__module__.startswith("dask.dataframe") for g in graphs)


def _optimized(graphs) -> list:
    """``graphs`` optimized for a distributed scheduler, without low-level task fusion.

    Fusion merges a chain of tasks into one and keeps the chain's last key as an alias, so a
    key gets one definition in a graph where the chain is linear and another where it is not:
    a table's X and y are slices of one read (``data/tables.py``), so a chunk of X is fused with
    its read in an X-only pass (prediction) and not in a pass over X and y. Passes submitted one
    after another then redefine keys the scheduler still holds, which distributed reports as
    "Detected different `run_spec`" and warns can deadlock (dask/dask#9888). Optimized here,
    as a client would leave it to the scheduler under the scheduler's config; bigkernel's
    tasks are chunk-sized, so fusion saved little.
    """
    with dask.config.set({"optimization.fuse.active": False}):
        return list(dask.optimize(*graphs))


def _killed_worker_message(exc, label: str, client) -> str:
    """Explain a ``distributed.KilledWorker`` in bigkernel's words (task, worker, causes)."""
    task = exc.task if isinstance(exc.task, str) else repr(exc.task)
    worker = getattr(exc.last_worker, "address", exc.last_worker)
    limit = getattr(exc.last_worker, "memory_limit", None)
    if not limit:  # the worker state may be gone; the live workers have the same limit, usually
        try:
            limit = max(w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values())
        except Exception:
            limit = None
    shown = f" of {limit / 2**20:,.0f} MiB" if limit else ""
    return (
        f"the {label} pass failed: task {task!r} killed every worker that ran it "
        f"({exc.allowed_failures + 1} attempts, last on {worker}; distributed.KilledWorker). A "
        f"task that always kills its worker usually needs more memory than the worker's limit{shown} "
        "(see 'Memory per worker' in docs/deployment.md: lower n_components or data.chunk_rows, "
        "or give the workers more memory) or crashed the process; the worker logs say which"
    )


def _blas_limits(threads: int):
    """``threadpool_limits`` through one cached controller: a fresh ``threadpool_limits`` scans
    every loaded library (~9 ms), too much per CG matvec.

    A cap, never a raise: each library keeps its current threads when those are fewer
    (``OPENBLAS_NUM_THREADS=1``, an enclosing ``threadpool_limits``, a CPU affinity mask that
    OpenBLAS honours and ``os.cpu_count`` does not). Raising them made the passes inside
    :func:`compute` run with other BLAS threads than the code around them, so an exact
    bootstrap replicate no longer matched the weighted fit bit for bit.
    """
    controller = threadpool_controller()  # shared with the LAPACK thread limits
    current: dict[str, int] = {}
    for lib in controller.lib_controllers:
        current[lib.user_api] = max(current.get(lib.user_api, 0), lib.num_threads)
    return controller.limit(limits={api: min(threads, n) for api, n in current.items()})


def persist(*graphs, client=None, label: str = "persist"):
    """Persist ``graphs`` (results held in memory: the cluster's, or this process's locally).

    Returns a tuple of collections backed by the computed results, like ``dask.persist``.
    """
    client = client or active_client()
    if client is not None:
        if _progress.get():
            logger.info("%s: persisting on %s", label, client.scheduler.address)
        if _has_dataframe(graphs):
            return tuple(client.persist(list(graphs)))
        return tuple(client.persist(_optimized(graphs), optimize_graph=False))
    with _blas_limits(blas_threads_for(local_threads())), _local_progress(_progress_mode(), label):
        return dask.persist(*graphs, scheduler=_local_scheduler())


@contextlib.contextmanager
def _local_progress(show: str | None, label: str) -> Iterator[None]:
    if not show:
        yield
        return
    from dask.diagnostics import ProgressBar

    if show == "bars":
        with ProgressBar(out=sys.stderr, minimum=1.0):
            yield
        return
    throttle = _Throttle(label)

    class LogBar(ProgressBar):
        def _update_bar(self, elapsed):
            s = self._state
            if s:
                done = len(s["finished"])
                throttle.update(done, done + sum(len(s[k]) for k in ("ready", "waiting", "running")))

        def _finish(self, dsk, state, errored):
            self._running = False
            self._timer.join()

    with LogBar(dt=PROGRESS_POLL_S):
        yield
