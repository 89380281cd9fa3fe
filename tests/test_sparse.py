"""Sparse X (scipy.sparse, dask arrays of sparse chunks, the sparse .npz job source) and the
refusal of strings, objects and complex numbers as data (issue 13, items 1 and 7).

Sparse and dense inputs must give the same model to rounding (float64, 1e-10 relative): the
sparse path multiplies and reduces the same numbers in another order, nothing more.
"""

import json
import os
import subprocess
import sys
import textwrap
import tracemalloc

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.base import clone

import bigkernel
from bigkernel import (
    ExactKernelRidge,
    ExactKernelRidgeCV,
    KernelRidge,
    NystroemRidge,
    RandomFeatureRidge,
    RandomFeatureRidgeCV,
)
from bigkernel.data.sources import open_npz, open_source
from bigkernel.errors import DataError, NonFiniteError
from bigkernel.kernels.factory import make_kernel
from bigkernel.numerics.gram_tiles import GramTiler

RTOL = 1e-10
N, D = 400, 60


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = sp.random(N, D, density=0.08, format="csr", random_state=1, data_rvs=rng.standard_normal)
    X = sp.csr_matrix(X)
    X.data[::7] = np.abs(X.data[::7]) + 2.0  # some large entries: ranges are not all 0-centred
    Xd = X.toarray()
    y = np.sin(Xd @ rng.standard_normal(D)) + 0.1 * rng.standard_normal(N)
    sw = rng.uniform(0.2, 2.0, N)
    return X, Xd, y, sw


def _rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def _coef(est):
    est = getattr(est, "estimator_", est)
    return est.coef_ if hasattr(est, "coef_") else est.dual_coef_


# the exact solvers run CG: a tolerance far below 1e-10 makes the solution, not the path, compared
ESTIMATORS = {
    "random_features": RandomFeatureRidge(n_components=80, alpha=0.1, random_state=0, dtype="float64"),
    "random_features_cossin_f32": RandomFeatureRidge(
        "laplacian", gamma=0.2, n_components=80, form="cossin", alpha=0.1, random_state=0, dtype="float64"
    ),
    "nystroem_rbf": NystroemRidge(n_components=50, alpha=0.1, random_state=0),
    "nystroem_laplacian_uniform": NystroemRidge(
        "laplacian", gamma=0.1, n_components=50, landmarks="uniform", alpha=0.1, random_state=0
    ),
    "nystroem_polynomial": NystroemRidge("polynomial", degree=2, n_components=50, alpha=1.0, random_state=0),
    "exact_rbf": ExactKernelRidge(alpha=0.1, tol=1e-13, random_state=0),
    "exact_matern": ExactKernelRidge("matern", nu=1.5, length_scale=3.0, alpha=0.1, tol=1e-13, random_state=0),
    "exact_linear": ExactKernelRidge("linear", alpha=1.0, tol=1e-13, preconditioner=None, random_state=0),
    "kernel_ridge": KernelRidge(alpha=0.1, tol=1e-13, random_state=0),
}


KIND_CASES = [(name, "csr_matrix") for name in sorted(ESTIMATORS)] + [
    (name, kind) for name in ("random_features", "nystroem_rbf", "exact_rbf") for kind in ("csr_array", "csc_matrix")
]


@pytest.mark.numerics
@pytest.mark.parametrize(("name", "kind"), KIND_CASES)
def test_sparse_fit_equals_dense(data, name, kind):
    X, Xd, y, sw = data
    Xs = getattr(sp, kind)(X)
    dense, sparse = clone(ESTIMATORS[name]).fit(Xd, y), clone(ESTIMATORS[name]).fit(Xs, y)
    assert _rel(_coef(sparse), _coef(dense)) < RTOL
    np.testing.assert_allclose(sparse.predict(Xs), dense.predict(Xd), rtol=RTOL, atol=1e-12)
    # a sparse-fitted model predicts dense rows, and the other way round
    np.testing.assert_allclose(sparse.predict(Xd), dense.predict(Xs), rtol=RTOL, atol=1e-12)
    np.testing.assert_array_equal(sparse.data_min_, Xd.min(axis=0))  # implicit zeros count
    np.testing.assert_array_equal(sparse.data_max_, Xd.max(axis=0))


