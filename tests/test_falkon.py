"""Falkon's preconditioner and CG against dense numpy references (issue 21)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from bigkernel.errors import DataError, NotPSDError, ParameterError
from bigkernel.kernels.factory import make_kernel
from bigkernel.numerics.falkon import FalkonPreconditioner, FalkonResult, falkon_solve
from bigkernel.numerics.gram_tiles import GramTiler

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set


def problem(n, M, *, d, gamma, seed=0, dist="normal"):
    """Centred weighted Nyström system: K̃ = K_nM − 1μᵀ, G = K̃ᵀWK̃, rhs = K̃ᵀW(y − ȳ_w)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) if dist == "normal" else rng.uniform(-2, 2, size=(n, d))
    Y = np.column_stack([np.sin(X.sum(1)), np.cos(X[:, 0]), X[:, -1] ** 2]) + 0.1 * rng.normal(size=(n, 3))
    w = rng.uniform(0.5, 2.0, n)
    idx = rng.choice(n, M, replace=False)
    kernel = make_kernel("rbf", gamma=gamma)
    tiler = GramTiler(kernel, X[idx])
    K = tiler.cross(X)
    n_w = w.sum()
    mu = w @ K / n_w
    Kt = K - mu
    rhs = Kt.T @ (w[:, None] * (Y - w @ Y / n_w))
    return dict(Kt=Kt, w=w, Kmm=tiler.dense(), rhs=rhs, n_w=n_w, mu=mu, idx=idx, X=X, kernel=kernel, C=X[idx])


def counting_gram(p, calls):
    def gram(V):
        calls.append(V.shape[1])
        return p["Kt"].T @ (p["w"][:, None] * (p["Kt"] @ V))

    return gram


@pytest.fixture(scope="module")
def wellcond():
    # K_MM full rank (cond ~ 10): β is well determined, so it can be compared
    return problem(3000, 300, d=10, gamma=0.5)


@pytest.mark.parametrize("exact_kmm", [False, True])
def test_matches_dense_solve(wellcond, exact_kmm):
    p = wellcond
    rel = np.array([1e-6, 1e-4, 1e-2, 1e-1])
    alphas = np.repeat(rel * 3000, 3)  # columns: 4 α × 3 targets
    rhs = np.tile(p["rhs"], 4)
    prec = FalkonPreconditioner.build(p["Kmm"], alphas, p["n_w"], mean=p["mu"])
    calls = []
    res = falkon_solve(counting_gram(p, calls), rhs, prec, alphas, tol=1e-11, max_iter=200, exact_kmm=exact_kmm)
    assert isinstance(res, FalkonResult) and res.converged.all()
    G = p["Kt"].T @ (p["w"][:, None] * p["Kt"])
    for j, a in enumerate(alphas):
        ref = np.linalg.solve(G + a * p["Kmm"], rhs[:, j])
        assert np.linalg.norm(res.beta[:, j] - ref) <= 1e-6 * np.linalg.norm(ref)
    # one gram call per iteration, on the active columns only
    assert len(calls) == res.n_iter == res.n_gram_calls
    assert calls[0] == 12 and sum(calls) == res.n_iter_per_column.sum()
    assert res.history.shape == (res.n_iter + 1, 12)
    np.testing.assert_array_equal(res.history[0], 1.0)
    np.testing.assert_array_equal(res.history[-1], res.residual)  # stopped columns hold their value
    for j in range(12):
        k = res.n_iter_per_column[j]
        assert np.all(res.history[k:, j] == res.residual[j]) and res.history[k - 1, j] > 1e-11


def iteration_counts(n):
    # one dimension: the kernel's effective dimension at α/n = 1e-6 is far below M = 300
    p = problem(n, 300, d=1, gamma=0.5, seed=1, dist="uniform")
    rel = np.array([1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1])
    prec = FalkonPreconditioner.build(p["Kmm"], rel * n, p["n_w"], mean=p["mu"])
    calls = []
    res = falkon_solve(counting_gram(p, calls), np.tile(p["rhs"][:, :1], 6), prec, rel * n, tol=1e-6)
    assert res.converged.all() and len(calls) == res.n_iter
    return res.n_iter_per_column


def test_iterations_few_and_independent_of_n():
    small, large = iteration_counts(2000), iteration_counts(20_000)
    assert small.max() <= 25 and large.max() <= 25, (small, large)
    assert np.abs(small - large).max() <= 4, (small, large)


