"""The primal solve at one α by Cholesky (``numerics/primal_cholesky.py``) against the
eigendecomposition route: β, df, GCV and the evidence over α from 1e-12 to 10 times the largest
eigenvalue (declined where that route must decide), the deferred decomposition, the declines
and a fitted estimator (spectrum, posterior std, saved model, pickle)."""

import pickle

import numpy as np
import pytest

from bigkernel import RandomFeatureRidge, load
from bigkernel.numerics import primal
from bigkernel.numerics.primal import eigen_path, solve_primal
from bigkernel.numerics.primal_cholesky import MIN_RELATIVE_ALPHA, solve_one_alpha
from bigkernel.numerics.sums import sums_precision
from tests._tolerance import EPS, assert_backward_stable
from tests.test_tridiagonal import CASES, _gram, _stats

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set


def _by_eigen(monkeypatch):
    monkeypatch.setattr(primal, "_solve_by_cholesky", lambda *a, **kw: None)


@pytest.mark.parametrize("D, n, gamma, dtype, k", CASES)
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_one_alpha_cholesky_equals_the_eigen_route(D, n, gamma, dtype, k, fit_intercept):
    """Where it serves, the Cholesky solve is backward stable and its df, GCV and evidence agree
    with the eigendecomposition's within the eigenvalues' rounding; it never decomposes."""
    st = _stats(D, n, gamma, dtype, k=k)
    eps = sums_precision(dtype)
    ref = eigen_path(st, fit_intercept, eps)
    s_max = float(ref.eigvals.max())
    G, b, *_ = primal.centred_system(st, fit_intercept)
    served = 0
    for a in s_max * np.logspace(-12, 1, 14):
        sol = solve_primal(st, a, fit_intercept, eps)
        if sol.path.decomposition.decomposed:  # declined: the eigenvalue route served
            assert a < 1e3 * MIN_RELATIVE_ALPHA * np.linalg.norm(G)
            continue
        served += 1
        A = 0.5 * (G + G.T) + a * np.eye(D)
        assert_backward_stable(A, sol.coef, b, c=20 * D)
        cond = (s_max + a) / a
        c_ref = ref.coef(a)
        assert np.linalg.norm(sol.coef - c_ref) <= min(1e3 * D * EPS * cond, 10.0) * np.linalg.norm(c_ref)
        # |Δ s/(s + α)| ≤ |Δs|/α with |Δs| ≈ D·ε·s_max: the bound the eigenvalue routes meet too
        df_ref = ref.df(np.array([a]))
        assert abs(sol.df[0] - df_ref[0]) <= D * D * EPS * s_max / a + 1e-12 * df_ref[0]
        g_ref = ref.gcv(np.array([a]))
        rtol = 1e-9 + 3 * abs(sol.df[0] - df_ref[0]) / (n - df_ref[0])
        np.testing.assert_allclose(sol.gcv, g_ref, rtol=rtol)
        ll_ref = ref.spectrum(shifted=True).evidence(np.array([a])).log_likelihood()
        np.testing.assert_allclose(sol.evidence.log_likelihood(), ll_ref, rtol=1e-7)
        np.testing.assert_allclose(sol.intercept, ref.intercept(sol.coef), rtol=1e-12, atol=1e-12)
        assert not sol.path.decomposition.decomposed
    assert served >= 9  # from 1e-9 of s_max upwards


