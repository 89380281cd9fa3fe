"""Sparse X in the classifiers (scipy.sparse CSR/CSC, sparray and spmatrix, dask arrays of
sparse chunks, a sparse .npz job source), as the regressors take it (tests/test_sparse.py).

Sparse and dense inputs must give the same decision values to rounding (1e-10 relative): the
sparse path multiplies the same numbers in another order. The hinge is the exception, not
because of sparsity: its linearly converging iteration amplifies rounding (dense X rechunked
differs by ~1e-7 too), so its passes are compared at one state and its fits by the duality-gap
bound of the solver.
"""

import json
import textwrap
import tracemalloc
import warnings

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

import bigkernel
from bigkernel import (
    ExactKernelClassifier,
    KernelClassifier,
    NystroemClassifier,
    RandomFeatureClassifier,
    RandomFeatureClassifierCV,
)
from bigkernel.errors import DataError, NonFiniteError
from bigkernel.graph.svm import svm_block_sums
from bigkernel.numerics.svm import SVMPassState

RTOL = 1e-10
N, D = 300, 40
LABELS = np.array(["ant", "bee", "cat"])


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = sp.random(N, D, density=0.1, format="csr", random_state=1, data_rvs=rng.standard_normal)
    X = sp.csr_matrix(X)
    X.data[::7] = np.abs(X.data[::7]) + 2.0  # some large entries
    Xd = X.toarray()
    score = Xd @ rng.standard_normal((D, 3)) + 0.3 * rng.standard_normal((N, 3))
    y3 = LABELS[np.argmax(score, axis=1)]
    y2 = np.where(score[:, 0] > np.median(score[:, 0]), "yes", "no")
    sw = rng.uniform(0.2, 2.0, N)
    return X, Xd, y2, y3, sw


def _rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


# the exact solvers run CG: a tolerance far below 1e-10 compares the solutions, not the paths
CLASSIFIERS = {
    "rff": RandomFeatureClassifier(gamma=0.05, n_components=60, alpha=0.1, random_state=0),
    "rff_sqhinge": RandomFeatureClassifier(
        gamma=0.05, n_components=60, alpha=0.1, loss="squared_hinge", tol=1e-12, random_state=0
    ),
    "nystroem": NystroemClassifier(n_components=40, alpha=0.1, random_state=0),
    "nystroem_laplacian_sqhinge": NystroemClassifier(
        "laplacian",
        gamma=0.05,
        n_components=40,
        landmarks="uniform",
        alpha=0.1,
        loss="squared_hinge",
        tol=1e-12,
        random_state=0,
    ),  # fmt: skip
    "exact": ExactKernelClassifier(alpha=0.1, tol=1e-13, random_state=0),
    "kernel": KernelClassifier(alpha=0.1, tol=1e-13, random_state=0),
    "rff_cv": RandomFeatureClassifierCV(gammas=[0.02, 0.1], alphas=[0.01, 1.0], cv=3, n_components=40, random_state=0),
}

CASES = (
    [(name, "csr_matrix", 3) for name in sorted(CLASSIFIERS)]
    + [(name, "csr_matrix", 2) for name in ("rff", "rff_sqhinge", "nystroem", "exact")]
    + [
        (name, kind, 3)
        for name in ("rff", "nystroem_laplacian_sqhinge", "exact")
        for kind in ("csr_array", "csc_matrix")
    ]
)


@pytest.mark.numerics
@pytest.mark.parametrize(("name", "kind", "k"), CASES)
def test_sparse_fit_equals_dense(data, name, kind, k):
    X, Xd, y2, y3, _ = data
    y = y2 if k == 2 else y3
    Xs = getattr(sp, kind)(X)
    dense, sparse = clone(CLASSIFIERS[name]).fit(Xd, y), clone(CLASSIFIERS[name]).fit(Xs, y)
    np.testing.assert_array_equal(sparse.classes_, np.unique(y))
    ref = dense.decision_function(Xd)
    assert ref.shape == ((N,) if k == 2 else (N, k))
    assert _rel(sparse.decision_function(Xs), ref) < RTOL
    # a sparse-fitted model takes dense rows, and the other way round
    assert _rel(sparse.decision_function(Xd), ref) < RTOL
    assert _rel(dense.decision_function(Xs), ref) < RTOL
    np.testing.assert_array_equal(sparse.predict(Xs), dense.predict(Xd))
    assert sparse.score(Xs, y) == dense.score(Xd, y) > 1 / k
    if name == "rff_cv":
        assert sparse.best_params_ == dense.best_params_
        np.testing.assert_allclose(
            sparse.cv_results_["mean_test_score"], dense.cv_results_["mean_test_score"], rtol=1e-12
        )


