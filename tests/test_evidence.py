"""The evidence (log marginal likelihood) against dense references: scikit-learn's
GaussianProcessRegressor on the exact path, the Bayesian-linear-regression evidence of explicit
features on the primal path, and the choice of alpha="evidence" / cv="evidence"."""

import numpy as np
import pytest
from scipy.stats import multivariate_normal
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF

from bigkernel import (
    ExactKernelRidge,
    ExactKernelRidgeCV,
    KernelRidge,
    NystroemRidge,
    ParameterError,
    RandomFeatureRidge,
    RandomFeatureRidgeCV,
)
from bigkernel.numerics.evidence import cholesky_log_det, evidence_path, log_det_path

pytestmark = pytest.mark.numerics


def dense_log_evidence(K, y, alpha, sigma2=None, fit_intercept=False):
    """log p(y) for y ~ N(b1, σ²(K + αI)), b integrated out under a flat unit-density prior when
    ``fit_intercept``; ``sigma2=None``: maximised over σ² (a dense, independent formula)."""
    n = y.size
    C = K + alpha * np.eye(n)
    Ci = np.linalg.inv(C)
    _, logdet = np.linalg.slogdet(C)
    if fit_intercept:
        one = np.ones(n)
        a = one @ Ci @ one
        P = Ci - np.outer(Ci @ one, Ci @ one) / a
        N, extra = n - 1, np.log(a)
    else:
        P, N, extra = Ci, n, 0.0
    quad = y @ P @ y
    s2 = quad / N if sigma2 is None else sigma2
    if not fit_intercept and sigma2 is not None:  # the plain Gaussian: scipy as the reference
        return multivariate_normal(np.zeros(n), s2 * C).logpdf(y)
    return -0.5 * (N * np.log(2 * np.pi * s2) + logdet + extra + quad / s2)


def sine(n, seed=0, d=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, d))
    return X, np.sin(2 * X[:, 0]) + 0.5 + 0.2 * rng.standard_normal(n)


def explicit_features(model, X):
    fm = model.feature_map_
    return np.asarray(fm.transform_unscaled(X, np.float64)) * fm.scale


@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("n_components", [40, 300])  # D < n and D > n (Sylvester's identity)
def test_primal_evidence_equals_dense_bayesian_regression(fit_intercept, n_components):
    X, y = sine(200)
    alphas = [1e-3, 0.05, 1.0]
    m = RandomFeatureRidge(gamma=1.0, n_components=n_components, alpha=alphas, fit_intercept=fit_intercept,
                           random_state=0, dtype="float64").fit(X, y)  # fmt: skip
    Phi = explicit_features(m, X)
    K = Phi @ Phi.T
    for j, a in enumerate(m.alphas_):
        for s2 in (1.0, 0.3):
            got = m.evidence_.log_likelihood(s2)[j, 0]
            assert got == pytest.approx(dense_log_evidence(K, y, a, s2, fit_intercept), rel=1e-9, abs=1e-8)
        want = dense_log_evidence(K, y, a, None, fit_intercept)
        assert m.log_marginal_likelihood_path_[j] == pytest.approx(want, rel=1e-9, abs=1e-8)
    # σ² estimate: the maximiser of the dense evidence
    j = int(np.flatnonzero(m.alphas_ == m.alpha_)[0])
    s2 = m.sigma2_
    for f in (0.9, 1.1):
        assert dense_log_evidence(K, y, m.alpha_, s2 * f, fit_intercept) < dense_log_evidence(
            K, y, m.alpha_, s2, fit_intercept
        )
    assert m.log_marginal_likelihood_ == m.log_marginal_likelihood_path_[j]


def test_nystroem_evidence_equals_dense():
    X, y = sine(150, seed=1)
    m = NystroemRidge(gamma=2.0, n_components=30, alpha=0.01, random_state=0).fit(X, y)
    Phi = explicit_features(m, X)
    want = dense_log_evidence(Phi @ Phi.T, y, 0.01, None, True)
    assert m.log_marginal_likelihood_ == pytest.approx(want, rel=1e-9)


