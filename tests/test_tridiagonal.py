"""The factored eigendecomposition (tridiagonal reduction, eigenvectors never formed unless read)
against the dense ``eigh`` route: the decomposition itself, the α path (β, GCV, df, evidence)
and fitted estimators, on small data including ill-conditioned systems (α down to 1e-12 of the
largest eigenvalue, rank-deficient D > n)."""

import pickle

import numpy as np
import pytest
import scipy.linalg

from bigkernel import RandomFeatureRidge
from bigkernel.numerics import primal
from bigkernel.numerics.fourier_features import make_feature_map
from bigkernel.numerics.primal import eigen_path, solve_primal
from bigkernel.numerics.sums import block_stats, sums_precision
from bigkernel.numerics.tridiagonal import FactoredEigenvectors, factored_eigh
from tests._tolerance import EPS, assert_backward_stable

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set


def _gram(D: int, rank: int, seed: int = 0) -> np.ndarray:
    A = np.random.default_rng(seed).standard_normal((D, rank))
    return A @ A.T


@pytest.mark.parametrize("D, rank", [(1, 1), (2, 2), (3, 1), (40, 40), (120, 30)])
def test_factored_eigh_equals_eigh(D, rank):
    """Eigenvalues, ``V x``, ``Vᵀ x``, chosen columns and the dense ``V`` of the factored route
    are an eigendecomposition of G (reconstruction and orthogonality to rounding)."""
    G = _gram(D, rank, seed=D)
    s_ref = scipy.linalg.eigvalsh(G)
    s, F = factored_eigh(G.copy(), overwrite=True)
    scale = max(float(s_ref.max()), 1.0)
    np.testing.assert_allclose(s, s_ref, atol=50 * D * EPS * scale)
    X = np.random.default_rng(1).standard_normal((D, 3))
    VX, VtX = F.apply(X), F.apply_transpose(X)
    np.testing.assert_allclose(F.apply_transpose(VX), X, atol=50 * D * EPS)  # orthogonal
    np.testing.assert_allclose(F.apply(VtX), X, atol=50 * D * EPS)
    np.testing.assert_allclose(F.apply(s[:, None] * VtX), G @ X, atol=50 * D * EPS * scale)  # V S Vᵀ = G
    np.testing.assert_allclose(F.apply(X[:, 0]), VX[:, 0])  # a vector as a column
    keep = s >= np.median(s)
    cols = F.columns(keep)
    assert cols.flags.c_contiguous and cols.shape == (D, int(keep.sum()))
    V = F.dense()  # formed once; the factors are dropped and V serves later products
    assert F.W is None and F.dense() is V
    np.testing.assert_allclose(cols, V[:, keep], atol=1e-14)
    np.testing.assert_allclose((V * s) @ V.T, G, atol=50 * D * EPS * scale)
    np.testing.assert_allclose(F.apply(X), VX, atol=50 * D * EPS)
    np.testing.assert_allclose(F.apply_transpose(X), VtX, atol=50 * D * EPS)


@pytest.mark.parametrize("order", ["C", "F"])
def test_factored_eigh_keeps_its_input_unless_told(order):
    G = np.asarray(_gram(30, 30), order=order)
    s, _ = factored_eigh(G)
    np.testing.assert_array_equal(G, _gram(30, 30))  # not overwritten by default
    np.testing.assert_allclose(factored_eigh(G, overwrite=True)[0], s, rtol=1e-12, atol=1e-12 * s.max())
    assert not np.array_equal(G, _gram(30, 30))  # reduced in place: no copy of a D × D matrix
    with pytest.raises(ValueError, match="square"):
        factored_eigh(np.ones((3, 4)))


def test_factored_eigenvectors_pickle_with_or_without_the_dense_form():
    G = _gram(25, 25)
    _, F = factored_eigh(G)
    x = np.arange(25.0)
    back = pickle.loads(pickle.dumps(F))
    np.testing.assert_allclose(back.apply(x), F.apply(x), atol=1e-13)
    F.dense()
    back = pickle.loads(pickle.dumps(F))
    np.testing.assert_allclose(back.apply(x), F.apply(x), atol=1e-13)


