"""The one place that runs dask graphs: picks the active distributed client or the local
scheduler, shows progress bars when asked, and keeps Dask threads × BLAS threads <= cores."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
from collections.abc import Iterator

import dask
from threadpoolctl import threadpool_limits

logger = logging.getLogger(__name__)

_progress: contextvars.ContextVar[bool] = contextvars.ContextVar("bigkernel_progress", default=False)


@contextlib.contextmanager
def progress_bars(enabled: bool = True) -> Iterator[None]:
    """Show a progress bar for every pass run inside this context (jobs turn it on)."""
    token = _progress.set(enabled)
    try:
        yield
    finally:
        _progress.reset(token)


def active_client():
    """The current distributed Client, or None when dask runs on the local scheduler."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def local_threads() -> int:
    """Threads the local (non-distributed) scheduler will use."""
    if dask.config.get("scheduler", None) in ("sync", "synchronous", "single-threaded"):
        return 1
    return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)


def blas_threads_for(dask_threads: int, cores: int | None = None) -> int:
    """BLAS threads per Dask thread so that their product does not exceed the cores."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // max(1, dask_threads))


def compute(*graphs, client=None, label: str = "pass"):
    """Compute ``graphs`` with a distributed ``client`` (default: the active one) or locally.

    Returns a tuple with one result per graph.
    """
    client = client or active_client()
    show = _progress.get()
    if client is not None:
        futures = client.compute(list(graphs))
        if show:
            from distributed import progress

            logger.info("%s: running on %s", label, client.scheduler.address)
            progress(futures)
        return tuple(client.gather(futures))
    with threadpool_limits(limits=blas_threads_for(local_threads())), _local_progress(show):
        return dask.compute(*graphs)


@contextlib.contextmanager
def _local_progress(show: bool) -> Iterator[None]:
    if not show:
        yield
        return
    from dask.diagnostics import ProgressBar

    with ProgressBar(out=sys.stderr, minimum=1.0):
        yield