def test_exact_evidence_equals_gaussian_process_regressor():
    X, y = sine(120, seed=2, d=2)
    gamma, alpha = 0.7, 0.05
    m = ExactKernelRidge(gamma=gamma, alpha=alpha, fit_intercept=False, tol=1e-12).fit(X, y)
    gp = GaussianProcessRegressor(RBF(1 / np.sqrt(2 * gamma)), alpha=alpha, optimizer=None).fit(X, y)
    assert m.evidence_.log_likelihood(1.0)[0, 0] == pytest.approx(gp.log_marginal_likelihood_value_, rel=1e-9)


def test_exact_evidence_with_intercept_equals_flat_prior_formula():
    X, y = sine(120, seed=3)
    m = ExactKernelRidge(gamma=1.5, alpha=[0.01, 0.1], fit_intercept=True, tol=1e-12).fit(X, y)
    K = m.kernel_(X)
    for j, a in enumerate(m.alphas_):
        assert m.evidence_.log_likelihood(1.0)[j, 0] == pytest.approx(dense_log_evidence(K, y, a, 1.0, True), rel=1e-8)
        assert m.log_marginal_likelihood_path_[j] == pytest.approx(dense_log_evidence(K, y, a, None, True), rel=1e-8)


def test_flat_prior_is_the_limit_of_a_constant_kernel():
    """The reported intercept evidence = GPR with kernel k + c, plus ½ log 2πσ²c, as c → ∞."""
    X, y = sine(80, seed=4)
    m = ExactKernelRidge(gamma=1.0, alpha=0.1, tol=1e-12).fit(X, y)
    K = m.kernel_(X)
    c = 1e4
    limit = dense_log_evidence(K + c, y, 0.1, 1.0, False) + 0.5 * np.log(2 * np.pi * c)
    assert m.evidence_.log_likelihood(1.0)[0, 0] == pytest.approx(limit, abs=1e-3)


def test_alpha_evidence_is_argmax_of_dense_evidence():
    X, y = sine(150, seed=5)
    m = RandomFeatureRidge(gamma=1.0, n_components=60, alpha="evidence", random_state=1).fit(X, y)
    Phi = explicit_features(m, X)
    dense = [dense_log_evidence(Phi @ Phi.T, y, a, None, True) for a in m.alphas_]
    assert m.alpha_ == m.alphas_[int(np.argmax(dense))]
    e = ExactKernelRidge(gamma=1.0, alpha="evidence", tol=1e-10).fit(X, y)
    K = e.kernel_(X)
    dense = [dense_log_evidence(K, y, a, None, True) for a in e.alphas_]
    assert e.alpha_ == e.alphas_[int(np.argmax(dense))]
    k = KernelRidge(gamma=1.0, alpha="evidence", solver="nystroem", n_components=40, random_state=0).fit(X, y)
    assert k.alpha_ == k.estimator_.alphas_[int(np.argmax(k.log_marginal_likelihood_path_))]


def test_exact_cv_evidence_scores_every_point_like_the_dense_formula():
    X, y = sine(100, seed=6)
    gammas, alphas = [0.3, 3.0], [1e-3, 1e-2, 1e-1]
    cv = ExactKernelRidgeCV(gammas=gammas, alphas=alphas, criterion="evidence").fit(X, y)
    res = cv.cv_results_
    for i, (g, a) in enumerate(zip(res["param_gamma"], res["param_alpha"])):
        K = ExactKernelRidge(gamma=g).fit(X[:2], y[:2]).kernel_(X)
        assert res["mean_test_evidence"][i] == pytest.approx(dense_log_evidence(K, y, a, None, True), rel=1e-8)
    assert cv.best_index_ == int(np.argmax(res["mean_test_evidence"]))
    assert cv.log_marginal_likelihood_ == pytest.approx(res["mean_test_evidence"][cv.best_index_])


def test_random_feature_cv_evidence_matches_per_gamma_fits():
    X, y = sine(300, seed=7)
    gammas, alphas = [0.2, 2.0], [1e-3, 1e-2, 1e-1]
    cv = RandomFeatureRidgeCV(gammas=gammas, alphas=alphas, cv="evidence", n_components=50, random_state=3).fit(X, y)
    scores = np.concatenate([
        RandomFeatureRidge(gamma=g, alpha=alphas, n_components=50, random_state=3, dtype="float64").fit(X, y).log_marginal_likelihood_path_
        for g in gammas
    ])  # fmt: skip
    np.testing.assert_allclose(cv.cv_results_["mean_test_score"], scores, rtol=1e-10)
    assert cv.best_index_ == int(np.argmax(scores))
    assert cv.log_marginal_likelihood_ == pytest.approx(scores.max())


