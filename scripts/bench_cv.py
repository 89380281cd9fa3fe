#!/usr/bin/env python
"""Benchmark the one-pass (γ, α) search against plain fits and scikit-learn's GridSearchCV.

Friedman #1 (d=10), rbf random features, float32. Each measurement runs in its own subprocess
(peak RSS is its own):

- ``large``: a 5 γ × 20 α grid with 5-fold CV at n=1,000,000, D=1024 (RandomFeatureRidgeCV), vs
  five plain fits (one RandomFeatureRidge per γ) and vs the floor, five bare numpy syrks of the
  same size (blocked, 131,072 rows at a time). Target: ≤ 1.3× five plain fits.
- ``small``: the same search at a size GridSearchCV can run (default n=20,000, D=256), vs
  GridSearchCV(RandomFeatureRidge) over the same 100 points × 5 folds = 500 fits, and the
  holdout RMSE of the chosen point vs the best grid point found by brute force (500 refits
  scored on fresh data).

Usage::

    python scripts/bench_cv.py                       # both cases, full size
    python scripts/bench_cv.py --case small --n-small 5000
"""

from __future__ import annotations

import argparse
import os
import time

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import dispatch_measurement, measurement_runner, peak_rss_mb, write_json

GAMMAS = [0.05, 0.1, 0.2, 0.5, 1.0]


def _data(n: int, seed: int):
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, 10, 1.0, seed), 0, n)
    return a[:, :10], a[:, 10]


def _alphas():
    import numpy as np

    return list(np.logspace(-6, 2, 20))


def m_search(n: int, D: int, folds: int, n_test: int) -> dict:
    import dask
    import numpy as np

    from bigkernel import RandomFeatureRidgeCV

    X, y = _data(n, 1)
    est = RandomFeatureRidgeCV(
        gammas=GAMMAS, alphas=_alphas(), cv=folds, n_components=D, dtype="float32", random_state=0, chunk_rows=131_072
    )
    with dask.config.set(scheduler="threads", num_workers=2):
        t = time.perf_counter()
        est.fit(X, y)
        fit_s = time.perf_counter() - t
    out = {"time_s": fit_s, "peak_rss_mb": peak_rss_mb(), "best": est.best_params_}
    if n_test:
        Xt, yt = _data(n_test, 2)
        out["rmse"] = float(np.sqrt(np.mean((est.predict(Xt) - yt) ** 2)))
    return out


def m_plain(n: int, D: int) -> dict:
    """One plain fit per γ (α fixed: a number, so no grid), summed."""
    import dask

    from bigkernel import RandomFeatureRidge

    X, y = _data(n, 1)
    total = 0.0
    with dask.config.set(scheduler="threads", num_workers=2):
        for g in GAMMAS:
            est = RandomFeatureRidge(
                gamma=g, alpha=1e-2, n_components=D, dtype="float32", random_state=0, chunk_rows=131_072
            )
            t = time.perf_counter()
            est.fit(X, y)
            total += time.perf_counter() - t
    return {"time_s": total, "peak_rss_mb": peak_rss_mb()}


def m_syrk(n: int, D: int, times: int) -> dict:
    import numpy as np

    rows = min(n, 131_072)
    P = np.random.default_rng(0).standard_normal((rows, D)).astype("float32")
    P[:1024].T @ P[:1024]
    t = time.perf_counter()
    for _ in range(times):
        G = np.zeros((D, D))
        full, rest = divmod(n, rows)
        for _ in range(full):
            G += P.T @ P
        if rest:
            G += P[:rest].T @ P[:rest]
    return {"time_s": time.perf_counter() - t, "peak_rss_mb": peak_rss_mb()}


