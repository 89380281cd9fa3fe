"""Benchmark: bootstrap of the exact solver (and Nyström) on a 2-worker LocalCluster.

Each solver's bootstrap (``bigkernel.bootstrap``, B replicates) is compared with ONE plain fit
of the same estimator, measured in the same run: ``est.fit(X, y, sample_weight=counts)`` with
the counts of replicate 0, in this process, on one core (dask's synchronous scheduler and one
BLAS thread via threadpoolctl), best of ``--ref-repeats``, before the cluster starts. The table
shows total time / (B x one fit) — the cost of a replicate relative to a fit — and total time /
(B x one fit / workers) — relative to perfect parallel use of the workers.

* ``exact``: ``ExactKernelRidge`` — one task per replicate: its rows with count > 0, the
  weighted dual system solved by preconditioned CG in the task (Gram tiles cached in the
  task's share of the memory budget). Replicate 0's predictions are checked against the plain
  weighted fit's (they are the same fit).
* ``nystroem``: ``NystroemRidge(n_components=1024)`` — landmarks drawn once, replicates share
  weighted passes like random features.

Also: peak RSS of the client + nannies + workers (sampled every 50 ms, as in
``scripts/bench_bootstrap.py``, whose helpers this script imports), CPU seconds, the share of
the machine's CPU other processes used meanwhile (and which processes), the load average, the
mean band width, and — for the exact solver — where one replicate's time goes (Gram cache
build, preconditioner factor and setup, CG matvecs, prediction), measured in this process on
one core, fastest of ``--ref-repeats`` runs.

OpenBLAS: the preconditioner calls scipy's Cholesky; scipy's bundled OpenBLAS may segfault in
large Cholesky on this machine (see ``scripts/bench_exact.py``), so the script re-executes
itself with ``OPENBLAS_CORETYPE=Haswell`` by default (``--openblas-coretype ""`` leaves it
unset). The cluster's processes inherit it.

Example::

    python scripts/bench_bootstrap_exact.py --out bench_bootstrap_exact.json   # n=10,000, B=100
    python scripts/bench_bootstrap_exact.py --n 2000 --B 8                     # quick check
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import sys
import tempfile
import time

import numpy as np
import psutil
from threadpoolctl import threadpool_info, threadpool_limits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import busy_cpu_seconds, process_cluster, write_json

logger = logging.getLogger("bench_bootstrap_exact")

SOLVERS = ("exact", "nystroem")


# --------------------------------------------------------------------------------------------
# Other processes on the machine
# --------------------------------------------------------------------------------------------
def _others_snapshot(own: set[int]) -> dict[int, tuple[str, float]]:
    """CPU seconds so far of every process outside this run's tree: pid -> (command, seconds)."""
    out = {}
    for p in psutil.process_iter(["pid", "cmdline", "name", "cpu_times"]):
        if p.info["pid"] in own or p.info["cpu_times"] is None:
            continue
        t = p.info["cpu_times"]
        cmd = " ".join(p.info["cmdline"] or []) or p.info["name"] or "?"
        out[p.info["pid"]] = (cmd[:120], t.user + t.system)
    return out


def _own_pids() -> set[int]:
    me = psutil.Process()
    return {me.pid, *(c.pid for c in me.children(recursive=True))}


def _busy_others(before: dict, after: dict, seconds: float, min_share: float = 0.05) -> list[dict]:
    """Processes (outside the run) that used more than ``min_share`` of one core meanwhile."""
    rows = []
    for pid, (cmd, t1) in after.items():
        t0 = before.get(pid, (cmd, 0.0))[1]
        if t1 - t0 > min_share * seconds:
            rows.append({"pid": pid, "command": cmd, "cpu_seconds": round(t1 - t0, 1)})
    return sorted(rows, key=lambda r: -r["cpu_seconds"])


# --------------------------------------------------------------------------------------------
# Estimators and references
# --------------------------------------------------------------------------------------------
def make_estimator(solver: str, args: argparse.Namespace):
    from bigkernel import ExactKernelRidge, NystroemRidge

    if solver == "exact":
        return ExactKernelRidge(gamma=args.gamma, alpha=args.alpha, random_state=0)
    return NystroemRidge(gamma=args.gamma, alpha=args.alpha, n_components=args.components, random_state=0)


def one_core():
    """Context: dask's synchronous scheduler and one BLAS thread (a fit on one core)."""
    import contextlib

    import dask

    stack = contextlib.ExitStack()
    stack.enter_context(dask.config.set(scheduler="synchronous"))
    stack.enter_context(threadpool_limits(limits=1))
    return stack


