"""partial_fit and model updates: after any split into batches, the streamed estimators equal
one fit on all rows; saved statistics make a loaded model updatable; ``bigkernel update`` through
the real CLI equals a refit, and refuses what it cannot do."""

import json
import os
import subprocess
import sys

import dask.array as da
import numpy as np
import pytest
import zarr

import bigkernel
from bigkernel import DataError, KernelRidge, NystroemRidge, ParameterError, RandomFeatureRidge
from bigkernel.cli import main
from bigkernel.data.synthetic import SyntheticSpec, make_data
from tests.conftest import friedman

pytestmark = pytest.mark.numerics

FORMAT_V1 = os.path.join(os.path.dirname(__file__), "fixtures", "format_v1")


def _random_batches(n: int, rng: np.random.Generator) -> list[slice]:
    """A random split of range(n) into consecutive batches, one of them a single row."""
    cuts = np.sort(rng.choice(np.arange(1, n - 1), size=5, replace=False))
    one = int(rng.integers(1, n - 1))
    edges = sorted({0, n, *cuts.tolist(), one, one + 1})
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


def _rel(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b)))


def _assert_same_model(a, b, X, tol=1e-10):
    """Two fitted models are one: coefficients, intercept, α path and predictions (relative)."""
    assert a.n_samples_fit_ == b.n_samples_fit_
    np.testing.assert_allclose(a.alpha_, b.alpha_, rtol=1e-12)  # "gcv": relative to the mean eigenvalue
    assert _rel(a.coef_, b.coef_) < tol
    np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=tol, atol=tol)
    np.testing.assert_allclose(a.df_path_, b.df_path_, rtol=tol)
    assert _rel(a.predict(X), b.predict(X)) < tol
    np.testing.assert_array_equal(a.data_min_, b.data_min_)
    np.testing.assert_array_equal(a.data_max_, b.data_max_)


@pytest.mark.parametrize("alpha", [0.3, [1e-3, 1e-1, 10.0], "gcv"])
@pytest.mark.parametrize("split_seed", [0, 1, 2])
def test_random_feature_batches_equal_one_fit(alpha, split_seed):
    X, y = friedman(900, seed=11)
    kw = dict(gamma=0.1, n_components=64, alpha=alpha, random_state=5, dtype="float64")
    full = RandomFeatureRidge(**kw).fit(X, y)
    inc = RandomFeatureRidge(**kw)
    for sl in _random_batches(len(X), np.random.default_rng(split_seed)):
        inc.partial_fit(X[sl], y[sl])
    _assert_same_model(inc, full, X)
    assert inc.n_samples_fit_ == 900


def test_nystroem_batches_equal_one_fit_with_the_first_batch_landmarks():
    X, y = friedman(900, seed=12)
    kw = dict(gamma=0.1, n_components=40, alpha=[0.01, 1.0], random_state=3)
    first = slice(0, 300)  # the landmarks come from the first batch
    inc = NystroemRidge(**kw).partial_fit(X[first], y[first])
    landmarks = inc.feature_map_.landmarks.copy()
    rest = _random_batches(600, np.random.default_rng(4))
    for sl in rest:
        inc.partial_fit(X[300:][sl], y[300:][sl])
    np.testing.assert_array_equal(inc.feature_map_.landmarks, landmarks)
    # reference: a plain numpy ridge with intercept on the same features of all rows
    Phi = inc.transform(X)
    Pc, yc = Phi - Phi.mean(axis=0), y - y.mean()
    beta = np.linalg.solve(Pc.T @ Pc + inc.alpha_ * np.eye(Phi.shape[1]), Pc.T @ yc)
    s = np.linalg.eigvalsh(Pc.T @ Pc)
    cond = (s.max() + inc.alpha_) / (max(s.min(), 0) + inc.alpha_)
    assert _rel(inc.coef_, beta) < cond * 200 * np.finfo(float).eps
    assert inc.n_samples_fit_ == 900
    # and a fit on the first batch continued by partial_fit is the same model
    cont = NystroemRidge(**kw).fit(X[first], y[first]).partial_fit(X[300:], y[300:])
    _assert_same_model(cont, inc, X)


