"""Benchmark: what the evidence costs on the exact path above n = 2000 (issue 12).

Per n, in the same run: the fit at a fixed α (the reference), one Cholesky log-determinant of
``K + αI`` at that α (what ``log_marginal_likelihood_`` would cost on every fixed-α fit: the
dense Gram matrix plus the factor), the fit with ``alpha="evidence"`` (7 factors + the CG run)
and ``predict(X, return_std=True)`` for ``--n-eval`` points (one more factor, then triangular
solves). Time, ratio to the fixed-α fit and peak RSS of each; ``sigma2_`` is known in every
fit (it needs only the CG solution).

Example::

    python scripts/bench_exact_evidence.py --n 3000 6000 --out bench_exact_evidence.json
"""

from __future__ import annotations

import argparse
import os

import numpy as np

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import load_text, machine_info, timed, write_json


def measure(n: int, a: argparse.Namespace) -> list[dict]:
    """The four timings at one n (rows of the table)."""
    from bigkernel import ExactKernelRidge
    from bigkernel.numerics.evidence import cholesky_log_det
    from bigkernel.numerics.gram_tiles import GramTiler

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (n, a.d))
    y = np.sin(6 * X[:, 0]) + X[:, 1] + 0.1 * rng.standard_normal(n)
    Xe = rng.uniform(0, 1, (a.n_eval, a.d))
    fixed = ExactKernelRidge(gamma=a.gamma, alpha=a.alpha)
    t_fit, rss_fit, _ = timed(lambda: fixed.fit(X, y))
    t_ld, rss_ld, _ = timed(lambda: cholesky_log_det(GramTiler(fixed.kernel_, X).dense(), a.alpha, True))
    ev = ExactKernelRidge(gamma=a.gamma, alpha="evidence")
    t_ev, rss_ev, _ = timed(lambda: ev.fit(X, y))
    t_std, rss_std, _ = timed(lambda: fixed.predict(Xe, return_std=True))
    rows = []
    for what, t, rss in (("fit, fixed alpha", t_fit, rss_fit), ("one log-det (Cholesky)", t_ld, rss_ld),
                         ("fit, alpha='evidence'", t_ev, rss_ev), (f"return_std ({a.n_eval} pts)", t_std, rss_std)):  # fmt: skip
        rows.append({"n": n, "what": what, "seconds": round(t, 3), "ratio_to_fit": round(t / t_fit, 2),
                     "peak_rss_mb": round(rss / 2**20, 1)})  # fmt: skip
    print(f"{n:>6} sigma2_={fixed.sigma2_:.4g} (fixed), alpha_={ev.alpha_:.3g}, lml={ev.log_marginal_likelihood_:.2f}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[3000, 6000])
    p.add_argument("--d", type=int, default=3)
    p.add_argument("--gamma", type=float, default=5.0)
    p.add_argument("--alpha", type=float, default=0.01)
    p.add_argument("--n-eval", type=int, default=1000)
    p.add_argument("--out", default=None, help="JSON file for the results")
    a = p.parse_args(argv)
    rows = []
    print(f"load average before: {load_text()}")
    for n in a.n:
        rows += measure(n, a)
    print(f"{'n':>6} {'what':<22} {'seconds':>8} {'x fit':>6} {'peak RSS MB':>11}")
    for r in rows:
        print(f"{r['n']:>6} {r['what']:<22} {r['seconds']:>8.2f} {r['ratio_to_fit']:>6.2f} {r['peak_rss_mb']:>11.0f}")
    print(f"load average after: {load_text()}")
    if a.out:
        write_json(a.out, {"rows": rows, "machine": machine_info(threads=os.cpu_count()), "load_after": load_text()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
