"""The float32 check of ``dtype="auto"`` against the measured float32-vs-float64 differences.

For each case the same ``RandomFeatureRidge`` (same seed, α) is fitted with float32 features
and with float64 features; the differences of the predictions (held-out rows of the same
distribution), of the posterior standard deviation and of df are measured and set beside the
estimates of :func:`bigkernel.numerics.precision.float32_check` (the ``dtype="auto"`` fit's
``dtype_check_``). ``ratio`` = estimate ÷ measured: at least 1 means the estimate bounded the
difference; the check wants it not far above 1 on realistic cases (a second float64 pass is
2.3–2.7× the cost of the fit). ``used`` says which dtype ``dtype="auto"`` ended with.

Cases:

- ``friedman``: Friedman #1 (d = 10, the data of ``bench_rff.py``) with the default parameters
  (γ = 1/d, α = 1: where the previous estimate reached its tolerance near n = 2.5M), with α by
  GCV, and standardized with γ = 0.5 and α by GCV; n and D from the command line;
- ``table``: the user table of the acceptance job (/tmp/accept/table.csv, or made here by the
  same recipe: 8 numeric columns on raw scales, a string column, target first), γ = 0.1,
  D = 512, α by GCV, standardized, 80 % of the rows;
- ``diamonds``: the diamonds table (``_bench.load_diamonds``, needs plotnine), γ = 0.05,
  D = 1024, α by GCV;
- ``sine``: the 1-d sine of tests/test_default_dtype.py, γ ∈ {0.5, 10, 1000}, α from 1 to
  1e-9 (ill-conditioned: the check must switch to float64 where float32 is off);
- ``sparse``: sparse X (CSR, 4,000 rows of k random columns among d, N(0, 1) values,
  y = sin(X w) + 0.1 ε; new rows likewise), the cases of :data:`SPARSE` (the check probes the
  map with sparse rows of the data's mean stored entries).

Usage::

    python scripts/bench_dtype_check.py --cases sine table diamonds friedman --n 100000 400000 \\
        --out bench_results/dtype_check.json
    python scripts/bench_dtype_check.py --table bench_results/dtype_check.json   # the markdown table
"""

from __future__ import annotations

import argparse
import logging
import os
import time

import numpy as np
from _bench import load_text, machine_info, write_json

from bigkernel.numerics.precision import SPREAD

logger = logging.getLogger("bench_dtype_check")


#: the Friedman fits (besides n_components)
FRIEDMAN = [{}, {"alpha": "gcv"}, {"gamma": 0.5, "standardize": True, "alpha": "gcv"}]


#: the sparse fits: (d, stored entries a row, γ, α, D)
SPARSE = [(2000, 20, 0.05, "gcv", 256), (5000, 5, 0.2, "gcv", 256), (5000, 5, 0.2, 1e-3, 256),
          (20_000, 10, 0.5, "gcv", 512)]  # fmt: skip


def _sparse(n: int, d: int, k: int, rng: np.random.Generator):
    """CSR of n rows with k stored N(0, 1) entries each, in distinct random columns."""
    import scipy.sparse as sp

    cols = np.concatenate([np.sort(rng.choice(d, size=k, replace=False)) for _ in range(n)])
    return sp.csr_matrix((rng.standard_normal(cols.size), cols, np.arange(n + 1) * k), shape=(n, d))


def _friedman(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", n, 10, 1.0, seed), 0, n)
    return a[:, :10], a[:, 10]


def _table(path: str = "/tmp/accept/table.csv") -> tuple[np.ndarray, np.ndarray]:
    """The acceptance table's training rows (80 %), encoded as the job does (one-hot city,
    missing values imputed by the column mean)."""
    import pandas as pd

    from bigkernel import TableEncoder

    frame = pd.read_csv(path) if os.path.exists(path) else _make_table(200_000)
    cols = ["age", "income", "rooms", "dist", "score", "tenure", "ratio", "temp", "city"]
    X = np.array(TableEncoder(categorical="auto").fit_transform(frame[cols]), dtype=np.float64)
    X = np.where(np.isnan(X), np.nanmean(X, axis=0), X)
    y = frame["y"].to_numpy(dtype=np.float64)
    keep = np.random.default_rng(0).permutation(len(y))[: int(0.8 * len(y))]
    return X[keep], y[keep]


def _make_table(n: int):
    """The acceptance table's recipe (/tmp/accept/gen.py)."""
    import pandas as pd

    rng = np.random.default_rng(0)
    age, income = rng.uniform(18, 80, n), rng.lognormal(10, 0.5, n)
    rooms, dist = rng.integers(1, 8, n).astype(float), rng.exponential(5, n)
    score, tenure, ratio, temp = (
        rng.normal(600, 80, n),
        rng.uniform(0, 30, n),
        rng.uniform(0, 1, n),
        rng.normal(15, 8, n),
    )
    city = rng.choice(["Paris", "Lyon", "Nice", "Lille"], n, p=[0.4, 0.3, 0.2, 0.1])
    eff = pd.Series(city).map({"Paris": 2.0, "Lyon": 1.0, "Nice": 0.5, "Lille": -1.0}).to_numpy()
    y = (np.sin(age / 10) + np.log(income) / 3 + 0.3 * rooms - 0.1 * dist + (score - 600) / 100
         + np.cos(tenure / 5) + ratio**2 + 0.05 * temp + eff + rng.normal(0, 0.3, n))  # fmt: skip
    return pd.DataFrame(dict(y=y, city=city, age=age, income=income, rooms=rooms, dist=dist, score=score,
                             tenure=tenure, ratio=ratio, temp=temp))  # fmt: skip


def _sine(n: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 10, (n, 1))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)