@pytest.mark.parametrize("D, n, gamma, dtype, k", CASES)
def test_the_deferred_decomposition_is_the_eigen_routes(monkeypatch, D, n, gamma, dtype, k):
    """The spectrum, the path's curves at other α and the eigenvectors read after a Cholesky
    solve are those of the eigenvalue route's solve (the same G, decomposed when first read)."""
    st = _stats(D, n, gamma, dtype, k=k)
    eps = sums_precision(dtype)
    alpha = 1e-3 * float(eigen_path(st, True, eps).eigvals.max())
    sol = solve_primal(st, alpha, True, eps)
    assert not sol.path.decomposition.decomposed
    shipped = pickle.loads(pickle.dumps(solve_primal(st, alpha, True, eps).path))
    assert not shipped.decomposition.decomposed
    _by_eigen(monkeypatch)
    ref = solve_primal(st, alpha, True, eps)
    grid = alpha * np.logspace(-1, 2, 7)
    np.testing.assert_array_equal(sol.spectrum.eigvals, ref.spectrum.eigvals)  # bitwise: the same G, the same LAPACK
    assert sol.path.decomposition.decomposed
    np.testing.assert_array_equal(sol.spectrum.gcv(grid), ref.spectrum.gcv(grid))
    np.testing.assert_array_equal(sol.path.df(grid), ref.path.df(grid))
    np.testing.assert_array_equal(sol.path.eigvecs, ref.path.eigvecs)
    # a deferred path pickles with G (no lock) and decomposes to the same bits where it lands
    np.testing.assert_array_equal(shipped.eigvals, ref.path.eigvals)
    np.testing.assert_array_equal(shipped.df(grid), ref.path.df(grid))


def test_the_cholesky_route_declines_near_the_rounding_floor():
    """With a negative (rounding) eigenvalue, α within ``margin`` of it is declined (the
    eigenvalue route clips it); above, served; α below MIN_RELATIVE_ALPHA·‖G‖ is declined."""
    D = 40
    G = _gram(D, 10, seed=7)
    G += 1e-9 * np.random.default_rng(8).standard_normal((D, D))
    G = 0.5 * (G + G.T)
    s_min = float(np.linalg.eigvalsh(G).min())
    assert s_min < 0
    b = np.random.default_rng(9).standard_normal((D, 2))
    kept = G.copy()
    assert solve_one_alpha(G, b, 0.5 * 1e3 * -s_min, 1e3) is None
    one = solve_one_alpha(G, b, 2 * 1e3 * -s_min, 1e3)
    assert one is not None
    np.testing.assert_array_equal(G, kept)  # G is not modified
    a = 2 * 1e3 * -s_min
    s, V = np.linalg.eigh(G)
    z = V.T @ b
    np.testing.assert_allclose(one.coef, V @ (z / (s + a)[:, None]), rtol=1e-6)
    np.testing.assert_allclose(one.df_sum, (s / (s + a)).sum(), rtol=1e-9)
    np.testing.assert_allclose(one.log_det, np.log(s + a).sum(), rtol=1e-12)
    np.testing.assert_allclose(one.cross, (z**2 / (s + a)[:, None]).sum(axis=0), rtol=1e-9)
    np.testing.assert_allclose(one.norm2, (z**2 / (s + a)[:, None] ** 2).sum(axis=0), rtol=1e-9)
    assert one.norm_bound >= s.max()
    big = _gram(D, D, seed=3)
    assert solve_one_alpha(big, b, 0.5 * MIN_RELATIVE_ALPHA * np.linalg.norm(big), 1e3) is None
    assert solve_one_alpha(big, b, 2 * MIN_RELATIVE_ALPHA * np.linalg.norm(big), 1e3) is not None


