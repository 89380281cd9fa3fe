#!/usr/bin/env python
"""Benchmark the classifiers: what k classes cost over one target, and scikit-learn's answer.

Data: X uniform on [0, 1]^10; labels cut from the noisy Friedman #1 value (bigkernel's
``classes`` synthetic kind: 3 classes; case ``a`` cuts it into 10 classes at its deciles).
rbf γ=0.5, α=1e-2, float32 features, chunks of about n / (2 · threads) rows (at most 131,072) so
that every dask thread has work. Every measurement runs in its own subprocess, so its peak
RSS (ru_maxrss) is its own; ratios are taken against a reference measured in the same run.

- ``a``: a 10-class ``RandomFeatureClassifier`` fit against a one-target ``RandomFeatureRidge``
  fit of the same n and D (issue target ≤ 1.15×; issue size n=1e6, D=1024).
- ``b``: ``RandomFeatureClassifier`` against scikit-learn ``RBFSampler`` + ``RidgeClassifier``
  at the same D: holdout accuracy (issue: within ±0.5 points), fit time (≥ 3× faster) and peak
  RSS (≤ 1.5 GB) (issue size n=400k, D=2048; scikit-learn holds the n × D float64 features, so
  ``--sklearn-n`` can run it at a smaller n when memory is short: then compare accuracy only).

Usage::

    python scripts/bench_classify.py --out bench_results/classify.json
    python scripts/bench_classify.py --case a --n 200000 --D 512       # smaller
"""

from __future__ import annotations

import argparse
import os
import time

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import dispatch_measurement, load_text, measurement_runner, peak_rss_mb, write_rows

GAMMA, ALPHA, D_FEATURES = 0.5, 1e-2, 10


def _data(n: int, seed: int, n_classes: int):
    """X (n, 10) and labels: 3 classes (the ``classes`` kind) or deciles of the noisy Friedman value."""
    import numpy as np

    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    kind = "classes" if n_classes == 3 else "friedman1"
    a = generate_rows(SyntheticSpec(kind, n, D_FEATURES, 1.0, seed), 0, n)
    X, y = a[:, :D_FEATURES], a[:, D_FEATURES]
    if n_classes != 3:  # fixed edges (deciles of a large reference sample), the same for every seed
        ref = generate_rows(SyntheticSpec("friedman1", 200_000, D_FEATURES, 1.0, 12345), 0, 200_000)[:, -1]
        y = np.digitize(y, np.quantile(ref, np.linspace(0, 1, n_classes + 1)[1:-1]))
    return X, y.astype(np.int64)


# ----------------------------------------------------------------------------- measurements
def m_ours(n: int, D: int, n_classes: int, task: str, threads: int, n_test: int) -> dict:
    """bigkernel fit on the local threaded scheduler (classifier, or regressor on one target)."""
    import dask
    import numpy as np

    from bigkernel import RandomFeatureClassifier, RandomFeatureRidge

    X, y = _data(n, 1, n_classes)
    kw = dict(
        gamma=GAMMA, n_components=D, alpha=ALPHA, random_state=0, dtype="float32", chunk_rows=_chunk_rows(n, threads)
    )
    est = RandomFeatureClassifier(**kw) if task == "classify" else RandomFeatureRidge(**kw)
    target = y if task == "classify" else y.astype(np.float64)
    with dask.config.set(scheduler="threads", num_workers=threads):
        t = time.perf_counter()
        est.fit(X, target)
        fit_s = time.perf_counter() - t
    out = {"time_s": fit_s, "peak_rss_mb": peak_rss_mb()}
    if n_test and task == "classify":
        Xt, yt = _data(n_test, 2, n_classes)
        out["accuracy"] = float(np.mean(est.predict(Xt) == yt))
    return out