def test_weights_are_repeated_rows():
    X, y = sine(60, seed=8)
    w = np.random.default_rng(0).integers(0, 3, 60)
    kw = dict(gamma=1.0, n_components=30, alpha=[0.01, 0.1], random_state=0, dtype="float64")
    a = RandomFeatureRidge(**kw).fit(X, y, sample_weight=w)
    b = RandomFeatureRidge(**kw).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    np.testing.assert_allclose(a.log_marginal_likelihood_path_, b.log_marginal_likelihood_path_, rtol=1e-9)
    np.testing.assert_allclose(a.sigma2_, b.sigma2_, rtol=1e-9)


def test_multi_target_sums_independent_targets():
    X, y = sine(100, seed=9)
    Y = np.column_stack([y, 2 * y + 1])
    m = RandomFeatureRidge(gamma=1.0, n_components=30, alpha=0.05, random_state=0).fit(X, Y)
    parts = [RandomFeatureRidge(gamma=1.0, n_components=30, alpha=0.05, random_state=0).fit(X, Y[:, j]) for j in (0, 1)]
    assert m.log_marginal_likelihood_ == pytest.approx(sum(p.log_marginal_likelihood_ for p in parts), rel=1e-10)
    np.testing.assert_allclose(m.sigma2_, [p.sigma2_ for p in parts], rtol=1e-10)


def test_exact_evidence_refused_above_the_cholesky_limit(monkeypatch):
    import bigkernel.solvers.budget as exact

    monkeypatch.setattr(exact, "EXACT_DF_MAX_N", 20)
    monkeypatch.setattr(exact, "EXACT_EVIDENCE_MAX_N", 50)
    X, y = sine(60)
    with pytest.raises(ParameterError, match="n <= 50 when the dense.*n=60.*NystroemRidge or RandomFeatureRidge"):
        ExactKernelRidge(alpha="evidence").fit(X, y)
    with pytest.raises(ParameterError, match="fit half the memory budget"):  # 16·n² bytes > budget / 2
        ExactKernelRidge(alpha="evidence", memory_budget=16 * 40 * 40).fit(X[:40], y[:40])
    m = ExactKernelRidge(alpha=0.1).fit(X, y)  # fixed alpha: σ² always, the evidence value not
    assert np.isnan(m.log_marginal_likelihood_) and m.log_marginal_likelihood_path_ is None
    assert np.isfinite(m.sigma2_) and np.isnan(m.evidence_.log_det).all()


def _weights(kind, n):
    rng = np.random.default_rng(5)
    return {"none": None, "counts": rng.integers(1, 4, n).astype(float), "real": rng.uniform(0.3, 2.0, n)}[kind]