def test_preconditioner_against_dense_formulas():
    p = problem(500, 60, d=4, gamma=0.3, seed=2)
    alphas = np.array([0.5, 2.0, 0.5, 7.0])
    prec = FalkonPreconditioner.build(p["Kmm"], alphas, p["n_w"], jitter=1e-8)
    M = 60
    T = np.linalg.cholesky(p["Kmm"] + 1e-8 * np.eye(M)).T
    np.testing.assert_allclose(prec.T, T, atol=1e-12)
    rng = np.random.default_rng(3)
    cols = np.array([3, 0, 1, 2, 0])
    V = rng.normal(size=(M, cols.size))
    Bs = []
    for c in cols:
        A = np.linalg.cholesky(T @ T.T / M + alphas[c] / p["n_w"] * np.eye(M)).T
        np.testing.assert_allclose(prec.factor(c), A, atol=1e-12)
        Bs.append(np.linalg.inv(T) @ np.linalg.inv(A) / np.sqrt(p["n_w"]))
    dense = lambda f: np.column_stack([f(B, V[:, i]) for i, B in enumerate(Bs)])
    scale = lambda X: np.abs(X).max()
    ref = dense(lambda B, v: B @ v)
    np.testing.assert_allclose(prec.apply(V, cols), ref, atol=1e-10 * scale(ref))
    ref = dense(lambda B, v: B.T @ v)
    np.testing.assert_allclose(prec.apply_t(V, cols), ref, atol=1e-10 * scale(ref))
    ref = dense(lambda B, v: np.linalg.solve(B, v))
    np.testing.assert_allclose(prec.apply_inv(V, cols), ref, atol=1e-10 * scale(ref))
    ref = dense(lambda B, v: B.T @ (p["Kmm"] + 1e-8 * np.eye(M)) @ B @ v)
    np.testing.assert_allclose(prec.penalty_matvec(V, cols), ref, atol=1e-9 * scale(ref))
    np.testing.assert_allclose(prec.kmm_matvec(V), p["Kmm"] @ V, atol=1e-12)
    np.testing.assert_allclose(prec.kmm_matvec(V[:, 0]), p["Kmm"] @ V[:, 0], atol=1e-12)
    # B Bᵀ = ((n_w / M) K² + α K)⁻¹ with K = K_MM + jitter·I: Falkon's approximation of (G + αK)⁻¹
    K = p["Kmm"] + 1e-8 * np.eye(M)
    np.testing.assert_allclose(
        np.linalg.inv(Bs[0] @ Bs[0].T), p["n_w"] / M * K @ K + alphas[3] * K, rtol=1e-6, atol=1e-6
    )


def test_centred_and_weighted_inner_matrix():
    p = problem(400, 400, d=3, gamma=0.2, seed=4)
    M, w_c = 400, p["w"][p["idx"]]
    prec = FalkonPreconditioner.build(p["Kmm"], [1.0], p["n_w"], mean=p["mu"], centre_weights=w_c)
    T = prec.T
    v = np.linalg.solve(T.T, p["mu"])
    Z = T - np.outer(v, np.ones(M))
    A = prec.factor(0)
    np.testing.assert_allclose(A.T @ A, Z @ np.diag(w_c) @ Z.T / w_c.sum() + np.eye(M) / p["n_w"], atol=1e-10)
    # every row a centre, with its weight and the mean: the preconditioner is (almost) exact
    alphas = np.array([1e-6, 1e-3]) * 400
    prec = FalkonPreconditioner.build(p["Kmm"], alphas, p["n_w"], mean=p["mu"], centre_weights=w_c)
    res = falkon_solve(counting_gram(p, []), np.tile(p["rhs"][:, :1], 2), prec, alphas, tol=1e-8)
    assert res.n_iter <= 4


def test_repeated_alphas_share_one_factor():
    p = problem(300, 50, d=3, gamma=0.3, seed=5)
    alphas = [1.0, 2.0, 1.0, 2.0, 2.0]
    prec = FalkonPreconditioner.build(p["Kmm"], alphas, p["n_w"])
    assert prec.n_factors == 2
    assert np.shares_memory(prec.factor(0), prec.factor(2)) and np.shares_memory(prec.factor(1), prec.factor(4))
    assert not np.shares_memory(prec.factor(0), prec.factor(1))
    assert prec.nbytes == 3 * 50 * 50 * 8
    assert FalkonPreconditioner.memory_bytes(50, 2) >= 4 * 50 * 50 * 8


