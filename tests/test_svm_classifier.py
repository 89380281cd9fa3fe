"""The SVM losses of RandomFeatureClassifier / NystroemClassifier: scikit-learn's checks, equal
to LinearSVC on the fitted feature map's explicit features (binary and one-vs-rest),
class_weight = sample weights, dask input, save/load, and the refusals."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from sklearn.svm import LinearSVC
from sklearn.utils.estimator_checks import parametrize_with_checks

import bigkernel
from bigkernel import ExactKernelClassifier, KernelClassifier, NystroemClassifier, RandomFeatureClassifier
from bigkernel.errors import ParameterError

pytestmark = pytest.mark.numerics


def _expected_failures(est):
    if est.loss == "hinge":
        # the hinge is solved to tol=1e-3 by a linearly converging iteration: (1) under class
        # weights 1000 : 1e-4 : 1e-4 it may stall above tol on the down-weighted column and say
        # so with a ConvergenceWarning (an error under pytest); (2) weighted and repeated rows
        # give the same sums up to rounding, but the stopped iterates differ by more than the
        # check's rtol 1e-7 (scikit-learn's LinearSVC carries the same expected failure).
        # Non-strict: either may pass (on these small data the hinge is solved in the dual on
        # the kept Gram matrix, which usually passes both). The squared hinge passes both.
        return {
            "check_class_weight_classifiers": "hinge may stall under class weights 1000:1e-4 (ConvergenceWarning)",
            "check_sample_weight_equivalence_on_dense_data": "iterates stopped at tol=1e-3 differ at 1e-3, not 1e-7",
            "check_sample_weight_equivalence_on_sparse_data": "iterates stopped at tol=1e-3 differ at 1e-3, not 1e-7",
        }
    return {}


@parametrize_with_checks(
    [
        RandomFeatureClassifier(n_components=32, loss="squared_hinge"),
        RandomFeatureClassifier(n_components=32, loss="hinge", tol=1e-3),
        NystroemClassifier(n_components=16, loss="hinge", tol=1e-3),
    ],
    expected_failed_checks=_expected_failures,
)
def test_sklearn_compatible_with_hinge_losses(estimator, check):
    check(estimator)


def _labels(n=300, seed=0, k=2):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    if k == 2:
        return X, np.where(np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] > 0, "yes", "no")
    return X, np.array(["a", "b", "c"])[np.argmax(X + 0.4 * rng.standard_normal((n, 3)), axis=1)]


@pytest.mark.parametrize("cls", [RandomFeatureClassifier, NystroemClassifier])
@pytest.mark.parametrize("k", [2, 3])
def test_squared_hinge_equals_linearsvc_on_the_feature_map(cls, k):
    X, y = _labels(k=k)
    C = 2.0
    est = cls(n_components=30, loss="squared_hinge", alpha=1 / (2 * C), fit_intercept=False, tol=1e-12, random_state=0)
    est.fit(X, y)
    Phi = est.feature_map_.transform(X)
    ref = LinearSVC(C=C, dual=False, fit_intercept=False, tol=1e-12, max_iter=10**5).fit(Phi, y)
    np.testing.assert_allclose(np.atleast_2d(est.coef_), ref.coef_, rtol=1e-5, atol=1e-6 * np.abs(ref.coef_).max())
    np.testing.assert_array_equal(est.classes_, ref.classes_)
    np.testing.assert_array_equal(est.predict(X), ref.predict(Phi))
    assert est.converged_.all() and est.n_iter_ <= 15


def test_hinge_classifier_close_to_linearsvc():
    X, y = _labels(seed=1)
    C = 0.2
    est = RandomFeatureClassifier(n_components=30, loss="hinge", alpha=1 / (2 * C), fit_intercept=False, tol=1e-6)
    est.set_params(random_state=0).fit(X, y)
    Phi = est.feature_map_.transform(X)
    ref = LinearSVC(C=C, loss="hinge", dual=True, fit_intercept=False, tol=1e-10, max_iter=10**6).fit(Phi, y)
    assert est.dual_gap_[0] <= 1e-6
    P = est.dual_gap_[0]  # relative; the coefficient bound is sqrt(gap·P/α), P ≤ Σc = n
    assert np.linalg.norm(est.coef_ - ref.coef_[0]) <= np.sqrt(P * len(y) * 2 * C) + 1e-6
    assert np.mean(est.predict(X) == ref.predict(Phi)) >= 0.99


@pytest.mark.parametrize("k", [2, 3])
def test_class_weight_equals_sample_weight(k):
    X, y = _labels(k=k, seed=2)
    cw = {"yes": 3.0, "no": 0.5} if k == 2 else {"a": 2.0, "c": 0.5}
    kw = dict(n_components=20, loss="squared_hinge", alpha=0.3, tol=1e-12, random_state=1)
    a = RandomFeatureClassifier(class_weight=cw, **kw).fit(X, y)
    sw = np.array([cw.get(label, 1.0) for label in y])
    b = RandomFeatureClassifier(**kw).fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=1e-9, atol=1e-12)


def test_dask_input_save_and_load(tmp_path):
    X, y = _labels(k=3, seed=3)
    kw = dict(n_components=20, loss="hinge", alpha=0.5, tol=1e-4, random_state=2)
    a = RandomFeatureClassifier(**kw).fit(X, y)
    b = RandomFeatureClassifier(**kw).fit(da.from_array(X, chunks=(64, 3)), da.from_array(y, chunks=64))
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-8, atol=1e-10)
    assert a.n_iter_ == b.n_iter_ >= 1  # small data: the hinge's dual on the kept Gram, one pass
    a.save(str(tmp_path / "m"))
    m = bigkernel.load(str(tmp_path / "m"))
    assert type(m) is RandomFeatureClassifier and m.loss == "hinge"
    assert m.n_iter_ == a.n_iter_
    np.testing.assert_array_equal(m.dual_gap_, a.dual_gap_)
    np.testing.assert_array_equal(m.converged_, a.converged_)
    np.testing.assert_array_equal(m.predict(X), a.predict(X))


def test_the_saved_svm_facts_do_not_depend_on_later_parameters(tmp_path):
    """The state is the fit's: parameters changed after it (here the loss) do not stop a save."""
    X, y = _labels(k=2, seed=4)
    a = RandomFeatureClassifier(n_components=16, loss="squared_hinge", random_state=0).fit(X, y)
    a.set_params(loss="squared_error", alpha=[0.1, 1.0])
    a.save(str(tmp_path / "m"))
    m = bigkernel.load(str(tmp_path / "m"))
    assert m.n_iter_ == a.n_iter_ and m.dual_gap_.tolist() == a.dual_gap_.tolist()
    np.testing.assert_array_equal(m.decision_function(X), a.decision_function(X))