def test_an_unresolved_gcv_score_falls_back_to_the_eigenvalues(monkeypatch):
    """Where the RSS is not above 10× its rounding bound with ‖G‖_F for s_max, the solve takes
    the eigenvalue route, which decides with s_max itself (the same scores as before)."""
    st = _stats(150, 80, 5.0, "float64", seed=2)  # D > n: a small α nearly interpolates
    eps = sums_precision("float64")
    s_max = float(eigen_path(st, True, eps).eigvals.max())
    alpha = 1e-8 * s_max
    G, b, yy, *_ = primal.centred_system(st, True)
    one = solve_one_alpha(primal.symmetrized(G), b, alpha, primal.SHIFT_MARGIN)
    assert one is not None  # the factor serves; the score's reliability does not
    rss = yy - (one.cross + alpha * one.norm2)
    assert np.all(rss <= 10 * eps * (yy + 2 * one.cross + one.norm_bound * one.norm2))
    sol = solve_primal(st, alpha, True, eps)
    assert sol.path.decomposition.decomposed
    _by_eigen(monkeypatch)
    ref = solve_primal(st, alpha, True, eps)
    np.testing.assert_array_equal(sol.gcv, ref.gcv)
    np.testing.assert_array_equal(sol.coef, ref.coef)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_fitted_estimator_at_one_alpha_defers_its_eigendecomposition(tmp_path, monkeypatch, dtype):
    """RandomFeatureRidge at one α: the fit decomposes nothing; the posterior std, the spectrum's
    curves, the saved-and-loaded model and a pickled estimator equal the eigenvalue route's."""
    rng = np.random.default_rng(5)
    X = rng.uniform(-2, 2, (700, 3))
    y = np.cos(X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.standard_normal(700)
    Xt = rng.uniform(-2, 2, (40, 3))
    kw = dict(gamma=0.7, n_components=120, alpha=0.3, random_state=1, dtype=dtype)
    fast = RandomFeatureRidge(**kw).fit(X, y)
    assert callable(fast.posterior_.directions)
    assert not fast.spectrum_.decomposition.decomposed
    # a pickled estimator (dask ships it to tasks) carries the posterior's directions: formed once, here
    back = pickle.loads(pickle.dumps(fast))
    assert fast.spectrum_.decomposition.decomposed and isinstance(back.posterior_.directions, np.ndarray)
    _by_eigen(monkeypatch)
    ref = RandomFeatureRidge(**kw).fit(X, y)
    assert ref.spectrum_.decomposition.decomposed
    np.testing.assert_allclose(fast.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
    # the eigenvalue route counts float32's negative rounding eigenvalues as 0, Cholesky as they are
    s = np.linalg.eigvalsh(primal.symmetrized(primal.centred_system(fast.stats_, True)[0]))
    clipped = np.abs(np.minimum(s, 0)).sum() / 0.3  # bounds Δdf and Δlog|G + αI| alike
    assert abs(fast.df_ - ref.df_) <= clipped + 1e-12 * ref.df_
    np.testing.assert_allclose(fast.gcv_, ref.gcv_, rtol=1e-9 + 3 * abs(fast.df_ - ref.df_) / (700 - ref.df_))
    np.testing.assert_allclose(fast.log_marginal_likelihood_, ref.log_marginal_likelihood_, rtol=1e-10, atol=clipped)
    std = fast.predict(Xt, return_std=True)[1]
    np.testing.assert_allclose(std, ref.predict(Xt, return_std=True)[1], rtol=1e-8)
    np.testing.assert_allclose(back.predict(Xt, return_std=True)[1], std, rtol=1e-12)
    grid = np.logspace(-3, 2, 6)
    np.testing.assert_array_equal(fast.spectrum_.gcv(grid), ref.spectrum_.gcv(grid))
    fast.save(str(tmp_path / "m.zarr"))
    loaded = load(str(tmp_path / "m.zarr"))
    np.testing.assert_array_equal(loaded.spectrum_.gcv(grid), ref.spectrum_.gcv(grid))
    # z is Vᵀb: each eigenvector's sign is arbitrary, so its square is compared
    np.testing.assert_allclose(loaded.spectrum_.z**2, ref.spectrum_.z**2, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(loaded.predict(Xt), ref.predict(Xt), rtol=1e-9)
    np.testing.assert_allclose(loaded.predict(Xt, return_std=True)[1], std, rtol=1e-12)


def test_a_default_fit_decomposes_once_for_its_float32_check(monkeypatch):
    """``dtype="auto"`` checks float32 with the eigendecomposition: the solve takes it at once
    rather than a Cholesky factor first; an explicit dtype takes the Cholesky route."""
    calls = []
    real = primal.solve_one_alpha
    monkeypatch.setattr(primal, "solve_one_alpha", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    rng = np.random.default_rng(2)
    X = rng.uniform(-2, 2, (500, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(500)
    auto = RandomFeatureRidge(n_components=80, alpha=0.5, random_state=0).fit(X, y)
    assert calls == [] and auto.dtype_ == "float32" and auto.dtype_check_ is not None
    RandomFeatureRidge(n_components=80, alpha=0.5, random_state=0, dtype="float32").fit(X, y)
    assert calls == [1]
