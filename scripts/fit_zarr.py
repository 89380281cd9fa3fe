#!/usr/bin/env python
"""Fit RandomFeatureRidge on a zarr group (arrays X, y) without a YAML job, and save the model.

Usage: python scripts/fit_zarr.py DATA.zarr MODEL.zarr [--gamma 0.5] [--n-components 1024]
       [--alpha gcv] [--dtype float32] [--scheduler-address tcp://host:8786]
"""

import argparse
import logging

import bigkernel


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("model")
    p.add_argument("--gamma", type=float, default=None)
    p.add_argument("--n-components", type=int, default=1024)
    p.add_argument("--alpha", default="gcv", help="a number, or gcv")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--kernel", default="rbf")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scheduler-address", default=None, help="existing Dask scheduler; default: local threads")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    alpha = args.alpha if args.alpha == "gcv" else float(args.alpha)
    ds = bigkernel.open_source(args.data)
    est = bigkernel.RandomFeatureRidge(
        kernel=args.kernel,
        gamma=args.gamma,
        n_components=args.n_components,
        alpha=alpha,
        dtype=args.dtype,
        random_state=args.seed,
    )
    if args.scheduler_address:
        from distributed import Client

        with Client(args.scheduler_address):
            est.fit(ds.X, ds.y)
    else:
        est.fit(ds.X, ds.y)
    est.save(args.model)
    logging.getLogger("bigkernel").info("alpha=%.3g df=%.1f saved to %s", est.alpha_, est.df_, args.model)


if __name__ == "__main__":
    main()