@pytest.mark.numerics
@pytest.mark.parametrize(
    ("name", "class_weight"),
    [("rff", "balanced"), ("rff_sqhinge", {"ant": 2.0, "cat": 0.5}), ("nystroem", "balanced"),
     ("exact", {"ant": 2.0, "cat": 0.5}), ("rff_cv", {"ant": 2.0, "cat": 0.5})],
)  # fmt: skip
def test_sparse_sample_and_class_weight_equal_dense(data, name, class_weight):
    """sample_weight times class weights (a dict of string labels, or "balanced")."""
    X, Xd, _, y, sw = data
    est = clone(CLASSIFIERS[name]).set_params(class_weight=class_weight)
    dense = clone(est).fit(Xd, y, sample_weight=sw)
    sparse = clone(est).fit(sp.csr_array(X), y, sample_weight=sw)
    np.testing.assert_array_equal(sparse.class_weight_, dense.class_weight_)
    assert _rel(sparse.decision_function(X), dense.decision_function(Xd)) < RTOL
    # the weights reach the sparse fit: unweighted, the decision values move
    plain = clone(CLASSIFIERS[name]).fit(X, y)
    assert _rel(plain.decision_function(X), dense.decision_function(Xd)) > 1e-4


@pytest.mark.numerics
@pytest.mark.parametrize("cls", [RandomFeatureClassifier, NystroemClassifier])
def test_svm_pass_sums_of_sparse_rows_equal_dense(data, cls):
    """One SVM pass (objective, gradients and Hessian sums at a grid of steps, both losses)
    reads the CSR rows as stored and gives the dense rows' sums; rows of weight 0 are skipped
    in both."""
    X, Xd, _, _, sw = data
    fmap = cls(n_components=24, random_state=0).fit(Xd, np.arange(N) % 2).feature_map_
    rng = np.random.default_rng(3)
    Dc, k = fmap.n_components, 3
    Y = np.where(rng.random((N, k)) < 0.5, 1.0, -1.0)
    c = np.where(np.arange(N) % 5 == 0, 0.0, sw)

    def weights(lo, hi):
        return c[np.newaxis, lo:hi]

    for loss in ("squared_hinge", "hinge"):
        state = SVMPassState(
            coef=rng.standard_normal((Dc, k)), intercept=rng.standard_normal(k),
            direction=rng.standard_normal((Dc, k)), direction_b=rng.standard_normal(k),
            steps=np.tile([0.0, 0.5, 1.0], (k, 1)), hess_step=np.array([0.5, np.nan, 1.0]),
            loss=loss, mu=np.full(k, 0.7),
        )  # fmt: skip
        kw = dict(dtype="float64", block_rows=64)
        start = 100  # a chunk that starts mid-way: sub-blocks at global multiples of block_rows
        dense = svm_block_sums(fmap, state, weights, Xd[start:], Y[start:], start, **kw)
        sparse = svm_block_sums(fmap, state, weights, X[start:], Y[start:], start, **kw)
        assert dense.weight == pytest.approx(c[start:].sum(), rel=1e-14)
        assert dense.n_curved.max() > 0 and np.abs(dense.hess).max() > 0
        for field in ("loss", "hinge", "lam", "lam2", "v", "hess", "hess_phi", "hess_c", "n_curved"):
            a, b = getattr(sparse, field), getattr(dense, field)
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max(), err_msg=f"{loss} {field}")


@pytest.mark.numerics
@pytest.mark.parametrize("cls", [RandomFeatureClassifier, NystroemClassifier])
def test_sparse_hinge_fit_within_the_gap_bound_of_dense(data, cls):
    """The hinge fit on sparse X meets tol, and its coefficients lie within the duality-gap
    bound ‖β − β*‖² ≤ gap·P/α of the dense fit's (each fit is that close to the optimum)."""
    X, Xd, _, y, sw = data
    alpha = 0.1
    est = cls(gamma=0.05, n_components=30, alpha=alpha, loss="hinge", tol=1e-5, max_iter=400, random_state=0)
    dense, sparse = clone(est).fit(Xd, y, sample_weight=sw), clone(est).fit(X, y, sample_weight=sw)
    assert sparse.converged_.all() and dense.converged_.all()
    for j in range(len(LABELS)):
        bound = sum(np.sqrt(m.dual_gap_[j] * m.estimator_.svm_.objective[j] / alpha) for m in (dense, sparse))
        gap = np.linalg.norm(sparse.coef_[j] - dense.coef_[j])
        assert gap <= bound, (j, gap, bound)
    assert np.mean(sparse.predict(X) == dense.predict(Xd)) >= 0.98


