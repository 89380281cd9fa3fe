"""Does the bootstrap band mean what it says? (issue 4, item 7)

On the 1-D sine problem y = sin(2πx) + noise, x ~ U(0, 1), compare

* the bootstrap percentile band from ONE data set of size n (B replicates), with
* the lecture's "hypothetical" band: fit the same estimator (same feature map, same α) on R
  fresh data sets of size n and take the same percentiles of the R predictions per point,

and print the ratio of their mean widths (target at n = 500, B = 500: within [0.8, 1.25]).
It also reports the pointwise coverage of the true function by the bootstrap band, for
information (a percentile band of a biased smoother is not built to cover f).

Example::

    python scripts/bootstrap_coverage.py --n 500 --B 500 --R 500 --out coverage.json
    python scripts/bootstrap_coverage.py --solver exact --out coverage_exact.json

``--solver`` picks the estimator: ``random_features`` (D features), ``exact`` (the exact rbf
kernel ridge, weighted CG per replicate) or ``nystroem`` (D landmarks, drawn once from the
bootstrapped data set and reused by the fresh fits: the same fixed map).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time

import numpy as np


def sine_data(n: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("sine", n, 1, noise, seed), 0, n)
    return a[:, :1], a[:, 1]


def coverage_experiment(
    n: int = 500,
    B: int = 500,
    R: int = 500,
    noise: float = 0.3,
    D: int = 200,
    alpha: float = 1.0,
    length_scale: float = 0.1,
    n_eval: int = 101,
    confidence_level: float = 0.9,
    seed: int = 0,
    store: str | None = None,
    solver: str = "random_features",
) -> dict:
    """Run the comparison; returns widths, their ratio and the coverage of f."""
    import dask
    from threadpoolctl import threadpool_limits

    from bigkernel import ExactKernelRidge, NystroemRidge, RandomFeatureRidge
    from bigkernel.bands.bootstrap import bootstrap
    from bigkernel.data.synthetic import true_function
    from bigkernel.numerics.resample import percentile_band

    X_eval = np.linspace(0.0, 1.0, n_eval)[:, np.newaxis]
    X, y = sine_data(n, noise, seed)
    if solver == "exact":

        def estimator():
            return ExactKernelRidge(length_scale=length_scale, alpha=alpha, random_state=seed)
    elif solver == "nystroem":
        # the landmarks are drawn once (from the bootstrapped data set) and kept for every fit
        ny = NystroemRidge(length_scale=length_scale, n_components=D, alpha=alpha, random_state=seed).fit(X, y)

        def estimator():
            return _FixedMap(ny)
    else:

        def estimator():
            # one fixed feature map (random_state) for the bootstrap and every fresh fit
            return RandomFeatureRidge(length_scale=length_scale, n_components=D, alpha=alpha, random_state=seed)

    own = store is None
    store = store or os.path.join(tempfile.mkdtemp(prefix="bootstrap-coverage-"), "bs.zarr")
    try:
        t0 = time.perf_counter()
        # Many tiny problems: one BLAS thread per task (multi-threaded BLAS on a 100x100 system
        # is ~10x slower on a busy machine), the dask threads give the parallelism.
        with dask.config.set(scheduler="threads", num_workers=os.cpu_count()), threadpool_limits(1):
            res = bootstrap(
                estimator() if solver != "nystroem" else ny,
                X,
                y,
                X_eval,
                n_bootstraps=B,
                confidence_level=confidence_level,
                random_state=seed + 1,
                store=store,
            )
            t_boot = time.perf_counter() - t0
            t0 = time.perf_counter()
            fresh = np.stack([estimator().fit(*sine_data(n, noise, seed + 1000 + i)).predict(X_eval) for i in range(R)])
            t_fresh = time.perf_counter() - t0
        fresh_band = percentile_band(fresh, confidence_level)
        f = true_function("sine", X_eval)
        w_boot, w_fresh = res.upper - res.lower, fresh_band.upper - fresh_band.lower
    finally:
        if own:
            shutil.rmtree(os.path.dirname(store), ignore_errors=True)
    return {
        "params": {
            "solver": solver,
            "n": n,
            "B": B,
            "R": R,
            "noise": noise,
            "D": D,
            "alpha": alpha,
            "length_scale": length_scale,
            "n_eval": n_eval,
            "confidence_level": confidence_level,
            "seed": seed,
        },
        "mean_width_bootstrap": float(w_boot.mean()),
        "mean_width_fresh": float(w_fresh.mean()),
        "width_ratio": float(w_boot.mean() / w_fresh.mean()),
        "pointwise_width_ratio_quantiles": {
            q: float(v) for q, v in zip(("5%", "50%", "95%"), np.percentile(w_boot / w_fresh, [5, 50, 95]))
        },
        "bootstrap_band_covers_f": float(np.mean((res.lower <= f) & (f <= res.upper))),
        "fresh_band_covers_f": float(np.mean((fresh_band.lower <= f) & (f <= fresh_band.upper))),
        "seconds": {"bootstrap": t_boot, "fresh_fits": t_fresh},
    }


class _FixedMap:
    """A fitted NystroemRidge refitted on new data with its landmarks kept (fresh fits)."""

    def __init__(self, fitted) -> None:
        self.fitted = fitted

    def fit(self, X, y):
        from sklearn.linear_model import Ridge

        fm = self.fitted.feature_map_
        self.ridge = Ridge(alpha=self.fitted.alpha).fit(fm.transform(X), y)
        return self

    def predict(self, X):
        return self.ridge.predict(self.fitted.feature_map_.transform(X))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description="Bootstrap band width vs fresh-sample band width on the 1-D sine problem.")
    ap.add_argument("--n", type=int, default=500, help="data set size")
    ap.add_argument("--B", type=int, default=500, help="bootstrap replicates")
    ap.add_argument("--R", type=int, default=500, help="fresh data sets")
    ap.add_argument("--noise", type=float, default=0.3, help="noise standard deviation")
    ap.add_argument("--solver", choices=["random_features", "exact", "nystroem"], default="random_features")
    ap.add_argument("--D", type=int, default=200, help="random features (Nyström: landmarks)")
    ap.add_argument("--alpha", type=float, default=1.0, help="ridge penalty (fixed)")
    ap.add_argument("--length-scale", type=float, default=0.1, help="rbf length scale")
    ap.add_argument("--n-eval", type=int, default=101, help="evaluation points on [0, 1]")
    ap.add_argument("--confidence-level", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    out = coverage_experiment(
        n=args.n,
        B=args.B,
        R=args.R,
        noise=args.noise,
        D=args.D,
        alpha=args.alpha,
        length_scale=args.length_scale,
        n_eval=args.n_eval,
        confidence_level=args.confidence_level,
        seed=args.seed,
        solver=args.solver,
    )
    out["command"] = "python scripts/bootstrap_coverage.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(
        f"solver={args.solver} n={args.n} B={args.B} R={args.R} noise={args.noise} D={args.D} alpha={args.alpha} "
        f"length_scale={args.length_scale}"
    )
    print(
        f"mean band width  bootstrap: {out['mean_width_bootstrap']:.4f}   fresh samples: {out['mean_width_fresh']:.4f}"
    )
    print(f"width ratio (bootstrap / fresh): {out['width_ratio']:.3f}   target [0.8, 1.25]")
    print(
        f"share of points where the band covers f: bootstrap "
        f"{out['bootstrap_band_covers_f']:.2f}, fresh {out['fresh_band_covers_f']:.2f}"
    )
    print(f"time: bootstrap {out['seconds']['bootstrap']:.1f} s, fresh fits {out['seconds']['fresh_fits']:.1f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