def test_weights_targets_and_dask_batches():
    X, y = friedman(700, seed=13)
    Y = np.column_stack([y, np.cos(X[:, 0])])
    w = np.random.default_rng(0).integers(0, 4, size=700).astype(float)
    kw = dict(gamma=0.2, n_components=48, alpha="gcv", random_state=1, dtype="float64")
    full = RandomFeatureRidge(**kw).fit(X, Y, sample_weight=w)
    inc = RandomFeatureRidge(**kw)
    for sl in (slice(0, 250), slice(250, 251), slice(251, 700)):
        inc.partial_fit(da.from_array(X[sl], chunks=(100, -1)), da.from_array(Y[sl], chunks=(100, -1)),
                        sample_weight=w[sl])  # fmt: skip
    _assert_same_model(inc, full, X)
    assert inc.coef_.shape == (2, 48) and inc.n_samples_fit_ == int(w.sum())


def test_fit_replaces_what_partial_fit_had_seen():
    X, y = friedman(400, seed=14)
    m = RandomFeatureRidge(n_components=32, random_state=0).partial_fit(X[:200], y[:200])
    m.fit(X[200:], y[200:])
    _assert_same_model(m, RandomFeatureRidge(n_components=32, random_state=0).fit(X[200:], y[200:]), X)


@pytest.mark.parametrize("cls", [RandomFeatureRidge, NystroemRidge])
@pytest.mark.parametrize("first", ["fit", "partial_fit"])
def test_standardized_models_update_with_their_frozen_scaling(cls, first, tmp_path):
    """standardize=True: the scaling comes from the fit (or the first batch) and stays; the
    updated model equals the same updates of a plain model on rows scaled by it by hand (raw
    scales: one column ~1e4), and a saved model updates after load as the fitted one does."""
    X, y = friedman(900, seed=15)
    X = X * np.array([1e4, 1, 1, 1e-3, 1, 1, 1, 1, 1, 1])
    kw = dict(n_components=24, alpha=[0.01, 0.1, 1.0], random_state=3, dtype="float64")
    m = getattr(cls(standardize=True, **kw), first)(X[:500], y[:500])
    mean, scale = X[:500].mean(axis=0), X[:500].std(axis=0)
    np.testing.assert_allclose(m.scaler_mean_, mean, rtol=1e-12)
    np.testing.assert_allclose(m.scaler_scale_, scale, rtol=1e-12)
    back = bigkernel.load(m.save(str(tmp_path / "m.zarr")))
    m.partial_fit(X[500:], y[500:])
    back.partial_fit(X[500:], y[500:])
    Xs = (X - mean) / scale  # by hand; Nyström landmarks come from the first rows alike
    ref = getattr(cls(**kw), first)(Xs[:500], y[:500]).partial_fit(Xs[500:], y[500:])
    np.testing.assert_allclose(m.scaler_mean_, mean, rtol=1e-12)  # frozen, not re-estimated
    assert m.n_samples_fit_ == ref.n_samples_fit_ == 900 and m.alpha_ == ref.alpha_
    assert _rel(m.coef_, ref.coef_) < 1e-8
    np.testing.assert_allclose(m.predict(X), ref.predict(Xs), rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(back.predict(X), m.predict(X), rtol=1e-10, atol=1e-10)


def test_refusals():
    X, y = friedman(300, seed=15)
    m = RandomFeatureRidge(n_components=16, random_state=0).partial_fit(X, y)
    with pytest.raises(ValueError, match="expecting 10 features"):
        m.partial_fit(X[:, :3], y)
    with pytest.raises(DataError, match="expecting 10 features"):
        m.partial_fit(da.from_array(X[:, :3], chunks=100), da.from_array(y, chunks=100))
    with pytest.raises(DataError, match="same targets"):
        m.partial_fit(X, np.column_stack([y, y]))
    with pytest.raises(DataError, match="requires y"):
        m.partial_fit(X, None)


def test_saved_model_keeps_its_statistics_and_updates_after_load(tmp_path):
    X, y = friedman(600, seed=16)
    for cls in (RandomFeatureRidge, NystroemRidge):
        m = cls(n_components=24, alpha=[0.1, 1.0], random_state=2).fit(X[:400], y[:400])
        back = bigkernel.load(m.save(str(tmp_path / cls.__name__)))
        for f in ("n", "sum_phi", "sum_y", "sum_yy", "gram", "phi_y", "x_min", "x_max"):
            np.testing.assert_array_equal(getattr(back.stats_, f), getattr(m.stats_, f), err_msg=f)
        _assert_same_model(back.partial_fit(X[400:], y[400:]), m.partial_fit(X[400:], y[400:]), X, tol=1e-14)


@pytest.mark.parametrize("name", ["random_features.zarr", "nystroem.zarr", "random_features_cossin_matern.zarr"])
def test_older_store_loads_but_cannot_be_updated(name):
    model = bigkernel.load(os.path.join(FORMAT_V1, name))
    assert model.stats_ is None
    X = np.zeros((3, model.n_features_in_))
    model.predict(X)  # still predicts
    with pytest.raises(ParameterError, match="sufficient statistics.*refit"):
        model.partial_fit(X, np.zeros(3))


# ------------------------------------------------------------------------ bigkernel update
def _subprocess_cli(*args):
    """The installed command as a user runs it (slow to start: used once)."""
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "bigkernel.cli", *args], capture_output=True, text=True, env=env)


