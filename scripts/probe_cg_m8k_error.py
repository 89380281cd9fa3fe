"""Probe (session 12): where is an early-stopped β's error function large? Compares the β saved by two
runs of scripts/probe_cg_m8k.py (/tmp/m8k_old.npz: early-stopped at α = 1e-5; /tmp/m8k_8000g.npz: converged)
on the training, held-out and test rows of diamonds."""
# ruff: noqa: UP031, E402  (a probe: percent formats, its imports after sys.path)

import sys

import numpy as np

sys.path.insert(0, "scripts")
from _bench import load_diamonds

import bigkernel.solvers.nystroem_cg as ncg
from bigkernel.kernels.factory import make_kernel
from bigkernel.numerics.splits import HoldoutSplit
from bigkernel.validation import int_seed

old, new = np.load("/tmp/m8k_old.npz"), np.load("/tmp/m8k_8000g.npz")
C = old["landmarks"]
assert np.array_equal(C, new["landmarks"])
d = load_diamonds()
X, y = d["X_train"], d["y_train"]
hv = HoldoutSplit(int_seed(0) ^ ncg.HOLDOUT_SEED_SALT, 0.1).groups(0, len(y)) == 1
k = make_kernel("rbf", gamma=0.01)
e = old["beta"][:, 0] - new["beta"][:, 0]
b_old, b_new = old["beta"][:, 0], new["beta"][:, 0]


def f(Z, v):
    return np.concatenate([k(Z[i : i + 4000], C) @ v for i in range(0, len(Z), 4000)])


# which rows are centres
key = {r.tobytes(): i for i, r in enumerate(C)}
is_c = np.array([r.tobytes() in key for r in X])
print("centres among training rows:", is_c.sum(), "of which held out:", (is_c & hv).sum())
tr = ~hv
fe_tr, fe_v, fe_t = f(X[tr], e), f(X[hv], e), f(d["X_test"], e)
fe_c = f(C, e)
rms = lambda a: float(np.sqrt(np.mean(a**2)))
print(
    "RMS of error function: train %.3g  held-out %.3g (centres %.3g, not %.3g)  test %.3g  at centres %.3g"
    % (rms(fe_tr), rms(fe_v), rms(fe_v[is_c[hv]]), rms(fe_v[~is_c[hv]]), rms(fe_t), rms(fe_c))
)
print("eᵀK_MM e = %.3g" % float(e @ f(C, e)))
# nearest-training-row distance of held-out vs test rows
from scipy.spatial import cKDTree

t = cKDTree(X[tr])
dv, _ = t.query(X[hv])
dt, _ = t.query(d["X_test"])
print(
    "NN distance to training rows: held-out median %.3g (zero: %d of %d), test median %.3g (zero: %d of %d)"
    % (np.median(dv), (dv == 0).sum(), hv.sum(), np.median(dt), (dt == 0).sum(), len(dt))
)
q = np.quantile(np.abs(fe_t), [0.5, 0.9, 0.99, 1.0])
print("test |err fn| quantiles", q)
q = np.quantile(np.abs(fe_v), [0.5, 0.9, 0.99, 1.0])
print("held |err fn| quantiles", q)
big = np.argsort(-np.abs(fe_t))[:5]
print("largest test errors at NN dist", dt[big], fe_t[big])
ib = old["intercept"][0, 0] - new["intercept"][0, 0]
print("intercept diff %.6g, -mean_train(fe) %.6g" % (ib, -fe_tr.mean()))
for name, fe in [("train", fe_tr), ("held", fe_v), ("test", fe_t)]:
    err = fe + ib
    print(
        name,
        "RMS pred diff old-new %.4g, quantiles %s" % (rms(err), np.quantile(np.abs(err), [0.5, 0.9, 0.99, 0.999, 1.0])),
    )
pt_old = f(d["X_test"], b_old) + old["intercept"][0, 0]
r = pt_old - d["y_test"]
print("old test RMSE %.4g; without the worst 10 rows %.4g" % (rms(r), rms(np.sort(np.abs(r))[:-10])))
w = np.argsort(-np.abs(r))[:10]
print("worst test rows: residual", r[w], "NN dist", dt[w])
print(np.round(d["X_test"][w[:3]], 2))
