#!/usr/bin/env python
"""Benchmark the exact solver (ExactKernelRidge) against scikit-learn's KernelRidge.

Friedman #1 (d=10, noise 1), rbf γ=0.5, α=1e-2, no intercept (scikit-learn's KernelRidge has
none), CG tolerance 1e-6, default preconditioner (RPCholesky) and rank. Every measurement runs
in its own subprocess, so its peak RSS (ru_maxrss) is its own; nothing else should run on the
machine meanwhile (the script reports the share of CPU other processes used during each one).

- ``sklearn``: KernelRidge.fit at n (dense Gram matrix + Cholesky), predictions at 5,000 new
  points.
- ``exact``: ExactKernelRidge.fit at n, same predictions → relative RMS difference to sklearn's;
  CG iterations. Then once more with df(α) (8 Hutchinson probes in the same CG run).
- ``plain``: the same without a preconditioner (plain CG to the same tolerance): iterations.
- ``large``: ExactKernelRidge.fit at the large n (the Gram matrix does not fit in memory: tiles
  beyond the memory budget are recomputed on every matvec); holdout RMSE on 5,000 rows.

Targets (issue 3): at n=20,000 predictions within 1e-4 relative RMS of sklearn, fit <= 10 s and
<= 1/4 of sklearn's time, peak RSS <= 4 GB; preconditioned CG <= 1/3 of plain CG's iterations;
n=100,000 completes in <= 10 min with peak RSS <= 16 GB.

OpenBLAS: scipy's bundled OpenBLAS 0.3.30 picks its SkylakeX kernels on this AMD EPYC (Zen 4)
and segfaults inside ``scipy.linalg.solve(assume_a="pos")`` — the Cholesky solve of
scikit-learn's KernelRidge — from n ≈ 16,000 on (reproduced with plain scipy; n=12,000 works;
``OPENBLAS_CORETYPE=Haswell`` or one thread avoids it). So every measurement subprocess runs
with ``OPENBLAS_CORETYPE=Haswell`` by default (``--openblas-coretype ""`` to leave it unset),
both libraries alike.

Usage::

    python scripts/bench_exact.py --out bench_results/bench_exact.json     # full size (~8 min)
    python scripts/bench_exact.py --n 5000 --n-large 20000 --out /tmp/b.json  # quick
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import cpu_seconds, dispatch_measurement, machine_info, measurement_runner, peak_rss_gb, write_json

GAMMA, ALPHA, D_FEATURES, N_TEST = 0.5, 1e-2, 10, 5000


def _data(n: int, seed: int):
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, D_FEATURES, 1.0, seed), 0, n)
    return a[:, :D_FEATURES], a[:, D_FEATURES]


# ----------------------------------------------------------------------------- measurements
def m_sklearn(n: int, pred_path: str) -> dict:
    import numpy as np
    from sklearn.kernel_ridge import KernelRidge

    X, y = _data(n, seed=1)
    c0, b0 = cpu_seconds()
    t = time.perf_counter()
    model = KernelRidge(kernel="rbf", gamma=GAMMA, alpha=ALPHA).fit(X, y)
    fit_s = time.perf_counter() - t
    c1, b1 = cpu_seconds()
    Xt, _ = _data(N_TEST, seed=2)
    np.save(pred_path, model.predict(Xt))
    return {"fit_s": fit_s, "peak_rss_gb": peak_rss_gb(), "others_cpu_s": max(0.0, (b1 - b0) - (c1 - c0))}


def m_exact(n: int, pred_path: str | None, preconditioner: str | None, n_probes: int | None = None) -> dict:
    import dask
    import numpy as np

    from bigkernel import ExactKernelRidge

    X, y = _data(n, seed=1)
    est = ExactKernelRidge(gamma=GAMMA, alpha=ALPHA, fit_intercept=False, tol=1e-6, random_state=0,
                           preconditioner=preconditioner, n_probes=n_probes)  # fmt: skip
    with dask.config.set(scheduler="threads", num_workers=2):
        c0, b0 = cpu_seconds()
        t = time.perf_counter()
        est.fit(X, y)
        fit_s = time.perf_counter() - t
        c1, b1 = cpu_seconds()
        Xt, yt = _data(N_TEST, seed=2)
        pred = est.predict(Xt)
    info = est.solver_info_
    out = {
        "fit_s": fit_s, "peak_rss_gb": peak_rss_gb(), "others_cpu_s": max(0.0, (b1 - b0) - (c1 - c0)),
        "n_iter": int(est.n_iter_), "residual": float(est.residual_), "df": est.df_, "df_stderr": est.df_stderr_,
        "rank": info["rank"], "preconditioner_s": info["preconditioner_seconds"],
        "gram": info["gram"], "memory_budget_gb": info["memory_budget"] / 1e9,
        "test_rmse": float(np.sqrt(np.mean((pred - yt) ** 2))),
    }  # fmt: skip
    if pred_path:
        np.save(pred_path, pred)
    return out


MEASUREMENTS = {"sklearn": m_sklearn, "exact": m_exact}


_ENV = dict(os.environ)


run = measurement_runner(__file__, env=_ENV, on_error="exit")


def _rel_rms(a, b) -> float:
    import numpy as np

    return float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b**2)))


# ----------------------------------------------------------------------------- table
def _table(rows: list[dict]) -> str:
    head = f"{'what':44s} {'fit s':>8s} {'peak RSS GB':>11s} {'CG iter':>7s} {'others CPU s':>12s}  notes"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['what']:44s} ERROR {r['error']}")
            continue
        it = str(r.get("n_iter", ""))
        lines.append(f"{r['what']:44s} {r['fit_s']:8.2f} {r['peak_rss_gb']:11.2f} {it:>7s} "
                     f"{r['others_cpu_s']:12.1f}  {r.get('notes', '')}")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=float, default=20_000, help="rows of the comparison with sklearn")
    p.add_argument("--n-large", type=float, default=100_000, help="rows of the out-of-memory case (0: skip)")
    p.add_argument("--no-sklearn", action="store_true")
    p.add_argument("--no-plain", action="store_true", help="skip plain CG (the slowest measurement)")
    p.add_argument("--out", default="bench_results/bench_exact.json")
    p.add_argument(
        "--openblas-coretype",
        default="Haswell",
        help="OPENBLAS_CORETYPE of the measurements (see above); '' leaves it unset",
    )
    args = p.parse_args()
    if args.openblas_coretype:
        _ENV["OPENBLAS_CORETYPE"] = args.openblas_coretype
    n, n_large = int(args.n), int(args.n_large)
    rows: list[dict] = []
    summary: dict = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        ours_pred, sk_pred = os.path.join(tmp, "ours.npy"), os.path.join(tmp, "sklearn.npy")
        ours = run("exact", n=n, pred_path=ours_pred, preconditioner="rpcholesky")
        g = ours.get("gram", {})
        ours.update(
            what=f"bigkernel ExactKernelRidge n={n:,}",
            notes=(
                f"rank {ours.get('rank')}, residual {ours.get('residual', float('nan')):.1e}, Gram "
                f"{g.get('cache_dtype')} {100 * g.get('cached_fraction', 0):.0f}% cached"
            ),
        )
        rows.append(ours)
        if not args.no_sklearn:
            sk = run("sklearn", n=n, pred_path=sk_pred)
            sk.update(what=f"scikit-learn KernelRidge n={n:,}", notes="dense Gram + Cholesky")
            rows.append(sk)
            if "error" not in sk and "error" not in ours:
                import numpy as np

                summary["pred_rel_rms_vs_sklearn"] = _rel_rms(np.load(ours_pred), np.load(sk_pred))
                summary["fit_time_ratio_ours_over_sklearn"] = ours["fit_s"] / sk["fit_s"]
        withdf = run("exact", n=n, pred_path=None, preconditioner="rpcholesky", n_probes=8)
        withdf.update(
            what=f"bigkernel ExactKernelRidge n={n:,}, df",
            notes=(
                f"n_probes=8: df {withdf.get('df', float('nan')):.1f} ± {withdf.get('df_stderr', float('nan')):.1f}"
            ),
        )
        rows.append(withdf)
        if not args.no_plain:
            plain = run("exact", n=n, pred_path=None, preconditioner=None)
            plain.update(what=f"bigkernel plain CG (no preconditioner) n={n:,}", notes="same tolerance")
            rows.append(plain)
            if "error" not in plain and "error" not in ours:
                summary["cg_iter_ratio_precond_over_plain"] = ours["n_iter"] / plain["n_iter"]
        if n_large:
            big = run("exact", n=n_large, pred_path=None, preconditioner="rpcholesky")
            gb = big.get("gram", {})
            big.update(
                what=f"bigkernel ExactKernelRidge n={n_large:,}",
                notes=(
                    f"rank {big.get('rank')}, Gram {gb.get('cache_dtype')} {100 * gb.get('cached_fraction', 0):.0f}% "
                    f"cached ({gb.get('cache_bytes', 0) / 1e9:.1f} GB, budget {big.get('memory_budget_gb', 0):.1f} GB), "
                    f"{gb.get('matvec_seconds', 0) / max(gb.get('n_matvec', 1), 1):.2f} s/matvec, "
                    f"test RMSE {big.get('test_rmse', float('nan')):.3f}"
                ),
            )
            rows.append(big)
    machine = machine_info(OPENBLAS_CORETYPE=_ENV.get("OPENBLAS_CORETYPE"))
    result = {"rows": rows, "summary": summary, "total_s": time.perf_counter() - t0, "machine": machine}
    write_json(args.out, result)
    print(_table(rows))
    for k, v in summary.items():
        print(f"{k}: {v:.3g}")
    print(f"\nwrote {args.out} ({result['total_s']:.0f}s)")


if __name__ == "__main__":
    main()
