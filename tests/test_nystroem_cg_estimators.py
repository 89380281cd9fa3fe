"""Falkon's CG behind the other estimators: NystroemClassifier(solver="cg") (every class's ±1
column in the same passes), and KernelRidge / KernelClassifier choosing NystroemRidge(solver="cg")
past the centres the one-pass Nyström solver holds.

References: the same classifier with solver="direct" and the same centres (the same least-squares
problem solved another way); the limit's arithmetic.
"""

import logging

import numpy as np
import pytest
from sklearn.datasets import load_digits

import bigkernel
from bigkernel import KernelClassifier, KernelRidge, NystroemClassifier, NystroemRidge
from bigkernel.errors import ParameterError
from bigkernel.solvers import budget
from bigkernel.solvers.budget import NYSTROEM_DIRECT_SQUARES, nystroem_direct_limit
from bigkernel.solvers.nystroem_cg import DEFAULT_RELATIVE_ALPHAS


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:1200] / 16.0, y[:1200], X[1200:1500] / 16.0, y[1200:1500]


KW = dict(gamma=0.05, n_components=300, landmarks="uniform", random_state=0, alpha=0.1)


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


# --------------------------------------------------------------------------------------------
# NystroemClassifier(solver="cg")
# --------------------------------------------------------------------------------------------
def test_classifier_cg_equals_direct_with_the_same_centres(digits):
    """10 classes: the ±1 columns of one least-squares problem per class, solved by CG to a
    relative residual of 1e-10, give the direct solution's decision values within 1e-6 of
    their scale (the regressor's own bound at that tol: tests/test_nystroem_cg.py, a residual
    of 1e-10 leaves the iterate within ~κ·1e-10 of the solution, κ the preconditioned
    system's condition number, O(1)–O(10⁴)); so the labels and the accuracy are the same."""
    X, y, Xt, yt = digits
    direct = NystroemClassifier(**KW).fit(X, y)
    cg = NystroemClassifier(solver="cg", tol=1e-10, max_iter=300, **KW).fit(X, y)
    np.testing.assert_array_equal(cg.feature_map_.landmarks, direct.feature_map_.landmarks)
    assert direct.feature_map_.n_components == 300  # K_mm full rank: the same model space
    assert _rel(cg.decision_function(Xt), direct.decision_function(Xt)) < 1e-6
    np.testing.assert_array_equal(cg.predict(Xt), direct.predict(Xt))
    assert cg.score(Xt, yt) == direct.score(Xt, yt) > 0.9
    # every class's column in the same passes: one moments pass, then one per CG iteration
    inner = cg.estimator_
    assert inner.solver == "cg" and inner.coef_.shape == (10, 300)
    assert inner.solver_info_["passes"] == cg.n_iter_ + 1 and cg.residuals_.shape == (cg.n_iter_ + 1, 10)


def test_classifier_cg_default_tol_keeps_the_accuracy(digits):
    """The classifier's default tol (1e-4) stops earlier: decision values within 1e-2 of their
    scale, accuracy within one percentage point of the direct solver's."""
    X, y, Xt, yt = digits
    direct = NystroemClassifier(**KW).fit(X, y)
    cg = NystroemClassifier(solver="cg", **KW).fit(X, y)
    assert cg.tol == 1e-4 and cg.estimator_.tol == 1e-4  # passed on to the inner regressor
    assert _rel(cg.decision_function(Xt), direct.decision_function(Xt)) < 1e-2
    assert abs(cg.score(Xt, yt) - direct.score(Xt, yt)) <= 0.01
    assert np.mean(cg.predict(Xt) == direct.predict(Xt)) >= 0.99