def test_step_hook_keeps_held_out_predictions(wellcond):
    p = wellcond
    Xv = np.random.default_rng(6).normal(size=(40, 10))
    Kv = GramTiler(p["kernel"], p["C"]).cross(Xv)
    alphas = np.array([3.0, 30.0])
    prec = FalkonPreconditioner.build(p["Kmm"], alphas, p["n_w"])
    last, pred = {}, np.zeros((40, 2))

    def gram(U):
        last["KvU"] = Kv @ U  # the pass's by-product: held-out rows times the directions
        return p["Kt"].T @ (p["w"][:, None] * (p["Kt"] @ U))

    def hook(cols, step):
        pred[:, cols] += last["KvU"] * step

    res = falkon_solve(gram, p["rhs"][:, :2], prec, alphas, tol=1e-8, step_hook=hook)
    np.testing.assert_allclose(pred, Kv @ res.beta, rtol=1e-9, atol=1e-12)


def test_x0_and_one_dimensional_rhs(wellcond):
    p = wellcond
    prec = FalkonPreconditioner.build(p["Kmm"], [30.0], p["n_w"])
    res = falkon_solve(counting_gram(p, []), p["rhs"][:, 0], prec, 30.0, tol=1e-10)
    assert res.beta.shape == (300,)
    calls = []
    again = falkon_solve(counting_gram(p, calls), p["rhs"][:, 0], prec, 30.0, tol=1e-6, x0=res.beta)
    assert again.n_iter == 0 and again.n_gram_calls == len(calls) == 1  # the initial residual only
    assert again.history.shape == (1, 1) and again.history[0, 0] <= 1e-6
    np.testing.assert_allclose(again.beta, res.beta)


def test_not_converged_warns_what_to_change(wellcond):
    p = wellcond
    prec = FalkonPreconditioner.build(p["Kmm"], [3e-3], p["n_w"])
    with pytest.warns(ConvergenceWarning, match="max_iter=2.*Raise max_iter.*larger alpha.*centres"):
        res = falkon_solve(counting_gram(p, []), p["rhs"][:, :1], prec, [3e-3], tol=1e-12, max_iter=2)
    assert not res.converged[0] and res.n_iter == 2 and res.history.shape == (3, 1)


def test_errors():
    p = problem(200, 30, d=2, gamma=0.5, seed=7)
    with pytest.raises(ParameterError, match="alphas must be finite floats > 0"):
        FalkonPreconditioner.build(p["Kmm"], [1.0, 0.0], p["n_w"])
    prec = FalkonPreconditioner.build(p["Kmm"], [1.0, 2.0], p["n_w"])
    with pytest.raises(ParameterError, match="preconditioner was built for"):
        falkon_solve(lambda V: V, p["rhs"][:, :2], prec, [1.0, 3.0])
    bad = p["Kmm"].copy()
    bad[5, 5] = -1.0
    with pytest.raises(NotPSDError, match="jitter"):
        FalkonPreconditioner.build(bad, [1.0], p["n_w"], jitter=0.0)
    with pytest.raises(NotPSDError, match="CG breakdown"):
        falkon_solve(lambda V: -1e6 * V, p["rhs"][:, :2], prec, [1.0, 2.0])


def test_tiled_products_and_panels(monkeypatch):
    # small tiles and Cholesky blocks, so the tile loops of T Tᵀ and the panels all run
    import bigkernel.numerics.falkon as falkon

    monkeypatch.setattr(falkon, "GRAM_TILE", 16)
    p = problem(300, 70, d=3, gamma=0.3, seed=8)
    w_c = p["w"][p["idx"]]
    small = FalkonPreconditioner.build(p["Kmm"], [0.5, 5.0], p["n_w"], mean=p["mu"], centre_weights=w_c, block=24)
    monkeypatch.setattr(falkon, "GRAM_TILE", 2048)
    whole = FalkonPreconditioner.build(p["Kmm"], [0.5, 5.0], p["n_w"], mean=p["mu"], centre_weights=w_c)
    np.testing.assert_allclose(small.T, whole.T, atol=1e-12)
    for c in (0, 1):
        np.testing.assert_allclose(small.factor(c), whole.factor(c), atol=1e-10)


# --- the eigendecomposition route: one M × M matrix for every α -------------------------------


