"""Peak memory of a Dask worker during a random-feature fit, next to the estimate that
docs/deployment.md ("Memory per worker") gives, :func:`bigkernel.jobs.cluster.fit_worker_memory`.

For each D and thread count: a LocalCluster of one worker process, its peak-RSS counter reset
(Linux: ``/proc/self/clear_refs``), one fit as a job runs it (holdout split, float32 or float64
features), then the worker's ``VmHWM`` (peak resident memory) read back.

    python scripts/worker_memory.py --n-components 512 1024 2048 --threads 1 2

Linux only (``/proc``). Prints one line per run: D, dtype, threads, chunk rows, measured and
estimated MiB.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile

logger = logging.getLogger("worker_memory")


def _reset_peak() -> int:
    """Reset the peak-RSS counter of this process; return the current RSS in bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    return _status_bytes("VmRSS:")


def _peak_bytes() -> int:
    return _status_bytes("VmHWM:")


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(path: str, n_components: int, dtype: str, threads: int) -> tuple[int, int]:
    """RSS before and peak RSS during a fit of the data at ``path`` (bytes), of the one worker."""
    from distributed import Client, LocalCluster

    import bigkernel
    from bigkernel.numerics.splits import HoldoutSplit

    ds = bigkernel.open_source(path)
    est = bigkernel.RandomFeatureRidge(gamma=0.5, n_components=n_components, alpha=1e-2, dtype=dtype, random_state=0)
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=threads,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            memory_limit=0,
        ) as cluster,
        Client(cluster) as client,
    ):
        # a first small fit loads every module a task needs: the base is then the idle worker
        small = bigkernel.open_source(path, chunk_rows=1024)
        bigkernel.RandomFeatureRidge(n_components=8, random_state=0).fit(small.X[:1024], small.y[:1024])
        base = max(client.run(_reset_peak).values())
        est.fit_dataset(ds, weights=HoldoutSplit(0, 0.2))
        return base, max(client.run(_peak_bytes).values())


def main() -> None:
    from bigkernel import SyntheticSpec, make_data
    from bigkernel.jobs.cluster import fit_worker_memory

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-components", type=int, nargs="+", default=[512, 1024, 2048])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--chunks", type=int, default=8, help="chunks of the data set")
    p.add_argument("--chunk-rows", type=int, default=16_384)
    p.add_argument("--n-features", type=int, default=10)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        path = make_data(
            SyntheticSpec("friedman1", args.chunks * args.chunk_rows, args.n_features),
            os.path.join(tmp, "d.zarr"),
            chunk_rows=args.chunk_rows,
        )
        logger.info(
            "%6s %8s %7s %10s %9s %12s %13s",
            "D",
            "dtype",
            "threads",
            "chunk_rows",
            "idle_MiB",
            "measured_MiB",
            "estimate_MiB",
        )
        for D in args.n_components:
            for t in args.threads:
                base, peak = measure(path, D, args.dtype, t)
                est = fit_worker_memory(D, args.dtype, args.chunk_rows, args.n_features, threads=t)
                logger.info(
                    "%6d %8s %7d %10d %9.0f %12.0f %13.0f",
                    D,
                    args.dtype,
                    t,
                    args.chunk_rows,
                    base / 2**20,
                    peak / 2**20,
                    est / 2**20,
                )


if __name__ == "__main__":
    main()
