#!/usr/bin/env python
"""Benchmark the closed-form (γ, α) search of the exact path against scikit-learn's GridSearchCV.

Friedman #1 (d=10, noise 1), rbf, a 5 γ × 20 α grid. ``ExactKernelRidgeCV`` forms one Gram
matrix and one eigendecomposition per γ and scores every α by closed-form leave-one-out
(``fit_intercept=False`` where compared with scikit-learn's KernelRidge, which has no intercept).
Each measurement runs in its own subprocess (peak RSS is its own) with ``OPENBLAS_CORETYPE=Haswell``
(scipy's bundled OpenBLAS picks SkylakeX kernels on this machine and crashes in large Cholesky
solves; see scripts/bench_exact.py), and records the load average and the CPU seconds other
processes used meanwhile: the machine is shared.

- ``ours``: ExactKernelRidgeCV at n (default 2000), LOO over the 100 points; test RMSE of the
  chosen point on 5000 fresh rows. Once more with an intercept (the default).
- ``kfold``: GridSearchCV(KernelRidge(kernel="rbf"), cv=5-fold) over the same 100 points at n
  (500 fits + refit), same test RMSE.
- ``loo_small``: GridSearchCV(KernelRidge, cv=LeaveOneOut()) at a small n (default 200:
  100 × 200 fits), against ours at the same n: the time, and the largest relative difference
  between the two grids of mean_test_score (both are exact LOO, so it should be ~1e-10).
- ``loo_per_fit``: seconds of one KernelRidge fit + predict on n − 1 rows (20 repeats): the
  brute-force LOO search at n is estimated as 100 · n such fits (not run: hours).
- ``--sizes 2000,4000,6000,8000``: instead of the above, ExactKernelRidgeCV with one γ (20 α) at
  each n: seconds for the Gram matrix, the eigendecomposition and the scoring, peak RSS (the
  figures behind ``max_n``).

Usage::

    python scripts/bench_exact_cv.py                        # n=2000 (~2-4 minutes)
    python scripts/bench_exact_cv.py --n 1000 --n-small 100 --out /tmp/b.json
    python scripts/bench_exact_cv.py --sizes 2000,4000,6000,8000 --out bench_results/exact_cv_sizes.json
"""

from __future__ import annotations

import argparse
import os
import time

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import LoadTimer, dispatch_measurement, machine_info, measurement_runner, peak_rss_gb, write_json

GAMMAS = [0.02, 0.05, 0.1, 0.2, 0.5]
N_TEST = 5000


def _alphas() -> list[float]:
    import numpy as np

    return [float(a) for a in np.logspace(-4, 1, 20)]


def _data(n: int, seed: int):
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, 10, 1.0, seed), 0, n)
    return a[:, :10], a[:, 10]


class _Timer(LoadTimer):
    def figures(self) -> dict:
        return {**super().figures(), "peak_rss_gb": peak_rss_gb()}


def _rmse(est) -> float:
    import numpy as np

    Xt, yt = _data(N_TEST, 2)
    return float(np.sqrt(np.mean((est.predict(Xt) - yt) ** 2)))


def m_ours(n: int, fit_intercept: bool, test: bool = True) -> dict:
    from bigkernel import ExactKernelRidgeCV

    X, y = _data(n, 1)
    est = ExactKernelRidgeCV(gammas=GAMMAS, alphas=_alphas(), criterion="loo", fit_intercept=fit_intercept)
    with _Timer() as t:
        est.fit(X, y)
    info = est.solver_info_["per_gamma"]
    out = {**t.figures(), "best": est.best_params_, "eigh_s": sum(g["eigh_seconds"] for g in info),
           "gram_s": sum(g["gram_seconds"] for g in info), "score_s": sum(g["score_seconds"] for g in info),
           "scores": {f"{p['gamma']}|{p['alpha']}": float(s) for p, s in
                      zip(est.cv_results_["params"], est.cv_results_["mean_test_score"])}}  # fmt: skip
    if test:
        out["test_rmse"] = _rmse(est)
    return out