@pytest.mark.numerics
@pytest.mark.parametrize("name", ["random_features", "nystroem_rbf", "exact_rbf", "kernel_ridge"])
def test_sparse_sample_weight_equals_dense(data, name):
    X, Xd, y, sw = data
    dense = clone(ESTIMATORS[name]).fit(Xd, y, sample_weight=sw)
    sparse = clone(ESTIMATORS[name]).fit(sp.csr_array(X), y, sample_weight=sw)
    assert _rel(_coef(sparse), _coef(dense)) < RTOL
    assert _rel(sparse.predict(X), dense.predict(Xd)) < RTOL


@pytest.mark.numerics
@pytest.mark.parametrize(
    "est",
    [
        RandomFeatureRidgeCV(gammas=[0.02, 0.1], alphas=[0.01, 1.0], cv=3, n_components=40, random_state=0),
        ExactKernelRidgeCV(gammas=[0.02, 0.1], alphas=[0.01, 1.0]),
    ],
    ids=["rff_cv", "exact_cv"],
)
def test_sparse_search_equals_dense(data, est):
    X, Xd, y, _ = data
    dense, sparse = clone(est).fit(Xd, y), clone(est).fit(X, y)
    assert sparse.best_params_ == dense.best_params_
    np.testing.assert_allclose(sparse.cv_results_["mean_test_score"], dense.cv_results_["mean_test_score"], rtol=1e-9)
    assert _rel(sparse.predict(X), dense.predict(Xd)) < RTOL


@pytest.mark.numerics
@pytest.mark.parametrize("name", ["random_features", "nystroem_laplacian_uniform", "exact_rbf"])
def test_dask_of_sparse_chunks_equals(data, name):
    """dask arrays of scipy.sparse chunks: from_array(asarray=False) and map_blocks; the fit
    equals the fit on the dense dask array of the same chunks, and prediction stays lazy."""
    X, Xd, y, _ = data
    for rows in (128,):
        by_slices = da.from_array(X, chunks=(rows, D), asarray=False)
        dense = da.from_array(Xd, chunks=(rows, D))
        by_blocks = dense.map_blocks(sp.csr_matrix, dtype=Xd.dtype, meta=sp.csr_matrix((0, D)))
        yk = da.from_array(y, chunks=rows)
        ref = clone(ESTIMATORS[name]).fit(dense, yk)
        for Xk in (by_slices, by_blocks):
            assert isinstance(Xk._meta, sp.csr_matrix)
            est = clone(ESTIMATORS[name]).fit(Xk, yk)
            assert _rel(_coef(est), _coef(ref)) < RTOL
            pred = est.predict(Xk)
            assert isinstance(pred, da.Array)
            assert _rel(pred.compute(), ref.predict(Xd)) < RTOL


@pytest.mark.numerics
def test_standardize_scales_sparse_without_centring(data):
    """standardize=True on sparse X divides by the column standard deviations and does not
    centre (X stays sparse): the model equals the dense fit on X / std. For a translation
    invariant kernel on the exact path it equals the dense standardized fit itself."""
    X, Xd, y, sw = data
    std = Xd.std(axis=0)
    std[std == 0] = 1.0
    sparse = RandomFeatureRidge(n_components=80, alpha=0.1, random_state=0, standardize=True, dtype="float64").fit(X, y)
    np.testing.assert_array_equal(sparse.scaler_mean_, 0.0)
    np.testing.assert_allclose(sparse.scaler_scale_, std, rtol=1e-12)
    ref = RandomFeatureRidge(n_components=80, alpha=0.1, random_state=0, dtype="float64").fit(Xd / std, y)
    assert _rel(sparse.coef_, ref.coef_) < RTOL
    assert _rel(sparse.predict(X), ref.predict(Xd / std)) < RTOL
    # weighted: the weighted standard deviation, as for dense X
    w_std = np.sqrt(np.average((Xd - np.average(Xd, axis=0, weights=sw)) ** 2, axis=0, weights=sw))
    weighted = RandomFeatureRidge(n_components=20, random_state=0, standardize=True, dtype="float64").fit(
        X, y, sample_weight=sw
    )
    np.testing.assert_allclose(weighted.scaler_scale_, w_std, rtol=1e-10)
    exact = dict(kernel="laplacian", gamma=0.1, alpha=0.1, tol=1e-13, random_state=0, standardize=True)
    e_sparse, e_dense = ExactKernelRidge(**exact).fit(X, y), ExactKernelRidge(**exact).fit(Xd, y)
    assert _rel(e_sparse.predict(X), e_dense.predict(Xd)) < RTOL
    ny = dict(n_components=40, alpha=0.1, random_state=0, standardize=True)
    n_sparse, n_dense = NystroemRidge(**ny).fit(X, y), NystroemRidge(**ny).fit(Xd, y)
    assert _rel(n_sparse.predict(X), n_dense.predict(Xd)) < 1e-8  # rbf: translation invariant


