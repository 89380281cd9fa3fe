"""BLAS threads for one large LAPACK call (eigh, Cholesky) on a shared machine (layer 1).

OpenBLAS's threads busy-wait at every synchronisation, and the tridiagonal reduction of ``eigh``
synchronises at every column (matrix-vector products). When other processes hold the cores,
a multi-threaded call then runs several times slower than a single-threaded one. Measured on
the project's shared 2-core AMD EPYC (OpenBLAS 0.3.31, load average 7-10):

======================================  ==============  ===============
call                                    one thread      two threads
======================================  ==============  ===============
``eigh`` 1024 × 1024 (evr / evd)        0.9 s           6-15 s
``eigh`` 3000 × 3000 (evr / evd)        9-12 s          27-46 s
Cholesky 5000 × 5000                    2.8-3.3 s       6.6-9.2 s
======================================  ==============  ===============

On an idle machine two threads gain ~1.7× (``eigh`` at n = 2000: 0.6 s against 1.0 s). So the
thread count follows the cores the *other* processes leave idle, measured just before the call
from ``/proc/stat`` (this process's own CPU time subtracted, so a fit never counts itself),
capped by the BLAS library's current setting (a caller's ``threadpool_limits`` wins). A
decision is reused for :data:`REUSE_SECONDS`, so a burst of calls pays one 0.1 s sample; a call
within that time after a local pass (:func:`measured_pass`, around every threaded
:func:`bigkernel.runtime.compute`) takes the load measured over the pass and pays none.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Iterator

from threadpoolctl import ThreadpoolController

logger = logging.getLogger(__name__)

__all__ = [
    "LAPACK_SAMPLE_MIN_N",
    "PicklesWithoutLock",
    "REUSE_SECONDS",
    "blas_thread_limit",
    "lapack_limit",
    "lapack_threads",
    "measured_pass",
    "others_busy_cores",
    "threadpool_controller",
]


class PicklesWithoutLock:
    """Mixin for objects guarding lazily formed state with ``self._lock`` (a
    :class:`threading.Lock`): pickled without the lock (dask ships them to tasks), a fresh one
    made on load."""

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "_lock", threading.Lock())  # also for frozen dataclasses


#: seconds over which the other processes' CPU use is sampled
SAMPLE_SECONDS = 0.1
#: smaller matrices keep the BLAS setting (their calls take milliseconds: not worth the sample)
LAPACK_SAMPLE_MIN_N = 512
#: a decision is reused this many seconds (a burst of calls — the folds of a CV search, bootstrap
#: replicates — samples once)
REUSE_SECONDS = 5.0
_last: dict[int, tuple[float, int]] = {}  # BLAS cap -> (when, threads)


def _allowed_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def _busy_ticks(cpus: set[int]) -> tuple[int, int] | None:
    """(busy, total) clock ticks so far over ``cpus`` from ``/proc/stat`` (None off Linux)."""
    busy = total = 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                if not line.startswith("cpu") or line.startswith("cpu "):
                    continue
                name, *fields = line.split()
                if not name[3:].isdigit() or int(name[3:]) not in cpus:
                    continue
                v = [int(x) for x in fields]
                idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait; steal counts as busy
                busy += sum(v) - idle
                total += sum(v)
    except (OSError, ValueError):
        return None
    return (busy, total) if total else None


def others_busy_cores(seconds: float = SAMPLE_SECONDS) -> float | None:
    """Cores busy with other processes (or stolen by the host) over the next ``seconds``:
    the machine's busy time on the CPUs this process may use, less this process's CPU time.
    None where ``/proc/stat`` is not available."""
    with _busy_window() as window:
        time.sleep(seconds)
    return window.get("others")


@contextlib.contextmanager
def _busy_window() -> Iterator[dict]:
    """Measure the other processes' busy cores while the block runs; the yielded dict gets
    ``others`` (cores) and ``wall`` (seconds) when the block ends, nothing off Linux."""
    out: dict = {}
    cpus = _allowed_cpus()
    first = _busy_ticks(cpus)
    c0, t0 = time.process_time(), time.perf_counter()
    yield out
    second = None if first is None else _busy_ticks(cpus)
    wall, own = time.perf_counter() - t0, time.process_time() - c0
    if second is None or wall <= 0:
        return
    busy = (second[0] - first[0]) / os.sysconf("SC_CLK_TCK")
    out["others"] = min(float(len(cpus)), max(0.0, (busy - own) / wall))  # ticks of 10 ms: ±0.2 cores at 0.1 s
    out["wall"] = wall


#: a local pass of at least this many seconds measures the other processes' load for the
#: LAPACK call after it (:func:`measured_pass`), instead of a fresh sample
PASS_WINDOW_MIN_SECONDS = 1.0
_pass_window: tuple[float, float] | None = None  # (when the last measured pass ended, others' cores)


@contextlib.contextmanager
def measured_pass() -> Iterator[None]:
    """Around a pass on this process's own threads (dask's local scheduler): the other
    processes' busy cores over the pass, which :func:`lapack_threads` uses for a call within
    :data:`REUSE_SECONDS` after it instead of sleeping through a 0.1 s sample (the eigh after a
    one-pass fit: 0.1 s of ~1 s). This process's threads are its own CPU time, so the pass
    never counts itself; a pass on worker processes must not be measured this way."""
    global _pass_window
    with _busy_window() as window:
        yield
    if window.get("wall", 0.0) >= PASS_WINDOW_MIN_SECONDS:
        _pass_window = (time.monotonic(), window["others"])


_controller: ThreadpoolController | None = None


def threadpool_controller() -> ThreadpoolController:
    """One cached controller for the process (this module and :mod:`bigkernel.runtime`): a
    fresh ``threadpool_info`` / ``threadpool_limits`` scans every loaded library (~10 ms; the
    first one 0.05-0.1 s here), too much around the many small solves of the SVM's Newton steps."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller


