"""Benchmark: ``predict(X, return_std=True)`` against ``predict(X)`` of a RandomFeatureRidge.

Target (issue 12): return_std for 1e6 points at D = 2048 costs <= 2x predict. Both are timed in
the same run on the same numpy X, alternating (predict, return_std) ``--repeats`` times; the
ratio of the medians is reported, with the peak RSS of each call (sampled in a thread), the
number r of posterior directions kept (of D) and df at the chosen alpha. ``predict_one_thread``
is predict with dask's sync scheduler: numpy rows on the calling thread, as before
``runtime.map_rows`` spread them over the local threads.

The posterior std costs, per row, the features (shared with the mean: one feature block serves
both), the float64 cast and centring of the block, and one ``(rows, D) @ (D, r)`` product:
``O(D·r)`` on top of predict's ``O(D·(d + k))`` and the cosines (see
:mod:`bigkernel.numerics.posterior`).

Example::

    python scripts/bench_posterior.py --out bench_posterior.json
    python scripts/bench_posterior.py --n-eval 200000 --dtype float32
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

import dask
import numpy as np

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import timed, write_json
from threadpoolctl import threadpool_info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", default="friedman1", choices=("friedman1", "sine"))
    p.add_argument("--n-fit", type=int, default=20_000)
    p.add_argument("--n-eval", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=10, help="features of friedman1 (sine: 1)")
    p.add_argument("--D", type=int, default=2048)
    p.add_argument("--gamma", type=float, default=None, help="default: 1/d (friedman1), 20 (sine)")
    p.add_argument("--alpha", default="evidence", help="a number, 'gcv' or 'evidence'")
    p.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON file for the results")
    a = p.parse_args(argv)

    from bigkernel import RandomFeatureRidge
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    d = 1 if a.kind == "sine" else a.d
    rows = generate_rows(SyntheticSpec(a.kind, a.n_fit + a.n_eval, d, None, 0), 0, a.n_fit + a.n_eval)
    X, y = rows[:, :d], rows[:, d]
    Xf, yf, Xe = X[: a.n_fit], y[: a.n_fit], np.ascontiguousarray(X[a.n_fit :])
    gamma = a.gamma if a.gamma is not None else (20.0 if a.kind == "sine" else 1.0 / d)
    alpha = a.alpha if a.alpha in ("gcv", "evidence") else float(a.alpha)
    est = RandomFeatureRidge(gamma=gamma, n_components=a.D, alpha=alpha, dtype=a.dtype, random_state=0)
    t_fit, rss_fit, _ = timed(lambda: est.fit(Xf, yf))
    r = int(est.posterior_.vecs.shape[1])

    def one_thread(fn):
        """The call as before ``runtime.map_rows``: numpy rows on the calling thread only."""
        with dask.config.set(scheduler="sync"):
            return fn()

    runs = {"predict": [], "return_std": [], "predict_one_thread": []}
    peaks = dict.fromkeys(runs, 0)
    for _ in range(a.repeats):
        for name, fn in (
            ("predict", lambda: est.predict(Xe)),
            ("return_std", lambda: est.predict(Xe, return_std=True)),
            ("predict_one_thread", lambda: one_thread(lambda: est.predict(Xe))),
        ):
            dt, peak, _ = timed(fn)
            runs[name].append(dt)
            peaks[name] = max(peaks[name], peak)
    med = {k: float(np.median(v)) for k, v in runs.items()}
    ratio = med["return_std"] / med["predict"]
    load = os.getloadavg()
    blas = [f"{i.get('internal_api')} {i.get('version')} x{i.get('num_threads')}" for i in threadpool_info()]
    result = {
        "kind": a.kind, "n_fit": a.n_fit, "n_eval": a.n_eval, "d": d, "D": a.D, "dtype": a.dtype,
        "gamma": gamma, "alpha": est.alpha_, "df": est.df_, "r_kept": r,
        "posterior_rtol": est.posterior_.rtol, "fit_seconds": t_fit, "fit_peak_rss_gb": rss_fit / 1e9,
        "predict_seconds": runs["predict"], "return_std_seconds": runs["return_std"],
        "ratio_return_std_over_predict": ratio, "target_ratio": 2.0,
        "predict_one_thread_seconds": runs["predict_one_thread"],
        "threads_speedup_predict": med["predict_one_thread"] / med["predict"],
        "predict_peak_rss_gb": peaks["predict"] / 1e9, "return_std_peak_rss_gb": peaks["return_std"] / 1e9,
        "load_average": load, "cpus": os.cpu_count(), "blas": blas, "python": sys.version.split()[0],
        "machine": platform.processor() or platform.machine(),
    }  # fmt: skip
    print(f"RandomFeatureRidge {a.kind} d={d} D={a.D} {a.dtype}: fit n={a.n_fit:,} in {t_fit:.1f}s, "
          f"alpha={est.alpha_:.3g} df={est.df_:.1f}, posterior keeps r={r} of {a.D} directions")  # fmt: skip
    print(f"{'call':<22}{'seconds (median)':>18}{'runs':>26}{'peak RSS GB':>14}")
    for name in runs:
        shown = ", ".join(f"{t:.2f}" for t in runs[name])
        print(f"{name:<22}{med[name]:>18.2f}{shown:>26}{peaks[name] / 1e9:>14.2f}")
    print(f"predict on the local threads: {med['predict_one_thread'] / med['predict']:.2f}x faster than on one")
    print(f"ratio return_std / predict = {ratio:.2f} (target <= 2.0) on {a.n_eval:,} points; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    if a.out:
        write_json(a.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
