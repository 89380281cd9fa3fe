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
- ``c``: small data, large D (issue 22): digits (``sklearn.datasets.load_digits``, X / 16, a
  fixed shuffle, 1,300 training rows, 497 held out, 10 classes), D = 2048, rbf γ = 0.1, both
  losses: ``RandomFeatureClassifier(alpha=0.5, loss=...)`` (defaults otherwise: float64, tol
  1e-4) against ``RBFSampler(γ, D) + LinearSVC(C=1, loss=..., dual=True)`` (C = 1/(2α);
  scikit-learn's defaults otherwise), each fit timed with its featurisation; ratio = ours /
  scikit-learn's in the same run. ``--streamed`` adds our fit with the features streamed every
  pass and the (D+1)² Newton solve (``KEEP_FEATURES_BYTES = 0``, the path before issue 22).
  The hinge is solved in the dual on the kept Gram matrix (session 10); ``--solutions`` adds a
  check of its solution against the primal Newton passes (the path before) and
  ``SVC(kernel="precomputed")`` on ΦΦᵀ: objectives, coefficients, gaps, predictions.
- ``d`` (not in ``all``): where the hinge's dual stops paying: kept features, 3 classes
  (the Friedman value cut at its tertiles), n/D = 4 to 20, α = 0.5 and 0.05, tol 1e-4, the dual
  against the primal Newton passes (``DUAL_ROWS_PER_FEATURE`` of ``numerics/svm_dual.py``).

Usage::

    python scripts/bench_svm.py --out bench_results/svm.json
    python scripts/bench_svm.py --case a --n 200000 --D 1024     # smaller (a loaded machine)
    python scripts/bench_svm.py --case c --out bench_results/svm_digits.json
    python scripts/bench_svm.py --case c --solutions      # + the hinge's solutions compared
    python scripts/bench_svm.py --case d                  # the hinge: dual or Newton by n/D
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


DIGITS_GAMMA, DIGITS_ALPHA, DIGITS_TRAIN = 0.1, 0.5, 1300


def _digits():
    import numpy as np
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    order = np.random.RandomState(0).permutation(len(y))
    X, y = X[order] / 16.0, y[order]
    return X[:DIGITS_TRAIN], y[:DIGITS_TRAIN], X[DIGITS_TRAIN:], y[DIGITS_TRAIN:]


def m_digits(D: int, loss: str, streamed: bool = False) -> dict:
    """bigkernel on digits (features kept in memory unless ``streamed``)."""
    import numpy as np

    import bigkernel.solvers.primal_svm as primal_svm
    from bigkernel import RandomFeatureClassifier

    if streamed:
        primal_svm.KEEP_FEATURES_BYTES = 0
    X, y, Xt, yt = _digits()
    est = RandomFeatureClassifier(n_components=D, gamma=DIGITS_GAMMA, alpha=DIGITS_ALPHA, loss=loss, random_state=0)
    t0 = time.perf_counter()
    est.fit(X, y)
    fit_s = time.perf_counter() - t0
    return {
        "time_s": fit_s, "accuracy": float(np.mean(est.predict(Xt) == yt)), "passes": int(est.n_iter_),
        "converged": bool(est.converged_.all()), "gap": float(est.dual_gap_.max()), "peak_rss_mb": peak_rss_mb(),
    }  # fmt: skip


def m_digits_sklearn(D: int, loss: str) -> dict:
    """RBFSampler + LinearSVC(C = 1/(2α), dual=True) on digits, featurisation timed."""
    import warnings

    import numpy as np
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.kernel_approximation import RBFSampler
    from sklearn.svm import LinearSVC

    X, y, Xt, yt = _digits()
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        sampler = RBFSampler(gamma=DIGITS_GAMMA, n_components=D, random_state=0)
        svc = LinearSVC(C=1 / (2 * DIGITS_ALPHA), loss=loss, dual=True).fit(sampler.fit_transform(X), y)
    fit_s = time.perf_counter() - t0
    return {
        "time_s": fit_s, "accuracy": float(np.mean(svc.predict(sampler.transform(Xt)) == yt)),
        "converged": not any(issubclass(w.category, ConvergenceWarning) for w in caught), "peak_rss_mb": peak_rss_mb(),
    }  # fmt: skip


def m_digits_solutions(D: int) -> dict:
    """The hinge on digits three ways, on our fitted map's float64 features: the dual on the kept
    Gram matrix (the default), the primal Newton passes over the kept features (the path before
    session 10: ``DUAL_ROWS_PER_FEATURE = 0``) and SVC(kernel="precomputed", tol=1e-8) on ΦΦᵀ.
    Worst class: objective relative to SVC's, coefficient distance, relative gaps, test
    predictions that differ."""
    import numpy as np
    from sklearn.svm import SVC

    import bigkernel.numerics.svm_dual as svm_dual
    from bigkernel import RandomFeatureClassifier
    from bigkernel.data.sources import as_dataset
    from bigkernel.solvers.primal_svm import fit_primal_svm

    X, y, Xt, _ = _digits()
    est = RandomFeatureClassifier(n_components=D, gamma=DIGITS_GAMMA, alpha=DIGITS_ALPHA, loss="hinge", random_state=0)
    fmap = est.fit(X, y).feature_map_
    Phi, Phit = fmap.transform(X), fmap.transform(Xt)
    Y = np.where(y[:, None] == np.arange(10), 1.0, -1.0)
    ds = as_dataset(X, Y)
    sols, out = {}, {}
    for name, per in (("dual", svm_dual.DUAL_ROWS_PER_FEATURE), ("newton", 0)):
        svm_dual.DUAL_ROWS_PER_FEATURE = per
        t0 = time.perf_counter()
        sols[name] = fit_primal_svm(ds, fmap, ds.y, alpha=DIGITS_ALPHA, loss="hinge", tol=1e-4, max_iter=100)
        out[f"{name}_time_s"], out[f"{name}_passes"] = time.perf_counter() - t0, sols[name].n_passes
        out[f"{name}_gap_max"] = float(sols[name].gap.max())
    K = Phi @ Phi.T
    svc = [SVC(kernel="precomputed", C=1 / (2 * DIGITS_ALPHA), tol=1e-8).fit(K, Y[:, j]) for j in range(10)]
    w_svc = np.stack([Phi[m.support_].T @ m.dual_coef_[0] for m in svc], axis=1)
    b_svc = np.array([m.intercept_[0] for m in svc])

    def objective(w, b):
        return np.maximum(0.0, 1.0 - Y * (Phi @ w + b)).sum(axis=0) + DIGITS_ALPHA * (w * w).sum(axis=0)

    p_svc = objective(w_svc, b_svc)
    for name, sol in sols.items():
        out[f"{name}_objective_vs_svc"] = float(np.max(objective(sol.coef, sol.intercept) / p_svc - 1))
        out[f"{name}_coef_vs_svc"] = float(
            np.max(np.linalg.norm(sol.coef - w_svc, axis=0) / np.linalg.norm(w_svc, axis=0))
        )
        out[f"{name}_test_predictions_differ"] = int(
            np.sum(np.argmax(Phit @ sol.coef + sol.intercept, axis=1) != np.argmax(Phit @ w_svc + b_svc, axis=1))
        )
    d, nw = sols["dual"], sols["newton"]
    out["coef_dual_vs_newton"] = float(
        np.max(np.linalg.norm(d.coef - nw.coef, axis=0) / np.linalg.norm(nw.coef, axis=0))
    )
    return out


def m_dual_or_newton(n: int, D: int, alpha: float, dual: bool) -> dict:
    """The hinge on kept features, 3 classes (Friedman #1 value cut at its tertiles), tol 1e-4:
    the dual (``dual``, forced) or the primal Newton passes (``DUAL_ROWS_PER_FEATURE = 0``)."""
    import warnings

    import numpy as np

    import bigkernel.numerics.svm_dual as svm_dual
    from bigkernel.data.sources import as_dataset
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows
    from bigkernel.numerics.fourier_features import make_feature_map
    from bigkernel.solvers.primal_svm import fit_primal_svm

    svm_dual.DUAL_ROWS_PER_FEATURE = 10**9 if dual else 0  # whatever the default rule says
    a = generate_rows(SyntheticSpec("friedman1", n, D_FEATURES, 1.0, 1), 0, n)
    labels = np.digitize(a[:, D_FEATURES], np.quantile(a[:, D_FEATURES], [1 / 3, 2 / 3]))
    Y = np.where(labels[:, None] == np.arange(3), 1.0, -1.0)
    fmap = make_feature_map("rbf", D_FEATURES, D, seed=0, gamma=GAMMA)
    ds = as_dataset(a[:, :D_FEATURES], Y)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sol = fit_primal_svm(ds, fmap, ds.y, alpha=alpha, loss="hinge", tol=1e-4, max_iter=100, keep_features=True)
    return {
        "time_s": time.perf_counter() - t0, "passes": sol.n_passes, "converged": bool(sol.converged.all()),
        "dual_iter": sol.history[0].get("dual_iter", 0), "objective": float(sol.objective.sum()),
        "gap": float(sol.gap.max()),
    }  # fmt: skip


MEASUREMENTS = {
    "fit": m_fit, "linearsvc": m_linearsvc, "digits": m_digits, "digits_sklearn": m_digits_sklearn,
    "digits_solutions": m_digits_solutions, "dual_or_newton": m_dual_or_newton,
}  # fmt: skip


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


def case_c(D: int, streamed: bool, solutions: bool = False) -> list[dict]:
    rows = []
    if solutions:
        sol = run("digits_solutions", D=D)
        print("hinge solutions, worst class:", {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in sol.items()})
        rows.append({"case": "c", "what": "digits hinge: dual vs Newton vs SVC", "n": DIGITS_TRAIN, "D": D, **sol})
    for loss in ("squared_hinge", "hinge"):
        ref = {"case": "c", "what": f"digits {loss}: RBFSampler + LinearSVC", "n": DIGITS_TRAIN, "D": D}
        ref.update(run("digits_sklearn", D=D, loss=loss))
        ours = {"case": "c", "what": f"digits {loss}: ours", "n": DIGITS_TRAIN, "D": D, **run("digits", D=D, loss=loss)}
        rows += [ref, ours]
        if streamed:
            rows.append({
                "case": "c", "what": f"digits {loss}: ours, streamed", "n": DIGITS_TRAIN, "D": D,
                **run("digits", D=D, loss=loss, streamed=True),
            })  # fmt: skip
        for r in rows[-2 if not streamed else -3 :]:
            if r is not ref and "time_s" in r and "time_s" in ref:
                r["ratio_vs_linearsvc"] = r["time_s"] / ref["time_s"]
                r["linearsvc_accuracy"] = ref.get("accuracy", float("nan"))
                r["accuracy_diff_points"] = 100 * (r["accuracy"] - r["linearsvc_accuracy"])
    return rows


CROSSOVER = ((2000, 500), (2000, 250), (4000, 400), (2000, 100), (4000, 200))


def case_d() -> list[dict]:
    """The hinge's dual against the primal Newton passes, kept features, n/D = 4 to 20."""
    rows = []
    for n, D in CROSSOVER:
        for alpha in (0.5, 0.05):
            r = {"case": "d", "n": n, "D": D, "alpha": alpha}
            for mode in ("dual", "newton"):
                got = run("dual_or_newton", n=n, D=D, alpha=alpha, dual=mode == "dual")
                r.update({f"{mode}_{k}": v for k, v in got.items()})
            if "dual_time_s" in r and "newton_time_s" in r:
                r["newton_over_dual"] = r["newton_time_s"] / r["dual_time_s"]
            rows.append(r)
    return rows


def _table_d(rows: list[dict]) -> str:
    lines = ["| n | D | n/D | α | dual s (SMO steps) | Newton s (passes) | Newton ÷ dual | Σ objective dual / Newton |"]
    lines.append("|" + "---|" * 8)
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {r['D']} | {r['n'] / r['D']:.0f} | {r['alpha']} | {r.get('dual_time_s', float('nan')):.2f} "
            f"({r.get('dual_dual_iter', '—')}) | {r.get('newton_time_s', float('nan')):.2f} ({r.get('newton_passes', '—')}) | "
            f"{r.get('newton_over_dual', float('nan')):.2f} | {r.get('dual_objective', float('nan')):.6g} / "
            f"{r.get('newton_objective', float('nan')):.6g} |"
        )
    return "\n".join(lines)


