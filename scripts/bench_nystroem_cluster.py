#!/usr/bin/env python
"""``NystroemRidge(solver="cg")`` on a real LocalCluster against the threaded fit (issue 21).

One synthetic store (Friedman #1, d = 10, noise 1, ``--n`` rows, zarr), one estimator
(rbf γ = 0.5, ``--M`` uniform centres, the 7-point α grid α/n = 1e-7 … 1e-1 chosen on the
held-out 10 %, ``tol`` 1e-6), three fits, each in its own interpreter:

- ``threads``: dask's threaded scheduler, 2 threads;
- ``cluster``: a ``distributed.LocalCluster`` of 2 one-thread worker processes (loopback);
- ``cluster-kill``: the same, with one worker SIGKILLed while a ``falkon-block`` task of the fit
  runs on it (``--kill-after`` seconds into the fit at the earliest); its nanny restarts it and
  the scheduler reruns its tasks.

Columns: fit s, CG passes, chosen α, peak RSS (the process and its children: the workers count),
and the largest coefficient difference relative to the threaded fit's largest coefficient (the
issue asks for 1e-10). Writes JSON (``--out``).

Usage::

    python scripts/bench_nystroem_cluster.py                      # n = 2e6, M = 1,000
    python scripts/bench_nystroem_cluster.py --n 2e4 --M 200      # a smoke run (< 1 min)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# scripts/ is on sys.path when a benchmark runs as a script
from _bench import (
    LoadTimer,
    RSSSampler,
    dispatch_measurement,
    load_text,
    machine_info,
    measurement_runner,
    process_cluster,
    write_json,
)

GAMMA, D, RELATIVE_ALPHAS, TOL = 0.5, 10, [1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1], 1e-6


def _estimator(M: int, n: int, max_iter: int):
    from bigkernel import NystroemRidge

    alphas = [a * n for a in RELATIVE_ALPHAS]
    return NystroemRidge(gamma=GAMMA, n_components=M, landmarks="uniform", alpha=alphas, solver="cg", tol=TOL,
                         max_iter=max_iter, random_state=0)  # fmt: skip


def _kill_when_running(client, prefix: str, after: float, out: dict, done) -> None:
    """SIGKILL the worker processing a ``prefix`` task, ``after`` seconds from now at the
    earliest; give up when ``done`` (a threading.Event: the fit ended first) is set."""
    import signal

    pids, t0 = client.run(os.getpid), time.monotonic()
    if done.wait(after):
        return
    while not done.is_set():
        for worker, keys in client.processing().items():
            if any(str(k).startswith(prefix) for k in keys):
                os.kill(pids[worker], signal.SIGKILL)
                out["killed_at_s"], out["killed_pid"] = time.monotonic() - t0, pids[worker]
                return
        time.sleep(0.01)


def m_fit(path: str, mode: str, M: int, max_iter: int, coef_path: str, kill_after: float) -> dict:
    """One fit of the store on the threaded scheduler or a 2-process LocalCluster."""
    import threading

    import dask
    import numpy as np

    from bigkernel import open_source

    src = open_source(path)
    n = int(src.X.shape[0])
    est = _estimator(M, n, max_iter)
    out: dict = {"mode": mode, "n": n, "M": M}
    if mode == "threads":
        with RSSSampler() as rss, dask.config.set(scheduler="threads", num_workers=2), LoadTimer() as t:
            est.fit(src.X, src.y)
    else:
        with process_cluster(2, out) as (rss, client):
            killer, done = None, threading.Event()
            if mode == "cluster-kill":
                killer = threading.Thread(
                    target=_kill_when_running, args=(client, "falkon-block", kill_after, out, done)
                )
                killer.start()
            with LoadTimer() as t:
                est.fit(src.X, src.y)
            if killer is not None:
                done.set()
                killer.join()
                out["worker_replaced"] = out.get("killed_pid") not in client.run(os.getpid).values()
    np.save(coef_path, np.asarray(est.coef_))
    info = est.solver_info_
    out.update(fit_s=t.seconds, others_cpu_s=t.others_cpu_s, load_1min=t.load, peak_rss_gb=rss.peak / 1e9,
               alpha=float(est.alpha_), n_iter=int(est.n_iter_), passes=int(info["passes"]),
               preconditioner_rows=int(info["preconditioner_rows"]), data_in_memory=bool(info["data_in_memory"]),
               converged=bool(info["converged"]))  # fmt: skip
    return out


MEASUREMENTS = {"fit": m_fit}
run = measurement_runner(__file__, env=dict(os.environ), on_error="exit")


def _table(rows: list[dict]) -> str:
    head = f"{'mode':14s} {'fit s':>8s} {'passes':>6s} {'α':>9s} {'peak RSS GB':>11s} {'coef rel diff':>13s}  notes"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['mode']:14s} ERROR {r['error']}")
            continue
        diff = r.get("coef_rel_diff")
        notes = f"others took {r['others_cpu_s']:.0f} CPU s; preconditioner rows {r['preconditioner_rows']:,}"
        if "killed_pid" in r:
            notes += f"; worker pid {r['killed_pid']} SIGKILLed, replaced: {r.get('worker_replaced')}"
        elif r["mode"] == "cluster-kill":
            notes += "; NO worker was killed (the fit ended first: lower --kill-after)"
        lines.append(f"{r['mode']:14s} {r['fit_s']:8.1f} {r['passes']:6d} {r['alpha']:9.3g} {r['peak_rss_gb']:11.2f} "
                     f"{'—' if diff is None else format(diff, '13.1e'):>13s}  {notes}")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    if dispatch_measurement(MEASUREMENTS):
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=float, default=2e6)
    p.add_argument("--M", type=int, default=1000)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--kill-after", type=float, default=5.0, help="cluster-kill: seconds into the fit at the earliest")
    p.add_argument("--data-dir", default="bench_results/data")
    p.add_argument("--out", default="bench_results/bench_nystroem_cluster.json")
    args = p.parse_args()

    import numpy as np

    from bigkernel.data.synthetic import SyntheticSpec, make_data

    n = int(args.n)
    os.makedirs(args.data_dir, exist_ok=True)
    path = os.path.join(args.data_dir, f"friedman1_{n}.zarr")
    load0, t0 = load_text(), time.perf_counter()
    make_data(SyntheticSpec("friedman1", n, D, 1.0, 0), path, chunk_rows=131_072)
    rows = []
    for mode in ("threads", "cluster", "cluster-kill"):
        coef = os.path.join(args.data_dir, f"coef_{mode}.npy")
        r = run("fit", path=path, mode=mode, M=args.M, max_iter=args.max_iter, coef_path=coef,
                kill_after=args.kill_after)  # fmt: skip
        r.setdefault("mode", mode)
        if "error" not in r and rows and "error" not in rows[0]:
            a, ref = np.load(coef), np.load(os.path.join(args.data_dir, "coef_threads.npy"))
            r["coef_rel_diff"] = float(np.abs(a - ref).max() / np.abs(ref).max())
            r["same_alpha"] = r["alpha"] == rows[0]["alpha"]
        rows.append(r)
        print(_table(rows[-1:]).splitlines()[-1], flush=True)
    result = {"rows": rows, "total_s": time.perf_counter() - t0, "load_average": [load0, load_text()],
              "argv": sys.argv[1:], "machine": machine_info()}  # fmt: skip
    write_json(args.out, result)
    print("\n" + _table(rows))
    print(f"\nwrote {args.out} ({result['total_s']:.0f}s; load average {load0} → {load_text()})")


if __name__ == "__main__":
    main()
