#!/usr/bin/env python
"""Benchmark random features on sparse X against scikit-learn RBFSampler + Ridge.

Data (bag-of-words-like): n rows, d columns, ``nnz_row`` stored entries per row (density =
nnz_row / d) with values U(0.5, 1.5); each row belongs to one of 50 topics and draws 80 % of its
columns from its topic's block of 2·nnz_row columns, the rest uniformly; ``y = t(topic) + 0.5 sin(s)
+ 0.3 ε`` with ``t ~ N(0, 1)`` per topic and ``s`` a random projection of the row. Generated row
block by row block from a seed. rbf γ = 1 / (2 nnz_row), D features, α = 1e-2, seed 0 for both.

Every measurement runs in its own subprocess, so its peak RSS (ru_maxrss) is its own:

- ``product``: scipy CSR × dense ``X W`` (n × d by d × D) alone, the reference the time ratios
  are taken against (the one step no sparse random-feature method avoids);
- ``bigkernel``: ``RandomFeatureRidge.fit`` on the scipy CSR matrix (in memory; dask threads,
  float64 and float32 features);
- ``bigkernel_npz``: the same fit reading the CSR ``.npz`` from disk in row blocks
  (``open_source``), so X is never in memory whole;
- ``sklearn``: ``RBFSampler(...).fit(X)``, ``Ridge(alpha).fit(sampler.transform(X), y)``
  (the n × D feature matrix dense in memory).

Holdout RMSE on ``n_test`` fresh rows for each fit, beside the RMSE of predicting the mean.

Usage::

    python scripts/bench_sparse.py                               # n=200,000, d=100,000, 0.1 %
    python scripts/bench_sparse.py --n 1000000 --out bench_results/sparse.json
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import dispatch_measurement, measurement_runner, peak_rss_mb, write_json

ALPHA = 1e-2
BLOCK = 50_000
TOPICS = 50


def _data(n: int, d: int, nnz_row: int, seed: int):
    """CSR X (n × d, nnz_row entries a row before duplicates merge) and y, block by block."""
    import numpy as np
    import scipy.sparse as sp

    fixed = np.random.default_rng(12345)
    topic_value = fixed.standard_normal(TOPICS)
    V = fixed.standard_normal(d) / np.sqrt(nnz_row)
    width = min(d // TOPICS, 2 * nnz_row)  # a topic's vocabulary: rows of a topic overlap
    blocks, ys = [], []
    for j, lo in enumerate(range(0, n, BLOCK)):
        rows = min(BLOCK, n - lo)
        rng = np.random.default_rng([seed, j])
        topic = rng.integers(0, TOPICS, size=rows)
        in_topic = rng.random((rows, nnz_row)) < 0.8
        cols = np.where(
            in_topic,
            topic[:, None] * width + rng.integers(0, width, size=(rows, nnz_row)),
            rng.integers(0, d, size=(rows, nnz_row)),
        ).astype(np.int32)
        vals = rng.uniform(0.5, 1.5, size=(rows, nnz_row))
        indptr = np.arange(0, rows * nnz_row + 1, nnz_row, dtype=np.int64)
        B = sp.csr_matrix((vals.ravel(), cols.ravel(), indptr), shape=(rows, d))
        B.sum_duplicates()
        ys.append(topic_value[topic] + 0.5 * np.sin(B @ V) + 0.3 * rng.standard_normal(rows))
        blocks.append(B)
    return sp.vstack(blocks, format="csr"), np.concatenate(ys)


def _gamma(nnz_row: int) -> float:
    return 1.0 / (2.0 * nnz_row)  # ‖x − x'‖² ≈ 2.2 nnz_row apart, less within a topic


# ----------------------------------------------------------------------------- measurements
def m_product(n: int, d: int, nnz_row: int, D: int) -> dict:
    import numpy as np

    X, _ = _data(n, d, nnz_row, seed=1)
    W = np.random.default_rng(0).standard_normal((d, D))
    t = time.perf_counter()
    Z = X @ W
    return {"time_s": time.perf_counter() - t, "peak_rss_mb": peak_rss_mb(), "checksum": float(Z[0, 0])}


def _rmse(predict, d: int, nnz_row: int, n_test: int) -> dict:
    import numpy as np

    Xt, yt = _data(n_test, d, nnz_row, seed=2)
    return {
        "rmse": float(np.sqrt(np.mean((predict(Xt) - yt) ** 2))),
        "rmse_of_mean": float(np.std(yt)),
    }


def m_bigkernel(n: int, d: int, nnz_row: int, D: int, dtype: str, n_test: int, npz: str | None = None) -> dict:
    import dask

    from bigkernel import RandomFeatureRidge, open_source

    est = RandomFeatureRidge(gamma=_gamma(nnz_row), n_components=D, alpha=ALPHA, random_state=0, dtype=dtype)
    if npz is None:
        X, y = _data(n, d, nnz_row, seed=1)
    else:
        ds = open_source(npz, y_path=npz[:-4] + "_y.npy")
        X, y = ds.X, ds.y
    with dask.config.set(scheduler="threads", num_workers=2):
        t = time.perf_counter()
        est.fit(X, y)
        fit_s = time.perf_counter() - t
    return {"time_s": fit_s, "peak_rss_mb": peak_rss_mb(), **_rmse(est.predict, d, nnz_row, n_test)}


def m_sklearn(n: int, d: int, nnz_row: int, D: int, n_test: int) -> dict:
    from sklearn.kernel_approximation import RBFSampler
    from sklearn.linear_model import Ridge

    X, y = _data(n, d, nnz_row, seed=1)
    t = time.perf_counter()
    feat = RBFSampler(gamma=_gamma(nnz_row), n_components=D, random_state=0).fit(X)
    model = Ridge(alpha=ALPHA).fit(feat.transform(X), y)
    fit_s = time.perf_counter() - t
    return {
        "time_s": fit_s,
        "peak_rss_mb": peak_rss_mb(),
        **_rmse(lambda Z: model.predict(feat.transform(Z)), d, nnz_row, n_test),
    }


def m_write_npz(n: int, d: int, nnz_row: int, path: str) -> dict:
    import numpy as np
    import scipy.sparse as sp

    X, y = _data(n, d, nnz_row, seed=1)
    sp.save_npz(path, X, compressed=False)
    np.save(path[:-4] + "_y.npy", y)
    return {"bytes": os.path.getsize(path), "nnz": int(X.nnz)}


MEASUREMENTS = {
    "product": m_product,
    "bigkernel": m_bigkernel,
    "sklearn": m_sklearn,
    "write_npz": m_write_npz,
}


run = measurement_runner(__file__)


def _table(rows: list[dict]) -> str:
    head = f"{'what':<52} {'time s':>8} {'ratio':>7} {'peak RSS MB':>12} {'RMSE':>7} {'RMSE(mean)':>10}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['what']:<52} error: {r['error']}")
            continue
        rm = f"{r['rmse']:.4f}" if "rmse" in r else ""
        rmm = f"{r['rmse_of_mean']:.4f}" if "rmse_of_mean" in r else ""
        lines.append(
            f"{r['what']:<52} {r['time_s']:>8.2f} {r['ratio']:>7.2f} {r['peak_rss_mb']:>12.0f} {rm:>7} {rmm:>10}"
        )
    return "\n".join(lines)


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--d", type=int, default=100_000)
    p.add_argument("--nnz-row", type=int, default=100, help="stored entries per row (density = nnz_row / d)")
    p.add_argument("--D", type=int, default=512, help="random features")
    p.add_argument("--n-test", type=int, default=20_000)
    p.add_argument("--no-sklearn", action="store_true")
    p.add_argument("--out", default="bench_results/sparse.json")
    args = p.parse_args()
    shape = dict(n=args.n, d=args.d, nnz_row=args.nnz_row)
    t0 = time.perf_counter()
    rows = []
    ref = run("product", **shape, D=args.D)
    rows.append({"what": f"scipy CSR X @ W ({args.n:,}×{args.d:,}) @ ({args.d:,}×{args.D})", **ref, "ratio": 1.0})

    def add(what: str, r: dict) -> None:
        rows.append({"what": what, **r, "ratio": r.get("time_s", float("nan")) / ref.get("time_s", float("nan"))})

    for dtype in ("float64", "float32"):
        add(
            f"bigkernel RandomFeatureRidge {dtype}, CSR in memory",
            run("bigkernel", **shape, D=args.D, dtype=dtype, n_test=args.n_test),
        )
    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "x.npz")
        written = run("write_npz", **shape, path=npz)
        add(
            "bigkernel RandomFeatureRidge float32, .npz row blocks",
            run("bigkernel", **shape, D=args.D, dtype="float32", n_test=args.n_test, npz=npz),
        )
    if not args.no_sklearn:
        add("sklearn RBFSampler + Ridge float64", run("sklearn", **shape, D=args.D, n_test=args.n_test))
    load = os.getloadavg()
    result = {
        "args": vars(args),
        "density": args.nnz_row / args.d,
        "nnz": written.get("nnz"),
        "npz_bytes": written.get("bytes"),
        "gamma": _gamma(args.nnz_row),
        "loadavg_end": load,
        "total_s": time.perf_counter() - t0,
        "rows": rows,
    }
    write_json(args.out, result)
    print(_table(rows))
    print(f"\nnnz={result['nnz']:,}  density={result['density']:.4%}  load average at the end {load}")
    print(f"wrote {args.out} ({result['total_s']:.0f}s)")


if __name__ == "__main__":
    main()
