#!/usr/bin/env python
"""GPU benchmark of issue 11, one run: JSON + table, the GPU named.

Cases (rbf, d=10 Friedman #1, float32 features unless said):

- ``bare``: the GPU limit — a bare CuPy pass ``cos(XW + b)`` then ``ΦᵀΦ`` (float32 GEMMs,
  float64 accumulation per chunk), host chunks copied in (n=4M, D=2048).
- ``rf_gpu`` / ``rf_cpu``: bigkernel ``RandomFeatureRidge`` on the GPU and on all CPU cores of
  the same machine, same data in memory; ratios to ``bare``.
- ``zarr``: n=1e8 from a zarr store on local disk: the store's read time (every chunk to host
  memory, nothing else), the bare GPU pass over the store, bigkernel on the GPU from the store.
- ``exact``: ``ExactKernelRidge(device="cuda")`` at n=100k and n=1M (preconditioned CG); its
  predictions checked on a subsample of training rows with the CPU path: the host predictor
  must give ``y_i − α a_i`` (the dual optimality condition of the centred system); at n=100k also
  against a CPU fit (``--exact-cpu-n``).
- ``bootstrap``: ``bootstrap(RandomFeatureRidge(D=1024), B=200, n=1e6)`` on the GPU.
- ``agree``: GPU vs CPU — exact float64 coefficients (relative), the same α chosen; random
  features float32 predictions, the same (γ, α) chosen by ``RandomFeatureRidgeCV``.

Cases that need the streamed pass on a GPU (``rf_gpu``, the zarr fit, ``bootstrap``, the
random-feature agreement) are reported as skipped, with the reason, in a build whose
``stats_graph`` has no ``device`` argument.

Without a usable GPU the script exits with status 2 and says why. ``--cpu-only`` runs tiny sizes
of every case on the CPU with numpy standing in for CuPy (the same namespace code), so the script
itself is exercised where there is no GPU; its timings mean nothing.

Usage::

    python scripts/bench_gpu.py --out bench_results/gpu.json            # on a GPU machine
    python scripts/bench_gpu.py --cpu-only --out /tmp/gpu_smoke.json     # anywhere
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import sys
import tempfile
import time

import numpy as np

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import peak_rss_mb, write_json

GAMMA, ALPHA, D_FEATURES = 0.5, 1e-2, 10


def _data(n: int, seed: int):
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, D_FEATURES, 1.0, seed), 0, n)
    return a[:, :D_FEATURES], a[:, D_FEATURES]


def _xp(cpu_only: bool):
    """The array module of the 'GPU' (CuPy, or numpy standing in for it)."""
    if cpu_only:
        import numpy

        return numpy
    import cupy

    return cupy


def _sync(xp) -> None:
    if xp.__name__ == "cupy":
        xp.cuda.Stream.null.synchronize()


def _stream_on_gpu() -> bool:
    from bigkernel.graph.stream import stats_graph

    return "device" in inspect.signature(stats_graph).parameters


def _device(cpu_only: bool) -> str:
    return "cpu" if cpu_only else "cuda"


# ----------------------------------------------------------------------------- the GPU limit
def bare_pass(xp, chunks, D: int, seed: int = 0) -> dict:
    """cos(XW + b) then ΦᵀΦ per host chunk: float32 GEMMs, float64 accumulation of the D×D sums."""
    rng = np.random.default_rng(seed)
    d = chunks[0].shape[1] if not callable(chunks) else D_FEATURES
    W = xp.asarray(rng.normal(scale=np.sqrt(2 * GAMMA), size=(d, D)).astype(np.float32))
    b = xp.asarray(rng.uniform(0, 2 * np.pi, size=D).astype(np.float32))
    G = xp.zeros((D, D), dtype=xp.float64)
    it = chunks() if callable(chunks) else chunks
    t = time.perf_counter()
    rows = 0
    for Xc in it:
        Xd = xp.asarray(Xc, dtype=xp.float32)
        P = xp.cos(Xd @ W + b)
        G += (P.T @ P).astype(xp.float64)
        rows += Xc.shape[0]
    _sync(xp)
    return {"time_s": time.perf_counter() - t, "rows": rows, "checksum": float(G[0, 0])}


def case_bare(args, xp) -> dict:
    X, _ = _data(args.n, seed=1)
    X = X.astype("float32")
    chunks = [X[i : i + args.chunk] for i in range(0, args.n, args.chunk)]
    bare_pass(xp, chunks[:1], args.D)  # warm up (kernels, cuBLAS handles)
    return {"n": args.n, "D": args.D, **bare_pass(xp, chunks, args.D)}


# ----------------------------------------------------------------------------- bigkernel RF
def _rf_fit(n: int, D: int, device: str, X=None, y=None, chunk_rows=None) -> dict:
    import dask

    from bigkernel import RandomFeatureRidge

    if X is None:
        X, y = _data(n, seed=1)
    est = RandomFeatureRidge(gamma=GAMMA, n_components=D, alpha=ALPHA, dtype="float32", random_state=0,
                             chunk_rows=chunk_rows, device=device)  # fmt: skip
    with dask.config.set(scheduler="threads"):
        t = time.perf_counter()
        est.fit(X, y)
    return {"time_s": time.perf_counter() - t, "peak_rss_mb": peak_rss_mb(), "df": est.df_}


def case_rf(args, device: str) -> dict:
    if device != "cpu" and not _stream_on_gpu():
        return {"skipped": "this build's streamed pass has no device argument (the `pass` branch adds it)"}
    return {"n": args.n, "D": args.D, "device": device, **_rf_fit(args.n, args.D, device, chunk_rows=args.chunk)}


# ----------------------------------------------------------------------------- zarr, n = 1e8
def case_zarr(args, xp) -> dict:
    import zarr

    from bigkernel.data.synthetic import SyntheticSpec, make_data

    path = os.path.join(args.workdir, f"bench_gpu_{args.n_zarr}.zarr")
    t = time.perf_counter()
    make_data(SyntheticSpec("friedman1", args.n_zarr, D_FEATURES, 1.0, 3), path, chunk_rows=args.zarr_chunk)
    out = {"n": args.n_zarr, "D": args.D, "store": path, "write_s": time.perf_counter() - t}
    Xz = zarr.open_group(path, mode="r")["X"]

    def chunks():
        for i in range(0, args.n_zarr, args.zarr_chunk):
            yield np.asarray(Xz[i : i + args.zarr_chunk])

    t = time.perf_counter()
    total = 0.0
    for c in chunks():
        total += float(c[0, 0])
    out["read_s"] = time.perf_counter() - t  # the store alone (page cache as the OS left it)
    out["bare_gpu_s"] = bare_pass(xp, chunks, args.D)["time_s"]
    if args.cpu_only or _stream_on_gpu():
        from bigkernel import open_source

        ds = open_source(path)
        out["bigkernel_gpu"] = _rf_fit(args.n_zarr, args.D, _device(args.cpu_only), ds.X, ds.y)
        out["ratio_to_max_read_bare"] = out["bigkernel_gpu"]["time_s"] / max(out["read_s"], out["bare_gpu_s"])
    else:
        out["bigkernel_gpu"] = {"skipped": "streamed pass without a device argument in this build"}
    return out


# ----------------------------------------------------------------------------- exact
class _NumpyNamespaceDevice:
    """--cpu-only: a stand-in device whose namespace is array-api-compat's numpy, so the exact
    solver takes its device path (DeviceGram + the namespace numerics) without a GPU."""

    is_gpu = True

    @property
    def xp(self):
        import array_api_compat.numpy as xnp

        return xnp

    def activate(self):
        import contextlib

        return contextlib.nullcontext()

    def free_memory(self):
        return None

    def __str__(self) -> str:
        return "numpy-namespace"


def _fit_on_namespace(est, X, y):
    """Fit ``est`` through the device path on :class:`_NumpyNamespaceDevice` (a benchmark script
    may reach into the estimator: the namespace tests do the same)."""
    from bigkernel.data.sources import as_dataset

    est._check_params()
    return est._fit_on(as_dataset(X, y), None, _NumpyNamespaceDevice())


def _exact(n: int, device: str, xp_name: str | None, rank: int | None, tol: float) -> tuple[object, dict]:
    from bigkernel import ExactKernelRidge

    X, y = _data(n, seed=4)
    est = ExactKernelRidge(gamma=GAMMA, alpha=ALPHA, tol=tol, rank=rank, random_state=0, device=device)
    t = time.perf_counter()
    if xp_name == "numpy-namespace":  # --cpu-only: the device path, numpy standing in for CuPy
        _fit_on_namespace(est, X, y)
    else:
        est.fit(X, y)
    fit_s = time.perf_counter() - t
    idx = np.random.default_rng(0).choice(n, size=min(n, 2000), replace=False)
    # the CPU path (host predictor) at training rows must give y − α a (dual optimality)
    f = est.predict(X[idx])
    target = y[idx] - est.alpha_ * est.dual_coef_[idx]
    info = {
        "n": n, "fit_s": fit_s, "n_iter": int(est.n_iter_), "residual": float(est.residual_),
        "gram": est.solver_info_["gram"], "rank": est.solver_info_["rank"],
        "optimality_rel_err": float(np.abs(f - target).max() / np.abs(y[idx]).max()),
        "peak_rss_mb": peak_rss_mb(),
    }  # fmt: skip
    return est, info


def case_exact(args) -> dict:
    out = {}
    dev = _device(args.cpu_only)
    xp_name = "numpy-namespace" if args.cpu_only else None
    for n in args.exact_n:
        est, info = _exact(n, dev, xp_name, args.rank, args.tol)
        if n == args.exact_cpu_n:
            cpu, cinfo = _exact(n, "cpu", None, args.rank, args.tol)
            Z, _ = _data(2000, seed=5)
            info["cpu_fit_s"] = cinfo["fit_s"]
            info["pred_rel_diff_vs_cpu_fit"] = float(np.abs(est.predict(Z) - cpu.predict(Z)).max()
                                                     / np.abs(cpu.predict(Z)).max())  # fmt: skip
        out[str(n)] = info
    return out


# ----------------------------------------------------------------------------- bootstrap
def case_bootstrap(args) -> dict:
    if not args.cpu_only and not _stream_on_gpu():
        return {"skipped": "the bootstrap's weighted pass needs the streamed pass on a GPU (`pass` branch)"}
    import dask

    import bigkernel
    from bigkernel import RandomFeatureRidge

    X, y = _data(args.boot_n, seed=6)
    est = RandomFeatureRidge(gamma=GAMMA, n_components=args.boot_D, alpha=ALPHA, dtype="float32", random_state=0,
                             device=_device(args.cpu_only))  # fmt: skip
    store = tempfile.mkdtemp(prefix="bench-gpu-boot-", dir=args.workdir)
    with dask.config.set(scheduler="threads"):
        t = time.perf_counter()
        bigkernel.bootstrap(est, X, y, X[:100], n_bootstraps=args.B, random_state=0,
                            store=os.path.join(store, "b.zarr"))  # fmt: skip
    return {"n": args.boot_n, "D": args.boot_D, "B": args.B, "time_s": time.perf_counter() - t}


# ----------------------------------------------------------------------------- agreement
def case_agree(args) -> dict:
    from bigkernel import ExactKernelRidge, RandomFeatureRidgeCV

    dev = _device(args.cpu_only)
    out = {}
    X, y = _data(args.agree_n, seed=7)
    kw = dict(gamma=GAMMA, alpha=[1e-3, 1e-2, 1e-1], n_probes=8, tol=1e-11, random_state=0)
    cpu = ExactKernelRidge(**kw).fit(X, y)
    if args.cpu_only:
        gpu = _fit_on_namespace(ExactKernelRidge(**kw), X, y)
    else:
        gpu = ExactKernelRidge(device=dev, **kw).fit(X, y)
    out["exact"] = {
        "coef_rel_diff": float(np.abs(gpu.dual_coef_ - cpu.dual_coef_).max() / np.abs(cpu.dual_coef_).max()),
        "alpha_cpu": cpu.alpha_, "alpha_gpu": gpu.alpha_, "same_alpha": cpu.alpha_ == gpu.alpha_,
    }  # fmt: skip
    if args.cpu_only or _stream_on_gpu():
        kw = dict(gammas=[0.1, 0.5, 2.0], alphas=[1e-3, 1e-2, 1e-1], n_components=512, dtype="float32", random_state=0)
        c = RandomFeatureRidgeCV(**kw).fit(X, y)
        g = RandomFeatureRidgeCV(device=dev, **kw).fit(X, y)
        pc, pg = c.predict(X[:1000]), g.predict(X[:1000])
        out["random_features"] = {"pred_rel_diff": float(np.abs(pg - pc).max() / np.abs(pc).max()),
                                  "same_choice": c.best_params_ == g.best_params_,
                                  "best_cpu": c.best_params_, "best_gpu": g.best_params_}  # fmt: skip
    else:
        out["random_features"] = {"skipped": "streamed pass without a device argument in this build"}
    return out


# ----------------------------------------------------------------------------- driver
def _gpu_name(cpu_only: bool) -> str:
    if cpu_only:
        return f"none (--cpu-only on {platform.processor() or platform.machine()})"
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def _table(res: dict) -> str:
    rows = [("case", "figure", "value")]
    bare = res["cases"].get("bare", {}).get("time_s")
    for key in ("rf_gpu", "rf_cpu"):
        r = res["cases"].get(key, {})
        if "time_s" in r:
            ratio = f" ({r['time_s'] / bare:.2f}× bare)" if bare else ""
            rows.append((key, f"fit n={r['n']:,} D={r['D']}", f"{r['time_s']:.2f} s{ratio}"))
        elif r:
            rows.append((key, "skipped", r.get("skipped", "")))
    if bare:
        rows.insert(1, ("bare", f"cos(XW+b), ΦᵀΦ n={res['cases']['bare']['n']:,}", f"{bare:.2f} s"))
    z = res["cases"].get("zarr")
    if z:
        rows.append(("zarr", f"read store n={z['n']:,}", f"{z['read_s']:.2f} s"))
        rows.append(("zarr", "bare GPU pass from store", f"{z['bare_gpu_s']:.2f} s"))
        g = z["bigkernel_gpu"]
        rows.append(("zarr", "bigkernel GPU from store", f"{g['time_s']:.2f} s" if "time_s" in g else g["skipped"]))
    for n, e in res["cases"].get("exact", {}).items():
        extra = f", vs CPU fit {e['pred_rel_diff_vs_cpu_fit']:.1e}" if "pred_rel_diff_vs_cpu_fit" in e else ""
        rows.append(("exact", f"n={int(n):,} fit ({e['n_iter']} it)",
                     f"{e['fit_s']:.2f} s, optimality {e['optimality_rel_err']:.1e}{extra}"))  # fmt: skip
    b = res["cases"].get("bootstrap")
    if b:
        rows.append(("bootstrap", "B, n, D" if "time_s" in b else "skipped",
                     f"{b['time_s']:.2f} s (B={b['B']}, n={b['n']:,}, D={b['D']})" if "time_s" in b
                     else b["skipped"]))  # fmt: skip
    a = res["cases"].get("agree")
    if a:
        e = a["exact"]
        rows.append(("agree", "exact coef rel diff, same α", f"{e['coef_rel_diff']:.1e}, {e['same_alpha']}"))
        r = a["random_features"]
        rows.append(("agree", "RF pred rel diff, same (γ, α)",
                     f"{r['pred_rel_diff']:.1e}, {r['same_choice']}" if "pred_rel_diff" in r else r["skipped"]))  # fmt: skip
    w = [max(len(str(r[i])) for r in rows) for i in range(3)]
    return "\n".join(" | ".join(str(c).ljust(w[i]) for i, c in enumerate(r)) for r in rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-only", action="store_true", help="tiny sizes on the CPU (numpy stands in for CuPy)")
    p.add_argument("--cases", default="bare,rf_gpu,rf_cpu,zarr,exact,bootstrap,agree")
    p.add_argument("--n", type=int, default=4_000_000)
    p.add_argument("--D", type=int, default=2048)
    p.add_argument("--chunk", type=int, default=524_288)
    p.add_argument("--n-zarr", type=int, default=100_000_000)
    p.add_argument("--zarr-chunk", type=int, default=1_048_576)
    p.add_argument("--exact-n", type=lambda s: [int(v) for v in s.split(",")], default=[100_000, 1_000_000])
    p.add_argument("--exact-cpu-n", type=int, default=100_000, help="also fit this n on the CPU (0: none)")
    p.add_argument("--rank", type=int, default=None)
    p.add_argument("--tol", type=float, default=1e-6)
    p.add_argument("--B", type=int, default=200)
    p.add_argument("--boot-n", type=int, default=1_000_000)
    p.add_argument("--boot-D", type=int, default=1024)
    p.add_argument("--agree-n", type=int, default=5000)
    p.add_argument("--workdir", default=tempfile.gettempdir())
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.cpu_only:  # tiny: exercise every line of the script, not a measurement
        args.n, args.D, args.chunk, args.n_zarr, args.zarr_chunk = 20_000, 256, 8192, 50_000, 16_384
        args.exact_n, args.exact_cpu_n, args.B, args.boot_n, args.boot_D, args.agree_n = [1500], 1500, 3, 5000, 64, 800
    else:
        from bigkernel.devices import resolve_device
        from bigkernel.errors import DeviceError

        try:
            resolve_device("cuda")
        except DeviceError as exc:
            print(f"bench_gpu: no usable GPU — {exc}\nRun it on a machine with a CUDA GPU "
                  "(scripts/gpu_check.sh), or use --cpu-only for a smoke run.", file=sys.stderr)  # fmt: skip
            return 2
    xp = _xp(args.cpu_only)
    cases = args.cases.split(",")
    res = {"gpu": _gpu_name(args.cpu_only), "cpu_count": os.cpu_count(), "load_avg": os.getloadavg(),
           "cpu_only_smoke": args.cpu_only, "stream_on_gpu": _stream_on_gpu(), "args": vars(args), "cases": {}}  # fmt: skip
    runners = {
        "bare": lambda: case_bare(args, xp),
        "rf_gpu": lambda: case_rf(args, _device(args.cpu_only)),
        "rf_cpu": lambda: case_rf(args, "cpu"),
        "zarr": lambda: case_zarr(args, xp),
        "exact": lambda: case_exact(args),
        "bootstrap": lambda: case_bootstrap(args),
        "agree": lambda: case_agree(args),
    }
    for case in cases:
        t = time.perf_counter()
        res["cases"][case] = runners[case]()
        print(f"[{case}] done in {time.perf_counter() - t:.1f}s", file=sys.stderr, flush=True)
    res["load_avg_end"] = os.getloadavg()
    print(f"GPU: {res['gpu']}   CPU cores: {res['cpu_count']}   load {res['load_avg']}")
    print(_table(res))
    if args.out:
        write_json(args.out, res, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