class _Run:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def cli(capsys):
    """``bigkernel ARGS`` in this process (the CLI's own parser and command; no interpreter start)."""

    def run(*args):
        capsys.readouterr()
        rc = main(list(args))
        out = capsys.readouterr()
        return _Run(rc, out.out, out.err)

    return run


@pytest.fixture(scope="module")
def two_parts(tmp_path_factory):
    d = tmp_path_factory.mktemp("update")
    make_data(SyntheticSpec("friedman1", 3000, 6, 1.0, 0), str(d / "old.zarr"), chunk_rows=1024)
    make_data(SyntheticSpec("friedman1", 1100, 6, 1.0, 1), str(d / "new.zarr"), chunk_rows=512)
    return d


def _read(path):
    g = zarr.open_group(str(path), mode="r")
    return g["X"][...], g["y"][...]


@pytest.mark.parametrize(
    "make",
    [
        lambda: RandomFeatureRidge(gamma=0.2, n_components=48, alpha=[0.1, 1.0, 10.0], random_state=0, dtype="float64"),
        lambda: KernelRidge(solver="nystroem", gamma=0.2, n_components=30, alpha=[0.1, 1.0], random_state=0),
    ],
)
def test_update_through_the_cli_equals_a_refit(two_parts, tmp_path, make, cli):
    (X0, y0), (X1, y1) = _read(two_parts / "old.zarr"), _read(two_parts / "new.zarr")
    model_path = make().fit(X0, y0).save(str(tmp_path / "model.zarr"))
    out, metrics = tmp_path / "updated.zarr", tmp_path / "m.json"
    run = _subprocess_cli if isinstance(make(), RandomFeatureRidge) else cli
    r = run("update", model_path, str(two_parts / "new.zarr"), "-o", str(out), "--metrics", str(metrics), "-q")
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    assert printed == json.loads(metrics.read_text())
    assert (printed["n_samples_before"], printed["n_samples_added"], printed["n_samples_after"]) == (3000, 1100, 4100)
    assert printed["scaling"] is None  # no standardize
    updated = bigkernel.load(str(out))
    got = getattr(updated, "estimator_", updated)
    Xa, ya = np.vstack([X0, X1]), np.concatenate([y0, y1])
    if isinstance(got, RandomFeatureRidge):  # the refit on all rows draws the same map
        _assert_same_model(got, make().fit(Xa, ya), Xa[:500])
        return
    # Nyström: the refit on all rows with the saved landmarks — a numpy ridge on their features
    Phi = got.transform(Xa)
    Pc, yc = Phi - Phi.mean(axis=0), ya - ya.mean()
    A = Pc.T @ Pc + got.alpha_ * np.eye(Phi.shape[1])
    beta = np.linalg.solve(A, Pc.T @ yc)
    assert _rel(got.coef_, beta) < np.linalg.cond(A) * 200 * np.finfo(float).eps
    assert got.n_samples_fit_ == 4100
    # and the CLI's model is the library's partial_fit of the loaded model
    api = getattr(bigkernel.load(model_path), "estimator_", None).partial_fit(X1, y1)
    _assert_same_model(got, api, Xa[:500], tol=1e-13)


def test_update_in_place_replaces_the_model_atomically(two_parts, tmp_path, cli):
    (X0, y0), (X1, y1) = _read(two_parts / "old.zarr"), _read(two_parts / "new.zarr")
    model_path = (
        RandomFeatureRidge(n_components=32, random_state=1, dtype="float64").fit(X0, y0).save(str(tmp_path / "m.zarr"))
    )
    r = cli("update", model_path, str(two_parts / "new.zarr"), "--in-place", "-q")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n_samples_after"] == 4100
    ref = RandomFeatureRidge(n_components=32, random_state=1, dtype="float64").fit(
        np.vstack([X0, X1]), np.concatenate([y0, y1])
    )
    _assert_same_model(bigkernel.load(model_path), ref, X0[:300])
    assert sorted(os.listdir(tmp_path)) == ["m.zarr"]  # no partial or old copy left beside it


