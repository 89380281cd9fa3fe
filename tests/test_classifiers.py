"""Classifiers: scikit-learn contract, labels, one-vs-rest, class weights, save/load, dask/zarr,
and the cross-validated (γ, α) choice against a brute-force loop."""

import logging

import dask.array as da
import numpy as np
import pytest
import zarr
from sklearn.datasets import make_classification
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
from sklearn.linear_model import RidgeClassifier
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.estimator_checks import parametrize_with_checks

import bigkernel
from bigkernel import (
    DataError,
    ExactKernelClassifier,
    KernelClassifier,
    NystroemClassifier,
    RandomFeatureClassifier,
    RandomFeatureClassifierCV,
    RandomFeatureRidge,
)
from bigkernel.numerics.splits import FoldSplit

pytestmark = pytest.mark.numerics


def _expected_failures(est):
    if isinstance(est, RandomFeatureClassifierCV):
        # folds are a hash of the row index: repeated rows fall in other folds than their
        # weighted original, so the search sees other folds and may choose another point
        # (scikit-learn's *CV searches differ the same way); test_cv_weighted_folds_* checks
        # the weighted folds themselves
        return {
            "check_sample_weight_equivalence_on_dense_data": "repeated rows change the folds",
            "check_sample_weight_equivalence_on_sparse_data": "repeated rows change the folds",
        }
    return {}