@pytest.mark.parametrize("centred", [False, True])
def test_eigen_preconditioner_has_falkons_b_bt_for_every_alpha(centred):
    """B_c B_cᵀ = ((n_w/M) K̃ᵀK̃ + α K)⁻¹ (K = K_MM + jitter I, K̃ = K − 1μᵀ when centred): the same
    as the Cholesky route's, column by column; B⁻¹ B = I, the penalty is Bᵀ K B, kmm_matvec = K_MM V."""
    from bigkernel.numerics.falkon_eigen import EigenFalkonPreconditioner

    p = problem(1500, 120, d=10, gamma=0.5)
    M, n_w = p["Kmm"].shape[0], p["n_w"]
    alphas = np.array([3e-3, 1.0, 30.0, 1.0])
    mean = p["mu"] if centred else None
    eig = EigenFalkonPreconditioner.build(p["Kmm"], alphas, n_w, mean=mean, jitter=1e-8)
    chol = FalkonPreconditioner.build(p["Kmm"], alphas, n_w, mean=mean, jitter=1e-8)
    K = p["Kmm"] + 1e-8 * np.eye(M)
    Kt = K - (np.ones(M)[:, None] * (np.zeros(M) if mean is None else mean)[None, :])
    eye = np.eye(M)
    for c, a in enumerate(alphas):
        B = eig.apply(eye, np.full(M, c))
        want = np.linalg.inv((n_w / M) * Kt.T @ Kt + a * K)
        np.testing.assert_allclose(B @ B.T, want, rtol=1e-7, atol=1e-9 * np.abs(want).max())
        Bc = chol.apply(eye, np.full(M, c))
        np.testing.assert_allclose(B @ B.T, Bc @ Bc.T, rtol=1e-7, atol=1e-9 * np.abs(want).max())
        np.testing.assert_allclose(eig.apply_t(eye, np.full(M, c)), B.T, atol=1e-12 * np.abs(B).max())
        np.testing.assert_allclose(eig.apply_inv(B, np.full(M, c)), eye, atol=1e-8)
        pen = eig.penalty_matvec(eye, np.full(M, c))
        np.testing.assert_allclose(pen, B.T @ K @ B, atol=1e-9 * np.abs(pen).max())
    V = np.random.default_rng(1).standard_normal((M, 3))
    np.testing.assert_allclose(eig.kmm_matvec(V), p["Kmm"] @ V, atol=1e-10 * np.abs(p["Kmm"] @ V).max())
    assert eig.nbytes < 1.2 * M * M * 8 and eig.n_factors == 3


def test_eigen_preconditioner_solves_the_grid_as_the_cholesky_one():
    """falkon_solve with either preconditioner: the same iterations and solutions (= dense)."""
    from bigkernel.numerics.falkon_eigen import EigenFalkonPreconditioner

    p = problem(1500, 120, d=10, gamma=0.5)
    alphas = np.array([0.05, 1.0, 20.0])
    rhs = np.tile(p["rhs"][:, :1], (1, alphas.size))
    G = p["Kt"].T @ (p["w"][:, None] * p["Kt"])
    out = {}
    for cls in (FalkonPreconditioner, EigenFalkonPreconditioner):
        prec = cls.build(p["Kmm"], alphas, p["n_w"], mean=p["mu"])
        out[cls] = falkon_solve(counting_gram(p, []), rhs, prec, alphas, tol=1e-10, max_iter=500)
    a, b = out.values()
    assert np.all(np.abs(a.n_iter_per_column - b.n_iter_per_column) <= 1)
    for j, alpha in enumerate(alphas):
        ref = np.linalg.solve(G + alpha * p["Kmm"], rhs[:, j])
        assert np.abs(b.beta[:, j] - ref).max() <= 1e-6 * np.abs(ref).max()


def test_eigen_preconditioner_memory_and_bad_input():
    from bigkernel.numerics.falkon_eigen import EigenFalkonPreconditioner

    p = problem(600, 60, d=10, gamma=0.5)
    M = p["Kmm"].shape[0]
    assert EigenFalkonPreconditioner.memory_bytes(M) >= 2 * M * M * 8
    assert EigenFalkonPreconditioner.memory_bytes(20_000) < FalkonPreconditioner.memory_bytes(20_000, 7) / 4
    K = p["Kmm"].copy()
    EigenFalkonPreconditioner.build(K, [1.0], p["n_w"], overwrite=True)
    assert not np.array_equal(K, p["Kmm"])  # overwritten: the peak is 2·M²·8
    with pytest.raises(ParameterError, match="alphas must be finite floats > 0"):
        EigenFalkonPreconditioner.build(p["Kmm"], [1.0, 0.0], p["n_w"])
    bad = p["Kmm"].copy()
    bad[0, 0] = np.nan
    with pytest.raises(DataError, match="NaN or infinite"):
        EigenFalkonPreconditioner.build(bad, [1.0], p["n_w"])
    with pytest.raises(DataError, match="square"):
        EigenFalkonPreconditioner.build(p["Kmm"][:, :3], [1.0], p["n_w"])


