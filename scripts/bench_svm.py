#!/usr/bin/env python
"""Benchmark the primal SVM (``RandomFeatureClassifier(loss="squared_hinge")``).

Data: X uniform on [0, 1]^10, two classes cut at the median of the noisy Friedman #1 value
(``scripts/bench_classify.py``'s data with two classes). rbf γ=0.5, α=1e-2 (LinearSVC's C = 50),
tol=1e-4 (relative duality gap), float32 features. Every measurement runs in its own subprocess,
so its peak RSS (ru_maxrss) is its own.

- ``a``: passes and time of the squared-hinge fit at n, D (issue: n=1e6, D=1024, converged in
  ≤ 15 passes), against the one-pass least-squares fit (``loss="squared_error"``) of the same
  data measured in the same run (the ratio ≈ passes × the cost of a pass over a ridge pass).
- ``b``: holdout accuracy against scikit-learn ``LinearSVC(C=1/(2α), loss="squared_hinge",
  dual=False)`` on the SAME explicit features (``feature_map_.transform``), at a size LinearSVC
  runs (issue: within 0.5 points). LinearSVC penalises its intercept; ``intercept_scaling=100``
  makes that penalty negligible.

Usage::

    python scripts/bench_svm.py --out bench_results/svm.json
    python scripts/bench_svm.py --case a --n 200000 --D 1024     # smaller (a loaded machine)
"""

from __future__ import annotations

import argparse
import os
import time

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import dispatch_measurement, load_text, measurement_runner, peak_rss_mb, write_rows

GAMMA, ALPHA, D_FEATURES, TOL = 0.5, 1e-2, 10, 1e-4


def _data(n: int, seed: int):
    """X (n, 10) and 0/1 labels: the noisy Friedman #1 value above its median."""
    import numpy as np

    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, D_FEATURES, 1.0, seed), 0, n)
    ref = generate_rows(SyntheticSpec("friedman1", 200_000, D_FEATURES, 1.0, 12345), 0, 200_000)[:, -1]
    return a[:, :D_FEATURES], (a[:, D_FEATURES] > np.median(ref)).astype(np.int64)


def _classifier(D: int, loss: str):
    from bigkernel import RandomFeatureClassifier

    return RandomFeatureClassifier(
        n_components=D, gamma=GAMMA, alpha=ALPHA, loss=loss, tol=TOL, max_iter=50, dtype="float32",
        random_state=0, chunk_rows=65_536,
    )  # fmt: skip


# ----------------------------------------------------------------------------- measurements
def m_fit(n: int, D: int, loss: str, n_test: int) -> dict:
    """bigkernel fit on the local threaded scheduler; holdout accuracy."""
    import numpy as np

    X, y = _data(n, seed=1)
    est = _classifier(D, loss)
    t0 = time.perf_counter()
    est.fit(X, y)
    fit_s = time.perf_counter() - t0
    Xt, yt = _data(n_test, seed=2)
    out = {"time_s": fit_s, "peak_rss_mb": peak_rss_mb(), "accuracy": float(np.mean(est.predict(Xt) == yt))}
    out["passes"] = int(est.n_iter_)
    if loss != "squared_error":
        out["converged"] = bool(est.converged_.all())
        out["gap"] = float(est.dual_gap_.max())
    return out


def m_linearsvc(n: int, D: int, n_test: int) -> dict:
    """Ours and LinearSVC on the same explicit features (our fitted feature map)."""
    import numpy as np
    from sklearn.svm import LinearSVC

    X, y = _data(n, seed=1)
    Xt, yt = _data(n_test, seed=2)
    est = _classifier(D, "squared_hinge")
    t0 = time.perf_counter()
    est.fit(X, y)
    ours_s = time.perf_counter() - t0
    fmap = est.feature_map_
    Phi, Phit = fmap.transform(X), fmap.transform(Xt)
    ref = LinearSVC(C=1 / (2 * ALPHA), loss="squared_hinge", dual=False, intercept_scaling=100, tol=1e-6)
    t0 = time.perf_counter()
    ref.fit(Phi, y)
    ref_s = time.perf_counter() - t0
    acc_ours = float(np.mean(est.predict(Xt) == yt))
    acc_ref = float(np.mean(ref.predict(Phit) == yt))
    coef_err = float(np.linalg.norm(est.coef_ - ref.coef_[0]) / np.linalg.norm(ref.coef_[0]))
    return {
        "time_s": ours_s, "linearsvc_time_s": ref_s, "accuracy": acc_ours, "linearsvc_accuracy": acc_ref,
        "accuracy_diff_points": 100 * (acc_ours - acc_ref), "coef_rel_diff": coef_err, "passes": int(est.n_iter_),
        "peak_rss_mb": peak_rss_mb(),
    }  # fmt: skip


MEASUREMENTS = {"fit": m_fit, "linearsvc": m_linearsvc}


run = measurement_runner(__file__)


def case_a(n: int, D: int) -> list[dict]:
    ls = {
        "case": "a",
        "what": "least squares (one pass)",
        "n": n,
        "D": D,
        **run("fit", n=n, D=D, loss="squared_error", n_test=20_000),
    }
    svm = {
        "case": "a",
        "what": "squared hinge",
        "n": n,
        "D": D,
        **run("fit", n=n, D=D, loss="squared_hinge", n_test=20_000),
    }
    if "time_s" in ls and "time_s" in svm:
        svm["ratio_vs_least_squares"] = svm["time_s"] / ls["time_s"]
    return [ls, svm]


def case_b(n: int, D: int) -> list[dict]:
    return [
        {"case": "b", "what": "squared hinge vs LinearSVC", "n": n, "D": D, **run("linearsvc", n=n, D=D, n_test=20_000)}
    ]


def _table(rows: list[dict]) -> str:
    head = "| case | what | n | D | passes | time (s) | ratio | accuracy | LinearSVC acc. | Δ points | peak RSS (MB) |"
    lines = [head, "|" + "---|" * 11]
    for r in rows:

        def f(key, fmt, r=r):
            return format(r[key], fmt) if key in r else "—"

        lines.append(
            f"| {r['case']} | {r['what']} | {r['n']:,} | {r['D']} | {f('passes', 'd')} | {f('time_s', '.1f')} | "
            f"{f('ratio_vs_least_squares', '.2f')} | {f('accuracy', '.4f')} | {f('linearsvc_accuracy', '.4f')} | "
            f"{f('accuracy_diff_points', '+.2f')} | {f('peak_rss_mb', '.0f')} |"
            + (f" error: {r['error']}" if "error" in r else "")
        )
    return "\n".join(lines)


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", choices=["a", "b", "all"], default="all")
    p.add_argument("--n", type=int, default=1_000_000, help="rows of case a")
    p.add_argument("--D", type=int, default=1024)
    p.add_argument("--svc-n", type=int, default=20_000, help="rows of case b (LinearSVC holds n × D float64)")
    p.add_argument("--out", default=None, help="JSON file of the rows")
    args = p.parse_args()
    load = os.getloadavg()
    rows = []
    if args.case in ("a", "all"):
        rows += case_a(args.n, args.D)
    if args.case in ("b", "all"):
        rows += case_b(args.svc_n, args.D)
    print(_table(rows))
    print(f"load average before: {load_text(load)}; after: {os.getloadavg()[0]:.2f}")
    write_rows(args.out, rows, load)


if __name__ == "__main__":
    main()
