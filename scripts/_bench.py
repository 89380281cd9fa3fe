"""The harness the ``scripts/bench_*.py`` benchmarks share (not part of the bigkernel package).

Each benchmark runs ``python scripts/bench_x.py``, so ``scripts/`` is on ``sys.path`` and the
scripts import this module as ``from _bench import ...``.

- One measurement per fresh interpreter (``measurement_runner`` / ``dispatch_measurement``):
  ``ru_maxrss`` is then that measurement's own peak RSS, not the largest of the whole run.
- ``PeakRSS`` / ``timed``: peak RSS sampled while a block runs, for benchmarks that measure
  several things in one process.
- ``RSSSampler``: summed RSS and CPU time of this process and its children (a LocalCluster's
  worker processes); ``process_cluster``: such a cluster, workers warmed, BLAS threads noted.
- ``cpu_seconds`` / ``busy_cpu_seconds``: this process's and the machine's busy CPU seconds
  (what others took meanwhile).
- ``write_json``, ``write_rows``, ``machine_info``, ``load_text``: the output every benchmark writes alike.
- ``load_diamonds``: the public diamonds table (plotnine ships it as a CSV file; the ``bench``
  extra), encoded by bigkernel's ``TableEncoder``, split 80/20 once.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

MEASURE = "_measure"  # argv[1] of the child interpreter that runs one measurement


def peak_rss_mb() -> float:
    """This process's peak RSS in MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss_gb() -> float:
    """This process's peak RSS in GB (10^9 bytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def cpu_seconds() -> tuple[float, float]:
    """(this process's CPU seconds, the machine's busy CPU seconds) so far."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, busy


def dispatch_measurement(measurements: Mapping[str, Callable[..., dict]]) -> bool:
    """In the child interpreter (``script _measure <name> <json kwargs>``): run the measurement,
    print its result as the last stdout line and return True; otherwise return False."""
    if len(sys.argv) > 1 and sys.argv[1] == MEASURE:
        print(json.dumps(measurements[sys.argv[2]](**json.loads(sys.argv[3]))))
        return True
    return False


def measurement_runner(
    script: str, env: Mapping[str, str] | None = None, on_error: str = "tail"
) -> Callable[..., dict]:
    """``run(kind, **kwargs)``: the measurement ``kind`` of ``script`` in a fresh interpreter.

    Its result is the child's last stdout line (JSON). A failed child gives
    ``{"error": <last stderr line, or "exit N">}`` (``on_error="tail"``),
    ``{"error": "exit N <last stderr line>"}`` (``"exit"``), or stops the benchmark (``"raise"``).
    ``env`` is read at each call, so a script may fill it after building the runner.
    Each result is also written to stderr as it comes (a benchmark stopped by a time limit
    keeps what it measured).
    """

    def run(kind: str, **kwargs: Any) -> dict:
        cmd = [sys.executable, script, MEASURE, kind, json.dumps(kwargs)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=None if env is None else dict(env))
        if r.returncode != 0:
            if on_error == "raise":
                raise SystemExit(f"{kind} failed:\n{r.stderr}")
            tail = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
            if on_error == "exit":
                result = {"error": f"exit {r.returncode} {tail}".strip()}
            else:
                result = {"error": tail or f"exit {r.returncode}"}
        else:
            result = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"measured {kind} {json.dumps(kwargs)}: {json.dumps(result)}", file=sys.stderr, flush=True)
        return result

    return run