def test_classifier_cg_alpha_grid_binary_and_round_trip(digits, tmp_path):
    """Two classes, string labels, a list of α chosen on the held-out split; the saved model
    loads and predicts bitwise, with its CG attributes."""
    X, y, Xt, _ = digits
    labels = np.where(y % 2 == 0, "even", "odd")
    alphas = [0.01, 1.0, 100.0]
    clf = NystroemClassifier(
        solver="cg", alpha=alphas, validation_fraction=0.2, tol=1e-6, gamma=0.05, n_components=120, random_state=1
    ).fit(X, labels)
    inner = clf.estimator_
    assert inner.validation_fraction == 0.2 and inner.max_iter == 100
    assert clf.validation_scores_.shape == (3,) and clf.alpha_ == alphas[int(np.argmin(clf.validation_scores_))]
    assert clf.residuals_.shape[1] == 3  # one column per α (one ±1 column for two classes)
    assert clf.decision_function(Xt).shape == (len(Xt),)
    assert set(clf.predict(Xt)) <= {"even", "odd"} and clf.score(X, labels) > 0.9
    clf.save(str(tmp_path / "m.zarr"))
    back = bigkernel.load(str(tmp_path / "m.zarr"))
    assert type(back) is NystroemClassifier and back.solver == "cg" and back.estimator_.solver == "cg"
    np.testing.assert_array_equal(back.decision_function(Xt), clf.decision_function(Xt))
    np.testing.assert_array_equal(back.predict(Xt), clf.predict(Xt))
    assert back.n_iter_ == clf.n_iter_ and back.alpha_ == clf.alpha_
    np.testing.assert_array_equal(back.validation_scores_, clf.validation_scores_)


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_svm_losses_refuse_the_cg_solver(digits, loss):
    X, y, _, _ = digits
    with pytest.raises(ParameterError, match=r"solver='cg'.*use solver='direct' for the SVM"):
        NystroemClassifier(solver="cg", loss=loss, **KW).fit(X, y)


def test_classifier_solver_is_checked_by_the_regressors_table(digits):
    X, y, _, _ = digits
    with pytest.raises(ParameterError, match="solver"):
        NystroemClassifier(solver="falkon").fit(X, y)
    with pytest.raises(ParameterError, match="validation_fraction"):
        NystroemClassifier(solver="cg", validation_fraction=1.0).fit(X, y)


# --------------------------------------------------------------------------------------------
# KernelRidge / KernelClassifier: the one-pass Nyström limit
# --------------------------------------------------------------------------------------------
def test_the_direct_limit_is_the_constant_or_the_memory_of_its_squares():
    assert nystroem_direct_limit(10**15) == budget.NYSTROEM_DIRECT_MAX_COMPONENTS == 8192
    m = nystroem_direct_limit(10**8)  # 100 MB: the M×M arrays decide
    assert NYSTROEM_DIRECT_SQUARES * 8 * m**2 <= 10**8 < NYSTROEM_DIRECT_SQUARES * 8 * (m + 1) ** 2
    assert nystroem_direct_limit(1) == 1


def _data(n=3000, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)


def test_kernel_ridge_picks_cg_past_the_constant_and_logs_why(monkeypatch, caplog):
    X, y = _data()
    monkeypatch.setattr(budget, "NYSTROEM_DIRECT_MAX_COMPONENTS", 50)
    kw = dict(solver="nystroem", gamma=0.5, alpha=1.0, random_state=0)
    assert KernelRidge(n_components=50, **kw).choose_solver(3000, 4, 1)[0] == "nystroem"  # at the limit: one pass
    with caplog.at_level(logging.INFO, logger="bigkernel.models.kernel_ridge"):
        m = KernelRidge(n_components=80, **kw).fit(X, y)
    assert m.solver_ == "cg" and "past the 50 centres the one-pass Nyström solver takes" in m.solver_reason_
    assert "solver cg — solver='nystroem' was asked for; n_components=80" in caplog.text
    inner = m.estimator_
    assert type(inner) is NystroemRidge and inner.solver == "cg" and inner.n_components == 80
    assert inner.tol == 1e-6 and inner.max_iter == 100  # KernelRidge's tol; max_iter None: the CG's default
    assert m.n_iter_ == inner.n_iter_ >= 1 and m.df_ is None and m.gcv_ is None  # all rows sampled: 1 pass
    # the same model as NystroemRidge(solver="cg") built directly
    ref = NystroemRidge(solver="cg", n_components=80, gamma=0.5, alpha=1.0, random_state=0).fit(X, y)
    np.testing.assert_array_equal(m.predict(X[:50]), ref.predict(X[:50]))