@pytest.mark.numerics
@pytest.mark.parametrize("name", ["rff", "rff_sqhinge", "nystroem", "exact", "rff_cv"])
def test_dask_of_sparse_chunks_equals_dense_dask(data, name):
    """dask arrays of CSR chunks (from_array(asarray=False) and map_blocks) with dask labels:
    the fit equals the fit on the dense dask array, and decision_function/predict stay lazy."""
    X, Xd, _, y, _ = data
    rows = 128
    dense = da.from_array(Xd, chunks=(rows, D))
    yk = da.from_array(y, chunks=rows)
    ref = clone(CLASSIFIERS[name]).fit(dense, yk)
    by_slices = da.from_array(X, chunks=(rows, D), asarray=False)
    by_blocks = dense.map_blocks(sp.csr_matrix, dtype=Xd.dtype, meta=sp.csr_matrix((0, D)))
    for Xk in (by_slices, by_blocks):
        assert isinstance(Xk._meta, sp.csr_matrix)
        est = clone(CLASSIFIERS[name]).fit(Xk, yk)
        dec, pred = est.decision_function(Xk), est.predict(Xk)
        assert isinstance(dec, da.Array) and isinstance(pred, da.Array)
        assert _rel(dec.compute(), ref.decision_function(Xd)) < RTOL
        np.testing.assert_array_equal(pred.compute(), ref.predict(Xd))


@pytest.mark.numerics
def test_standardize_scales_sparse_without_centring(data):
    """standardize=True on sparse X divides by the column standard deviations without centring
    (X stays sparse), for both losses: the model is the dense fit on X / std."""
    X, Xd, _, y, _ = data
    std = Xd.std(axis=0)
    std[std == 0] = 1.0
    for loss in ("squared_error", "squared_hinge"):
        kw = dict(gamma=0.05, n_components=40, alpha=0.1, loss=loss, tol=1e-12, random_state=0)
        sparse = RandomFeatureClassifier(**kw, standardize=True).fit(X, y)
        np.testing.assert_array_equal(sparse.estimator_.scaler_mean_, 0.0)
        ref = RandomFeatureClassifier(**kw).fit(Xd / std, y)
        assert _rel(sparse.decision_function(X), ref.decision_function(Xd / std)) < RTOL


@pytest.mark.parametrize("name", ["exact", "nystroem_laplacian_sqhinge"])
def test_sparse_model_saved_as_csr_and_loaded(data, tmp_path, name):
    X, _, _, y, _ = data
    est = clone(CLASSIFIERS[name]).fit(X, y)
    path = est.save(tmp_path / "m.zarr")
    import zarr

    keys = set(zarr.open_group(path, mode="r").array_keys())
    stored = "X_fit" if name == "exact" else "nystroem_landmarks"
    assert stored not in keys and f"{stored}_csr_data" in keys  # no dense copy of the points
    loaded = bigkernel.load(path)
    assert type(loaded) is type(est)
    np.testing.assert_array_equal(loaded.decision_function(X), est.decision_function(X))
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))