def reference_fits(solver: str, args, X, y, counts, X_eval, repeats: int) -> dict:
    """Best of ``repeats`` plain weighted fits (one core), with the fit's own breakdown."""
    times, est = [], None
    with one_core():
        for _ in range(repeats):
            est = make_estimator(solver, args)
            t0 = time.perf_counter()
            est.fit(X, y, sample_weight=counts)
            times.append(time.perf_counter() - t0)
        pred = est.predict(X_eval)
    out = {"seconds": min(times), "all_seconds": times, "rows_fitted": int((counts > 0).sum())}
    info = getattr(est, "solver_info_", None)
    if info:  # exact: the fit's own breakdown
        gram = info.get("gram", {})
        out.update(
            preconditioner_seconds=info.get("preconditioner_seconds"), rank=info.get("rank"),
            gram_build_seconds=gram.get("build_seconds"), n_matvec=gram.get("n_matvec"),
            matvec_seconds=gram.get("matvec_seconds"), cg_iterations=int(np.max(est.n_iter_)),
        )  # fmt: skip
    return {**out, "_pred": np.asarray(pred)}


def profile_exact_replicate(plan, counts: np.ndarray) -> dict:
    """One exact replicate as its task runs it (``_ExactReplicate.run``), timed by phase, on one
    core in this process: LocalGram cache build, exact df (n <= 2000 only), preconditioner
    factor (RPCholesky) and setup (``LowRankPreconditioner``: ``LᵀL``, eigh, ``LV``, inside
    ``solve_dual``), CG matvecs, the rest of the solve, prediction at X_eval."""
    import dask

    import bigkernel.models.exact as exact_module
    import bigkernel.numerics.dual as dual_module
    from bigkernel.numerics.gram_tiles import KernelExpansion, LocalGram

    t = {"build": 0.0, "matvec": 0.0, "exact_df": 0.0, "prec_setup": 0.0}

    def timed(fn, key):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                t[key] += time.perf_counter() - t0

        return wrapper

    with one_core():
        (rep, (X, Y)) = dask.compute(plan._model, plan._data, scheduler="synchronous")
        keep = counts > 0
        Xk, Yk, ck = X[keep], Y[keep], counts[keep]
        ops = []

        def operator(n_rhs: int, reserve: int) -> LocalGram:
            t0 = time.perf_counter()
            op = LocalGram(rep.kernel, Xk, max(0, rep.cache_budget - reserve))
            t["build"] += time.perf_counter() - t0
            op.matvec = timed(op.matvec, "matvec")
            ops.append(op)
            return op

        patches = [
            (exact_module, "_centred_eigenvalues", "exact_df"),
            (dual_module, "LowRankPreconditioner", "prec_setup"),
        ]
        saved = [getattr(m, name) for m, name, _ in patches]
        for m, name, key in patches:
            setattr(m, name, timed(getattr(m, name), key))
        try:
            t0 = time.perf_counter()
            sol, rank, t_prec = rep.estimator._solve(
                rep.kernel, Xk, Yk, operator, rep.solve_budget, None if np.all(ck == 1.0) else ck
            )
            t_solve = time.perf_counter() - t0
        finally:
            for (m, name, _), fn in zip(patches, saved):
                setattr(m, name, fn)
        t1 = time.perf_counter()
        KernelExpansion(ops[0].tiler, sol.coef, sol.intercept)(rep.X_eval)
        t_pred = time.perf_counter() - t1
        info = ops[0].info()
        ops[0].close()
    phases = t["build"] + t["exact_df"] + t_prec + t["prec_setup"] + t["matvec"]
    return {
        "rows": int(keep.sum()), "rank": rank, "cg_iterations": int(np.max(sol.n_iter)),
        "n_matvec": info["n_matvec"], "cached_tiles": info["cached_tiles"],
        "n_tiles": info["n_tiles"], "cache_bytes": info["cache_bytes"],
        "seconds": t_solve + t_pred, "gram_cache_build_seconds": t["build"],
        "exact_df_seconds": t["exact_df"], "preconditioner_factor_seconds": t_prec,
        "preconditioner_setup_seconds": t["prec_setup"], "matvec_seconds": t["matvec"],
        "other_solve_seconds": t_solve - phases, "predict_seconds": t_pred,
    }  # fmt: skip


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--B", type=int, default=100, help="bootstrap replicates")
    ap.add_argument("--gamma", type=float, default=0.1)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--components", type=int, default=1024, help="Nyström landmarks")
    ap.add_argument("--solvers", nargs="+", choices=SOLVERS, default=list(SOLVERS))
    ap.add_argument("--batch-size", type=int, default=None, help="default: bootstrap's own")
    ap.add_argument("--n-eval", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ref-repeats", type=int, default=3, help="plain fits timed (best kept)")
    ap.add_argument("--no-profile", action="store_true", help="skip the phase breakdown of one exact replicate")
    ap.add_argument("--workdir", default=None, help="folder for the stores (default: temp)")
    ap.add_argument(
        "--openblas-coretype", default="Haswell", help="OPENBLAS_CORETYPE of this run (see above); '' leaves it unset"
    )
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from bigkernel.bands.bootstrap import bootstrap, default_batch_size, eval_grid
    from bigkernel.bands.plans import make_plan
    from bigkernel.data.sources import as_dataset
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows
    from bigkernel.numerics.resample import BootstrapWeights

    logging.getLogger("distributed").setLevel(logging.WARNING)  # after its import sets INFO

    n, d, B, W = args.n, args.d, args.B, args.workers
    a = generate_rows(SyntheticSpec("friedman1", n, d, 1.0, 0), 0, n)
    X, y = np.ascontiguousarray(a[:, :d]), np.ascontiguousarray(a[:, d])
    X_eval = eval_grid(X, 0, args.n_eval)
    counts0 = BootstrapWeights(0, (0,), n)(0, n)[0].astype(np.float64)  # replicate 0 of seed 0

    results: dict = {
        "command": "python scripts/bench_bootstrap_exact.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": {"cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
                    "platform": platform.platform(), "python": platform.python_version(),
                    "blas": [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}"
                             for i in threadpool_info()],
                    "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")},
        "params": vars(args), "load_before": os.getloadavg(), "references": {}, "profile": None,
        "runs": [],
    }  # fmt: skip

    # references: one plain weighted fit per solver, one core, before the cluster exists
    preds = {}
    for solver in args.solvers:
        ref = reference_fits(solver, args, X, y, counts0, X_eval, args.ref_repeats)
        preds[solver] = ref.pop("_pred")
        results["references"][solver] = ref
        logger.info(
            "%s: one plain weighted fit %.3f s (best of %s)",
            solver,
            ref["seconds"],
            [round(s, 3) for s in ref["all_seconds"]],
        )
    if "exact" in args.solvers and not args.no_profile:
        plan = make_plan(make_estimator("exact", args), as_dataset(X, y), X_eval, 0, W)
        # the first run is cold (page faults of the fresh tile cache...): keep the fastest
        profiles = [profile_exact_replicate(plan, counts0) for _ in range(args.ref_repeats)]
        results["profile"] = min(profiles, key=lambda p: p["seconds"])
        results["profile"]["all_seconds"] = [p["seconds"] for p in profiles]
        logger.info("exact replicate 0 profile: %s", results["profile"])

    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-bootstrap-exact-")
    own_workdir = args.workdir is None
    try:
        with process_cluster(W, results) as (rss, client):
            for solver in args.solvers:
                est = make_estimator(solver, args)
                store = os.path.join(workdir, f"store-{solver}.zarr")
                shutil.rmtree(store, ignore_errors=True)
                rss.reset()
                own = _own_pids()
                others0 = _others_snapshot(own)
                cpu0, (busy0, steal0) = rss.cpu_seconds(), busy_cpu_seconds()
                t0 = time.perf_counter()
                res = bootstrap(
                    est,
                    X,
                    y,
                    X_eval,
                    n_bootstraps=B,
                    random_state=0,
                    store=store,
                    batch_size=args.batch_size,
                    client=client,
                )
                total = time.perf_counter() - t0
                cpu = rss.cpu_seconds() - cpu0
                busy1, steal1 = busy_cpu_seconds()
                others = _busy_others(others0, _others_snapshot(own | _own_pids()), total)
                foreign = max(0.0, busy1 - busy0 - cpu)
                rep0 = np.asarray(res.predictions[0].compute())
                ref_pred = preds[solver]
                diff = float(np.linalg.norm(rep0 - ref_pred) / np.linalg.norm(ref_pred))
                ref_s = results["references"][solver]["seconds"]
                run = {
                    "solver": solver, "estimator": repr(est), "seconds": total,
                    "seconds_per_replicate": total / B, "cpu_seconds": cpu,
                    "cpu_seconds_per_replicate": cpu / B,
                    "ratio_vs_B_fits": total / (B * ref_s),
                    "ratio_vs_B_fits_over_workers": total / (B * ref_s / W),
                    "foreign_cpu_share": foreign / (total * (os.cpu_count() or 1)),
                    "steal_share": (steal1 - steal0) / (total * (os.cpu_count() or 1)),
                    "load_after": os.getloadavg(), "other_processes": others,
                    "peak_rss_gb": rss.peak / 2**30, "n_computed": res.n_computed,
                    "batch_size": args.batch_size or default_batch_size(
                        B, W, make_plan(est, as_dataset(X, y), X_eval, 0, W).max_batch_size),
                    "mean_band_width": float(np.mean(res.width)),
                    "replicate0_vs_plain_fit_rel_diff": diff,
                }  # fmt: skip
                results["runs"].append(run)
                logger.info(
                    "%s: %.1f s (%.1f CPU s, others used %.0f %% of the machine, load %s), "
                    "peak RSS %.2f GB, replicate 0 vs plain fit %.1e",
                    solver,
                    total,
                    cpu,
                    100 * run["foreign_cpu_share"],
                    run["load_after"],
                    rss.peak / 2**30,
                    diff,
                )
                shutil.rmtree(store, ignore_errors=True)
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    print(
        f"\nbootstrap bench (exact / Nyström): friedman1 n={n:,} d={d} B={B} rbf gamma="
        f"{args.gamma} alpha={args.alpha} workers={W}x1 thread, OPENBLAS_CORETYPE="
        f"{os.environ.get('OPENBLAS_CORETYPE')}"
    )
    print(
        f"{'solver':>8} {'1 fit s':>8} {'total s':>8} {'s/rep':>7} {'CPU s/rep':>9} "
        f"{'/(B*fit)':>9} {'/(B*fit/W)':>11} {'peak RSS GB':>12} {'width':>7} {'rep0 diff':>9} "
        f"{'others':>7} {'steal':>6}"
    )
    for run in results["runs"]:
        ref = results["references"][run["solver"]]
        print(
            f"{run['solver']:>8} {ref['seconds']:>8.3f} {run['seconds']:>8.1f} "
            f"{run['seconds_per_replicate']:>7.3f} {run['cpu_seconds_per_replicate']:>9.3f} "
            f"{run['ratio_vs_B_fits']:>9.2f} {run['ratio_vs_B_fits_over_workers']:>11.2f} "
            f"{run['peak_rss_gb']:>12.2f} {run['mean_band_width']:>7.3f} "
            f"{run['replicate0_vs_plain_fit_rel_diff']:>9.1e} "
            f"{100 * run['foreign_cpu_share']:>6.0f}% {100 * run['steal_share']:>5.0f}%"
        )
    print(
        "1 fit = est.fit(X, y, sample_weight=counts of replicate 0) on one core (best of "
        f"{args.ref_repeats}); 'rep0 diff' = relative L2 difference between replicate 0's "
        "predictions and that fit's (the same fit for exact; Nyström fit draws its landmarks "
        "from the weighted rows, the bootstrap once from all rows); 'others' = share of the "
        "machine's CPU used by other processes during the run"
    )
    prof = results["profile"]
    if prof:
        s = prof["seconds"]
        print(
            f"exact replicate 0 on one core (best of {len(prof['all_seconds'])}): {s:.3f} s, "
            f"{prof['rows']:,} rows, rank "
            f"{prof['rank']}, {prof['cg_iterations']} CG iterations ({prof['n_matvec']} matvecs), "
            f"{prof['cached_tiles']}/{prof['n_tiles']} tiles cached"
        )
        for key in (
            "gram_cache_build",
            "exact_df",
            "preconditioner_factor",
            "preconditioner_setup",
            "matvec",
            "other_solve",
            "predict",
        ):
            v = prof[f"{key}_seconds"]
            print(f"  {key:>21}: {v:7.3f} s ({100 * v / s:4.0f} %)")
    for run in results["runs"]:
        for o in run["other_processes"]:
            print(f"  during {run['solver']}: pid {o['pid']} used {o['cpu_seconds']} CPU s: {o['command']}")
    if args.out:
        write_json(args.out, results)
    return results


def _reexec_with_coretype(argv: list[str]) -> None:
    """Restart this script with OPENBLAS_CORETYPE set (it must be set before OpenBLAS loads)."""
    args = parse(argv)
    want = args.openblas_coretype
    if want and os.environ.get("OPENBLAS_CORETYPE") != want:
        env = {**os.environ, "OPENBLAS_CORETYPE": want}
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *argv], env)


if __name__ == "__main__":
    _reexec_with_coretype(sys.argv[1:])
    main()