def write_json(path: str, obj: Any, **dump_kwargs: Any) -> None:
    """Write ``obj`` as indented JSON, creating the folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, **dump_kwargs)


def write_rows(path: str | None, rows: list[dict], load: tuple[float, float, float]) -> None:
    """Write the rows, the load average and the command line as JSON, if a path is given."""
    if path:
        write_json(path, {"rows": rows, "load_average": load, "argv": sys.argv[1:]})


def machine_info(**extra: Any) -> dict:
    """CPUs, platform, Python and numpy versions, then ``extra``."""
    import numpy

    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        **extra,
    }


def load_text(load: tuple[float, float, float] | None = None) -> str:
    """The 1, 5 and 15 minute load averages (now unless given), two decimals each."""
    load = os.getloadavg() if load is None else load
    return f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


class PeakRSS:
    """Peak RSS (bytes) of this process while the block runs (sampled every 20 ms)."""

    def __enter__(self) -> PeakRSS:
        import psutil

        self._proc, self._stop = psutil.Process(), threading.Event()
        self.peak = self._proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._stop.wait(0.02)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class LoadTimer:
    """Wall time of a block with what else the machine did meanwhile: the CPU seconds of other
    processes (:func:`cpu_seconds`) and the highest 1-minute load average seen."""

    def __enter__(self) -> LoadTimer:
        self.load0 = os.getloadavg()[0]
        self.c0, self.b0 = cpu_seconds()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.t0
        c1, b1 = cpu_seconds()
        self.others_cpu_s = round(max(0.0, (b1 - self.b0) - (c1 - self.c0)), 1)
        self.load = round(max(self.load0, os.getloadavg()[0]), 2)

    def figures(self, prefix: str = "") -> dict:
        """``time_s``, ``others_cpu_s`` and ``load_1min``, each name after ``prefix``."""
        return {f"{prefix}time_s": round(self.seconds, 3), f"{prefix}others_cpu_s": self.others_cpu_s,
                f"{prefix}load_1min": self.load}  # fmt: skip


def timed(fn: Callable[[], Any]) -> tuple[float, int, Any]:
    """(seconds, peak RSS bytes, result) of ``fn()``."""
    with PeakRSS() as rss:
        t = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t
    return seconds, rss.peak, out


class RSSSampler:
    """Samples the summed RSS of this process and all its descendants in a thread."""

    def __init__(self, interval: float = 0.05) -> None:
        import psutil

        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._proc = psutil.Process()

    def _family(self) -> list:
        return [self._proc, *self._proc.children(recursive=True)]

    def current(self) -> int:
        import psutil

        total = 0
        for p in self._family():
            try:
                total += p.memory_info().rss
            except psutil.Error:  # a process that just exited
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.current())
            self._stop.wait(self.interval)

    def reset(self) -> None:
        self.peak = self.current()

    def cpu_seconds(self) -> float:
        """CPU time (user + system) used so far by this process and its live descendants."""
        import psutil

        total = 0.0
        for p in self._family():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def __enter__(self) -> RSSSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def busy_cpu_seconds() -> tuple[float, float]:
    """Machine-wide CPU seconds so far: (busy in this machine's processes, stolen by the host)."""
    import psutil

    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    return busy, getattr(t, "steal", 0.0)


@contextmanager
def process_cluster(n_workers: int, results: dict) -> Iterator[tuple[RSSSampler, Any]]:
    """(RSS sampler, client) of a LocalCluster of one-thread worker processes, its bigkernel
    bootstrap imports warmed; the workers' BLAS thread counts go to ``results``."""
    from distributed import Client, LocalCluster
    from threadpoolctl import threadpool_info

    with (
        RSSSampler() as rss,
        LocalCluster(
            n_workers=n_workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(lambda: __import__("bigkernel.bands.bootstrap"))  # warm the imports
        results["worker_blas_threads"] = sorted(
            {i["num_threads"] for info in client.run(threadpool_info).values() for i in info}
        )
        yield rss, client


#: the diamonds table's feature columns (``price`` is the target, as log(price))
DIAMONDS_COLUMNS = ("carat", "cut", "color", "clarity", "depth", "table", "x", "y", "z")


def diamonds_path() -> str:
    """The diamonds CSV that plotnine ships (``pip install "bigkernel[bench]"``), found without
    importing plotnine (no network, no plotting stack loaded)."""
    import importlib.util

    spec = importlib.util.find_spec("plotnine")
    if spec is None or spec.origin is None:
        raise SystemExit('the diamonds table comes with plotnine: pip install -e ".[bench]"')
    path = os.path.join(os.path.dirname(spec.origin), "data", "diamonds.csv")
    if not os.path.exists(path):
        raise SystemExit(f"{path} is missing: plotnine no longer ships diamonds.csv there")
    return path


def load_diamonds(test_fraction: float = 0.2, seed: int = 0, clean: bool = True) -> dict:
    """The diamonds table (53,940 rows) as float64 arrays, split once at random.

    Target ``log(price)``. ``clean``: the 23 rows whose length ``x``, width ``y`` or depth ``z``
    is 0 or above 20 mm (data-entry errors: 20 zeros, and 31.8 / 58.9 mm stones of 0.5–2 carat)
    are dropped, 53,917 rows remain; one such row in the test set (x = z = 0) alone made a kernel
    model's test RMSE 0.23 instead of 0.11. The string columns ``cut``, ``color`` and ``clarity`` are one-hot
    encoded by :class:`bigkernel.TableEncoder` (20 columns); the six numeric columns are
    standardized with the training rows' mean and standard deviation; 26 features in all.

    Returns
    -------
    dict
        ``X_train``, ``y_train``, ``X_test``, ``y_test``, ``names`` (the encoded columns) and
        ``path`` (the CSV read).
    """
    import numpy as np
    import pandas as pd

    from bigkernel import TableEncoder

    path = diamonds_path()
    frame = pd.read_csv(path)
    if clean:
        frame = frame[((frame[["x", "y", "z"]] > 0) & (frame[["x", "y", "z"]] <= 20)).all(axis=1)]
    enc = TableEncoder(categorical="auto").fit(frame[list(DIAMONDS_COLUMNS)])
    X = np.array(enc.transform(frame[list(DIAMONDS_COLUMNS)]), dtype=np.float64)
    y = np.log(frame["price"].to_numpy(dtype=np.float64))
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    names = list(enc.get_feature_names_out())
    numeric = [i for i, c in enumerate(names) if c in DIAMONDS_COLUMNS]
    mean, std = X[train][:, numeric].mean(axis=0), X[train][:, numeric].std(axis=0)
    X[:, numeric] = (X[:, numeric] - mean) / std
    return {"X_train": X[train], "y_train": y[train], "X_test": X[test], "y_test": y[test], "names": names,
            "path": path}  # fmt: skip