def _panels(Z, rows=64):
    return lambda: (Z[i : i + rows] for i in range(0, len(Z), rows))


def test_sketch_preconditioner_is_exact_from_every_row_and_better_from_a_sample():
    """sketch panels Z (S = ZᵀZ): B Bᵀ = (n_w S + α K)⁻¹. With every row (S = G / n_w) CG needs
    one iteration; with a uniform sample of 8M rows far fewer than with Falkon's centres at a
    small α."""
    p = problem(3000, 100, d=5, gamma=0.3, dist="uniform")
    M, n_w, w, Kt = 100, p["n_w"], p["w"], p["Kt"]
    G = Kt.T @ (w[:, None] * Kt)
    alphas = np.array([1e-4 * n_w, 1.0])
    rhs = np.tile(p["rhs"][:, :1], (1, 2))
    every = _panels(Kt * np.sqrt(w / n_w)[:, None])
    exact = FalkonPreconditioner.build(p["Kmm"], alphas, n_w, sketch=every, jitter=1e-8)
    B = exact.apply(np.eye(M), np.zeros(M, int))
    want = np.linalg.inv(G + alphas[0] * (p["Kmm"] + 1e-8 * np.eye(M)))
    np.testing.assert_allclose(B @ B.T, want, rtol=1e-6, atol=1e-8 * np.abs(want).max())
    assert falkon_solve(counting_gram(p, []), rhs, exact, alphas, tol=1e-8, max_iter=50).n_iter <= 2
    R = np.random.default_rng(3).choice(3000, 8 * M, replace=False)
    sample = _panels(Kt[R] * np.sqrt(w[R] / w[R].sum())[:, None])
    sampled = FalkonPreconditioner.build(p["Kmm"], alphas, n_w, sketch=sample)
    centres = FalkonPreconditioner.build(p["Kmm"], alphas, n_w, mean=p["mu"])
    its = [falkon_solve(counting_gram(p, []), rhs, q, alphas, tol=1e-6, max_iter=500).n_iter_per_column[0]
           for q in (sampled, centres)]  # fmt: skip
    assert its[0] < 0.6 * its[1], its
    with pytest.raises(ParameterError, match="give sketch alone"):
        FalkonPreconditioner.build(p["Kmm"], alphas, n_w, sketch=sample, mean=p["mu"])
    with pytest.raises(DataError, match="sketch panels must be finite"):
        FalkonPreconditioner.build(p["Kmm"], alphas, n_w, sketch=_panels(Kt[:10, :5]))


def test_sketch_panels_factor_when_k_mm_is_ill_conditioned():
    """1-d rbf, M = 120 (K_MM numerically singular), α/n = 1e-10: T⁻ᵀST⁻¹ from a formed S has
    round-off pivots of −1e-6; from the panels it is a Gram, positive semi-definite, and CG
    solves the system (the residual of the original system is checked)."""
    from bigkernel.numerics.nystroem_block import sketch_panels

    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(4000, 1))
    kernel = make_kernel("rbf", gamma=1.0)
    C = X[rng.choice(4000, 120, replace=False)]
    tiler = GramTiler(kernel, C)
    Knm, Kmm = tiler.cross(X), tiler.dense()
    mu = Knm.mean(axis=0)
    Kt = Knm - mu

    class RawMap:  # the panels' map: x ↦ k(x, C)
        n_components = 120

        def transform_unscaled(self, Z, dtype):
            return tiler.cross(Z)

    R = rng.choice(4000, 960, replace=False)
    panels = sketch_panels(RawMap(), X[R], np.ones(960), mu, panel_rows=100)
    np.testing.assert_allclose(sum(Z.T @ Z for Z in panels()), Kt[R].T @ Kt[R] / 960, atol=1e-12)
    alphas = np.array([1e-10 * 4000, 1e-3 * 4000])
    # (T⁻ᵀST⁻¹ from the formed S failed here, a pivot of −1.8e-6: the panels are the only form)
    prec = FalkonPreconditioner.build(Kmm, alphas, 4000, sketch=panels)
    y = np.sin(3 * X[:, 0])
    rhs = np.tile((Kt.T @ (y - y.mean()))[:, None], (1, 2))
    res = falkon_solve(lambda V: Kt.T @ (Kt @ V), rhs, prec, alphas, tol=1e-8, max_iter=100)
    assert res.converged.all() and res.n_iter <= 25
    for j, a in enumerate(alphas):
        r = (Kt.T @ Kt + a * Kmm) @ res.beta[:, j] - rhs[:, j]
        assert np.linalg.norm(r) <= 1e-6 * np.linalg.norm(rhs[:, j])