def test_sparse_classifier_fits_never_densify():
    """The classifiers' passes (least squares, the SVM's Newton passes, the CV's two passes)
    and prediction on sparse X hold O(nnz) + one feature block: with n × d = 1024 × 40,000 a
    dense copy of X (328 MB) — or of a few hundred rows — would dominate tracemalloc's peak,
    which must stay below 25 MB (the feature map's d × D weights are 5 MB)."""
    n, d, Dc = 1024, 40_000, 16
    rng = np.random.default_rng(5)
    X = sp.random(n, d, density=2e-4, format="csr", random_state=6, data_rvs=rng.standard_normal)
    y = LABELS[rng.integers(0, 3, n)]
    X_bytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    dense_bytes = n * d * 8
    kw = dict(n_components=Dc, random_state=0, chunk_rows=256)
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # noise labels: only memory is measured
            RandomFeatureClassifier(**kw).fit(X, y).predict(X)
            RandomFeatureClassifier(**kw, loss="squared_hinge", max_iter=3).fit(X, y).decision_function(X)
            NystroemClassifier(**kw, landmarks="uniform", loss="hinge", max_iter=3).fit(X, y).predict(X)
            RandomFeatureClassifierCV(**kw, gammas=[0.5], alphas=[1.0], cv=2).fit(X, y).predict(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    weights = d * Dc * 8  # the feature map itself (d × D)
    assert peak < 25e6, f"peak {peak / 1e6:.1f} MB (X sparse {X_bytes / 1e6:.2f} MB, dense {dense_bytes / 1e6:.0f} MB)"
    assert peak < 3 * weights + 20 * X_bytes + 8e6
    assert peak < dense_bytes / 15


def test_nonfinite_in_sparse_rows_named(data):
    X, _, _, y, _ = data
    bad = X.copy()
    bad.data[bad.indptr[123]] = np.nan  # first stored entry of row 123
    for est in (RandomFeatureClassifier(n_components=10), RandomFeatureClassifier(n_components=10, loss="hinge")):
        with pytest.raises(NonFiniteError, match="first at row 123"):
            est.fit(bad, y)


def test_paths_without_sparse_support_say_so(data):
    """What the regressors refuse on sparse X the classifiers refuse with the same error."""
    X, Xd, _, y, _ = data
    for loss in ("squared_error", "hinge"):
        with pytest.raises(DataError, match="polynomial random-feature map does not take sparse X.*NystroemRidge"):
            RandomFeatureClassifier("polynomial", degree=2, n_components=20, loss=loss).fit(X, y)
    for est in (ExactKernelClassifier("chi2"), KernelClassifier("chi2")):
        with pytest.raises(DataError, match="chi2 kernel: sparse X is not supported.*X.toarray"):
            est.fit(abs(X), y)
    K = sp.csr_matrix(Xd @ Xd.T)
    with pytest.raises(DataError, match="precomputed.*dense Gram matrix.*K.toarray"):
        ExactKernelClassifier(kernel="precomputed").fit(K, y)
    # and an SVM fitted on dense X refuses nothing at predict: the same map reads sparse rows
    est = RandomFeatureClassifier(n_components=20, loss="squared_hinge", random_state=0).fit(Xd, y)
    np.testing.assert_allclose(est.decision_function(X), est.decision_function(Xd), rtol=1e-12, atol=1e-14)


def test_sparse_npz_classification_job_through_cli(tmp_path):
    """A classification job on a sparse .npz (labels in a .npy) with a holdout: its model equals
    the in-memory fit on the training rows, the holdout sample's decision values are the
    model's, and the predictions of a sparse .npz are predict's."""
    from bigkernel.numerics.splits import HoldoutSplit

    rng = np.random.default_rng(8)
    n, d = 1500, 200
    X = sp.random(n, d, density=0.03, format="csr", random_state=9, data_rvs=rng.standard_normal)
    y = (X @ rng.standard_normal(d) > 0).astype(np.int64)
    sp.save_npz(tmp_path / "x.npz", X)
    np.save(tmp_path / "y.npy", y)
    sp.save_npz(tmp_path / "new.npz", X[:300], compressed=False)
    (tmp_path / "job.yaml").write_text(
        textwrap.dedent("""\
        task: classification
        seed: 4
        output: out
        data:
          train: {path: x.npz, y_path: y.npy}
          holdout_fraction: 0.2
          chunk_rows: 512
        model: {gamma: 0.02, n_components: 48, alpha: 0.01, random_state: 0, loss: squared_hinge, tol: 1.0e-12}
        predict: {path: new.npz, output: pred.zarr}
        cluster: {local: {n_workers: 1, threads_per_worker: 1}}
        progress: false
        plots: false
        """)
    )
    # in-process: tests/test_sparse.py runs a sparse .npz job as a real `bigkernel` subprocess
    from bigkernel.cli import main

    assert main(["-q", "run", str(tmp_path / "job.yaml")]) == 0
    out = tmp_path / "out"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["data"]["n_features"] == d and metrics["model"]["converged"] == [True]
    model = bigkernel.load(out / "model.zarr")
    assert type(model) is RandomFeatureClassifier and model.loss == "squared_hinge"
    train = HoldoutSplit(4, 0.2).groups(0, n) == 0
    kw = dict(gamma=0.02, n_components=48, alpha=0.01, random_state=0, loss="squared_hinge", tol=1e-12)
    ref = RandomFeatureClassifier(**kw).fit(X[train], y[train])
    assert _rel(model.coef_, ref.coef_) < RTOL
    sample = np.load(out / "holdout_sample.npz")
    np.testing.assert_array_equal(sample["row"], np.flatnonzero(~train)[: sample["row"].size])
    np.testing.assert_allclose(sample["decision"], model.decision_function(X[sample["row"]]), rtol=1e-12)
    import zarr

    pred = zarr.open_group(out / "pred.zarr", mode="r")["y_pred"][:]
    np.testing.assert_array_equal(pred, model.predict(X[:300]))