@pytest.mark.parametrize("name", ["nystroem_laplacian_uniform", "exact_rbf"])
def test_sparse_model_saved_as_csr_and_loaded(data, tmp_path, name):
    X, Xd, y, _ = data
    est = clone(ESTIMATORS[name]).fit(X, y)
    path = est.save(tmp_path / "m.zarr")
    import zarr

    keys = set(zarr.open_group(path, mode="r").array_keys())
    stored = "X_fit" if name.startswith("exact") else "nystroem_landmarks"
    assert stored not in keys and f"{stored}_csr_data" in keys  # no dense copy of the points
    loaded = bigkernel.load(path)
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))
    assert sp.issparse(loaded.X_fit_ if name.startswith("exact") else loaded.feature_map_.landmarks)


def test_sparse_kernel_blocks_equal_dense():
    """Every kernel's Gram tiles, cross blocks and columns from sparse points equal the dense
    ones; the rbf with a full precision matrix refuses sparse X, saying what to do."""
    X = sp.random(150, 30, density=0.1, format="csr", random_state=3)
    Z = sp.random(40, 30, density=0.1, format="csr", random_state=4)
    for name, kw in [
        ("rbf", {"gamma": 0.3}),
        ("rbf", {"length_scale": np.linspace(0.5, 2.0, 30)}),
        ("laplacian", {"gamma": 0.2}),
        ("matern", {"nu": 2.5, "length_scale": 1.0}),
        ("periodic", {}),
        ("linear", {}),
        ("polynomial", {"degree": 3, "gamma": 0.1}),
        ("cosine", {}),
    ]:
        k = make_kernel(name, **kw)
        ts, td = GramTiler(k, X), GramTiler(k, X.toarray())
        np.testing.assert_allclose(ts.dense(), td.dense(), rtol=1e-12, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(ts.cross(Z), td.cross(Z.toarray()), rtol=1e-12, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(ts.columns([0, 7]), td.columns([0, 7]), rtol=1e-12, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(ts.diag(), td.diag(), rtol=1e-12, err_msg=name)
        # a dense block against sparse points: same values, the caller's array untouched
        Zd = Z.toarray()
        Zd0 = Zd.copy()
        np.testing.assert_allclose(k(Zd, X), k(Zd0, X.toarray()), rtol=1e-12, atol=1e-13, err_msg=name)
        np.testing.assert_array_equal(Zd, Zd0)
    with pytest.raises(DataError, match="precision matrix cannot serve sparse X"):
        GramTiler(make_kernel("rbf", precision=np.eye(30)), X)
    for name in ("chi2", "additive_chi2"):  # scikit-learn's refuse sparse X too
        with pytest.raises(DataError, match=f"{name} kernel: sparse X is not supported.*X.toarray"):
            GramTiler(make_kernel(name), abs(X)).dense()


def test_nonfinite_in_sparse_rows_named(data):
    X, _, y, _ = data
    bad = X.copy()
    bad.data[bad.indptr[123]] = np.nan  # first stored entry of row 123
    with pytest.raises(NonFiniteError, match="first at row 123"):
        RandomFeatureRidge(n_components=10).fit(bad, y)
    with pytest.raises(NonFiniteError, match="first at row 123"):
        ExactKernelRidge().fit(bad, y)


def test_sparse_pass_never_densifies():
    """The streamed pass and prediction on sparse X hold O(nnz) + one feature block: with
    n × d = 1024 × 40,000 a single dense copy of X (328 MB) — or of a few hundred rows — would
    dominate tracemalloc's peak, which must stay below 25 MB (the feature map's d × D
    weights are 5 MB)."""
    n, d, D = 1024, 40_000, 16
    rng = np.random.default_rng(5)
    X = sp.random(n, d, density=2e-4, format="csr", random_state=6, data_rvs=rng.standard_normal)
    y = rng.standard_normal(n)
    X_bytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    dense_bytes = n * d * 8
    tracemalloc.start()
    try:
        est = RandomFeatureRidge(n_components=D, random_state=0, chunk_rows=256).fit(X, y)
        est.predict(X)
        NystroemRidge(n_components=32, landmarks="uniform", random_state=0, chunk_rows=256).fit(X, y).predict(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    weights = d * D * 8  # the feature map itself (d × D)
    assert peak < 25e6, f"peak {peak / 1e6:.1f} MB (X sparse {X_bytes / 1e6:.2f} MB, dense {dense_bytes / 1e6:.0f} MB)"
    assert peak < 3 * weights + 20 * X_bytes + 8e6
    assert peak < dense_bytes / 15


def test_sparse_float32_check_probes_sparse_rows(tmp_path):
    """The float32 check of a sparse fit probes the map with sparse rows (the data's mean stored
    entries per row, counted in the pass) through the sparse path: no dense-path weight cache
    (d × D) is built, and the probe itself holds far less than one dense copy of the map's
    weights, where the dense probe's caches held 1.5 (float64 + float32 [ω; b])."""
    import pickle

    from bigkernel.numerics.precision import feature_rounding

    n, d, D = 600, 100_000, 32
    rng = np.random.default_rng(11)
    counts = rng.integers(1, 10, n)  # 1–9 stored entries a row (sp.random is slow at this width)
    cols = np.concatenate([np.sort(rng.choice(d, size=k, replace=False)) for k in counts])
    X = sp.csr_matrix((rng.standard_normal(cols.size), cols, np.r_[0, np.cumsum(counts)]), shape=(n, d))
    y = rng.standard_normal(n)
    w = rng.uniform(0.5, 2.0, n)
    est = RandomFeatureRidge(n_components=D, random_state=0, chunk_rows=256).fit(X, y, sample_weight=w)
    assert est.dtype_ == "float32" and est.dtype_check_ is not None  # the check ran
    # the stored entries ride with the pass, weighted like n
    row_nnz = np.diff(X.indptr)
    assert est.stats_.x_nnz[0] == pytest.approx(float(w @ row_nnz), rel=1e-12)
    dense_keys = [
        k for k in est.feature_map_.__dict__.get("_cast_cache", {}) if isinstance(k, tuple) and k[0] == "augmented"
    ]
    assert not dense_keys, f"the check built the dense path's weights {dense_keys}"
    # the probe alone, on a map without caches (a pickled copy drops them)
    fm = pickle.loads(pickle.dumps(est.feature_map_))
    weights_bytes = d * D * 8
    tracemalloc.start()
    try:
        sd = feature_rounding(fm, est.data_min_, est.data_max_, nnz_per_row=row_nnz.mean())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 0 < sd < np.inf
    # the float32 cast of ω (d × D × 4, which the pass itself holds), the range's reach (O(d))
    # and small batches (the dense probe: 66 MB)
    assert peak < 0.5 * weights_bytes + 32 * d + 1e6, f"probe {peak / 1e6:.1f} MB, ω {weights_bytes / 1e6:.0f} MB"
    # saved and loaded, the count stays; partial_fit adds the batch's
    from bigkernel.io.model_store import load, save_model

    save_model(est, tmp_path / "m")
    loaded = load(tmp_path / "m")
    assert loaded.stats_.x_nnz[0] == pytest.approx(est.stats_.x_nnz[0])
    loaded.partial_fit(X[:100], y[:100])
    assert loaded.stats_.x_nnz[0] == pytest.approx(est.stats_.x_nnz[0] + row_nnz[:100].sum())
    assert loaded.dtype_check_ is not None


def test_npz_reader_reads_row_blocks(tmp_path):
    X = sp.random(700, 25, density=0.1, format="csr", random_state=7)
    for compressed in (False, True):
        path = tmp_path / f"x{compressed}.npz"
        sp.save_npz(path, X, compressed=compressed)
        Xk = open_npz(str(path), chunk_rows=256)
        assert Xk.chunks[0] == (256, 256, 188) and isinstance(Xk._meta, sp.csr_matrix)
        blocks = [b.compute() for b in Xk.to_delayed().ravel()]
        assert all(sp.issparse(b) for b in blocks)
        np.testing.assert_array_equal(sp.vstack(blocks).toarray(), X.toarray())
    sp.save_npz(tmp_path / "c.npz", X.tocsc())
    with pytest.raises(DataError, match=r"CSC matrix.*X\.tocsr\(\)"):
        open_source(str(tmp_path / "c.npz"))
    np.savez(tmp_path / "dense.npz", X=X.toarray())
    with pytest.raises(DataError, match="not a scipy.sparse .npz"):
        open_source(str(tmp_path / "dense.npz"))


def test_sparse_npz_job_through_cli(tmp_path, capsys):
    """A job whose training data is a sparse .npz (with y in a .npy) runs through the real CLI;
    its model equals the in-memory fit, and its predictions of a sparse .npz equal predict."""
    rng = np.random.default_rng(8)
    X = sp.random(3000, 300, density=0.02, format="csr", random_state=9, data_rvs=rng.standard_normal)
    y = np.sin(X @ rng.standard_normal(300)) + 0.05 * rng.standard_normal(3000)
    sp.save_npz(tmp_path / "x.npz", X)
    np.save(tmp_path / "y.npy", y)
    sp.save_npz(tmp_path / "new.npz", X[:500], compressed=False)
    job = tmp_path / "job.yaml"
    job.write_text(
        textwrap.dedent("""\
        name: sparse
        output: out
        data:
          train: {path: x.npz, y_path: y.npy}
          holdout_fraction: 0.0
          chunk_rows: 1024
        model:
          gamma: 0.5
          n_components: 64
          alpha: 0.01
          random_state: 0
          dtype: float64
        predict:
          path: new.npz
          output: pred.zarr
        cluster:
          local: {n_workers: 1, threads_per_worker: 1}
        progress: false
        plots: false
        """)
    )
    run = subprocess.run(
        [sys.executable, "-m", "bigkernel.cli", "-q", "run", str(job)], capture_output=True, text=True, env=os.environ
    )
    assert run.returncode == 0, run.stderr
    out = tmp_path / "out"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["data"]["n_samples"] == 3000 and metrics["data"]["n_features"] == 300
    model = bigkernel.load(out / "model.zarr")
    ref = RandomFeatureRidge(gamma=0.5, n_components=64, alpha=0.01, random_state=0, dtype="float64").fit(X, y)
    assert _rel(model.coef_, ref.coef_) < RTOL
    import zarr

    pred = zarr.open_group(out / "pred.zarr", mode="r")["y_pred"][:]
    np.testing.assert_allclose(pred, ref.predict(X[:500]), rtol=RTOL, atol=1e-12)
    # a CSC .npz is refused before any work, with the fix (in-process: no second interpreter
    # to start for an error the real CLI above would print the same way)
    from bigkernel.cli import main

    sp.save_npz(tmp_path / "x.npz", X.tocsc())
    job.write_text(job.read_text().replace("output: out", "output: out_csc"))
    capsys.readouterr()
    code, err = main(["-q", "run", str(job)]), capsys.readouterr().err
    assert code != 0 and "CSC matrix" in err and "tocsr()" in err, err
    assert not (tmp_path / "out_csc" / "metrics.json").exists()


# ------------------------------------------------------------------------------------ refusals
BAD_X = {
    "strings of numbers": (np.array([["1.5", "2"], ["3", "4"], ["5", "6"]]), "strings"),
    # as a list, numpy reads it as strings; as an object array, its elements are scanned
    "objects with text": (
        np.array([[1.0, "2"], [3.0, 4.0], [5.0, 6.0]], dtype=object),
        "(str values in an object array|strings)",
    ),
    "complex": (np.array([[1 + 1j, 2], [3, 4], [5, 6]]), "complex numbers"),
}


@pytest.mark.parametrize("what", sorted(BAD_X))
@pytest.mark.parametrize("est", [RandomFeatureRidge(n_components=4), ExactKernelRidge(), KernelRidge()])
def test_refuse_non_real_X_and_y(what, est):
    bad, found = BAD_X[what]
    y = np.arange(3.0)
    for X in (bad, bad.tolist()):
        with pytest.raises(DataError, match=f"X must hold real numbers.*{found}"):
            clone(est).fit(X, y)
    dask_found = "Python objects" if bad.dtype == object else found  # dask: the dtype alone
    with pytest.raises(DataError, match=f"X must hold real numbers.*{dask_found}"):
        clone(est).fit(da.from_array(bad, chunks=(2, 2)), y)
    with pytest.raises(DataError, match=f"y must hold real numbers.*{found}"):
        clone(est).fit(np.ones((3, 2)), bad[:, 1])
    fitted = clone(est).fit(np.arange(6.0).reshape(3, 2), y)
    with pytest.raises(DataError, match=f"X must hold real numbers.*{found}"):
        fitted.predict(bad)
    with pytest.raises(DataError, match=f"X must hold real numbers.*{dask_found}"):
        fitted.predict(da.from_array(bad, chunks=(2, 2)))


def test_object_array_of_numbers_is_converted():
    """An object array holding only real numbers is converted, as scikit-learn does (its
    check_dtype_object requires it); the fit equals the float64 fit."""
    X = np.arange(12.0).reshape(6, 2)
    y = np.arange(6.0)
    a = RandomFeatureRidge(n_components=8, random_state=0).fit(X.astype(object), y)
    b = RandomFeatureRidge(n_components=8, random_state=0).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)


def test_refuse_dataframe_text_column_and_complex_sparse():
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": ["1", "2", "3"]})
    with pytest.raises(DataError, match=r"non-numeric columns \{'b': 'object'\}|non-numeric columns \{'b': 'str"):
        RandomFeatureRidge(n_components=4).fit(df, np.arange(3.0))
    cplx = sp.csr_matrix(np.array([[1 + 1j, 0], [0, 2], [3, 0]]))
    with pytest.raises(DataError, match="complex numbers"):
        RandomFeatureRidge(n_components=4).fit(cplx, np.arange(3.0))


def test_refuse_text_column_in_table_source(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": ["x", "2", "3"], "y": [1.0, 2.0, 3.0]}).to_csv(path, index=False)
    with pytest.raises(DataError, match="non-numeric columns"):
        open_source(str(path), ["a", "b"], "y")


def test_bootstrap_refuses_sparse_clearly(data, tmp_path):
    X, Xd, y, _ = data
    with pytest.raises(DataError, match=r"bootstrap\(\) does not take sparse X yet.*X\.toarray\(\)"):
        bigkernel.bootstrap(RandomFeatureRidge(n_components=8), X, y, Xd[:3], n_bootstraps=2, store=tmp_path / "b.zarr")


@pytest.mark.numerics
def test_sparse_transform_transformers_and_partial_fit(data):
    """transform, the feature transformers and partial_fit take sparse X and equal dense X."""
    from bigkernel import NystroemFeatures, RandomFeatures

    X, Xd, y, _ = data
    for T in (RandomFeatures(n_components=30, random_state=0), NystroemFeatures(n_components=30, random_state=0)):
        np.testing.assert_allclose(clone(T).fit(X).transform(X), clone(T).fit(Xd).transform(Xd), rtol=1e-10, atol=1e-12)
    full = RandomFeatureRidge(n_components=40, alpha=0.1, random_state=0, dtype="float64").fit(X, y)
    np.testing.assert_allclose(full.transform(X), full.transform(Xd), rtol=1e-12, atol=1e-14)
    batches = RandomFeatureRidge(n_components=40, alpha=0.1, random_state=0, dtype="float64")
    for rows in (slice(0, 150), slice(150, 333), slice(333, N)):
        batches.partial_fit(X[rows], y[rows])
    assert _rel(batches.coef_, full.coef_) < RTOL


def test_paths_without_sparse_support_say_so(data):
    X, Xd, y, _ = data
    with pytest.raises(DataError, match="polynomial random-feature map does not take sparse X.*NystroemRidge"):
        RandomFeatureRidge("polynomial", degree=2, n_components=20).fit(X, y)
    K = sp.csr_matrix(Xd @ Xd.T)
    with pytest.raises(DataError, match="precomputed.*dense Gram matrix.*K.toarray"):
        ExactKernelRidge(kernel="precomputed").fit(K, y)