def test_update_from_a_csv_table(two_parts, tmp_path, cli):
    import pandas as pd

    (X0, y0), (X1, y1) = _read(two_parts / "old.zarr"), _read(two_parts / "new.zarr")
    cols = [f"c{i}" for i in range(6)]
    model = RandomFeatureRidge(n_components=32, random_state=1, dtype="float64").fit(pd.DataFrame(X0, columns=cols), y0)
    model_path = model.save(str(tmp_path / "m.zarr"))
    pd.DataFrame(np.column_stack([X1, y1]), columns=[*cols, "target"]).to_csv(tmp_path / "new.csv", index=False)
    r = cli("update", model_path, str(tmp_path / "new.csv"), "--y", "target", "-o", str(tmp_path / "u.zarr"), "-q")
    assert r.returncode == 0, r.stderr
    ref = RandomFeatureRidge(n_components=32, random_state=1, dtype="float64").fit(
        np.vstack([X0, X1]), np.concatenate([y0, y1])
    )
    updated = bigkernel.load(str(tmp_path / "u.zarr"))
    assert list(updated.feature_names_in_) == cols
    assert _rel(updated.coef_, ref.coef_) < 1e-10


def test_update_of_a_standardized_job_model_finds_its_target_by_name(two_parts, tmp_path, cli):
    """A job fitted on a target-first CSV (target ``price``, standardize on, raw scales) is
    updated from a reordered CSV with no --y: the model's own target column is read, and the
    result equals the library's partial_fit of the loaded model."""
    import pandas as pd

    (X0, y0), (X1, y1) = _read(two_parts / "old.zarr"), _read(two_parts / "new.zarr")
    cols = [f"c{i}" for i in range(6)]
    X0, X1 = X0 * 1e3, X1 * 1e3
    pd.DataFrame(X0, columns=cols).assign(price=y0)[["price", *cols]].to_csv(tmp_path / "old.csv", index=False)
    pd.DataFrame(X1, columns=cols).assign(price=y1)[[*cols[::-1], "price"]].to_csv(tmp_path / "new.csv", index=False)
    (tmp_path / "job.yaml").write_text(
        f"name: t\noutput: out\ndata:\n  train: {{path: old.csv, x: {json.dumps(cols)}, y: price}}\n"
        "  holdout_fraction: 0\nmodel: {gamma: 0.2, n_components: 32, alpha: [0.1, 1.0], standardize: true}\n"
        "progress: false\nplots: false\ncluster:\n  local: {n_workers: 1, threads_per_worker: 1}\n"
    )
    assert cli("run", str(tmp_path / "job.yaml"), "-q").returncode == 0
    model_path = str(tmp_path / "out" / "model.zarr")
    r = cli("update", model_path, str(tmp_path / "new.csv"), "-o", str(tmp_path / "u.zarr"), "-q")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["scaling"] == "from the first fit, kept fixed"  # said, not silent
    updated = bigkernel.load(str(tmp_path / "u.zarr"))
    api = bigkernel.load(model_path).partial_fit(pd.DataFrame(X1, columns=cols), y1)
    assert updated.n_samples_fit_ == 4100
    _assert_same_model(updated, api, pd.DataFrame(X0[:300], columns=cols), tol=1e-12)


