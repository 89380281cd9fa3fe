#!/usr/bin/env python
"""Benchmark the streamed random-feature fit against the machine's limit and scikit-learn.

Friedman #1 (d=10), rbf γ=0.5, α=1e-2. Every measurement runs in its own subprocess, so its peak
RSS (ru_maxrss) is its own. Timings are reported as ratios to the machine's LIMIT, measured in the
same run: the best of float32 BLAS syrk ``PᵀP`` over n rows, in blocks of 8k/16k/32k/64k rows
accumulated into float64, on every split of the cores into threads × BLAS threads per thread
(1 × c, the powers of two dividing c, c × 1; on 2 cores 1 × 2 and 2 × 1; all candidates are
listed). The fits and passes run on c dask threads (and 1 dask thread × c BLAS threads):

- ``a``: n=400,000, D=2048, float32 features, data in memory (``--repeat`` times: the limit grid,
  the fit with both thread splits, the pass alone, the solve after the pass alone
  (``solve_primal``: at one α a Cholesky factor) and a dense ``eigh`` for reference, the load average; in the first
  repetition the post-pass candidates on 1 and c BLAS threads: eigh drivers, ``dsytrd`` alone,
  with ``dsterf`` / ``dstemr``, the factored route, Cholesky, the one-α Cholesky sums);
  scikit-learn RBFSampler + Ridge on the same data; holdout RMSE on 100,000 fresh rows.
- ``b``: n=10,000,000, D=1024, float32, read from a zarr store on disk; the limit grid is timed
  on 2M rows and scaled to n; peak RSS at n = 1M, 3M, 10M to show it is flat in n.
- ``chunking``: same seed, two chunkings → coefficient difference (float32 with chunk edges at
  multiples of 8192 rows; float64 with arbitrary chunk edges).
- ``dtype``: the default feature dtype (``dtype="auto"``: float32, checked after the pass) against
  forced float32 and float64, **default parameters** otherwise (γ = 1/d, α = 1), D = 512 and
  2048: fit on n rows (default 400,000) and predict 200,000 rows, each configuration in its own
  process, best of ``--repeat``; ratios to float32 in the same run, peak RSS beside the time.
- ``standardize``: the cost of ``standardize=True`` (its pre-pass reads X's d columns once before
  the feature pass): fits from zarr with and without it, and the pre-pass alone, as ratios to the
  plain fit (default n=3,000,000, D=1024, float32).

Usage::

    python scripts/bench_rff.py                 # all cases, full size (about 10 minutes here)
    python scripts/bench_rff.py --case a --n 100000 --out bench_results/a.json   # smaller
    python scripts/bench_rff.py --case dtype --n 400000 --repeat 2 --out bench_results/dtype.json
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import dask.system

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import dispatch_measurement, machine_info, measurement_runner, peak_rss_mb, write_json

GAMMA, ALPHA, D_FEATURES = 0.5, 1e-2, 10


def _data(n: int, seed: int):
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, D_FEATURES, 1.0, seed), 0, n)
    return a[:, :D_FEATURES], a[:, D_FEATURES]


# ----------------------------------------------------------------------------- measurements
def m_syrk(n: int, D: int, dtype: str, block_rows: int, threads: int = 1, blas: int | None = None) -> dict:
    """The machine's limit for the pass: float32 (or ``dtype``) syrk ``PᵀP`` of ``block_rows``-row
    blocks accumulated into float64, n rows in all, on ``threads`` Python threads (as the dask
    threads of the pass) with ``blas`` BLAS threads each (default: cores // threads)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from threadpoolctl import threadpool_limits

    blas = blas or max(1, (os.cpu_count() or 1) // threads)
    full, rest = divmod(n, block_rows)
    counts = [full // threads + (t < full % threads) for t in range(threads)]
    # one block per thread (as each dask thread has its own feature buffer), copies of one draw
    # (drawing 16 × 65,536 × 2,048 normals took longer than the syrk)
    first = np.random.default_rng(0).standard_normal((block_rows, D), dtype=np.float32).astype(dtype)
    blocks = [first] + [first.copy() for _ in range(threads - 1)]

    def task(t: int):
        G, P = np.zeros((D, D)), blocks[t]
        for _ in range(counts[t]):
            G += P.T @ P  # numpy dispatches AᵀA to BLAS syrk
        if t == 0 and rest:
            G += P[:rest].T @ P[:rest]
        return G

    with threadpool_limits(blas), ThreadPoolExecutor(threads) as pool:
        Q = blocks[0][:4096]
        Q.T @ Q  # warm up BLAS
        t = time.perf_counter()
        G = sum(pool.map(task, range(threads)))
        elapsed = time.perf_counter() - t
    return {"time_s": elapsed, "peak_rss_mb": peak_rss_mb(), "checksum": float(G[0, 0])}


def _use_sub_blocks(sub_blocks: int | None) -> None:
    """Cut this measurement process's pass into tasks of ``sub_blocks`` feature sub-blocks
    (default: the library's ``SUB_BLOCKS_PER_TASK``), to see what the task size costs."""
    if sub_blocks:
        from bigkernel.graph import stream

        stream.SUB_BLOCKS_PER_TASK = sub_blocks


def m_pass(n: int, D: int, dtype: str, chunk_rows: int, dask_threads: int, sub_blocks: int | None = None) -> dict:
    """The statistics pass of the fit alone (no eigendecomposition), data in memory."""
    import dask
    import dask.array as da
    import numpy as np

    from bigkernel.graph.stream import stats_graph
    from bigkernel.models.random_features import feature_block_rows
    from bigkernel.numerics.fourier_features import make_feature_map
    from bigkernel.runtime import compute

    _use_sub_blocks(sub_blocks)
    X, y = _data(n, seed=1)
    Xd, Yd = da.from_array(X, chunks=(chunk_rows, X.shape[1])), da.from_array(y[:, None], chunks=(chunk_rows, 1))
    fmap = make_feature_map("rbf", X.shape[1], D, seed=0, gamma=GAMMA)
    graph = stats_graph(Xd, Yd, fmap, dtype=dtype, block_rows=feature_block_rows(D, dtype))
    with dask.config.set(scheduler="threads", num_workers=dask_threads):
        t = time.perf_counter()
        (stats,) = compute(graph)
        elapsed = time.perf_counter() - t
    return {"time_s": elapsed, "peak_rss_mb": peak_rss_mb(), "checksum": float(np.trace(stats.gram[0]))}


def _use_route(route: str) -> None:
    """Point this measurement process's solve at ``route`` (see :func:`m_ours`)."""
    from bigkernel.numerics import primal

    if route != "factored":  # the routes before the one-α Cholesky solve: an eigendecomposition
        primal._solve_by_cholesky = lambda *a, **kw: None
    if route == "dense":
        real = primal.eigen_path
        primal.eigen_path = lambda *a, **kw: real(*a, **{**kw, "factored": False})
    elif route == "eager":
        real_eigh = primal.symmetric_eigh
        primal.symmetric_eigh = lambda *a, **kw: real_eigh(*a, **{**kw, "vectors": True})


def m_eigh(D: int) -> dict:
    """One float64 eigendecomposition of a D × D matrix, as in the fit's solve."""
    import numpy as np
    import scipy.linalg

    A = np.random.default_rng(0).standard_normal((D, 2 * D))
    G = A @ A.T
    t = time.perf_counter()
    scipy.linalg.eigh(G, driver="evd", check_finite=False)
    return {"time_s": time.perf_counter() - t, "peak_rss_mb": peak_rss_mb()}


def m_solve(D: int, route: str = "factored") -> dict:
    """The fit's solve after the pass (``solve_primal``: the factored eigendecomposition of the
    centred D × D system, β, df, GCV and the evidence at α) on sums of D × 2D random features;
    ``route`` as in :func:`m_ours`."""
    import numpy as np

    from bigkernel.numerics.primal import solve_primal
    from bigkernel.numerics.sums import SufficientStats, sums_precision

    rng = np.random.default_rng(0)
    P, y = rng.standard_normal((2 * D, D)), rng.standard_normal((2 * D, 1))
    st = SufficientStats(np.array([2.0 * D]), P.sum(0)[None], y.sum(0)[None], (y**2).sum(0)[None],
                         (P.T @ P)[None], (P.T @ y)[None])  # fmt: skip
    _use_route(route)
    t = time.perf_counter()
    solve_primal(st, ALPHA, True, sums_precision("float32"))
    return {"time_s": time.perf_counter() - t, "peak_rss_mb": peak_rss_mb()}


def m_lapack(D: int, blas: int = 1) -> dict:
    """The post-pass candidates on one D × D system (best of 2 each, ``blas`` BLAS threads):
    dense eigh drivers, the tridiagonal reduction alone and with eigenvalues / MRRR, the fit's
    factored route with Vᵀb and β, and a Cholesky solve."""
    import numpy as np
    import scipy.linalg as sl
    from scipy.linalg import lapack
    from threadpoolctl import threadpool_limits

    from bigkernel.numerics.primal_cholesky import solve_one_alpha
    from bigkernel.numerics.tridiagonal import factored_eigh

    rng = np.random.default_rng(0)
    A = rng.standard_normal((D, 2 * D))
    G, b = A @ A.T, rng.standard_normal((D, 1))

    def trd(x):
        work, _ = lapack.dsytrd_lwork(D, lower=1)
        return lapack.dsytrd(x.T, lower=1, lwork=int(work), overwrite_a=1)[1:3]

    def factored(x):
        s, F = factored_eigh(x, overwrite=True)
        return F.apply(F.apply_transpose(b) / (s + ALPHA)[:, None])

    def shifted(x):  # eigenvalues (dsterf) and β = Q (T + αI)⁻¹ Qᵀb: no eigenvectors at all
        s, F = factored_eigh(x, overwrite=True, vectors=False)
        return s, F.apply_q(F.shifted_solve(ALPHA, F.apply_q_transpose(b)))

    steps = {
        "np.linalg.eigh": np.linalg.eigh,
        "eigh evd": lambda x: sl.eigh(x, driver="evd", check_finite=False, overwrite_a=True),
        "eigh evr": lambda x: sl.eigh(x, driver="evr", check_finite=False, overwrite_a=True),
        "dsytrd": trd,
        "dsytrd+dsterf": lambda x: lapack.dsterf(*trd(x)),
        "dsytrd+dstemr": lambda x: sl.eigh_tridiagonal(*trd(x), lapack_driver="stemr"),
        "factored+Vtb+beta": factored,
        "dsytrd+dsterf+shifted beta (one α)": shifted,
        "cholesky+solve": lambda x: sl.cho_solve(sl.cho_factor(x, overwrite_a=True), b),
        "one-α Cholesky sums (β, df, log det)": lambda x: solve_one_alpha(x, b, ALPHA, 1e3),
    }
    out = {}
    with threadpool_limits(blas):
        for name, fn in steps.items():
            times = []
            for _ in range(2):
                x = G.copy()
                t = time.perf_counter()
                fn(x)
                times.append(time.perf_counter() - t)
            out[name] = min(times)
    return {"steps_s": out, "blas": blas, "load": os.getloadavg()}


#: the cores this process may use (dask's count: affinity mask, cgroup quota): the limit's thread
#: splits and the fits' follow them
CORES = dask.system.CPU_COUNT


def thread_splits(cores: int) -> tuple[tuple[int, int], ...]:
    """(threads, BLAS threads per thread) that use every core: 1 × cores, then powers of two
    that divide ``cores``, then cores × 1 (2 cores: 1 × 2 and 2 × 1)."""
    splits = [(t, cores // t) for t in (2**k for k in range(cores.bit_length())) if cores % t == 0]
    return tuple(dict.fromkeys([*splits, (cores, 1)]))


#: the limit's candidates: syrk block sizes and (threads, BLAS threads per thread) splits
LIMIT_BLOCKS = (8192, 16384, 32768, 65536)
LIMIT_SPLITS = thread_splits(CORES)


def limit_rows(case: str, n: int, D: int, n_measured: int | None = None) -> tuple[list[dict], float]:
    """Rows of the limit grid and the limit (the best), each time scaled to ``n`` rows when
    measured on ``n_measured`` rows (syrk time is linear in the rows)."""
    n_measured = n_measured or n
    rows, best = [], float("inf")
    for block in LIMIT_BLOCKS:
        for threads, blas in LIMIT_SPLITS:
            r = run("syrk", n=n_measured, D=D, dtype="float32", block_rows=block, threads=threads, blas=blas)
            if "time_s" in r:
                r["time_s"] *= n / n_measured
                best = min(best, r["time_s"])
            scaled = "" if n_measured == n else f", timed on {n_measured:,} rows"
            rows.append({"case": case, "what": f"syrk {block}-row blocks, {threads} thr × {blas} BLAS{scaled}", **r})
    for r in rows:
        r["ratio"] = r.get("time_s", float("nan")) / best
    return rows, best


def m_ours(
    n: int,
    D: int,
    dtype: str,
    source: str | None,
    chunk_rows: int | None,
    dask_threads: int,
    n_test: int,
    save_coef: str | None = None,
    standardize: bool = False,
    gamma: float = GAMMA,
    route: str = "factored",
    sub_blocks: int | None = None,
) -> dict:
    """RandomFeatureRidge.fit on the local threaded scheduler; holdout RMSE on fresh rows.
    ``route="factored"``: this tree's solve (at one α a Cholesky factor, the eigendecomposition
    deferred to first read); ``"eigen"``: the factored eigendecomposition at every α (the route
    before the one-α Cholesky solve); ``"dense"``: the solve forms the eigenvectors (LAPACK
    ``evd``, the route before the factored eigendecomposition); ``"eager"``: the factored route
    with the tridiagonal eigenvectors formed in the decomposition (MRRR, the route before they
    were left for first use); for before/after comparisons in one run."""
    import dask
    import numpy as np

    from bigkernel import RandomFeatureRidge, open_source

    _use_route(route)
    _use_sub_blocks(sub_blocks)

    est = RandomFeatureRidge(
        gamma=gamma,
        n_components=D,
        alpha=ALPHA,
        random_state=0,
        dtype=dtype,
        chunk_rows=chunk_rows,
        standardize=standardize,
    )
    if source is None:
        X, y = _data(n, seed=1)
    else:
        ds = open_source(source, chunk_rows=chunk_rows)
        X, y = ds.X, ds.y
    with dask.config.set(scheduler="threads", num_workers=dask_threads):
        t = time.perf_counter()
        est.fit(X, y)
        fit_s = time.perf_counter() - t
    out = {"time_s": fit_s, "peak_rss_mb": peak_rss_mb(), "n_chunks": int(np.ceil(n / (chunk_rows or n)))}
    if n_test:
        Xt, yt = _data(n_test, seed=2)
        out["rmse"] = float(np.sqrt(np.mean((est.predict(Xt) - yt) ** 2)))
    if save_coef:
        np.save(save_coef, est.coef_)
    return out


def m_default(n: int, D: int, dtype: str, n_pred: int) -> dict:
    """RandomFeatureRidge with default parameters but ``n_components`` and ``dtype``: fit on n
    rows, predict ``n_pred`` rows (numpy in, the default scheduler)."""
    import numpy as np

    from bigkernel import RandomFeatureRidge

    X, y = _data(n, seed=1)
    Xp, yp = _data(n_pred, seed=2)
    est = RandomFeatureRidge(n_components=D, random_state=0, dtype=dtype)
    t = time.perf_counter()
    est.fit(X, y)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    pred = est.predict(Xp)
    predict_s = time.perf_counter() - t
    check = est.dtype_check_ or {}
    return {"fit_s": fit_s, "predict_s": predict_s, "peak_rss_mb": peak_rss_mb(), "dtype_used": est.dtype_,
            "rmse": float(np.sqrt(np.mean((pred - yp) ** 2))), "mean_error": check.get("mean_error"),
            "std_error": check.get("std_error")}  # fmt: skip


def m_kernels(D: int, rows: int = 4096) -> dict:
    """Per-block costs behind the dtype choice, best of 3 on one ``rows × D`` block: ``cos`` in
    float64 (numpy: scalar libm here), float32 (SIMD) and a float64 polynomial cos written in
    numpy operations (range reduction + degree-22 even Taylor, ~1e-12 absolute), and the
    ``syrk`` ΦᵀΦ in both dtypes (single BLAS thread: per core)."""
    import numpy as np
    import scipy.linalg.blas as blas
    from threadpoolctl import threadpool_limits

    z = np.random.default_rng(0).standard_normal((rows, D)) * 3

    def best(fn) -> float:
        out = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
        return min(out)

    def poly_cos(x: np.ndarray) -> np.ndarray:
        r = x - np.rint(x * (1 / (2 * np.pi))) * (2 * np.pi)
        r2 = r * r
        p = np.full_like(r, 1 / 1.1240007277776077e21 * -1)
        for k in range(10, -1, -1):
            p *= r2
            p += (-1) ** k / float(np.prod(np.arange(1, 2 * k + 1)))
        return p

    z32, o64, o32 = z.astype(np.float32), np.empty_like(z), np.empty((rows, D), np.float32)
    F64, F32 = np.cos(z), np.cos(z32)
    with threadpool_limits(1):
        return {
            "cos64_ns": best(lambda: np.cos(z, out=o64)) / z.size * 1e9,
            "cos32_ns": best(lambda: np.cos(z32, out=o32)) / z.size * 1e9,
            "polycos64_ns": best(lambda: poly_cos(z)) / z.size * 1e9,
            "polycos64_err": float(np.abs(poly_cos(z) - F64).max()),
            "syrk64_s": best(lambda: blas.dsyrk(1.0, F64, trans=1)),
            "syrk32_s": best(lambda: blas.ssyrk(1.0, F32, trans=1)),
            "rows": rows,
        }


def case_dtype(n: int, Ds: list[int], n_pred: int, repeat: int) -> list[dict]:
    """Default (auto) vs float32 vs float64 features, default parameters; best of ``repeat``
    runs, each in its own process; ratios to float32 of the same D."""
    rows = []
    for D in Ds:
        best: dict[str, dict] = {}
        for rep in range(repeat):
            order = ("auto", "float32", "float64")
            for dtype in order if rep % 2 == 0 else order[::-1]:  # alternate: no order advantage
                r = run("default", n=n, D=D, dtype=dtype, n_pred=n_pred)
                if "error" in r:
                    best.setdefault(dtype, r)
                    continue
                old = best.get(dtype)
                if old is None or "error" in old:
                    best[dtype] = dict(r)
                else:
                    for key in ("fit_s", "predict_s"):
                        old[key] = min(old[key], r[key])
                    old["peak_rss_mb"] = max(old["peak_rss_mb"], r["peak_rss_mb"])
        ref = best.get("float32", {})
        for dtype in ("auto", "float32", "float64"):
            r = best[dtype]
            if "error" in r:
                rows.append({"case": f"dtype D={D}", "what": f"{dtype}", **r})
                continue
            used = f" (used {r['dtype_used']})" if dtype == "auto" else ""
            for step, key, rows_n in (("fit", "fit_s", n), ("predict", "predict_s", n_pred)):
                rows.append({
                    "case": f"dtype D={D}", "what": f"{step} dtype={dtype}{used}, {rows_n:,} rows",
                    "time_s": r[key], "ratio": r[key] / ref.get(key, float("nan")),
                    "peak_rss_mb": r["peak_rss_mb"], "rmse": r["rmse"], "dtype_used": r["dtype_used"],
                    "mean_error": r["mean_error"], "std_error": r["std_error"],
                })  # fmt: skip
        k = run("kernels", D=D)
        rows.append({"case": f"dtype D={D}", "what": f"per {k.get('rows', 0)}×{D} block, 1 thread", "kernels": k})
        rows.append({"case": f"dtype D={D}", "what": "uptime load average after these runs", "load": os.getloadavg()})
    return rows


def m_sklearn(n: int, D: int, n_test: int) -> dict:
    """scikit-learn RBFSampler + Ridge (float64, everything in memory)."""
    import numpy as np
    from sklearn.kernel_approximation import RBFSampler
    from sklearn.linear_model import Ridge

    X, y = _data(n, seed=1)
    t = time.perf_counter()
    feat = RBFSampler(gamma=GAMMA, n_components=D, random_state=0).fit(X)
    model = Ridge(alpha=ALPHA).fit(feat.transform(X), y)
    fit_s = time.perf_counter() - t
    Xt, yt = _data(n_test, seed=2)
    rmse = float(np.sqrt(np.mean((model.predict(feat.transform(Xt)) - yt) ** 2)))
    return {"time_s": fit_s, "peak_rss_mb": peak_rss_mb(), "rmse": rmse}


def m_prepass(source: str, chunk_rows: int, dask_threads: int) -> dict:
    """The standardize pre-pass alone: column means and standard deviations of X from zarr."""
    import dask

    from bigkernel import open_source

    ds = open_source(source, chunk_rows=chunk_rows)
    with dask.config.set(scheduler="threads", num_workers=dask_threads):
        t = time.perf_counter()
        dask.compute(ds.X.mean(axis=0), ds.X.std(axis=0))
        return {"time_s": time.perf_counter() - t, "peak_rss_mb": peak_rss_mb()}


MEASUREMENTS = {
    "syrk": m_syrk, "pass": m_pass, "eigh": m_eigh, "solve": m_solve, "lapack": m_lapack, "ours": m_ours, "sklearn": m_sklearn, "prepass": m_prepass,
    "default": m_default,
    "kernels": m_kernels,
}  # fmt: skip


run = measurement_runner(__file__)


# ----------------------------------------------------------------------------- cases
def case_a(
    n: int,
    D: int,
    with_sklearn: bool,
    repeat: int = 1,
    routes: tuple[str, ...] = ("factored",),
    sub_blocks: int | None = None,
) -> list[dict]:
    rows = []
    for rep in range(1, repeat + 1):
        case = f"a#{rep}"
        grid, limit = limit_rows(case, n, D)
        rows += grid
        rows.append({"case": case, "what": f"LIMIT: best syrk above, {n:,}×{D} float32→float64", "time_s": limit,
                     "ratio": 1.0, "peak_rss_mb": float("nan")})  # fmt: skip
        order = routes if rep % 2 else routes[::-1]  # alternate: no order advantage
        for threads, label in ((CORES, f"{CORES} dask threads × 1 BLAS"), (1, f"1 dask thread × {CORES} BLAS")):
            for route in order:
                r = run("ours", n=n, D=D, dtype="float32", source=None, chunk_rows=131_072, dask_threads=threads,
                        n_test=100_000, route=route, sub_blocks=sub_blocks)  # fmt: skip
                tag = "" if routes == ("factored",) else f" [{route}]"
                rows.append({"case": case, "what": f"bigkernel fit float32, {label}{tag}", **r,
                             "ratio": r.get("time_s", float("nan")) / limit})  # fmt: skip
        r = run("pass", n=n, D=D, dtype="float32", chunk_rows=131_072, dask_threads=CORES, sub_blocks=sub_blocks)
        rows.append({"case": case, "what": f"  of which the pass ({CORES} dask threads)", **r,
                     "ratio": r.get("time_s", float("nan")) / limit})  # fmt: skip
        for route in order:
            r = run("solve", D=D, route=route)
            tag = "" if routes == ("factored",) else f" [{route}]"
            rows.append({"case": case, "what": f"  of which the solve of {D}×{D}{tag}", **r,
                         "ratio": r.get("time_s", float("nan")) / limit})  # fmt: skip
        r = run("eigh", D=D)
        rows.append({"case": case, "what": f"  (for reference: a dense eigh (evd) of {D}×{D})", **r,
                     "ratio": r.get("time_s", float("nan")) / limit})  # fmt: skip
        if rep == 1:
            for blas in sorted({1, CORES}):
                r = run("lapack", D=D, blas=blas)
                rows.append({"case": case, "what": f"post-pass steps {D}×{D}, {blas} BLAS thread(s)", "lapack": r})
        rows.append({"case": case, "what": "uptime load average after this repetition", "load": os.getloadavg()})
    if with_sklearn:
        r = run("sklearn", n=n, D=D, n_test=100_000)
        rows.append({"case": "a", "what": "sklearn RBFSampler+Ridge float64", **r,
                     "ratio": r.get("time_s", float("nan")) / limit})  # fmt: skip
    return rows


def case_b(n: int, D: int, data_dir: str, rss_ns: list[int]) -> list[dict]:
    from bigkernel.data.synthetic import SyntheticSpec, make_data

    rows = []
    for m in sorted(set(rss_ns + [n])):
        path = os.path.join(data_dir, f"friedman1_{m}.zarr")
        t = time.perf_counter()
        if not os.path.exists(path):
            make_data(SyntheticSpec("friedman1", m, D_FEATURES, 1.0, 0), path, chunk_rows=131_072)
        made = time.perf_counter() - t
        # the limit grid on at most 2M rows, scaled to m (syrk time is linear in the rows)
        grid, limit = limit_rows("b", m, D, n_measured=min(m, 2_000_000))
        r = run("ours", n=m, D=D, dtype="float32", source=path, chunk_rows=131_072, dask_threads=CORES, n_test=100_000)
        rows += grid
        rows.append({"case": "b", "what": f"LIMIT {m:,}×{D}", "time_s": limit, "ratio": 1.0,
                     "peak_rss_mb": float("nan")})  # fmt: skip
        rows.append(
            {
                "case": "b",
                "what": f"bigkernel fit {m:,} rows from zarr (made in {made:.0f}s)",
                **r,
                "ratio": r.get("time_s", float("nan")) / limit,
            }
        )
        rows.append({"case": "b", "what": "uptime load average", "load": os.getloadavg()})
    return rows


def case_chunking(n: int, D: int) -> list[dict]:
    import numpy as np

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype, chunkings in (("float32", (131_072, 262_144)), ("float64", (100_000, 77_777))):
            files = []
            for c in chunkings:
                f = os.path.join(tmp, f"{dtype}_{c}.npy")
                run("ours", n=n, D=D, dtype=dtype, source=None, chunk_rows=c, dask_threads=CORES, n_test=0, save_coef=f)
                files.append(f)
            a, b = (np.load(f) for f in files)
            rel = float(np.linalg.norm(a - b) / np.linalg.norm(a))
            rows.append(
                {
                    "case": "chunking",
                    "what": f"{dtype}: chunks {chunkings[0]:,} vs {chunkings[1]:,} rows",
                    "coef_rel_diff": rel,
                }
            )
    return rows


def case_standardize(n: int, D: int, data_dir: str) -> list[dict]:
    from bigkernel.data.synthetic import SyntheticSpec, make_data

    path = os.path.join(data_dir, f"friedman1_{n}.zarr")
    if not os.path.exists(path):
        make_data(SyntheticSpec("friedman1", n, D_FEATURES, 1.0, 0), path, chunk_rows=131_072)
    common = dict(n=n, D=D, dtype="float32", source=path, chunk_rows=131_072, dask_threads=CORES, n_test=100_000)
    plain = run("ours", **common)
    # γ applies to the standardized features: x ~ U(0, 1) has variance 1/12, so γ/12 is the
    # same kernel on the original scale (comparable RMSE)
    scaled = run("ours", **common, standardize=True, gamma=GAMMA / 12.0)
    pre = run("prepass", source=path, chunk_rows=131_072, dask_threads=CORES)
    base = plain.get("time_s", float("nan"))
    return [
        {"case": "std", "what": f"fit {n:,} rows from zarr, standardize=False", **plain, "ratio": 1.0},
        {
            "case": "std",
            "what": "fit, standardize=True (pre-pass + pass)",
            **scaled,
            "ratio": scaled.get("time_s", float("nan")) / base,
        },
        {
            "case": "std",
            "what": "the pre-pass alone (mean, std of X)",
            **pre,
            "ratio": pre.get("time_s", float("nan")) / base,
        },
    ]


def _table(rows: list[dict]) -> str:
    lines = [f"{'case':8s} {'what':58s} {'time s':>8s} {'ratio':>6s} {'peak RSS MB':>11s} {'RMSE':>7s}"]
    for r in rows:
        if "coef_rel_diff" in r:
            lines.append(f"{r['case']:8s} {r['what']:58s} coefficient relative difference {r['coef_rel_diff']:.2e}")
            continue
        if "kernels" in r:
            k = r["kernels"]
            if "error" in k:
                lines.append(f"{r['case']:8s} {r['what']:58s} ERROR {k['error']}")
                continue
            lines.append(
                f"{r['case']:8s} {r['what']:58s} cos ns/value f64 {k['cos64_ns']:.2f} f32 {k['cos32_ns']:.2f} "
                f"poly-f64 {k['polycos64_ns']:.2f} (err {k['polycos64_err']:.0e}); syrk s f64 {k['syrk64_s']:.3f} "
                f"f32 {k['syrk32_s']:.3f}"
            )
            continue
        if "lapack" in r:
            k = r["lapack"]
            steps = "; ".join(f"{name} {t:.2f}" for name, t in k.get("steps_s", {}).items()) or k.get("error")
            lines.append(f"{r['case']:8s} {r['what']:58s} s: {steps}")
            continue
        if "load" in r:
            lines.append(f"{r['case']:8s} {r['what']:58s} {' '.join(f'{v:.2f}' for v in r['load'])}")
            continue
        if "error" in r:
            lines.append(f"{r['case']:8s} {r['what']:58s} ERROR {r['error']}")
            continue
        rmse = f"{r['rmse']:.4f}" if "rmse" in r else ""
        lines.append(
            f"{r['case']:8s} {r['what']:58s} {r['time_s']:8.2f} {r['ratio']:6.2f} {r['peak_rss_mb']:11.0f} {rmse:>7s}"
        )
    return "\n".join(lines)


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", choices=["a", "b", "chunking", "standardize", "dtype", "all"], default="all")
    p.add_argument("--n-pred", type=int, default=200_000, help="rows predicted in case dtype")
    p.add_argument("--n", type=float, default=None, help="rows (default 4e5 for a/chunking, 1e7 for b)")
    p.add_argument("--D", type=int, default=None, help="features (default 2048 for a/chunking, 1024 for b)")
    p.add_argument("--no-sklearn", action="store_true")
    p.add_argument(
        "--solve-route", choices=["factored", "eigen", "dense", "eager", "both", "eager-both", "eigen-both"],
        default="factored",
        help="case a: the solve after the pass as in this tree (default: Cholesky at one α), the "
        "factored eigendecomposition at every α (eigen), the dense evd route or the eager factored "
        "route (tridiagonal eigenvectors formed in the decomposition), or eigen/dense/eager and "
        "this tree's in the same run (before/after ratios)",
    )  # fmt: skip
    p.add_argument(
        "--sub-blocks",
        type=int,
        default=None,
        help="case a: feature sub-blocks per task of the pass (default: the library's)",
    )
    p.add_argument("--repeat", type=int, default=2, help="repetitions of case a (limit grid and fits)")
    p.add_argument("--no-rss-sweep", action="store_true", help="case b at n only (not also n/10 and 3n/10)")
    p.add_argument("--data-dir", default="bench_results/data")
    p.add_argument("--out", default="bench_results/bench_rff.json")
    args = p.parse_args()
    os.makedirs(args.data_dir, exist_ok=True)
    rows: list[dict] = []
    t0 = time.perf_counter()
    if args.case in ("a", "all"):
        both = {"both": ("dense", "factored"), "eager-both": ("eager", "factored"), "eigen-both": ("eigen", "factored")}
        routes = both.get(args.solve_route, (args.solve_route,))
        rows += case_a(int(args.n or 4e5), args.D or 2048, not args.no_sklearn, args.repeat, routes, args.sub_blocks)
    if args.case in ("b", "all"):
        n = int(args.n or 1e7)
        rows += case_b(n, args.D or 1024, args.data_dir, [] if args.no_rss_sweep else [n // 10, (3 * n) // 10])
    if args.case in ("chunking", "all"):
        rows += case_chunking(int(args.n or 4e5), args.D or 2048)
    if args.case in ("dtype", "all"):
        rows += case_dtype(int(args.n or 4e5), [args.D] if args.D else [512, 2048], args.n_pred, args.repeat)
    if args.case in ("standardize", "all"):
        rows += case_standardize(int(args.n or 3e6), args.D or 1024, args.data_dir)
    result = {"rows": rows, "total_s": time.perf_counter() - t0, "machine": machine_info()}
    write_json(args.out, result)
    print(_table(rows))
    print(f"\nwrote {args.out} ({result['total_s']:.0f}s)")


if __name__ == "__main__":
    main()
