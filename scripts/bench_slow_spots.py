#!/usr/bin/env python
"""Issue 19's three slow spots, before and after the LAPACK thread rule, against references.

The three spots are ``ExactKernelRidgeCV`` (one n × n eigendecomposition per γ), the exact
``predict(X, return_std=True)`` (one Cholesky factor of ``K + αI``, then a triangular solve per
block of points) and ``RandomFeatureRidgeCV`` with 5 folds (one data pass, then 1 + 5
eigendecompositions of D × D per γ). Each measurement runs in its own interpreter (its own peak
RSS), twice:

- ``--policy blas`` ("before"): every LAPACK call on the BLAS library's threads (the behaviour
  before :mod:`bigkernel.numerics.threads`; ExactKernelRidgeCV used one thread only up to
  n = 2000);
- ``--policy idle`` ("after"): on the cores other processes leave idle, sampled before each call.

References, measured in the same run on the same data: scikit-learn's ``KernelRidge`` fit (one
Cholesky solve of the n × n system) for the exact CV; scikit-learn's
``GaussianProcessRegressor(optimizer=None)`` fit + ``predict(return_std=True)`` (the same
algorithm: Cholesky, then a triangular solve) for the posterior; one ``RandomFeatureRidge`` fit
for the random-feature CV. The machine is shared: every row records the 1-minute load average
and the CPU seconds other processes used meanwhile. Both policies give the same numbers (the
largest relative difference of the scores / std is printed).

Usage::

    python scripts/bench_slow_spots.py                         # ~10-15 minutes on 2 busy cores
    python scripts/bench_slow_spots.py --only b --out /tmp/b.json
    python scripts/bench_slow_spots.py --exact-n 5000 --exact-gammas 4 --rff-n 200000
"""

from __future__ import annotations

import argparse
import os
import time

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import (
    LoadTimer,
    dispatch_measurement,
    load_text,
    machine_info,
    measurement_runner,
    peak_rss_gb,
    write_json,
)

GAMMAS = [0.05, 0.1, 0.2, 0.5]


def _data(n: int, d: int, seed: int = 0):
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, d, 1.0, seed), 0, n)
    return a[:, :d], a[:, d]


def _policy(policy: str) -> None:
    """``blas``: the behaviour before the thread rule (every LAPACK call on the BLAS threads)."""
    if policy == "blas":
        from bigkernel.numerics import threads

        threads.lapack_threads = threads._blas_threads


def m_exact_cv(n: int, n_gammas: int, policy: str) -> dict:
    """ExactKernelRidgeCV, ``n_gammas`` γ × 20 α, closed-form LOO."""
    _policy(policy)
    from bigkernel import ExactKernelRidgeCV

    X, y = _data(n, 8)
    est = ExactKernelRidgeCV(gammas=GAMMAS[:n_gammas], max_n=None)
    with LoadTimer() as t:
        est.fit(X, y)
    eigh = [g["eigh_seconds"] for g in est.solver_info_["per_gamma"]]
    return {**t.figures(), "eigh_s": round(sum(eigh), 2), "peak_rss_gb": round(peak_rss_gb(), 2),
            "scores": est.cv_results_["mean_test_loo"].tolist()}  # fmt: skip


def m_kernel_ridge(n: int) -> dict:
    """scikit-learn KernelRidge fit at n: one Cholesky solve of the n × n system."""
    from sklearn.kernel_ridge import KernelRidge

    X, y = _data(n, 8)
    with LoadTimer() as t:
        KernelRidge(kernel="rbf", gamma=0.1, alpha=1e-2).fit(X, y)
    return {**t.figures(), "peak_rss_gb": round(peak_rss_gb(), 2)}


def m_posterior(n: int, m: int, policy: str) -> dict:
    """ExactKernelRidge fit at n, then predict m points: mean, std (first call: factors K + αI), std again."""
    _policy(policy)
    from bigkernel import ExactKernelRidge

    X, y = _data(n + m, 8)
    est = ExactKernelRidge(gamma=0.1, alpha=1.0)
    with LoadTimer() as fit:
        est.fit(X[:n], y[:n])
    with LoadTimer() as mean:
        est.predict(X[n:])
    with LoadTimer() as std:
        _, s = est.predict(X[n:], return_std=True)
    with LoadTimer() as again:
        est.predict(X[n:], return_std=True)
    return {**fit.figures("fit_"), **mean.figures("mean_"), **std.figures("std_"), **again.figures("std_again_"),
            "peak_rss_gb": round(peak_rss_gb(), 2), "std": s[:200].tolist()}  # fmt: skip