def measure(name: str, X, y, E, params: dict) -> dict:
    """Fit auto, float32 and float64; the check's estimates and the measured differences."""
    from bigkernel import RandomFeatureRidge
    from bigkernel.errors import DataError

    t0 = time.perf_counter()
    auto = RandomFeatureRidge(random_state=0, **params).fit(X, y)
    t_auto = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = RandomFeatureRidge(random_state=0, dtype="float64", **params).fit(X, y)
    t64 = time.perf_counter() - t0
    f32 = auto if auto.dtype_ == "float32" else RandomFeatureRidge(random_state=0, dtype="float32", **params).fit(X, y)
    sd = float(np.std(y))
    mu, mu64 = f32.predict(E), ref.predict(E)
    S = E[: min(E.shape[0], 2000)]
    std64 = ref.predict(S, return_std=True)[1]
    try:
        std = f32.predict(S, return_std=True)[1]
        rel = np.abs(std - std64) / std64
        std_diff, std_q = float(np.max(rel)), float(np.quantile(rel, 0.999))
    except DataError:  # float32's σ² below its rounding
        std_diff = std_q = float("inf")
    check = auto.dtype_check_ or {}
    at64 = np.nan  # refitted: float32 features at float64's α, against float64 (what the refit avoided)
    if auto.dtype_ == "float64" and not np.isclose(f32.alpha_, ref.alpha_, rtol=1e-6):
        fixed = {**params, "alpha": float(ref.alpha_)}
        forced = RandomFeatureRidge(random_state=0, dtype="float32", **fixed).fit(X, y)
        at64 = float(np.max(np.abs(forced.predict(E) - mu64)) / sd)
    diff = np.abs(mu - mu64)
    row = {
        "case": name, **{k: (v if isinstance(v, (int, float, str)) else str(v)) for k, v in params.items()},
        "n": len(y), "used": auto.dtype_, "alpha": float(f32.alpha_),
        "alpha64": float(ref.alpha_), "df64": float(ref.df_),
        "mean_max": float(diff.max() / sd), "mean_rms": float(np.sqrt(np.mean(diff**2)) / sd),
        "mean_q999": float(np.quantile(diff, 0.999) / sd), "std_q999": std_q,
        "std_max": std_diff, "mean_max_at_alpha64": at64, "df_diff": float(abs(f32.df_ - ref.df_)),
        "est_mean": check.get("mean_error", np.nan), "est_std": check.get("std_error", np.nan),
        "est_df": check.get("df_error", np.nan), "fit_auto_s": t_auto, "fit_f64_s": t64,
    }  # fmt: skip
    row["ratio_mean"] = row["est_mean"] / max(row["mean_max"], 1e-300)
    row["ratio_std"] = row["est_std"] / max(row["std_max"], 1e-300)
    row["ratio_mean_rms"] = row["est_mean"] / SPREAD / max(row["mean_rms"], 1e-300)
    row["ratio_mean_q999"] = row["est_mean"] / max(row["mean_q999"], 1e-300)
    row["ratio_df"] = row["est_df"] / max(row["df_diff"], 1e-300)
    logger.info(_line(row))
    return row