def _blas_threads() -> int:
    """The BLAS library's current thread count (its setting, or a caller's limit)."""
    counts = [int(i.get("num_threads") or 1) for i in threadpool_controller().info() if i.get("user_api") == "blas"]
    return max(counts) if counts else 1


def lapack_threads() -> int:
    """BLAS threads for one large LAPACK call now: the allowed cores the other processes leave
    idle (rounded), at least 1, at most the BLAS library's current thread count."""
    cap = _blas_threads()
    if cap <= 1:
        return 1
    now = time.monotonic()
    last = _last.get(cap)
    if last is not None and now - last[0] < REUSE_SECONDS:
        return last[1]
    recent = _pass_window is not None and 0.0 <= now - _pass_window[0] < REUSE_SECONDS
    others = _pass_window[1] if recent else others_busy_cores()
    if others is None:
        return cap
    idle = len(_allowed_cpus()) - others
    threads = int(max(1, min(cap, math.floor(idle + 0.5))))
    _last[cap] = (now, threads)
    if threads < cap:
        logger.debug("LAPACK on %d of %d BLAS threads: other processes hold %.1f cores", threads, cap, others)
    return threads


@contextlib.contextmanager
def blas_thread_limit(threads: int | None = None) -> Iterator[int]:
    """Run the block with ``threads`` BLAS threads (default :func:`lapack_threads`); yields the
    count."""
    threads = lapack_threads() if threads is None else max(1, int(threads))
    with threadpool_controller().limit(limits=threads, user_api="blas"):
        yield threads


@contextlib.contextmanager
def lapack_limit(n: int) -> Iterator[int | None]:
    """The thread limit of :func:`blas_thread_limit` around an O(n³) LAPACK call on an
    ``n × n`` matrix; below :data:`LAPACK_SAMPLE_MIN_N` nothing changes (yields None)."""
    if n < LAPACK_SAMPLE_MIN_N:
        yield None
        return
    with blas_thread_limit() as threads:
        yield threads
