#!/usr/bin/env python
"""Benchmark a model update (``partial_fit`` of new rows into a saved model, as ``bigkernel
update`` does) against the refit on all rows it replaces, and the size the kept statistics add
to a saved model.

Friedman #1 (d=10), rbf random features, float32 features. Each measurement runs in its own
subprocess (peak RSS is its own):

- ``refit``: ``RandomFeatureRidge.fit`` on old + new rows (n_old + n_new).
- ``update``: load the model saved after a fit on the old rows, ``partial_fit_dataset`` of the
  new rows, save it — reads n_new rows only, so it should cost about n_new / (n_old + n_new) of
  the refit plus the load/save of the D×D statistics.
- store sizes: the saved model with its statistics, and without (the arrays ``stats_*``).

Both cases end with the same D×D eigendecomposition (the α path), a fixed cost that does not
shrink with the rows read; on a loaded machine it can dominate (measured: 9 s of a 12 s fit of
40,000 rows at D=1024 with load average 20 on 2 cores), so read the ratio beside the load.

Usage::

    python scripts/bench_update.py                           # n_old=1e6, n_new=1e5, D=1024
    python scripts/bench_update.py --n-old 200000 --n-new 20000 --D 512
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import dispatch_measurement, measurement_runner, peak_rss_mb, write_json

#: rows per chunk of old and new data alike, so that both passes use every core (a batch of new
#: rows in one chunk would run on one thread)
CHUNK_ROWS = 32_768


def _data(n: int, seed: int):
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, 10, 1.0, seed), 0, n)
    return a[:, :10], a[:, 10]


def _model(D: int):
    from bigkernel import RandomFeatureRidge

    return RandomFeatureRidge(
        gamma=0.1, n_components=D, alpha=[1e-3, 1e-2, 1e-1, 1.0], dtype="float32", random_state=0, chunk_rows=CHUNK_ROWS
    )


def m_refit(n_old: int, n_new: int, D: int, folder: str) -> dict:
    import numpy as np

    (X0, y0), (X1, y1) = _data(n_old, 0), _data(n_new, 1)
    X, y = np.vstack([X0, X1]), np.concatenate([y0, y1])
    t = time.perf_counter()
    est = _model(D).fit(X, y)
    return {"time_s": time.perf_counter() - t, "peak_rss_mb": peak_rss_mb(), "alpha": est.alpha_}


def m_prepare(n_old: int, n_new: int, D: int, folder: str) -> dict:
    """Not timed: the model of the old rows, saved (what ``bigkernel run`` leaves)."""
    X0, y0 = _data(n_old, 0)
    _model(D).fit(X0, y0).save(os.path.join(folder, "model.zarr"), overwrite=True)
    return {"time_s": 0.0, "peak_rss_mb": peak_rss_mb()}


def m_update(n_old: int, n_new: int, D: int, folder: str) -> dict:
    import bigkernel
    from bigkernel.data.sources import as_dataset

    X1, y1 = _data(n_new, 1)
    t = time.perf_counter()
    model = bigkernel.load(os.path.join(folder, "model.zarr"))
    model.partial_fit_dataset(as_dataset(X1, y1, chunk_rows=CHUNK_ROWS))
    model.save(os.path.join(folder, "updated.zarr"), overwrite=True)
    return {"time_s": time.perf_counter() - t, "peak_rss_mb": peak_rss_mb(), "alpha": model.alpha_}


MEASUREMENTS = {"refit": m_refit, "prepare": m_prepare, "update": m_update}


def _store_bytes(path: str, skip_prefix: str | None = None) -> int:
    total = 0
    for root, _, files in os.walk(path):
        rel = os.path.relpath(root, path)
        if skip_prefix and rel.split(os.sep)[0].startswith(skip_prefix):
            continue
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


run = measurement_runner(__file__, on_error="raise")


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--n-old", type=lambda s: int(float(s)), default=1_000_000)
    p.add_argument("--n-new", type=lambda s: int(float(s)), default=100_000)
    p.add_argument("--D", type=int, default=1024)
    p.add_argument("--out", default="bench_results/bench_update.json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        kw = dict(n_old=args.n_old, n_new=args.n_new, D=args.D, folder=folder)
        run("prepare", **kw)
        rows = {name: run(name, **kw) for name in ("refit", "update")}
        store = os.path.join(folder, "updated.zarr")
        sizes = {
            "with_stats_mb": _store_bytes(store) / 2**20,
            "without_stats_mb": _store_bytes(store, "stats_") / 2**20,
        }
    ratio = rows["update"]["time_s"] / rows["refit"]["time_s"]
    print(f"n_old={args.n_old:,} n_new={args.n_new:,} D={args.D} float32, load {os.getloadavg()[0]:.1f}")
    print(f"{'case':<8} {'time s':>8} {'peak RSS MB':>12} {'alpha':>8}")
    for name, r in rows.items():
        print(f"{name:<8} {r['time_s']:>8.2f} {r['peak_rss_mb']:>12.0f} {r['alpha']:>8.3g}")
    print(f"update / refit = {ratio:.3f} (rows read: {args.n_new / (args.n_old + args.n_new):.3f})")
    print(
        f"model store: {sizes['with_stats_mb']:.1f} MB with the statistics, {sizes['without_stats_mb']:.1f} MB without"
    )
    write_json(args.out, {"args": vars(args), "rows": rows, "ratio": ratio, "sizes": sizes, "cpus": os.cpu_count()})


if __name__ == "__main__":
    main()