def _chunk_rows(n: int, threads: int) -> int:
    """Rows per chunk: at least two chunks per dask thread (a multiple of 8192, at most 131,072),
    so every thread works; the default for numpy input is one 131,072-row chunk, which leaves
    all but one thread idle below that n (BLAS gets one thread per dask thread)."""
    return int(min(131_072, max(8192, n // (2 * threads) // 8192 * 8192)))


def m_sklearn(n: int, D: int, n_classes: int, n_test: int, dtype: str = "float64") -> dict:
    """scikit-learn RBFSampler + RidgeClassifier (features of X's dtype, in memory; float32 X is
    the like-for-like reference of our float32 features)."""
    import numpy as np
    from sklearn.kernel_approximation import RBFSampler
    from sklearn.linear_model import RidgeClassifier

    X, y = _data(n, 1, n_classes)
    X = X.astype(dtype)
    t = time.perf_counter()
    feat = RBFSampler(gamma=GAMMA, n_components=D, random_state=0).fit(X)
    model = RidgeClassifier(alpha=ALPHA).fit(feat.transform(X), y)
    fit_s = time.perf_counter() - t
    Xt, yt = _data(n_test, 2, n_classes)
    acc = float(np.mean(model.predict(feat.transform(Xt.astype(dtype))) == yt))
    return {"time_s": fit_s, "peak_rss_mb": peak_rss_mb(), "accuracy": acc}


MEASUREMENTS = {"ours": m_ours, "sklearn": m_sklearn}


run = measurement_runner(__file__)


# ----------------------------------------------------------------------------- cases
def case_a(n: int, D: int, threads: int, repeat: int) -> list[dict]:
    """Regression and classification fits alternated ``repeat`` times (a loaded machine's
    noise hits both alike); the ratio of the fastest of each, and each pair's ratio."""
    rows, reg_t, clf_t = [], [], []
    for i in range(repeat):
        reg = run("ours", n=n, D=D, n_classes=10, task="regress", threads=threads, n_test=0)
        clf = run("ours", n=n, D=D, n_classes=10, task="classify", threads=threads, n_test=100_000 if i == 0 else 0)
        reg_t.append(reg.get("time_s", float("nan")))
        clf_t.append(clf.get("time_s", float("nan")))
        rows += [
            {"case": "a", "what": f"RandomFeatureRidge, 1 target, n={n:,} D={D} (run {i + 1})", **reg, "ratio": 1.0},
            {"case": "a", "what": f"RandomFeatureClassifier, 10 classes, n={n:,} D={D} (run {i + 1})", **clf,
             "ratio": clf_t[-1] / reg_t[-1]},
        ]  # fmt: skip
    rows.append({"case": "a", "what": f"fastest of {repeat}: classifier / regressor", "time_s": min(clf_t),
                 "ratio": min(clf_t) / min(reg_t)})  # fmt: skip
    return rows


def case_b(n: int, D: int, threads: int, sklearn_n: int) -> list[dict]:
    ours = run("ours", n=n, D=D, n_classes=3, task="classify", threads=threads, n_test=100_000)
    rows = [{"case": "b", "what": f"RandomFeatureClassifier float32, n={n:,} D={D}", **ours, "ratio": 1.0}]
    if sklearn_n:
        for dtype in ("float32", "float64"):
            ref = run("sklearn", n=sklearn_n, D=D, n_classes=3, n_test=100_000, dtype=dtype)
            rows.append({"case": "b", "what": f"sklearn RBFSampler+RidgeClassifier {dtype}, n={sklearn_n:,} D={D}",
                         **ref, "ratio": ref.get("time_s", float("nan")) / ours.get("time_s", float("nan"))})  # fmt: skip
        if sklearn_n != n:  # ours at sklearn's n as well: a time ratio at equal sizes
            same = run("ours", n=sklearn_n, D=D, n_classes=3, task="classify", threads=threads, n_test=100_000)
            rows.append({"case": "b", "what": f"RandomFeatureClassifier float32, n={sklearn_n:,} D={D}", **same,
                         "ratio": same.get("time_s", float("nan")) / ours.get("time_s", float("nan"))})  # fmt: skip
    return rows


def _table(rows: list[dict]) -> str:
    head = "| case | what | time (s) | ratio | peak RSS (MB) | accuracy |\n|---|---|---|---|---|---|"
    lines = [head]
    for r in rows:
        acc = f"{100 * r['accuracy']:.2f} %" if "accuracy" in r else "—"
        lines.append(
            f"| {r['case']} | {r['what']} | {r.get('time_s', float('nan')):.2f} | {r.get('ratio', float('nan')):.2f} "
            f"| {r.get('peak_rss_mb', float('nan')):.0f} | {acc} |" + (f" error: {r['error']}" if "error" in r else "")
        )
    return "\n".join(lines)


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=["a", "b", "all"], default="all")
    p.add_argument("--n", type=int, default=None, help="rows (default: a 1,000,000; b 400,000)")
    p.add_argument("--D", type=int, default=None, help="features (default: a 1024; b 2048)")
    p.add_argument("--sklearn-n", type=int, default=None, help="rows for scikit-learn in b (default: --n; 0: skip)")
    p.add_argument("--threads", type=int, default=2, help="dask threads")
    p.add_argument("--repeat", type=int, default=3, help="case a: alternated runs of each fit")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args()
    rows: list[dict] = []
    if args.case in ("a", "all"):
        rows += case_a(args.n or 1_000_000, args.D or 1024, args.threads, args.repeat)
    if args.case in ("b", "all"):
        n = args.n or 400_000
        rows += case_b(n, args.D or 2048, args.threads, n if args.sklearn_n is None else args.sklearn_n)
    load = os.getloadavg()
    print(_table(rows))
    print(f"load average {load_text(load)}")
    write_rows(args.out, rows, load)


if __name__ == "__main__":
    main()