def m_gpr(n: int, m: int) -> dict:
    """scikit-learn GaussianProcessRegressor(optimizer=None) fit + predict(return_std=True): the
    same Cholesky + triangular solve (no intercept term, σ² = 1)."""
    import numpy as np
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF

    X, y = _data(n + m, 8)
    gpr = GaussianProcessRegressor(RBF(length_scale=1 / np.sqrt(2 * 0.1)), alpha=1.0, optimizer=None)
    with LoadTimer() as t:
        gpr.fit(X[:n], y[:n]).predict(X[n:], return_std=True)
    return {**t.figures(), "peak_rss_gb": round(peak_rss_gb(), 2)}


def _count_eigh():
    """Wrap the primal eigendecomposition to count its calls and seconds."""
    from bigkernel.numerics import primal

    inner, stats = primal.symmetric_eigh, {"calls": 0, "seconds": 0.0}

    def timed(G, *args, **kwargs):  # (G, device): the fit's Device, passed through
        t = time.perf_counter()
        try:
            return inner(G, *args, **kwargs)
        finally:
            stats["calls"] += 1
            stats["seconds"] += time.perf_counter() - t

    primal.symmetric_eigh = timed
    return stats


def m_rff_one(n: int, D: int, policy: str) -> dict:
    """One RandomFeatureRidge fit (float64), γ = 0.1, α = 1."""
    _policy(policy)
    from bigkernel import RandomFeatureRidge

    stats = _count_eigh()
    X, y = _data(n, 8)
    with LoadTimer() as t:
        RandomFeatureRidge(n_components=D, gamma=0.1, alpha=1.0, random_state=0).fit(X, y)
    return {**t.figures(), "eigh_calls": stats["calls"], "eigh_s": round(stats["seconds"], 2),
            "peak_rss_gb": round(peak_rss_gb(), 2)}  # fmt: skip


def m_rff_cv(n: int, D: int, n_gammas: int, policy: str) -> dict:
    """RandomFeatureRidgeCV, ``n_gammas`` γ × 20 α × 5 folds (float64)."""
    _policy(policy)
    from bigkernel import RandomFeatureRidgeCV

    stats = _count_eigh()
    X, y = _data(n, 8)
    est = RandomFeatureRidgeCV(n_components=D, gammas=GAMMAS[:n_gammas], cv=5, random_state=0)
    with LoadTimer() as t:
        est.fit(X, y)
    return {**t.figures(), "eigh_calls": stats["calls"], "eigh_s": round(stats["seconds"], 2),
            "peak_rss_gb": round(peak_rss_gb(), 2), "scores": est.cv_results_["mean_test_score"].tolist()}  # fmt: skip


MEASUREMENTS = {
    "exact_cv": m_exact_cv,
    "kernel_ridge": m_kernel_ridge,
    "posterior": m_posterior,
    "gpr": m_gpr,
    "rff_one": m_rff_one,
    "rff_cv": m_rff_cv,
}
run = measurement_runner(__file__, env={**os.environ, "OPENBLAS_CORETYPE": "Haswell"}, on_error="exit")


def _rel_diff(a: list, b: list) -> float:
    import numpy as np

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(np.isfinite(a), np.isfinite(b)):
        return float("inf")
    return float(np.max(np.abs(a[ok] - b[ok]) / np.maximum(np.abs(b[ok]), 1e-300))) if ok.any() else 0.0