def m_gridsearch(n: int, D: int, folds: int) -> dict:
    from sklearn.model_selection import GridSearchCV, KFold

    from bigkernel import RandomFeatureRidge

    X, y = _data(n, 1)
    est = RandomFeatureRidge(n_components=D, dtype="float32", random_state=0)
    search = GridSearchCV(
        est,
        {"gamma": GAMMAS, "alpha": _alphas()},
        cv=KFold(folds, shuffle=True, random_state=0),
        scoring="neg_mean_squared_error",
        n_jobs=1,
        refit=False,
    )
    t = time.perf_counter()
    search.fit(X, y)
    return {"time_s": time.perf_counter() - t, "peak_rss_mb": peak_rss_mb(), "best": search.best_params_}


def m_brute(n: int, D: int, n_test: int) -> dict:
    """Holdout RMSE of every grid point, fitted on all n rows: the best achievable choice."""
    import numpy as np

    from bigkernel import RandomFeatureRidge

    X, y = _data(n, 1)
    Xt, yt = _data(n_test, 2)
    best = (np.inf, None)
    for g in GAMMAS:
        for a in _alphas():
            est = RandomFeatureRidge(gamma=g, alpha=a, n_components=D, dtype="float32", random_state=0).fit(X, y)
            r = float(np.sqrt(np.mean((est.predict(Xt) - yt) ** 2)))
            best = min(best, (r, {"gamma": g, "alpha": a}), key=lambda t: t[0])
    return {"rmse": best[0], "best": best[1]}


MEASUREMENTS = {"search": m_search, "plain": m_plain, "syrk": m_syrk, "gridsearch": m_gridsearch, "brute": m_brute}


run = measurement_runner(__file__)


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", choices=["large", "small", "all"], default="all")
    p.add_argument("--n-large", type=float, default=1e6)
    p.add_argument("--D-large", type=int, default=1024)
    p.add_argument("--n-small", type=float, default=2e4)
    p.add_argument("--D-small", type=int, default=256)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--out", default="bench_results/bench_cv.json")
    args = p.parse_args()
    rows = []
    if args.case in ("large", "all"):
        n, D = int(args.n_large), args.D_large
        floor = run("syrk", n=n, D=D, times=len(GAMMAS))
        plain = run("plain", n=n, D=D)
        search = run("search", n=n, D=D, folds=args.folds, n_test=100_000)
        rows += [
            {"case": "large", "what": f"floor: {len(GAMMAS)} numpy syrks {n:,}×{D}", **floor},
            {"case": "large", "what": f"{len(GAMMAS)} plain fits (one per γ)", **plain},
            {
                "case": "large",
                "what": f"one-pass search {len(GAMMAS)}γ×20α, {args.folds}-fold CV",
                **search,
                "ratio_to_plain": search.get("time_s", float("nan")) / plain.get("time_s", float("nan")),
                "ratio_to_floor": search.get("time_s", float("nan")) / floor.get("time_s", float("nan")),
            },
        ]
    if args.case in ("small", "all"):
        n, D = int(args.n_small), args.D_small
        search = run("search", n=n, D=D, folds=args.folds, n_test=20_000)
        grid = run("gridsearch", n=n, D=D, folds=args.folds)
        brute = run("brute", n=n, D=D, n_test=20_000)
        rows += [
            {"case": "small", "what": f"one-pass search n={n:,} D={D}", **search},
            {
                "case": "small",
                "what": f"GridSearchCV, {len(GAMMAS) * 20 * args.folds} fits",
                **grid,
                "ratio_to_search": grid.get("time_s", float("nan")) / search.get("time_s", float("nan")),
            },
            {
                "case": "small",
                "what": "brute force best grid point (holdout RMSE)",
                **brute,
                "rmse_ratio_chosen_to_best": search.get("rmse", float("nan")) / brute.get("rmse", float("nan")),
            },
        ]
    write_json(args.out, {"rows": rows, "cpus": os.cpu_count()})
    for r in rows:
        extras = {k: v for k, v in r.items() if k not in ("case", "what")}
        print(
            f"{r['case']:6s} {r['what']:52s} "
            + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in extras.items())
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