def _stats(D: int, n: int, gamma: float, dtype: str = "float64", seed: int = 0, k: int = 1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    Y = np.column_stack([np.sin(3 * X[:, 0]) + X[:, 1] * (j + 1) + 0.1 * rng.standard_normal(n) for j in range(k)])
    fmap = make_feature_map("rbf", 3, D, seed=seed + 1, gamma=gamma)
    return block_stats(fmap, X, Y, 0, dtype=dtype, block_rows=64)


# D > n (rank-deficient after centring), large γ, float32 sums; α from 1e-12 of s_max upwards
CASES = [
    pytest.param(60, 400, 0.5, "float64", 1, id="D<n"),
    pytest.param(150, 80, 0.5, "float64", 2, id="D>n-rank-deficient"),
    pytest.param(100, 300, 40.0, "float32", 1, id="large-gamma-float32"),
]


@pytest.mark.parametrize("D, n, gamma, dtype, k", CASES)
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_factored_path_equals_eigh_path(D, n, gamma, dtype, k, fit_intercept):
    """β(α) of both routes solve (G + αI)β = b backward-stably (for every α: ill-conditioned
    ones too), agree in the well-conditioned α, and df, GCV and the evidence agree."""
    st = _stats(D, n, gamma, dtype, k=k)
    eps = sums_precision(dtype)
    lazy = eigen_path(st, fit_intercept, eps)
    dense = eigen_path(st, fit_intercept, eps, factored=False)
    assert isinstance(lazy.vectors, FactoredEigenvectors) and isinstance(dense.vectors, np.ndarray)
    s_max = float(dense.eigvals.max())
    np.testing.assert_allclose(lazy.eigvals, dense.eigvals, atol=100 * D * EPS * s_max)
    G, b, *_ = primal.centred_system(st, fit_intercept)
    alphas = s_max * np.logspace(-12, 1, 14)
    for a in alphas:
        A = 0.5 * (G + G.T) + a * np.eye(D)
        c_lazy, c_dense = lazy.coef(a), dense.coef(a)
        assert_backward_stable(A, c_lazy, b, c=20 * D)
        assert_backward_stable(A, c_dense, b, c=20 * D)
        # forward difference within cond·ε (a few orders of magnitude of ε·cond for MRRR vs D&C)
        cond = (s_max + a) / a
        tol = min(1e3 * D * EPS * cond, 10.0)
        assert np.linalg.norm(c_lazy - c_dense) <= tol * np.linalg.norm(c_dense)
        np.testing.assert_allclose(lazy.intercept(c_lazy), dense.intercept(c_lazy), rtol=1e-12, atol=1e-12)
    # |Δ s/(s + α)| <= |Δs|/α: where the eigenvalues are rounding (the null space of a
    # rank-deficient system) and α is not far above them, df is rounding too, in both routes
    ds = float(np.abs(lazy.eigvals - dense.eigvals).max())
    assert np.all(np.abs(lazy.df(alphas) - dense.df(alphas)) <= D * ds / alphas + 1e-9 * dense.df(alphas))
    g_lazy, g_dense = lazy.gcv(alphas), dense.gcv(alphas)
    both = np.isfinite(g_lazy) & np.isfinite(g_dense)
    assert both[-8:].all()  # the well-conditioned end is scored by both
    # GCV = n·RSS/(n − df)²: a df within its rounding (above) moves it by 2|Δdf|/(n − df)
    df_l, df_d = lazy.df(alphas), dense.df(alphas)
    rtol = 1e-6 + 3 * np.abs(df_l - df_d) / (st.n[0] - df_d)
    assert np.all(
        np.abs(g_lazy / np.where(both, g_dense, 1.0) - 1)[both] <= np.broadcast_to(rtol[:, None], both.shape)[both]
    )
    # only points near the rounding floor may be judged differently
    assert (np.isfinite(g_lazy) != np.isfinite(g_dense)).sum() <= 2
    e_lazy, e_dense = lazy.spectrum().evidence(alphas[-6:]), dense.spectrum().evidence(alphas[-6:])
    np.testing.assert_allclose(e_lazy.log_likelihood(), e_dense.log_likelihood(), rtol=1e-8)
    np.testing.assert_allclose(lazy.eigvecs @ lazy.z, dense.eigvecs @ dense.z, atol=1e-9 * np.abs(b).max())


@pytest.mark.parametrize("alpha", ["gcv", "evidence", 1e-9, [1e-6, 1e-3, 1.0]])
def test_solve_primal_routes_choose_the_same_alpha(monkeypatch, alpha):
    st = _stats(80, 500, 2.0)
    lazy = solve_primal(st, alpha)  # at one α: a Cholesky factor where the α allows it
    real = primal.eigen_path
    monkeypatch.setattr(primal, "eigen_path", lambda *a, **kw: real(*a, **kw, factored=False))
    _no_cholesky(monkeypatch)
    dense = solve_primal(st, alpha)
    assert isinstance(dense.path.vectors, np.ndarray)
    assert np.argmin(np.abs(lazy.alphas - lazy.alpha)) == np.argmin(np.abs(dense.alphas - dense.alpha))
    assert lazy.alpha == pytest.approx(dense.alpha, rel=1e-12)
    np.testing.assert_allclose(lazy.alphas, dense.alphas, rtol=1e-12)
    np.testing.assert_allclose(lazy.df, dense.df, rtol=1e-9)
    finite = np.isfinite(dense.gcv)
    np.testing.assert_allclose(lazy.gcv[finite], dense.gcv[finite], rtol=1e-6)
    scale = np.linalg.norm(dense.coef)
    rel = 1e-6 if lazy.alpha > 1e-6 else 1e-3  # the forward error grows with cond = s_max/α
    assert np.linalg.norm(lazy.coef - dense.coef) <= rel * scale
    np.testing.assert_allclose(lazy.intercept, dense.intercept, rtol=rel, atol=rel * scale)


def test_estimator_fit_forms_no_eigenvectors_until_a_variance_is_asked(monkeypatch):
    """A fit leaves V factored; ``predict(return_std=True)`` forms the kept columns; both
    routes give the same fitted numbers and the same posterior std."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, (600, 2))
    y = np.sin(2 * X[:, 0]) * X[:, 1] + 0.05 * rng.standard_normal(600)
    Xt = rng.uniform(-2, 2, (50, 2))
    kw = dict(gamma=1.0, n_components=90, alpha="gcv", random_state=0, dtype="float64")
    lazy = RandomFeatureRidge(**kw).fit(X, y)
    assert callable(lazy.posterior_.directions)  # not formed by the fit
    mean_l, std_l = lazy.predict(Xt, return_std=True)
    assert isinstance(lazy.posterior_.directions, np.ndarray)
    real = primal.eigen_path
    monkeypatch.setattr(primal, "eigen_path", lambda *a, **kw: real(*a, **kw, factored=False))
    dense = RandomFeatureRidge(**kw).fit(X, y)
    mean_d, std_d = dense.predict(Xt, return_std=True)
    # the grid is relative to the mean eigenvalue (the trace, to rounding): the same grid point
    assert np.argmin(np.abs(lazy.alphas_ - lazy.alpha_)) == np.argmin(np.abs(dense.alphas_ - dense.alpha_))
    assert lazy.alpha_ == pytest.approx(dense.alpha_, rel=1e-12)
    np.testing.assert_allclose(lazy.gcv_, dense.gcv_, rtol=1e-7)
    np.testing.assert_allclose(lazy.df_path_, dense.df_path_, rtol=1e-6)  # α down to 1e-9 · mean eigenvalue
    np.testing.assert_allclose(lazy.coef_, dense.coef_, rtol=1e-6, atol=1e-8 * np.abs(dense.coef_).max())
    np.testing.assert_allclose(lazy.intercept_, dense.intercept_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(mean_l, mean_d, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(std_l, std_d, rtol=1e-7)
    np.testing.assert_allclose(lazy.log_marginal_likelihood_, dense.log_marginal_likelihood_, rtol=1e-9)
    # a pickled posterior carries its directions (dask tasks), not the factored decomposition
    fresh = RandomFeatureRidge(**kw).fit(X, y)
    back = pickle.loads(pickle.dumps(fresh.posterior_))
    assert isinstance(back.directions, np.ndarray)
    np.testing.assert_allclose(back.unit_variance(Xt), lazy.posterior_.unit_variance(Xt), rtol=1e-7)


def _no_cholesky(monkeypatch):
    """Solve at one α by the eigendecomposition (the route before the one-α Cholesky solve)."""
    monkeypatch.setattr(primal, "_solve_by_cholesky", lambda *a, **kw: None)


def _eager(monkeypatch):
    """Make the factored route form the tridiagonal eigenvectors in the decomposition (the
    route before they were left for first use), at one α too (no Cholesky solve)."""
    _no_cholesky(monkeypatch)
    real = primal.symmetric_eigh
    monkeypatch.setattr(primal, "symmetric_eigh", lambda *a, **kw: real(*a, **{**kw, "vectors": True}))


def test_tridiagonal_pieces_solve_and_rotate():
    """``Q``, ``(T + αI)⁻¹`` and the lazily formed ``W`` rebuild G: ``Q (T + αI)⁻¹ Qᵀ b`` is
    ``(G + αI)⁻¹ b``, and ``W`` formed on first use is an eigenbasis of T."""
    D = 50
    G = _gram(D, 20, seed=4)
    s, F = factored_eigh(G, vectors=False)
    assert not F.formed and F.W is None
    np.testing.assert_allclose(s, scipy.linalg.eigvalsh(G), atol=100 * D * EPS * s.max())
    T = np.diag(F.diagonal) + np.diag(F.offdiagonal, 1) + np.diag(F.offdiagonal, -1)
    b = np.random.default_rng(2).standard_normal((D, 2))
    np.testing.assert_allclose(F.apply_q(F.apply_q_transpose(b)), b, atol=50 * D * EPS)
    np.testing.assert_allclose(F.apply_q(T @ F.apply_q_transpose(b)), G @ b, atol=50 * D * EPS * s.max())
    for a in (1e-6, 1.0, 100.0):
        x = F.apply_q(F.shifted_solve(a, F.apply_q_transpose(b)))
        assert_backward_stable(G + a * np.eye(D), x, b, c=20 * D)
    assert F.shifted_solve(-0.5 * s.max(), b) is None  # T − αI indefinite: declined, not wrong
    VtX = F.apply_transpose(b)  # forms W
    assert F.formed and F.W is not None
    np.testing.assert_allclose(F.apply(s[:, None] * VtX), G @ b, atol=50 * D * EPS * s.max())


@pytest.mark.parametrize("D, n, gamma, dtype, k", CASES)
def test_one_alpha_forms_no_tridiagonal_eigenvectors(monkeypatch, D, n, gamma, dtype, k):
    """A solve at one α (well above the eigenvalues' rounding) takes β, df, GCV and the
    evidence from ``(T + αI)⁻¹`` and never forms W; they equal the eigenvector route's, and
    reading z afterwards (``spectrum_``, the saved state) forms it and agrees."""
    st = _stats(D, n, gamma, dtype, k=k)
    eps = sums_precision(dtype)
    s_max = float(eigen_path(st, True, eps).eigvals.max())
    alpha = 1e-3 * s_max
    _no_cholesky(monkeypatch)  # the shifted tridiagonal route (α lists, α the Cholesky solve declines)
    lazy = solve_primal(st, alpha, True, eps)
    assert lazy.path.decomposition.decomposed
    assert not lazy.path.vectors.formed and not lazy.path.z_source.formed
    _eager(monkeypatch)
    eager = solve_primal(st, alpha, True, eps)
    assert eager.path.vectors.formed
    np.testing.assert_allclose(lazy.coef, eager.coef, rtol=1e-9, atol=1e-11 * np.abs(eager.coef).max())
    np.testing.assert_allclose(lazy.intercept, eager.intercept, rtol=1e-9, atol=1e-11 * np.abs(eager.coef).max())
    np.testing.assert_allclose(lazy.df, eager.df, rtol=1e-12)
    np.testing.assert_allclose(lazy.gcv, eager.gcv, rtol=1e-9)
    np.testing.assert_allclose(lazy.evidence.log_likelihood(), eager.evidence.log_likelihood(), rtol=1e-9)
    # the path's curves at other α: by the shifted solves too, until z is read
    grid = alpha * np.logspace(-1, 2, 7)
    np.testing.assert_allclose(lazy.path.spectrum(shifted=True).gcv(grid), eager.spectrum.gcv(grid), rtol=1e-9)
    np.testing.assert_allclose(lazy.path.gcv(grid), eager.spectrum.gcv(grid), rtol=1e-9)
    assert not lazy.path.vectors.formed
    # the model's spectrum reads z (its curves never depend on what was read before)
    np.testing.assert_allclose(lazy.spectrum.rss(grid), eager.spectrum.rss(grid), rtol=1e-9)
    assert lazy.path.vectors.formed  # z read: formed, and every later quantity reads it
    np.testing.assert_allclose(
        lazy.spectrum.z**2, eager.spectrum.z**2, rtol=1e-6, atol=1e-9 * (eager.spectrum.z**2).max()
    )
    np.testing.assert_array_equal(lazy.path.gcv(grid), lazy.spectrum.gcv(grid))


def test_the_shifted_route_declines_near_the_rounding_floor():
    """Where T has a negative (rounding) eigenvalue, α within ``SHIFT_MARGIN`` of it is served
    by the clipped spectrum (z formed), as before the shifted route existed."""
    D = 40
    G = _gram(D, 10, seed=7)
    G += 1e-9 * np.random.default_rng(8).standard_normal((D, D))
    G = 0.5 * (G + G.T)
    s, F = factored_eigh(G, vectors=False)
    assert s.min() < 0
    b = np.random.default_rng(9).standard_normal((D, 1))
    lazy = primal.LazyProjection(F, b, primal.SHIFT_MARGIN * -s.min())
    assert lazy.shifted(np.array([-s.min()])) is None and not lazy.formed
    assert lazy.shifted(np.array([2 * lazy.floor])) is not None and not lazy.formed
    back = pickle.loads(pickle.dumps(lazy))  # dask ships paths to tasks: no lock in the pickle
    assert not back.formed and back.shifted(np.array([2 * lazy.floor])) is not None
    z = lazy.value()
    assert lazy.formed and lazy.shifted(np.array([2 * lazy.floor])) is None  # formed: z serves
    np.testing.assert_allclose(back.value(), z, atol=1e-12)
    np.testing.assert_allclose(F.apply(z), b, atol=1e-12)
