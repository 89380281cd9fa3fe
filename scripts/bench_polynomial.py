"""Benchmark: polynomial kernels on the streamed path (issue 13).

a) The explicit monomial map (``RandomFeatureRidge(kernel="poly")`` with C(d + k, k) <=
   n_components) against the exact dual solve (``ExactKernelRidge(kernel="poly")``) on the same
   data: fit time, peak RSS, and the largest prediction difference (the two are the same model).
b) TensorSketch features (``make_polynomial_map(method="tensorsketch")``) against scikit-learn's
   ``PolynomialCountSketch.transform`` at the same (d, D, degree): time per transform.

Ratios are taken within one run; report ``uptime`` beside them (the machine is shared).

Example::

    python scripts/bench_polynomial.py --n 20000 --out bench_polynomial.json
"""

from __future__ import annotations

import argparse
import os

import numpy as np

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import load_text, timed, write_json


def _timed(fn):
    seconds, peak, out = timed(fn)
    return out, seconds, peak / 2**20


def case_explicit_vs_exact(n: int, d: int, degree: int) -> dict:
    from bigkernel import ExactKernelRidge, RandomFeatureRidge

    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    y = X[:, 0] ** 2 - X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=n)
    kw = dict(degree=degree, gamma=1.0 / d, coef0=1.0, alpha=1.0)
    primal, t_p, rss_p = _timed(lambda: RandomFeatureRidge("poly", n_components=4096, **kw).fit(X, y))
    dual, t_d, rss_d = _timed(lambda: ExactKernelRidge("poly", tol=1e-10, random_state=0, **kw).fit(X, y))
    diff = float(np.abs(primal.predict(X[:2000]) - dual.predict(X[:2000])).max())
    return {
        "case": "a", "n": n, "d": d, "degree": degree, "features": primal.feature_map_.n_components,
        "method": primal.feature_map_.method, "explicit_fit_s": round(t_p, 3), "exact_fit_s": round(t_d, 3),
        "exact_over_explicit": round(t_d / t_p, 1), "explicit_peak_rss_mib": round(rss_p),
        "exact_peak_rss_mib": round(rss_d), "max_prediction_diff": diff,
    }  # fmt: skip


def case_tensorsketch(n: int, d: int, degree: int, D: int, repeats: int = 3) -> dict:
    from sklearn.kernel_approximation import PolynomialCountSketch

    from bigkernel.numerics.polynomial_features import make_polynomial_map

    X = np.random.default_rng(1).normal(size=(n, d))
    ours = make_polynomial_map(d, D, 0, degree=degree, method="tensorsketch")
    ref = PolynomialCountSketch(degree=degree, gamma=1.0 / d, coef0=1.0, n_components=D, random_state=0).fit(X)
    best = {}
    for name, fn in (("bigkernel", lambda: ours.transform(X)), ("sklearn", lambda: ref.transform(X))):
        times = []
        for _ in range(repeats):
            _, t, rss = _timed(fn)
            times.append(t)
        best[name] = (min(times), rss)
    return {
        "case": "b", "n": n, "d": d, "degree": degree, "D": D,
        "bigkernel_s": round(best["bigkernel"][0], 3), "sklearn_s": round(best["sklearn"][0], 3),
        "sklearn_over_bigkernel": round(best["sklearn"][0] / best["bigkernel"][0], 1),
        "bigkernel_peak_rss_mib": round(best["bigkernel"][1]), "sklearn_peak_rss_mib": round(best["sklearn"][1]),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = [case_explicit_vs_exact(args.n, 5, 3), case_tensorsketch(args.n, 50, 2, 1024)]
    load = os.getloadavg()
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()))
    print(f"load average: {load_text(load)}; cpus: {os.cpu_count()}")
    if args.out:
        write_json(args.out, {"rows": rows, "loadavg": load, "cpus": os.cpu_count()})


if __name__ == "__main__":
    main()
