#!/usr/bin/env python
"""Benchmark Nyström by preconditioned CG (``NystroemRidge(solver="cg")``, Falkon's method, issue 21).

Every configuration runs in its own subprocess (peak RSS ``ru_maxrss`` is its own, data loading
included), on dask's threaded scheduler with 2 threads, ``OPENBLAS_CORETYPE=Haswell`` by default
(numpy's OpenBLAS segfaults in multi-threaded Cholesky factors of order >= 16,000 with its
SkylakeX kernels on this machine; ``--openblas-coretype ""`` leaves it unset). The cg rows run
only when the installed bigkernel has ``NystroemRidge(solver=...)``; otherwise they are skipped
and say so.

Cases (``--case``):

- ``diamonds``: the public diamonds table (plotnine ships it as a CSV; ``pip install -e
  ".[bench]"``), target log(price), 53,940 rows: ``cut``, ``color`` and ``clarity`` one-hot encoded
  by :class:`bigkernel.TableEncoder`, the six numeric columns standardized with the training
  mean and standard deviation (26 features; ``scripts/_bench.py: load_diamonds``). One fixed
  80/20 split (seed 0): 43,152 training rows, 10,788 test rows. rbf kernel with γ = 0.01 and
  α = 1e-3, chosen by ``ExactKernelRidgeCV`` (closed-form leave-one-out, γ ∈ {0.003, 0.01, 0.03,
  0.1, 0.3} × 11 α from 1e-4 to 10) on 4,000 training rows drawn at random (seed 1); ``--tune``
  reruns that search (337 s on this machine under load 5) and uses what it picks. Then, on all training rows:
  ``ExactKernelRidge`` at that (γ, α) (the gold standard), ``RandomFeatureRidge`` D = 1k … 8k with
  α by GCV, ``NystroemRidge(solver="direct")`` M = 1k … 8k with α by GCV, and
  ``NystroemRidge(solver="cg")`` M = 1k … 30k with a 7-point α grid (1e-5 … 1e-1, log) chosen on
  a held-out 10 % of the training rows in the same passes. Both Nyström solvers take uniform
  landmarks (``--landmarks``), so at equal M they have the same centres. Where the client's
  preconditioner build (the smaller of (2 + #α)·M²·8 bytes by Cholesky and 2·M²·8 by the
  eigendecomposition) exceeds ``--client-gb``, the cg fit takes the single α chosen at
  the largest M that fitted the grid (said in the row). Larger M are skipped once one cg fit has
  taken more than ``--max-fit-s``. Columns: fit s, test RMSE, ratio to the exact RMSE, peak RSS,
  CG iterations.
- ``synthetic``: Friedman #1 (d = 10, noise 1), n = 2·10⁶ rows written once to a zarr store
  (``bigkernel.data.synthetic.make_data``), rbf γ = 0.5, M = 20,000 (``--synthetic-m``), the
  7-point α grid α = n·10⁻⁷ … n·10⁻¹ (``--relative-alphas``): the cg fit reading the store (every CG iteration one
  pass over it) and the same fit on the rows held in memory (numpy): fit s, peak RSS against
  2·M²·8 bytes + 2 GB, test RMSE on 100,000 fresh rows, and the relative difference of the two
  fits' predictions.
- ``iterations``: Friedman #1 held in memory, n = 10⁵ and 10⁶, M = 2,000 (``--iter-m``), the
  same relative α grid, ``tol`` 1e-6: CG passes (``n_iter_``) and, per α, the first iteration whose
  relative residual (``residuals_``) is at most ``tol``.

Usage::

    python scripts/bench_nystroem_cg.py --case diamonds                 # ~1 h on 2 cores
    python scripts/bench_nystroem_cg.py --case synthetic                # n = 2e6, M = 20,000
    python scripts/bench_nystroem_cg.py --case iterations
    python scripts/bench_nystroem_cg.py --quick                         # every case, small (< 2 min)
    python scripts/figure_nystroem_cg.py bench_results/bench_nystroem_cg.json  # the gallery figure's data
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import LoadTimer, dispatch_measurement, load_text, machine_info, measurement_runner, peak_rss_gb, write_json

#: γ, α of the diamonds case: ExactKernelRidgeCV's choice on 4,000 training rows (see above)
DIAMONDS_GAMMA, DIAMONDS_ALPHA = 0.01, 1e-3
DIAMONDS_ALPHAS = [1e-5, 4.64e-5, 2.15e-4, 1e-3, 4.64e-3, 2.15e-2, 1e-1]
SYNTH_GAMMA, SYNTH_D, N_TEST_SYNTH = 0.5, 10, 100_000
#: synthetic and iterations cases: α = n · these (α/n from 1e-7 to 1e-1, the solver's reference grid)
RELATIVE_ALPHAS = [1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1]
TOL, MAX_ITER = 1e-6, 100


def has_cg() -> bool:
    """Whether the installed bigkernel has ``NystroemRidge(solver="cg")``."""
    from bigkernel import NystroemRidge

    return "solver" in NystroemRidge().get_params()


# ----------------------------------------------------------------------------- measurements
def _diamonds(n_train: int | None):
    import numpy as np
    from _bench import load_diamonds

    d = load_diamonds()
    if n_train and n_train < len(d["y_train"]):
        keep = np.random.default_rng(2).choice(len(d["y_train"]), n_train, replace=False)
        d["X_train"], d["y_train"] = d["X_train"][keep], d["y_train"][keep]
    return d


def _estimator(family: str, size: int, gamma: float, alpha, landmarks: str, max_iter: int = MAX_ITER):
    from bigkernel import ExactKernelRidge, NystroemRidge, RandomFeatureRidge

    if family == "exact":
        return ExactKernelRidge(gamma=gamma, alpha=alpha, tol=TOL, random_state=0)
    if family == "rff":
        return RandomFeatureRidge(gamma=gamma, n_components=size, alpha=alpha, random_state=0)
    kw = {"solver": "cg", "tol": TOL, "max_iter": max_iter} if family == "cg" else {}
    return NystroemRidge(gamma=gamma, n_components=size, alpha=alpha, landmarks=landmarks, random_state=0, **kw)


def _fit_figures(est, fit) -> dict:
    """Fit time, this process's CPU seconds (the sturdier figure on a loaded machine), CPU
    seconds others took meanwhile, and what the fitted estimator says."""
    import numpy as np

    cpu0 = time.process_time()
    with LoadTimer() as t:
        fit()
    out = {"fit_s": t.seconds, "cpu_s": time.process_time() - cpu0, "others_cpu_s": t.others_cpu_s, "load_1min": t.load}
    out["alpha"] = float(np.ravel(est.alpha_)[0]) if hasattr(est, "alpha_") else None
    if hasattr(est, "n_iter_"):
        out["n_iter"] = int(np.max(est.n_iter_))
    if getattr(est, "residuals_", None) is not None:
        out["iter_per_alpha"] = iterations_per_column(est.residuals_, TOL)
    if getattr(est, "validation_scores_", None) is not None:
        out["validation_mse"] = np.ravel(est.validation_scores_).tolist()
    if getattr(est, "df_", None) is not None:
        out["df"] = float(np.ravel(est.df_)[0])
    return out


def iterations_per_column(residuals, tol: float) -> list[int | None]:
    """Per column of a ``residuals_`` history (n_iter + 1, n_columns): the first iteration whose
    relative residual is at most ``tol`` (None: never reached)."""
    import numpy as np

    r = np.asarray(residuals)
    r = r[:, None] if r.ndim == 1 else r
    return [int(np.argmax(c <= tol)) if bool(np.any(c <= tol)) else None for c in r.T]


def m_diamonds(
    family: str, size: int, gamma: float, alpha, landmarks: str, n_train: int | None, max_iter: int = MAX_ITER
) -> dict:
    """One fit on the diamonds training rows; test RMSE on the test rows."""
    import dask
    import numpy as np

    d = _diamonds(n_train)
    est = _estimator(family, size, gamma, alpha, landmarks, max_iter)
    with dask.config.set(scheduler="threads", num_workers=2):
        out = _fit_figures(est, lambda: est.fit(d["X_train"], d["y_train"]))
        pred = np.asarray(est.predict(d["X_test"]))
    out.update(test_rmse=float(np.sqrt(np.mean((pred - d["y_test"]) ** 2))), peak_rss_gb=peak_rss_gb(),
               n_train=len(d["y_train"]), n_test=len(d["y_test"]))  # fmt: skip
    return out


def m_tune(n_sub: int, gammas: list[float]) -> dict:
    """ExactKernelRidgeCV (closed-form LOO) on ``n_sub`` training rows drawn at random."""
    import numpy as np

    from bigkernel import ExactKernelRidgeCV

    d = _diamonds(None)
    idx = np.random.default_rng(1).choice(len(d["y_train"]), n_sub, replace=False)
    t = time.perf_counter()
    cv = ExactKernelRidgeCV(gammas=gammas, alphas=list(np.logspace(-4, 1, 11)), random_state=0)
    cv.fit(d["X_train"][idx], d["y_train"][idx])
    return {"fit_s": time.perf_counter() - t, "gamma": float(cv.gamma_), "alpha": float(cv.alpha_),
            "peak_rss_gb": peak_rss_gb()}  # fmt: skip


def _synthetic_test(n: int):
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows, true_function

    a = generate_rows(SyntheticSpec("friedman1", n, SYNTH_D, 1.0, 7), 0, n)
    return a[:, :SYNTH_D], a[:, SYNTH_D], true_function("friedman1", a[:, :SYNTH_D])


def m_synthetic(
    path: str, source: str, M: int, alphas: list[float], pred_path: str, solver: str, max_iter: int = MAX_ITER
) -> dict:
    """The cg fit on the zarr store (``source="zarr"``) or on its rows loaded into numpy."""
    import dask
    import numpy as np

    from bigkernel import open_source

    ds = open_source(path)
    X, y = (ds.X, ds.y) if source == "zarr" else (ds.X.compute(), ds.y.compute())
    est = _estimator(solver, M, SYNTH_GAMMA, alphas, "uniform", max_iter)
    with dask.config.set(scheduler="threads", num_workers=2):
        out = _fit_figures(est, lambda: est.fit(X, y))
        Xt, yt, ft = _synthetic_test(N_TEST_SYNTH)
        pred = np.asarray(est.predict(Xt))
    np.save(pred_path, pred)
    out.update(test_rmse=float(np.sqrt(np.mean((pred - yt) ** 2))), rmse_to_truth=float(np.sqrt(np.mean((pred - ft) ** 2))),
               peak_rss_gb=peak_rss_gb(), n=int(ds.X.shape[0]))  # fmt: skip
    return out


def m_iterations(n: int, M: int, alphas: list[float], solver: str, max_iter: int = MAX_ITER) -> dict:
    """CG passes and iterations per α to ``TOL`` at n rows held in memory."""
    import dask

    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, SYNTH_D, 1.0, 5), 0, n)
    est = _estimator(solver, M, SYNTH_GAMMA, alphas, "uniform", max_iter)
    with dask.config.set(scheduler="threads", num_workers=2):
        out = _fit_figures(est, lambda: est.fit(a[:, :SYNTH_D], a[:, SYNTH_D]))
    out.update(peak_rss_gb=peak_rss_gb(), n=n)
    return out


MEASUREMENTS = {"diamonds": m_diamonds, "tune": m_tune, "synthetic": m_synthetic, "iterations": m_iterations}
_ENV = dict(os.environ)
run = measurement_runner(__file__, env=_ENV, on_error="exit")


# ----------------------------------------------------------------------------- cases
def _client_bytes(M: int, n_alphas: int) -> float:
    """Peak bytes of the cg preconditioner's build on the client: the smaller route's (K_MM, T and
    one A per α by Cholesky; K_MM and its eigenvectors by the eigendecomposition, any grid)."""
    return min((2 + n_alphas) * M * M * 8.0, 2 * M * M * 8.0 + 64 * M * 8.0)


def _diamonds_cg(args, gamma: float, n_train: int | None, cg_ok: bool) -> list[dict]:
    if not cg_ok:
        return [{"case": "diamonds", "family": "cg", "what": "NystroemRidge cg",
                 "skipped": "this bigkernel has no NystroemRidge(solver=...): cg rows not measured"}]  # fmt: skip
    rows: list[dict] = []
    grid_alpha, grid_M, too_long = None, None, None
    for M in args.cg_m:
        if too_long is not None:
            rows.append({"case": "diamonds", "family": "cg", "size": M, "what": f"NystroemRidge cg M={M:,}",
                         "skipped": f"the fit at M={too_long:,} took > {args.max_fit_s:.0f} s"})  # fmt: skip
            continue
        alphas, note = list(args.alphas), f"{len(args.alphas)} α, held-out {TOL:g}"
        if _client_bytes(M, len(alphas)) > args.client_gb * 1e9 and grid_alpha is not None:
            alphas, note = [grid_alpha], f"one α = {grid_alpha:.3g} (the grid's choice at M={grid_M:,})"
        r = run(
            "diamonds",
            family="cg",
            size=M,
            gamma=gamma,
            alpha=alphas,
            landmarks=args.landmarks,
            n_train=n_train,
            max_iter=args.max_iter,
        )
        r.update(case="diamonds", family="cg", size=M, what=f"NystroemRidge cg M={M:,}", notes=note,
                 alpha_rule="holdout" if len(alphas) > 1 else "fixed")  # fmt: skip
        if "error" not in r and len(alphas) > 1:
            grid_alpha, grid_M = r["alpha"], M
        rows.append(r)
        print(_table([r], header=False), flush=True)
        if r.get("fit_s", 0) > args.max_fit_s:
            too_long = M
    return rows


def case_diamonds(args, cg_ok: bool) -> list[dict]:
    gamma, alpha = DIAMONDS_GAMMA, DIAMONDS_ALPHA
    n_train = args.n_train or None
    rows: list[dict] = []
    if args.tune:
        t = run("tune", n_sub=4000, gammas=[0.003, 0.01, 0.03, 0.1, 0.3])
        t.update(case="diamonds", family="tune", what="ExactKernelRidgeCV LOO, 4,000 rows")
        rows.append(t)
        if "error" not in t:
            gamma, alpha = t["gamma"], t["alpha"]
    plan = [("exact", 0, alpha, "ExactKernelRidge", f"γ {gamma:g}, α {alpha:g}")]
    rules = {"gcv": ("gcv", "GCV", "α by GCV"), "fixed": (alpha, "α=exact's", f"α = {alpha:g}, the exact fit's")}
    for rule in ["gcv", "fixed"] if args.rff_direct_alpha == "both" else [args.rff_direct_alpha]:
        a, tag, note = rules[rule]
        plan += [("rff", D, a, f"RandomFeatureRidge D={D:,} {tag}", note) for D in args.rff_d]
        plan += [("direct", M, a, f"NystroemRidge direct M={M:,} {tag}", note) for M in args.direct_m]
    for family, size, a, what, note in (p for p in plan if p[0] in args.families):
        r = run("diamonds", family=family, size=size, gamma=gamma, alpha=a, landmarks=args.landmarks, n_train=n_train)
        r.update(case="diamonds", family=family, size=size, what=what, notes=note,
                 alpha_rule="gcv" if a == "gcv" else "fixed")  # fmt: skip
        rows.append(r)
        print(_table([r], header=False), flush=True)
    if "cg" in args.families:
        rows += _diamonds_cg(args, gamma, n_train, cg_ok)
    exact = next((r for r in rows if r["family"] == "exact"), {})
    for r in rows:
        if "test_rmse" in r and "test_rmse" in exact:
            r["ratio_to_exact"] = r["test_rmse"] / exact["test_rmse"]
    return rows


def case_synthetic(args, solver: str) -> list[dict]:
    import numpy as np

    from bigkernel.data.synthetic import SyntheticSpec, make_data

    n, M = int(args.synthetic_n), args.synthetic_m
    need = _client_bytes(M, len(args.relative_alphas))
    if solver == "cg" and need > args.client_gb * 1e9:
        return [{"case": "synthetic", "family": solver, "size": M, "what": f"cg n={n:,} M={M:,}",
                 "skipped": f"the preconditioner takes {need / 1e9:.1f} GB > --client-gb "
                 f"{args.client_gb:g}: raise it (the machine's RAM permitting) or give fewer centres"}]  # fmt: skip
    path = os.path.join(args.data_dir, f"friedman1_{n}.zarr")
    t = time.perf_counter()
    make_data(SyntheticSpec("friedman1", n, SYNTH_D, 1.0, 0), path, chunk_rows=131_072)
    made = time.perf_counter() - t
    bound_gb = (2 * M * M * 8 + 2e9) / 1e9
    rows, preds = [], {}
    for source in ("zarr", "numpy"):
        preds[source] = os.path.join(args.data_dir, f"pred_{source}.npy")
        r = run("synthetic", path=path, source=source, M=M, alphas=[a * n for a in args.relative_alphas],
                pred_path=preds[source], solver=solver, max_iter=args.max_iter)  # fmt: skip
        r.update(case="synthetic", family=solver, size=M, what=f"{solver} n={n:,} M={M:,} from {source}",
                 rss_bound_gb=bound_gb, notes=f"store made in {made:.1f} s" if source == "zarr" else "")  # fmt: skip
        rows.append(r)
        print(_table([r], header=False), flush=True)
    if all("error" not in r for r in rows):
        a, b = np.load(preds["zarr"]), np.load(preds["numpy"])
        rows[0]["pred_rel_diff_vs_numpy"] = float(np.linalg.norm(a - b) / np.linalg.norm(b))
        rows[0]["notes"] += f"; predictions vs numpy fit: {rows[0]['pred_rel_diff_vs_numpy']:.1e} relative"
    return rows


def case_iterations(args, solver: str) -> list[dict]:
    rows = []
    for n in args.iter_n:
        r = run(
            "iterations",
            n=int(n),
            M=args.iter_m,
            alphas=[a * int(n) for a in args.relative_alphas],
            solver=solver,
            max_iter=args.max_iter,
        )
        per = r.get("iter_per_alpha")
        r.update(case="iterations", family=solver, size=args.iter_m, what=f"{solver} n={int(n):,} M={args.iter_m:,}",
                 notes="" if per is None else "per α: " + " ".join(str(i) for i in per))  # fmt: skip
        rows.append(r)
        print(_table([r], header=False), flush=True)
    return rows


# ----------------------------------------------------------------------------- table
def _num(r: dict, key: str, fmt: str) -> str:
    v = r.get(key)
    return "" if v is None else format(v, fmt)


def _table(rows: list[dict], header: bool = True) -> str:
    head = (f"{'what':44s} {'fit s':>8s} {'CPU s':>7s} {'test RMSE':>9s} {'÷ exact':>7s} {'peak RSS GB':>11s} {'CG it':>5s} "
            f"{'α':>8s} {'others CPU s':>12s}  notes")  # fmt: skip
    lines = [head, "-" * len(head)] if header else []
    for r in rows:
        if "skipped" in r or "error" in r:
            lines.append(
                f"{r['what']:44s} {'SKIPPED' if 'skipped' in r else 'ERROR'} {r.get('skipped', r.get('error'))}"
            )
            continue
        notes = r.get("notes", "")
        if "rss_bound_gb" in r:
            notes = f"RSS bound {r['rss_bound_gb']:.1f} GB; {notes}"
        lines.append(
            f"{r['what']:44s} {r['fit_s']:8.2f} {_num(r, 'cpu_s', '7.2f'):>7s} {_num(r, 'test_rmse', '9.4f'):>9s} {_num(r, 'ratio_to_exact', '7.4f'):>7s} "
            f"{r['peak_rss_gb']:11.2f} {_num(r, 'n_iter', 'd'):>5s} {_num(r, 'alpha', '8.2g'):>8s} "
            f"{r.get('others_cpu_s', 0):12.1f}  {notes}"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--case",
        choices=["diamonds", "synthetic", "iterations", "all"],
        default=None,
        help="default: diamonds (--quick: all)",
    )
    p.add_argument("--quick", action="store_true", help="every case at toy sizes (a smoke run, < 2 min)")
    p.add_argument("--tune", action="store_true", help="rerun the (γ, α) search on 6,000 rows first (~9 min)")
    p.add_argument("--n-train", type=int, default=0, help="diamonds: training rows drawn at random (0: all)")
    p.add_argument("--rff-d", type=int, nargs="*", default=[1024, 2048, 4096, 8192])
    p.add_argument("--direct-m", type=int, nargs="*", default=[1000, 2000, 4000, 8000])
    p.add_argument("--cg-m", type=int, nargs="*", default=[1000, 2000, 4000, 8000, 16000, 30000])
    p.add_argument("--alphas", type=float, nargs="*", default=DIAMONDS_ALPHAS, help="diamonds: the cg α grid")
    p.add_argument("--max-iter", type=int, default=MAX_ITER, help="cg: max_iter (CG passes)")
    p.add_argument(
        "--families",
        nargs="*",
        default=["exact", "rff", "direct", "cg"],
        choices=["exact", "rff", "direct", "cg"],
        help="diamonds: which estimators",
    )
    p.add_argument(
        "--rff-direct-alpha",
        default="both",
        choices=["gcv", "fixed", "both"],
        help="RandomFeatureRidge and direct Nyström: α by GCV, fixed at the exact fit's, or both",
    )
    p.add_argument("--landmarks", default="uniform", choices=["uniform", "rpcholesky"])
    p.add_argument("--client-gb", type=float, default=8.0, help="cg: the α grid only while its factors fit")
    p.add_argument("--max-fit-s", type=float, default=600.0, help="cg: no larger M after a fit this long")
    p.add_argument("--synthetic-n", type=float, default=2e6)
    p.add_argument("--synthetic-m", type=int, default=20_000)
    p.add_argument("--relative-alphas", type=float, nargs="*", default=RELATIVE_ALPHAS, help="α/n, synthetic cases")
    p.add_argument("--iter-n", type=float, nargs="*", default=[1e5, 1e6])
    p.add_argument("--iter-m", type=int, default=2000)
    p.add_argument("--solver", default="cg", choices=["cg", "direct"],
                   help="synthetic and iterations cases: direct only to smoke-test the script without cg")  # fmt: skip
    p.add_argument("--data-dir", default="bench_results/data")
    p.add_argument("--out", default="bench_results/bench_nystroem_cg.json")
    p.add_argument("--openblas-coretype", default="Haswell", help="OPENBLAS_CORETYPE of the measurements; '' unsets")
    return p


def _quick(args) -> None:
    """Toy sizes of every case: a smoke run of the script (its figures mean nothing)."""
    args.n_train = args.n_train or 2000
    args.rff_d, args.direct_m, args.cg_m = [256, 512], [250, 500], [250, 500]
    args.client_gb = min(args.client_gb, 0.005)  # M=500 then takes the single-α path
    args.synthetic_n, args.synthetic_m, args.iter_n, args.iter_m = 20_000, 200, [1e4, 2e4], 200
    args.max_iter = min(args.max_iter, 25)
    args.rff_direct_alpha = "gcv"
    if args.out == _parser().get_default("out"):
        args.out = "bench_results/bench_nystroem_cg_quick.json"


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    args = _parser().parse_args()
    args.case = args.case or ("all" if args.quick else "diamonds")
    if args.quick:
        _quick(args)
    if args.openblas_coretype:
        _ENV["OPENBLAS_CORETYPE"] = args.openblas_coretype
    os.makedirs(args.data_dir, exist_ok=True)
    cg_ok = has_cg()
    solver_ok = cg_ok or args.solver == "direct"
    load0, t0, rows = load_text(), time.perf_counter(), []
    print(_table([]), flush=True)
    if args.case in ("diamonds", "all"):
        rows += case_diamonds(args, cg_ok)
    for case, fn in (("synthetic", case_synthetic), ("iterations", case_iterations)):
        if args.case in (case, "all") and solver_ok:
            rows += fn(args, args.solver)
        elif args.case in (case, "all"):
            rows.append({"case": case, "what": case, "skipped": "no NystroemRidge(solver='cg') in this bigkernel"})
            print(_table(rows[-1:], header=False))
    machine = machine_info(OPENBLAS_CORETYPE=_ENV.get("OPENBLAS_CORETYPE"), has_cg=cg_ok)
    result = {"rows": rows, "total_s": time.perf_counter() - t0, "load_average": [load0, load_text()],
              "argv": sys.argv[1:], "quick": args.quick, "machine": machine}  # fmt: skip
    write_json(args.out, result)
    print("\n" + _table(rows))
    print(f"\nwrote {args.out} ({result['total_s']:.0f}s; load average {load0} → {load_text()})")


if __name__ == "__main__":
    main()
