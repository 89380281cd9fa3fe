"""Probe (session 12, issue 21): does the held-out score of the chosen Nyström cg column match the returned model?

Fits NystroemRidge(solver="cg") on diamonds (the bench's data, γ, split) and compares, per α, the
tracked held-out predictions, K_v β, K_v Σ sᵢUᵢ, predict, and the test RMSE; saves β to --out.
Run from the repository root: ``PYTHONPATH=$PWD python scripts/probe_cg_m8k.py --m 8000 --alphas 1e-5 ... 1e-1``.
"""
# ruff: noqa: B007  (a probe)

import argparse
import json
import logging
import sys
import time

import numpy as np

sys.path.insert(0, "scripts")
import dask
from _bench import load_diamonds

import bigkernel.solvers.nystroem_cg as ncg
from bigkernel import NystroemRidge
from bigkernel.numerics.splits import HoldoutSplit
from bigkernel.validation import int_seed

p = argparse.ArgumentParser()
p.add_argument("--m", type=int, default=8000)
p.add_argument("--alphas", type=float, nargs="*", default=[1e-5, 1e-3])
p.add_argument("--max-iter", type=int, default=100)
p.add_argument("--n-train", type=int, default=0)
p.add_argument("--dtype", default="float64")
p.add_argument("--out", default="/tmp/m8k_probe.npz")
a = p.parse_args()
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

CAP = {}
orig_solve = ncg.falkon_solve


def wrapped(gram, rhs, prec, alphas, *, step_hook=None, **kw):
    acc = np.zeros_like(rhs)
    last = {}

    def g(U):
        last["U"] = U
        return gram(U)

    def h(active, steps):
        acc[:, active] += last["U"] * steps
        if step_hook is not None:
            step_hook(active, steps)

    res = orig_solve(g, rhs, prec, alphas, step_hook=h, **kw)
    CAP.update(acc=acc, beta=res.beta.copy(), prec=prec, res=res)
    return res


ncg.falkon_solve = wrapped
orig_scores = ncg._CGRun._held_out_scores


def scores(self, held, intercept):
    CAP.update(held_pred=self.held_pred.copy(), intercept=intercept.copy(), held=held.copy())
    return orig_scores(self, held, intercept)


ncg._CGRun._held_out_scores = scores

d = load_diamonds()
X, y = d["X_train"], d["y_train"]
if a.n_train:
    keep = np.random.default_rng(2).choice(len(y), a.n_train, replace=False)
    X, y = X[keep], y[keep]
est = NystroemRidge(
    gamma=0.01,
    n_components=a.m,
    alpha=a.alphas,
    landmarks="uniform",
    random_state=0,
    solver="cg",
    tol=1e-6,
    max_iter=a.max_iter,
    dtype=a.dtype,
)
t = time.perf_counter()
with dask.config.set(scheduler="threads", num_workers=2):
    est.fit(X, y)
fit_s = time.perf_counter() - t
best = int(np.argmin(est.validation_scores_))
split = HoldoutSplit(int_seed(0) ^ ncg.HOLDOUT_SEED_SALT, 0.1)
hv = split.groups(0, len(y)) == 1
Xv, yv = X[hv], y[hv]
assert np.allclose(CAP["held"][:, 0], yv), "held-out rows differ"
out = {
    "fit_s": fit_s,
    "alpha": est.alpha_,
    "val_scores": np.ravel(est.validation_scores_).tolist(),
    "iters": [int(np.argmax(c <= 1e-6)) if np.any(c <= 1e-6) else None for c in est.residuals_.T],
}
fm = est.feature_map_
Kv = fm.transform_unscaled(Xv) if hasattr(fm, "transform_unscaled") else None
for j, al in enumerate(est.alphas_):
    b = CAP["intercept"][j, 0]
    tracked = CAP["held_pred"][:, j] + b
    beta, acc = CAP["beta"][:, j], CAP["acc"][:, j]
    direct = Kv @ beta + b
    via_acc = Kv @ acc + b
    r = {
        "alpha": float(al),
        "mse_tracked": float(np.mean((tracked - yv) ** 2)),
        "mse_direct_beta": float(np.mean((direct - yv) ** 2)),
        "mse_direct_acc": float(np.mean((via_acc - yv) ** 2)),
        "beta_norm": float(np.linalg.norm(beta)),
        "beta_abs_sum": float(np.abs(beta).sum()),
        "beta_vs_acc_rel": float(np.linalg.norm(beta - acc) / np.linalg.norm(beta)),
        "max_abs_Kv_absbeta": float(np.max(np.abs(Kv) @ np.abs(beta))),
        "resid_final": float(est.residuals_[-1, j]),
    }
    out[f"col{j}"] = r
pv = est.predict(Xv)
pt = est.predict(d["X_test"])
out["chosen"] = {
    "mse_predict_heldout": float(np.mean((pv - yv) ** 2)),
    "test_rmse": float(np.sqrt(np.mean((pt - d["y_test"]) ** 2))),
    "max_pred_diff_tracked_vs_predict": float(
        np.max(np.abs(pv - (CAP["held_pred"][:, best] + CAP["intercept"][best, 0])))
    ),
}
Kt = fm.transform_unscaled(d["X_test"])
for j, al in enumerate(est.alphas_):
    b = CAP["intercept"][j, 0]
    out[f"col{j}"]["test_rmse_beta"] = float(np.sqrt(np.mean((Kt @ CAP["beta"][:, j] + b - d["y_test"]) ** 2)))
    out[f"col{j}"]["test_rmse_acc"] = float(np.sqrt(np.mean((Kt @ CAP["acc"][:, j] + b - d["y_test"]) ** 2)))
print(json.dumps(out, indent=1))
np.savez(
    a.out,
    beta=CAP["beta"],
    acc=CAP["acc"],
    held_pred=CAP["held_pred"],
    intercept=CAP["intercept"],
    landmarks=np.asarray(fm.landmarks),
    hv=hv,
    resid=est.residuals_,
)