@parametrize_with_checks(
    [
        RandomFeatureClassifier(n_components=64),
        NystroemClassifier(n_components=32),
        ExactKernelClassifier(),
        KernelClassifier(n_components=32),
        RandomFeatureClassifierCV(n_components=32, cv=3, gammas=[0.1, 1.0], alphas=[1e-2, 1.0]),
    ],
    expected_failed_checks=_expected_failures,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def _data(n=800, classes=3, seed=0, d=5):
    X, y = make_classification(
        n, n_features=d, n_informative=4, n_redundant=0, n_classes=classes, n_clusters_per_class=1, random_state=seed
    )
    return X, y


KW = dict(gamma=0.2, n_components=64, alpha=0.1, random_state=0)


@pytest.mark.parametrize(
    "labels",
    [np.array([3, 7, 11]), np.array(["cat", "dog", "emu"]), np.array(["cat", "dog", "emu"], dtype=object),
     np.array([-1.0, 0.0, 2.0])],
    ids=["int", "str", "object", "float"],
)  # fmt: skip
def test_label_types_give_the_same_classifier(labels):
    X, y = _data()
    ref = RandomFeatureClassifier(**KW).fit(X, y)
    m = RandomFeatureClassifier(**KW).fit(X, labels[y])
    np.testing.assert_array_equal(m.classes_, labels)
    assert m.classes_.dtype == labels.dtype
    np.testing.assert_array_equal(m.predict(X), labels[ref.predict(X)])
    np.testing.assert_allclose(m.decision_function(X), ref.decision_function(X), rtol=1e-12)


def test_bool_labels_binary_decision_sign():
    X, y = _data(classes=2)
    m = RandomFeatureClassifier(**KW).fit(X, y.astype(bool))
    assert m.classes_.tolist() == [False, True]
    dec = m.decision_function(X)
    assert dec.shape == (X.shape[0],)
    np.testing.assert_array_equal(m.predict(X), dec > 0)
    assert m.score(X, y.astype(bool)) > 0.85


def test_least_squares_on_pm1_targets_equals_ridge_classifier_on_the_same_features():
    """Same features ⇒ the same decision values as scikit-learn's RidgeClassifier (multiclass
    and binary), which is least squares on ±1 targets too."""
    for classes in (2, 4):
        X, y = _data(classes=classes, seed=classes)
        m = RandomFeatureClassifier(**KW).fit(X, y)
        ref = RidgeClassifier(alpha=KW["alpha"]).fit(m.feature_map_.transform(X), y)
        np.testing.assert_allclose(
            m.decision_function(X), ref.decision_function(m.feature_map_.transform(X)), rtol=1e-7, atol=1e-9
        )
        np.testing.assert_array_equal(m.predict(X), ref.predict(m.feature_map_.transform(X)))


@pytest.mark.parametrize("cls", [RandomFeatureClassifier, NystroemClassifier, ExactKernelClassifier])
def test_multiclass_is_one_vs_rest_of_binary_fits(cls):
    n = 150 if cls is ExactKernelClassifier else 400  # the exact fits are the slow ones
    X, y = _data(n=n, classes=3, seed=1)
    kw = dict(gamma=0.2, alpha=0.1, random_state=0) | ({} if cls is ExactKernelClassifier else {"n_components": 48})
    m = cls(**kw).fit(X, y)
    dec = m.decision_function(X)
    assert dec.shape == (n, 3)
    for j in range(3):
        b = cls(**kw).fit(X, y == j)  # classes [False, True]: +1 for class j, as column j
        tol = 1e-4 if cls is ExactKernelClassifier else 1e-9  # CG to tol 1e-6 vs an eigensolve
        np.testing.assert_allclose(dec[:, j], b.decision_function(X), rtol=tol, atol=tol)
    np.testing.assert_array_equal(m.predict(X), np.argmax(dec, axis=1))


def test_exact_classifier_equals_kernel_ridge_on_pm1_targets():
    X, y = _data(n=200, classes=3, seed=2)
    m = ExactKernelClassifier(gamma=0.3, alpha=0.5, fit_intercept=False, tol=1e-10).fit(X, y)
    Y = np.where(y[:, None] == np.arange(3), 1.0, -1.0)
    ref = SkKernelRidge(kernel="rbf", gamma=0.3, alpha=0.5).fit(X, Y)
    np.testing.assert_allclose(m.decision_function(X), ref.predict(X), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("cls", [RandomFeatureClassifier, ExactKernelClassifier])
def test_class_weight_equals_the_equivalent_sample_weight(cls):
    X, y = _data(n=200 if cls is ExactKernelClassifier else 500, classes=3, seed=3)
    labels = np.array(["a", "b", "c"])[y]
    sw = np.random.default_rng(0).uniform(0.5, 2.0, y.size)
    kw = dict(gamma=0.2, alpha=0.1, random_state=0) | ({"tol": 1e-10} if cls is ExactKernelClassifier else {})
    cw = {"a": 3.0, "b": 0.5, "c": 1.0}
    a = cls(**kw, class_weight=cw).fit(X, labels, sample_weight=sw)
    b = cls(**kw).fit(X, labels, sample_weight=sw * np.array([3.0, 0.5, 1.0])[y])
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), rtol=1e-7, atol=1e-9)
    # "balanced" = scikit-learn's compute_class_weight on an unbalanced subset
    keep = (y != 2) | (np.arange(y.size) % 5 == 0)
    Xs, ls = X[keep], labels[keep]
    bal = compute_class_weight("balanced", classes=np.unique(ls), y=ls)
    a = cls(**kw, class_weight="balanced").fit(Xs, ls)
    b = cls(**kw).fit(Xs, ls, sample_weight=bal[np.searchsorted(np.unique(ls), ls)])
    np.testing.assert_allclose(a.class_weight_, bal)
    np.testing.assert_allclose(a.decision_function(Xs), b.decision_function(Xs), rtol=1e-7, atol=1e-9)
    # with sample_weight too: "balanced" counts rows, not weights (scikit-learn's rule)
    sws = sw[keep]
    a = cls(**kw, class_weight="balanced").fit(Xs, ls, sample_weight=sws)
    b = cls(**kw).fit(Xs, ls, sample_weight=sws * bal[np.searchsorted(np.unique(ls), ls)])
    np.testing.assert_allclose(a.class_weight_, bal)
    np.testing.assert_allclose(a.decision_function(Xs), b.decision_function(Xs), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize(
    "est",
    [RandomFeatureClassifier(**KW, class_weight={"b": 2.0}), NystroemClassifier(n_components=32, random_state=0),
     ExactKernelClassifier(gamma=0.2), KernelClassifier(n_components=32, random_state=0),
     RandomFeatureClassifierCV(n_components=32, gammas=[0.1, 0.5], alphas=[0.01, 1.0], cv=3, random_state=0)],
    ids=lambda e: type(e).__name__,
)  # fmt: skip
@pytest.mark.parametrize("labels", [np.array(["a", "b", "c"]), np.array([True, False, True]), np.array([5, 6, 9])])
def test_save_load_round_trip(est, labels, tmp_path):
    X, y = _data(n=200, classes=3, seed=4)
    if labels.dtype == bool:
        y = y % 2
    if labels.dtype.kind != "U":
        est.set_params(class_weight=None)
    m = est.fit(X, labels[y])
    loaded = bigkernel.load(m.save(str(tmp_path / "m")))
    assert type(loaded) is type(m)
    np.testing.assert_array_equal(loaded.classes_, m.classes_)
    assert loaded.classes_.dtype == m.classes_.dtype
    np.testing.assert_array_equal(loaded.predict(X), m.predict(X))
    np.testing.assert_allclose(loaded.decision_function(X), m.decision_function(X), rtol=1e-12)
    assert loaded.get_params() == m.get_params()  # class_weight's labels keep their type


def test_dask_and_zarr_inputs_give_the_same_classifier(tmp_path):
    X, y = _data(n=3000, classes=3, seed=5)
    labels = np.array(["x", "y", "z"])[y]
    a = RandomFeatureClassifier(**KW, chunk_rows=1000).fit(X, labels)
    b = RandomFeatureClassifier(**KW).fit(da.from_array(X, chunks=(700, 5)), da.from_array(labels, chunks=700))
    np.testing.assert_allclose(b.decision_function(X), a.decision_function(X), rtol=1e-9, atol=1e-12)
    lazy = b.predict(da.from_array(X, chunks=(512, 5)))
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), a.predict(X))
    g = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    g.create_array("X", data=X, chunks=(1024, 5))
    g.create_array("y", data=y.astype(np.int64), chunks=(1024,))
    c = RandomFeatureClassifier(**KW).fit_dataset(bigkernel.open_source(str(tmp_path / "d.zarr")))
    np.testing.assert_allclose(c.decision_function(X), a.decision_function(X), rtol=1e-9, atol=1e-12)