def test_update_refusals(two_parts, tmp_path, cli):
    new = str(two_parts / "new.zarr")
    X0, y0 = _read(two_parts / "old.zarr")
    # an old store without statistics: refused before any data is read
    r = cli("update", os.path.join(FORMAT_V1, "random_features.zarr"), new, "-o", str(tmp_path / "a.zarr"))
    assert r.returncode == 2 and "sufficient statistics" in r.stderr and not (tmp_path / "a.zarr").exists()
    # an exact model has no sums to add to
    exact = bigkernel.ExactKernelRidge(alpha=1.0).fit(X0[:200], y0[:200]).save(str(tmp_path / "exact.zarr"))
    r = cli("update", exact, new, "-o", str(tmp_path / "b.zarr"))
    assert r.returncode == 2 and "cannot be updated" in r.stderr
    # a classifier: refused by name (it was an AttributeError traceback before)
    labels = (y0 > np.median(y0)).astype(int)
    clf = bigkernel.RandomFeatureClassifier(n_components=16, random_state=0).fit(X0, labels)
    r = cli("update", clf.save(str(tmp_path / "clf.zarr")), new, "-o", str(tmp_path / "c.zarr"))
    assert r.returncode == 2 and "RandomFeatureClassifier model cannot be updated" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "c.zarr").exists()
    # mismatched columns: the new data has 8 features, the model 6
    make_data(SyntheticSpec("friedman1", 500, 8, 1.0, 2), str(tmp_path / "wide.zarr"), chunk_rows=256)
    model = RandomFeatureRidge(n_components=16, random_state=0).fit(X0, y0).save(str(tmp_path / "m.zarr"))
    before = open(os.path.join(model, "zarr.json")).read()
    r = cli("update", model, str(tmp_path / "wide.zarr"), "--in-place")
    assert r.returncode == 2 and "8 features" in r.stderr and "expecting 6" in r.stderr
    assert open(os.path.join(model, "zarr.json")).read() == before  # the model is untouched
    # where to write must be said, and never over the data or an existing output unasked
    r = cli("update", model, new)
    assert r.returncode == 2 and "--in-place" in r.stderr
    r = cli("update", model, new, "-o", model)
    assert r.returncode == 2 and "--in-place" in r.stderr
    r = cli("update", model, new, "-o", exact)
    assert r.returncode == 2 and "exists" in r.stderr


def test_a_failed_in_place_write_leaves_the_old_model(two_parts, tmp_path, monkeypatch, cli):
    import bigkernel.io.atomic as atomic

    X0, y0 = _read(two_parts / "old.zarr")
    model = RandomFeatureRidge(n_components=16, random_state=0).fit(X0, y0).save(str(tmp_path / "m.zarr"))
    real, failed = os.replace, []

    def failing(src, dst):  # the rename of the new model into place fails (disk, signal, ...)
        if os.path.basename(str(src)).startswith(".m.zarr.partial-") and str(dst) == model:
            failed.append(src)
            raise OSError("simulated failure")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", failing)
    with pytest.raises(OSError, match="simulated"):
        main(["update", model, str(two_parts / "new.zarr"), "--in-place", "-q"])
    monkeypatch.undo()
    assert failed  # it failed at the rename, after the new model was complete
    back = bigkernel.load(model)  # the old model, complete, at its place
    assert back.n_samples_fit_ == 3000 and sorted(os.listdir(tmp_path)) == ["m.zarr"]
    # NaN in the new rows: refused naming the rows, the model untouched
    X1, y1 = _read(two_parts / "new.zarr")
    X1[700, 3] = np.nan
    g = zarr.open_group(str(tmp_path / "bad.zarr"), mode="w")
    g.create_array("X", data=X1, chunks=(512, 6))
    g.create_array("y", data=y1, chunks=(512,))
    r = cli("update", model, str(tmp_path / "bad.zarr"), "--in-place")
    assert r.returncode == 2 and "row 700" in r.stderr
    assert bigkernel.load(model).n_samples_fit_ == 3000


def test_update_from_npy_files(two_parts, tmp_path, cli):
    (X0, y0), (X1, y1) = _read(two_parts / "old.zarr"), _read(two_parts / "new.zarr")
    model = (
        RandomFeatureRidge(n_components=24, random_state=3, dtype="float64").fit(X0, y0).save(str(tmp_path / "m.zarr"))
    )
    np.save(tmp_path / "X.npy", X1)
    np.save(tmp_path / "y.npy", y1)
    r = cli("update", model, str(tmp_path / "X.npy"), "-o", str(tmp_path / "u.zarr"))
    assert r.returncode == 2 and "--y y.npy" in r.stderr  # y of a .npy X must be named
    r = cli("update", model, str(tmp_path / "X.npy"), "--y", str(tmp_path / "y.npy"), "-o", str(tmp_path / "u.zarr"))
    assert r.returncode == 0, r.stderr
    ref = RandomFeatureRidge(n_components=24, random_state=3, dtype="float64").fit(
        np.vstack([X0, X1]), np.concatenate([y0, y1])
    )
    _assert_same_model(bigkernel.load(str(tmp_path / "u.zarr")), ref, X0[:200])