def test_refusals():
    X, y = _labels(n=60)
    for est in (ExactKernelClassifier(loss="hinge"), KernelClassifier(loss="squared_hinge")):
        with pytest.raises(ParameterError, match="RandomFeatureClassifier and NystroemClassifier"):
            est.fit(X, y)
    with pytest.raises(ParameterError, match="one number for alpha"):
        RandomFeatureClassifier(loss="hinge", alpha=[0.1, 1.0]).fit(X, y)
    with pytest.raises(ParameterError, match="loss"):
        RandomFeatureClassifier(loss="log_loss").fit(X, y)


def test_holdout_partition_fits_the_training_rows():
    """A job's holdout split (a row partition) keeps only its training rows in the SVM."""
    from bigkernel.data.sources import as_dataset
    from bigkernel.numerics.splits import HoldoutSplit

    X, labels = _labels(n=240, seed=5)
    y = (labels == "yes").astype(np.int64)
    split = HoldoutSplit(seed=3, fraction=0.25)
    train = split.groups(0, len(y)) == 0
    kw = dict(n_components=16, loss="squared_hinge", alpha=0.5, tol=1e-12, random_state=4)
    a = RandomFeatureClassifier(**kw).fit_dataset(as_dataset(X, y, chunk_rows=100), weights=split)
    b = RandomFeatureClassifier(**kw).fit(X[train], y[train])
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-9, atol=1e-12)
    assert a.n_samples_fit_ == int(train.sum())