def test_regression_target_and_single_class_are_refused():
    X, y = _data(n=100)
    with pytest.raises(DataError, match="Unknown label type: 'continuous'.*RandomFeatureRidge"):
        RandomFeatureClassifier().fit(X, y + 0.5)
    with pytest.raises(DataError, match="only one class"):
        RandomFeatureClassifier().fit(X, np.zeros(100))
    with pytest.raises(DataError, match="class_weight names class 'q'"):
        RandomFeatureClassifier(class_weight={"q": 2.0}).fit(X, np.array(["a", "b", "c"])[y])
    with pytest.raises(ValueError, match="loss"):
        RandomFeatureClassifier(loss="log").fit(X, y)


def test_kernel_classifier_picks_and_logs_the_solver(caplog):
    X, y = _data(n=300)
    with caplog.at_level(logging.INFO, logger="bigkernel"):
        m = KernelClassifier(n_components=32, random_state=0).fit(X, y)
    assert m.solver_ == "exact" and "solver exact" in caplog.text
    f = KernelClassifier(solver="random_features", n_components=32, random_state=0).fit(X, y)
    assert f.solver_ == "random_features" and isinstance(f.estimator_.estimator_, RandomFeatureRidge)


def test_kernel_classifier_says_which_solver_it_would_run():
    """The public choice (KernelRidge's rule, every class column counted) is the fit's choice,
    and make_solver_estimator gives the regressor that fits the ±1 targets."""
    X, y = _data(n=300, classes=3)
    m = KernelClassifier(n_components=32, random_state=0)
    solver, reason = m.choose_solver(X.shape[0], X.shape[1], 3)
    m.fit(X, y)
    assert (solver, reason) == (m.solver_, m.solver_reason_)
    f = KernelClassifier(solver="random_features", n_components=32, random_state=0)
    assert f.choose_solver(10**7, 5, 3) == ("random_features", "solver='random_features' was asked for")
    inner = f.make_solver_estimator("random_features")
    assert isinstance(inner, RandomFeatureRidge) and inner.n_components == 32 and not hasattr(inner, "coef_")