def test_kernel_ridge_auto_picks_cg_when_the_squares_do_not_fit_the_budget(tmp_path):
    """1 MB: the Gram matrix of 3,000 rows does not fit (Nyström), nor do 6 float64 200×200
    arrays (200 > the limit 144): Falkon's CG, "gcv" becoming the default α grid."""
    X, y = _data()
    assert nystroem_direct_limit(10**6) == 144
    m = KernelRidge(memory_budget=10**6, n_components=200, gamma=0.5, alpha="gcv", random_state=0).fit(X, y)
    assert m.solver_ == "cg" and "does not fit the memory budget" in m.solver_reason_
    assert "past the 144 centres" in m.solver_reason_ and "0.001 GB memory budget" in m.solver_reason_
    np.testing.assert_allclose(m.estimator_.alphas_, 3000 * DEFAULT_RELATIVE_ALPHAS)
    assert m.alpha_ in m.estimator_.alphas_ and np.mean((m.predict(X) - y) ** 2) < 0.05
    # the budget reaches the CG solver: 7 Cholesky factors (2.9 MB) do not fit, one eigh (0.7 MB) does
    assert m.estimator_.memory_budget == 10**6 and m.estimator_.solver_info_["preconditioner"] == "eigen"
    small = KernelRidge(memory_budget=10**6, n_components=100, gamma=0.5, random_state=0)
    assert small.choose_solver(3000, 4, 1)[0] == "nystroem"  # under the limit: the one-pass solver
    m.save(str(tmp_path / "kr.zarr"))
    back = bigkernel.load(str(tmp_path / "kr.zarr"))
    assert back.solver_ == "cg" and back.estimator_.solver == "cg"
    np.testing.assert_array_equal(back.predict(X[:100]), m.predict(X[:100]))


def test_kernel_ridge_cg_asked_for_and_evidence_refused():
    X, y = _data(1500)
    m = KernelRidge(solver="cg", n_components=60, gamma=0.5, alpha=[0.1, 10.0], random_state=0).fit(X, y)
    assert m.solver_reason_ == "solver='cg' was asked for" and m.estimator_.solver == "cg"
    assert m.estimator_.validation_scores_.shape == (2,)
    with pytest.raises(ParameterError, match="alpha='evidence' needs the one-pass Nyström solver"):
        KernelRidge(solver="cg", n_components=60, alpha="evidence").fit(X, y)
    with pytest.raises(ParameterError, match="'cg'"):
        KernelRidge(solver="falkon").fit(X, y)


def test_kernel_classifier_fits_every_class_in_the_cg_passes(monkeypatch, digits):
    X, y, Xt, yt = digits
    monkeypatch.setattr(budget, "NYSTROEM_DIRECT_MAX_COMPONENTS", 100)
    clf = KernelClassifier(solver="nystroem", n_components=300, gamma=0.05, alpha=0.1, landmarks="uniform",
                           random_state=0).fit(X, y)  # fmt: skip
    assert clf.solver_ == "cg" and clf.choose_solver(1200, 64, 10)[0] == "cg"
    inner = clf.estimator_.estimator_
    assert type(inner) is NystroemRidge and inner.solver == "cg" and inner.coef_.shape == (10, 300)
    direct = NystroemClassifier(**KW).fit(X, y)  # the same centres and α
    assert abs(clf.score(Xt, yt) - direct.score(Xt, yt)) <= 0.01