def _table(rows: list[dict]) -> str:
    head = "| case | what | n | D | passes | time (s) | ratio (a: vs least squares; c: vs LinearSVC) | accuracy | LinearSVC acc. | Δ points | peak RSS (MB) |"
    lines = [head, "|" + "---|" * 11]
    for r in rows:

        def f(key, fmt, r=r):
            return format(r[key], fmt) if key in r else "—"

        lines.append(
            f"| {r['case']} | {r['what']} | {r['n']:,} | {r['D']} | {f('passes', 'd')} | {f('time_s', '.1f')} | "
            f"{f('ratio_vs_least_squares', '.2f') if 'ratio_vs_linearsvc' not in r else f('ratio_vs_linearsvc', '.2f')} | {f('accuracy', '.4f')} | {f('linearsvc_accuracy', '.4f')} | "
            f"{f('accuracy_diff_points', '+.2f')} | {f('peak_rss_mb', '.0f')} |"
            + (f" error: {r['error']}" if "error" in r else "")
        )
    return "\n".join(lines)


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", choices=["a", "b", "c", "d", "all"], default="all")
    p.add_argument("--n", type=int, default=1_000_000, help="rows of case a")
    p.add_argument("--D", type=int, default=1024)
    p.add_argument("--svc-n", type=int, default=20_000, help="rows of case b (LinearSVC holds n × D float64)")
    p.add_argument("--digits-D", type=int, default=2048, help="D of case c")
    p.add_argument("--streamed", action="store_true", help="case c: also our streamed (D+1)² path")
    p.add_argument("--solutions", action="store_true", help="case c: the hinge's dual vs primal Newton vs SVC")
    p.add_argument("--out", default=None, help="JSON file of the rows")
    args = p.parse_args()
    load = os.getloadavg()
    rows = []
    if args.case in ("a", "all"):
        rows += case_a(args.n, args.D)
    if args.case in ("b", "all"):
        rows += case_b(args.svc_n, args.D)
    if args.case in ("c", "all"):
        rows += case_c(args.digits_D, args.streamed, args.solutions)
    if rows:
        print(_table(rows))
    if args.case == "d":
        rows += case_d()
        print(_table_d(rows))
    print(f"load average before: {load_text(load)}; after: {os.getloadavg()[0]:.2f}")
    write_rows(args.out, rows, load)


if __name__ == "__main__":
    main()