def _gridsearch(n: int, cv, test: bool) -> dict:
    from sklearn.kernel_ridge import KernelRidge
    from sklearn.model_selection import GridSearchCV

    X, y = _data(n, 1)
    search = GridSearchCV(
        KernelRidge(kernel="rbf"),
        {"gamma": GAMMAS, "alpha": _alphas()},
        cv=cv,
        scoring="neg_mean_squared_error",
        n_jobs=1,
        refit=test,
    )
    with _Timer() as t:
        search.fit(X, y)
    r = search.cv_results_
    out = {
        **t.figures(),
        "best": search.best_params_,
        "n_fits": len(r["params"]) * search.n_splits_,
        "scores": {f"{p['gamma']}|{p['alpha']}": float(s) for p, s in zip(r["params"], r["mean_test_score"])},
    }
    if test:
        out["test_rmse"] = _rmse(search.best_estimator_)
    return out


def m_kfold(n: int) -> dict:
    from sklearn.model_selection import KFold

    return _gridsearch(n, KFold(5, shuffle=True, random_state=0), test=True)


def m_loo_small(n: int) -> dict:
    from sklearn.model_selection import LeaveOneOut

    return _gridsearch(n, LeaveOneOut(), test=False)


def m_loo_per_fit(n: int, repeats: int = 20) -> dict:
    """One brute-force LOO split: KernelRidge on n − 1 rows, predict the left-out row."""
    import numpy as np
    from sklearn.kernel_ridge import KernelRidge

    X, y = _data(n, 1)
    keep = np.arange(n) != 0
    with _Timer() as t:
        for _ in range(repeats):
            KernelRidge(kernel="rbf", gamma=0.1, alpha=1e-2).fit(X[keep], y[keep]).predict(X[:1])
    return {**t.figures(), "per_fit_s": t.seconds / repeats}


def m_size(n: int) -> dict:
    """One γ, the default 20 α: where the time of one grid column goes."""
    from bigkernel import ExactKernelRidgeCV

    X, y = _data(n, 1)
    est = ExactKernelRidgeCV(gammas=[0.1], max_n=None)
    with _Timer() as t:
        est.fit(X, y)
    return {**t.figures(), **{k: v for k, v in est.solver_info_["per_gamma"][0].items() if k != "gamma"}}


def sizes(ns: list[int], out: str) -> None:
    rows = [{"what": f"ExactKernelRidgeCV one γ × 20 α, n={n:,}", **run("size", n=n)} for n in ns]
    machine = {"cpus": os.cpu_count(), "OPENBLAS_CORETYPE": _ENV.get("OPENBLAS_CORETYPE")}
    write_json(out, {"rows": rows, "machine": machine})
    print(f"{'what':44s} {'time s':>8s} {'Gram s':>7s} {'eigh s':>8s} {'score s':>8s} {'RSS GB':>7s} {'load':>5s}")
    for r in rows:
        if "error" in r:
            print(f"{r['what']:44s} ERROR {r['error']}")
            continue
        print(
            f"{r['what']:44s} {r['time_s']:8.2f} {r['gram_seconds']:7.2f} {r['eigh_seconds']:8.2f} "
            f"{r['score_seconds']:8.2f} {r['peak_rss_gb']:7.2f} {r['load_1min']:5.2f}"
        )
    print(f"wrote {out}")


MEASUREMENTS = {
    "ours": m_ours,
    "kfold": m_kfold,
    "loo_small": m_loo_small,
    "loo_per_fit": m_loo_per_fit,
    "size": m_size,
}
_ENV = dict(os.environ)


run = measurement_runner(__file__, env=_ENV, on_error="exit")