def _row(what: str, r: dict, ref: float | None, key: str = "time_s") -> str:
    if "error" in r:
        return f"{what:58s} ERROR {r['error']}"
    ratio = f"{r[key] / ref:7.2f}" if ref else "      -"
    load, others = r.get("load_1min", r.get("std_load_1min")), r.get("others_cpu_s", r.get("std_others_cpu_s"))
    return f"{what:58s} {r[key]:8.2f} {ratio} {r.get('peak_rss_gb', 0):7.2f} {load:6.2f} {others:8.1f}"


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exact-n", type=int, default=3000, help="n of ExactKernelRidgeCV")
    p.add_argument("--exact-gammas", type=int, default=2, help="γ values of ExactKernelRidgeCV (at most 4)")
    p.add_argument("--rff-gammas", type=int, default=4, help="γ values of RandomFeatureRidgeCV (at most 4)")
    p.add_argument("--post-n", type=int, default=5000, help="training n of the posterior")
    p.add_argument("--post-m", type=int, default=5000, help="points of predict(return_std=True)")
    p.add_argument("--rff-n", type=int, default=50000)
    p.add_argument("--rff-d", type=int, default=1024, help="n_components D")
    p.add_argument("--only", default="abc", help="which spots: any of a, b, c")
    p.add_argument("--policies", default="blas,idle", help="'idle' alone skips the slow 'before' runs")
    p.add_argument("--out", default="bench_results/bench_slow_spots.json")
    a = p.parse_args()
    policies = a.policies.split(",")
    load0 = load_text()
    rows: dict[str, dict] = {}
    lines = [f"{'what':58s} {'time s':>8s} {'× ref':>7s} {'RSS GB':>7s} {'load':>6s} {'others s':>8s}"]
    if "a" in a.only:
        ref = rows["a ref"] = run("kernel_ridge", n=a.exact_n)
        for pol in policies:
            rows[f"a {pol}"] = run("exact_cv", n=a.exact_n, n_gammas=a.exact_gammas, policy=pol)
        rt = ref.get("time_s")
        lines.append(_row(f"a: sklearn KernelRidge fit, n={a.exact_n:,} (reference)", ref, rt))
        for pol in policies:
            lines.append(_row(f"a: ExactKernelRidgeCV {a.exact_gammas} γ × 20 α, {pol}", rows[f"a {pol}"], rt))
            lines.append(_row("     of which eigh", rows[f"a {pol}"], rt, "eigh_s"))
        if "scores" in rows.get("a blas", {}) and "scores" in rows.get("a idle", {}):
            lines.append(
                f"   LOO scores blas vs idle: max rel diff {_rel_diff(rows['a blas']['scores'], rows['a idle']['scores']):.1e}"
            )
    if "b" in a.only:
        ref = rows["b ref"] = run("gpr", n=a.post_n, m=a.post_m)
        for pol in policies:
            rows[f"b {pol}"] = run("posterior", n=a.post_n, m=a.post_m, policy=pol)
        rt = ref.get("time_s")
        lines.append(_row(f"b: sklearn GPR fit + predict std, n={a.post_n:,}, m={a.post_m:,} (ref)", ref, rt))
        for pol in policies:
            r = rows[f"b {pol}"]
            lines.append(_row(f"b: ExactKernelRidge fit, {pol}", r, rt, "fit_time_s"))
            lines.append(_row(f"b: predict mean, {pol}", r, rt, "mean_time_s"))
            lines.append(_row(f"b: predict std (first: factors K + αI), {pol}", r, rt, "std_time_s"))
            lines.append(_row(f"b: predict std again (factor kept), {pol}", r, rt, "std_again_time_s"))
        if "std" in rows.get("b blas", {}) and "std" in rows.get("b idle", {}):
            lines.append(
                f"   std blas vs idle: max rel diff {_rel_diff(rows['b blas']['std'], rows['b idle']['std']):.1e}"
            )
    if "c" in a.only:
        for pol in policies:
            rows[f"c one {pol}"] = run("rff_one", n=a.rff_n, D=a.rff_d, policy=pol)
            rows[f"c cv {pol}"] = run("rff_cv", n=a.rff_n, D=a.rff_d, n_gammas=a.rff_gammas, policy=pol)
        rt = rows[f"c one {policies[-1]}"].get("time_s")
        for pol in policies:
            lines.append(
                _row(f"c: RandomFeatureRidge one fit, n={a.rff_n:,} D={a.rff_d}, {pol}", rows[f"c one {pol}"], rt)
            )
            lines.append(_row(f"c: RandomFeatureRidgeCV {a.rff_gammas} γ × 5 folds, {pol}", rows[f"c cv {pol}"], rt))
            r = rows[f"c cv {pol}"]
            if "eigh_s" in r:
                lines.append(_row(f"     of which {r['eigh_calls']} eigh of {a.rff_d}²", r, rt, "eigh_s"))
        if "scores" in rows.get("c cv blas", {}) and "scores" in rows.get("c cv idle", {}):
            lines.append(
                f"   CV scores blas vs idle: max rel diff {_rel_diff(rows['c cv blas']['scores'], rows['c cv idle']['scores']):.1e}"
            )
    print("\n".join(lines))
    print(f"load average before: {load0}, after: {load_text()}")
    write_json(a.out, {"rows": rows, "table": lines, "machine": machine_info(load_before=load0, load_after=load_text()),
                       "argv": vars(a)})  # fmt: skip
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