@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("weights", ["none", "counts", "real"])
def test_exact_beyond_the_eigenvalue_limit_equals_the_eigenvalue_path(monkeypatch, fit_intercept, weights):
    """Above EXACT_DF_MAX_N (forced here at small n): σ² from the dual solution's quadratic form
    and, with alpha="evidence", the evidence from one Cholesky factor per α equal the values of
    the eigenvalue path (and the dense formula)."""
    import bigkernel.solvers.budget as exact

    X, y = sine(90, seed=11)
    w = _weights(weights, 90)
    kw = dict(gamma=1.0, fit_intercept=fit_intercept, tol=1e-12)
    small_fixed = ExactKernelRidge(alpha=0.05, **kw).fit(X, y, sample_weight=w)
    small_ev = ExactKernelRidge(alpha="evidence", **kw).fit(X, y, sample_weight=w)
    monkeypatch.setattr(exact, "EXACT_DF_MAX_N", 50)
    big_fixed = ExactKernelRidge(alpha=0.05, **kw).fit(X, y, sample_weight=w)
    big_ev = ExactKernelRidge(alpha="evidence", **kw).fit(X, y, sample_weight=w)
    assert np.isnan(big_fixed.log_marginal_likelihood_) and np.isnan(big_fixed.df_)  # really the large-n branch
    assert big_fixed.sigma2_ == pytest.approx(small_fixed.sigma2_, rel=1e-9)
    np.testing.assert_allclose(big_ev.alphas_, small_ev.alphas_, rtol=1e-14)
    np.testing.assert_allclose(big_ev.evidence_.log_det, small_ev.evidence_.log_det, rtol=1e-9)
    # a log evidence can be near 0: its agreement is absolute (a log-determinant of ~100 agrees to ~1e-12)
    np.testing.assert_allclose(
        big_ev.log_marginal_likelihood_path_, small_ev.log_marginal_likelihood_path_, rtol=1e-9, atol=1e-7
    )
    assert big_ev.alpha_ == small_ev.alpha_ and big_ev.sigma2_ == pytest.approx(small_ev.sigma2_, rel=1e-9)
    if weights == "none":  # and the independent dense formula
        K = big_ev.kernel_(X)
        want = [dense_log_evidence(K, y, a, None, fit_intercept) for a in big_ev.alphas_]
        np.testing.assert_allclose(big_ev.log_marginal_likelihood_path_, want, rtol=1e-9, atol=1e-7)
    if weights == "counts":  # repeated rows
        r = np.repeat(np.arange(90), w.astype(int))
        rep = ExactKernelRidge(alpha=0.05, **kw).fit(X[r], y[r])
        assert big_fixed.sigma2_ == pytest.approx(rep.sigma2_, rel=1e-9)


def test_sigma2_beyond_the_eigenvalue_limit_is_gaussian_process_regressor_maximiser(monkeypatch):
    """Without intercept σ̂² = yᵀ(K + αI)⁻¹y / n, the σ² maximising scikit-learn's evidence of the
    kernel σ²k (noise σ²α); checked against GaussianProcessRegressor's own quadratic form."""
    import bigkernel.solvers.budget as exact

    monkeypatch.setattr(exact, "EXACT_DF_MAX_N", 50)
    X, y = sine(120, seed=12, d=2)
    gamma, alpha = 0.7, 0.05
    m = ExactKernelRidge(gamma=gamma, alpha=alpha, fit_intercept=False, tol=1e-12).fit(X, y)
    gp = GaussianProcessRegressor(RBF(1 / np.sqrt(2 * gamma)), alpha=alpha, optimizer=None).fit(X, y)
    assert m.sigma2_ == pytest.approx(y @ gp.alpha_ / y.size, rel=1e-9)
    # the evidence of σ²k at noise σ²α is GPR's at σ² = 1 shifted: largest at sigma2_
    K = m.kernel_(X)
    at = [dense_log_evidence(K, y, alpha, m.sigma2_ * f, False) for f in (0.95, 1.0, 1.05)]
    assert at[1] > max(at[0], at[2])


def test_cholesky_log_det_equals_the_spectrum():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((40, 25))
    K = A @ A.T  # rank 25: zero eigenvalues as in a smooth kernel
    c = rng.uniform(0.5, 3.0, 40)
    for w in (None, c):
        s = np.ones(40) if w is None else np.sqrt(w)
        Kt = s[:, None] * K * s[None, :]
        n = 40.0 if w is None else float(w.sum())
        for fit_intercept in (False, True):
            M = Kt
            if fit_intercept:
                H = np.eye(40) - np.outer(s, s) / (s @ s)
                M = H @ Kt @ H
            lam = np.linalg.eigvalsh(0.5 * (M + M.T))
            for a in (1e-3, 0.5):
                want = log_det_path(lam, [a], n - 1.0 if fit_intercept else n)[0]
                assert cholesky_log_det(K, a, fit_intercept, w) == pytest.approx(want, rel=1e-10)
    assert np.isnan(cholesky_log_det(-K - np.eye(40), 0.1, False))  # not positive definite


def test_evidence_path_log_det_counts_dimensions():
    lam = np.array([3.0, 1.0, 0.0])
    ev = evidence_path(lam, np.ones((2, 1)), [0.5, 2.0], 5, False)
    want = [np.log(3.5) + np.log(1.5) + 3 * np.log(0.5), np.log(5) + np.log(3) + 3 * np.log(2)]
    np.testing.assert_allclose(ev.log_det, want)