def test_cv_chooses_what_a_brute_force_loop_chooses():
    """Every (γ, α) fitted per fold by RandomFeatureClassifier on the same folds: the same
    held-out accuracies, hence the same choice."""
    X, y = _data(n=1200, classes=3, seed=6)
    gammas, alphas, K, D, seed = [0.05, 0.3, 2.0], [1e-3, 0.1, 10.0], 4, 48, 11
    m = RandomFeatureClassifierCV(gammas=gammas, alphas=alphas, cv=K, n_components=D, random_state=seed).fit(X, y)
    folds = FoldSplit(seed, K).groups(0, X.shape[0])
    brute = np.zeros((len(gammas), len(alphas), K))
    for i, g in enumerate(gammas):
        for j, a in enumerate(alphas):
            for k in range(K):
                tr, te = folds != k, folds == k
                f = RandomFeatureClassifier(gamma=g, alpha=a, n_components=D, random_state=seed).fit(X[tr], y[tr])
                brute[i, j, k] = f.score(X[te], y[te])
    np.testing.assert_allclose(m.cv_results_["mean_test_score"], brute.mean(axis=2).ravel(), atol=1e-12)
    for k in range(K):
        np.testing.assert_allclose(m.cv_results_[f"split{k}_test_score"], brute[:, :, k].ravel(), atol=1e-12)
    i, j = np.unravel_index(np.argmax(brute.mean(axis=2)), brute.shape[:2])
    assert m.best_params_ == {"gamma": gammas[i], "alpha": alphas[j]}
    ref = RandomFeatureClassifier(gamma=gammas[i], alpha=alphas[j], n_components=D, random_state=seed).fit(X, y)
    np.testing.assert_allclose(m.decision_function(X), ref.decision_function(X), rtol=1e-8, atol=1e-10)


def test_cv_weighted_folds_equal_the_partitioned_ones():
    X, y = _data(n=900, classes=2, seed=7)
    kw = dict(gammas=[0.1, 1.0], alphas=[1e-2, 1.0], cv=3, n_components=32, random_state=2)
    a = RandomFeatureClassifierCV(**kw).fit(X, y)
    b = RandomFeatureClassifierCV(**kw).fit(X, y, sample_weight=np.ones(y.size))
    np.testing.assert_allclose(a.cv_results_["mean_test_score"], b.cv_results_["mean_test_score"], atol=1e-12)
    c = RandomFeatureClassifierCV(**kw, class_weight={0: 2.0}).fit(X, y)
    d = RandomFeatureClassifierCV(**kw).fit(X, y, sample_weight=np.where(y == 0, 2.0, 1.0))
    np.testing.assert_allclose(c.cv_results_["mean_test_score"], d.cv_results_["mean_test_score"], atol=1e-12)
    np.testing.assert_allclose(c.decision_function(X), d.decision_function(X), rtol=1e-9)


def test_bootstrap_refuses_classifiers_with_the_way_out(tmp_path):
    X, y = _data(n=200)
    with pytest.raises(bigkernel.ParameterError, match="is a classifier.*np.where"):
        bigkernel.bootstrap(RandomFeatureClassifier(**KW), X, y, X[:5], n_bootstraps=4, store=str(tmp_path / "b"))
    assert not (tmp_path / "b").exists()  # refused before anything is written