def _line(r: dict) -> str:
    gamma = r.get("gamma", "")
    what = f"{r['case']:9s} n={r['n']:>8,} D={r.get('n_components', ''):>5} γ={gamma!s:>6} α={r['alpha']:9.3g}"
    return (
        f"{what} {r['used']:7s} mean {r['mean_max']:8.2e} est {r['est_mean']:8.2e} ×{r['ratio_mean']:7.1f} | "
        f"std {r['std_max']:8.2e} est {r['est_std']:8.2e} ×{r['ratio_std']:7.1f} | "
        f"df {r['df_diff']:8.2e} est {r['est_df']:8.2e}"
    )


def markdown(rows: list[dict]) -> str:
    """The rows as the table of docs/benchmarks.md."""
    head = (
        "| case | n | D | γ | α | auto used | max \\|Δμ\\|/sd(y) | estimate | ÷ max | ÷ 99.9 % | "
        "max Δstd/std | estimate | ÷ max | \\|Δdf\\| | estimate |"
    )
    lines = [head, "|" + "---|" * 15]
    for r in rows:
        gamma = r.get("gamma", "1/d")
        alpha = f"{r['alpha']:.3g}"
        if not np.isclose(r["alpha"], r["alpha64"], rtol=1e-6):  # float32's GCV chose another α
            alpha += f" (float64: {r['alpha64']:.3g})"
        lines.append(
            f"| {r['case']} | {r['n']:,} | {r.get('n_components', '')} | {gamma} | {alpha} | {r['used']} | "
            f"{r['mean_max']:.2e} | {r['est_mean']:.2e} | {r['ratio_mean']:.1f} | {r['ratio_mean_q999']:.1f} | "
            f"{r['std_max']:.2e} | {r['est_std']:.2e} | {r['ratio_std']:.1f} | {r['df_diff']:.1e} | {r['est_df']:.1e} |"
        )
    return "\n".join(lines)


def run_cases(cases: list[str], ns: list[int], Ds: list[int], configs: list[int]) -> list[dict]:
    rows = []
    if "sine" in cases:
        X, y = _sine()
        E = np.linspace(0, 10, 2001)[:, None]
        for gamma in (0.5, 10.0, 1000.0):
            for alpha in (1.0, 1e-3, 1e-6, 1e-9):
                rows.append(measure("sine", X, y, E, dict(gamma=gamma, alpha=alpha, n_components=512)))
    if "table" in cases:
        X, y = _table()
        E = X[np.random.default_rng(1).choice(len(y), 20_000, replace=False)]
        rows.append(measure("table", X, y, E, dict(gamma=0.1, n_components=512, alpha="gcv", standardize=True)))
    if "diamonds" in cases:
        from _bench import load_diamonds

        d = load_diamonds()
        params = dict(gamma=0.05, n_components=1024, alpha="gcv", standardize=True)
        rows.append(measure("diamonds", d["X_train"], d["y_train"], d["X_test"], params))
    if "friedman" in cases:
        E = _friedman(20_000, 99)[0]
        for n in ns:
            X, y = _friedman(n, 0)
            for D in Ds:
                for params in (FRIEDMAN[i] for i in configs):
                    rows.append(measure("friedman", X, y, E, {**params, "n_components": D}))
    if "sparse" in cases:
        for d, k, gamma, alpha, D in SPARSE:
            rng = np.random.default_rng(0)
            X, E = _sparse(4000, d, k, rng), _sparse(1000, d, k, rng)
            y = np.sin(X @ rng.standard_normal(d)) + 0.1 * rng.standard_normal(4000)
            rows.append(measure(f"sparse d={d} k={k}", X, y, E, dict(gamma=gamma, alpha=alpha, n_components=D)))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=["sine", "table", "friedman"],
                   choices=["sine", "table", "diamonds", "friedman", "sparse"])  # fmt: skip
    p.add_argument("--n", nargs="+", type=lambda s: int(float(s)), default=[100_000, 400_000])
    p.add_argument("--D", nargs="+", type=int, default=[512])
    p.add_argument("--friedman-configs", nargs="+", type=int, default=[0, 1, 2], help="indices into FRIEDMAN")
    p.add_argument("--out", default=None)
    p.add_argument(
        "--table", nargs="+", default=None, help="print the markdown table of these JSON outputs, run nothing"
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("bigkernel").setLevel(logging.ERROR)
    if args.table:
        import json

        rows = [r for path in args.table for r in json.load(open(path))["rows"]]
        print(markdown(rows))
        return
    rows = run_cases(args.cases, args.n, args.D, args.friedman_configs)
    load = os.getloadavg()
    logger.info("load average %s", load_text(load))
    if args.out:
        write_json(args.out, {"rows": rows, "load_average": load, "machine": machine_info(), "argv": os.sys.argv[1:]})


if __name__ == "__main__":
    main()