def _max_rel_diff(a: dict, b: dict) -> float:
    return max(abs(a[k] - b[k]) / abs(b[k]) for k in b)


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--n-small", type=int, default=200, help="n of the full brute-force LOO grid search")
    p.add_argument("--out", default="bench_results/bench_exact_cv.json")
    p.add_argument("--openblas-coretype", default="Haswell", help="'' leaves OPENBLAS_CORETYPE unset")
    p.add_argument("--sizes", default="", help="comma-separated n: time one γ column at each n instead")
    args = p.parse_args()
    if args.openblas_coretype:
        _ENV["OPENBLAS_CORETYPE"] = args.openblas_coretype
    if args.sizes:
        sizes([int(float(v)) for v in args.sizes.split(",")], args.out)
        return
    n, ns = args.n, args.n_small
    grid = f"{len(GAMMAS)}γ×{len(_alphas())}α"
    t0 = time.perf_counter()
    ours = run("ours", n=n, fit_intercept=False)
    ours_b = run("ours", n=n, fit_intercept=True)
    kfold = run("kfold", n=n)
    per_fit = run("loo_per_fit", n=n)
    ours_small = run("ours", n=ns, fit_intercept=False, test=False)
    loo_small = run("loo_small", n=ns)
    rows = [
        {"what": f"ExactKernelRidgeCV LOO {grid}, n={n:,}, no intercept", **ours},
        {"what": f"ExactKernelRidgeCV LOO {grid}, n={n:,}, intercept", **ours_b},
        {"what": f"GridSearchCV(KernelRidge) 5-fold {grid}, n={n:,}", **kfold},
        {
            "what": f"GridSearchCV(KernelRidge) LOO {grid}, n={n:,} (estimated)",
            "time_s": per_fit.get("per_fit_s", float("nan")) * len(GAMMAS) * len(_alphas()) * n,
            "load_1min": per_fit.get("load_1min"),
            "notes": f"{per_fit.get('per_fit_s', float('nan')):.3g} s per fit",
        },
        {"what": f"ExactKernelRidgeCV LOO {grid}, n={ns:,}, no intercept", **ours_small},
        {"what": f"GridSearchCV(KernelRidge) LOO {grid}, n={ns:,}", **loo_small},
    ]
    summary = {
        "ratio_kfold_over_ours": kfold.get("time_s", float("nan")) / ours.get("time_s", float("nan")),
        "ratio_loo_estimated_over_ours": rows[3]["time_s"] / ours.get("time_s", float("nan")),
        "ratio_loo_small_over_ours_small": (
            loo_small.get("time_s", float("nan")) / ours_small.get("time_s", float("nan"))
        ),
    }
    if "scores" in ours_small and "scores" in loo_small:
        summary["loo_small_max_rel_score_diff"] = _max_rel_diff(ours_small["scores"], loo_small["scores"])
        summary["loo_small_same_best"] = ours_small["best"] == loo_small["best"]
    for r in rows:
        r.pop("scores", None)
    import scipy

    machine = machine_info(scipy=scipy.__version__, OPENBLAS_CORETYPE=_ENV.get("OPENBLAS_CORETYPE"))
    result = {"rows": rows, "summary": summary, "total_s": time.perf_counter() - t0, "machine": machine}
    write_json(args.out, result)
    head = f"{'what':58s} {'time s':>9s} {'load':>5s} {'others CPU s':>12s}  best / test RMSE"
    print(head + "\n" + "-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['what']:58s} ERROR {r['error']}")
            continue
        note = r.get("notes") or (f"{r.get('best')} / {r['test_rmse']:.4f}" if "test_rmse" in r else str(r.get("best")))
        print(
            f"{r['what']:58s} {r['time_s']:9.2f} {r.get('load_1min') or float('nan'):5.2f} "
            f"{r.get('others_cpu_s', float('nan')):12.1f}  {note}"
        )
    for k, v in summary.items():
        print(f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}")
    print(f"wrote {args.out} ({result['total_s']:.0f}s)")


if __name__ == "__main__":
    main()
