"""The exact/Nyström numerics on every array namespace: numpy (the fast path) and
array-api-strict, which refuses anything outside the array API standard — so a numpy-only call
in the code a GPU runs (CG, RPCholesky/Nyström factors, the Woodbury preconditioner, the dual
solve, the device Gram operator, bootstrap weights and the percentile band) fails here, in CI,
and not first on a GPU. References: dense numpy / scikit-learn on small data."""

from __future__ import annotations

import array_api_strict as xps
import numpy as np
import pytest
from sklearn.metrics.pairwise import laplacian_kernel, rbf_kernel

from bigkernel import ExactKernelRidge
from bigkernel.data.sources import as_dataset
from bigkernel.kernels.factory import make_kernel
from bigkernel.numerics.cg import conjugate_gradient
from bigkernel.numerics.device_gram import DeviceGram
from bigkernel.numerics.dual import solve_dual
from bigkernel.numerics.gram_tiles import GramTiler
from bigkernel.numerics.namespace import namespace, solve_triangular, to_host
from bigkernel.numerics.precond import LowRankPreconditioner, nystroem_factor, rpcholesky_factor
from bigkernel.numerics.resample import BootstrapWeights, percentile_band

pytestmark = pytest.mark.numerics


def _strict(a: np.ndarray):
    return xps.asarray(np.array(a, dtype=np.float64))


def _data(n: int = 300, d: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.1 * rng.normal(size=n)
    return X, y


def _is_strict(a) -> bool:
    return namespace(a) is xps


def test_solve_triangular_dispatch_matches_scipy():
    rng = np.random.default_rng(1)
    R = np.triu(rng.normal(size=(6, 6))) + 6 * np.eye(6)
    B = rng.normal(size=(6, 3))
    want = np.linalg.solve(R.T, B)
    got_np = solve_triangular(namespace(R), R, B, lower=False, trans=True)
    got_strict = solve_triangular(xps, _strict(R), _strict(B), lower=False, trans=True)
    np.testing.assert_allclose(got_np, want, rtol=1e-12)
    np.testing.assert_allclose(to_host(got_strict), want, rtol=1e-12)


def test_cg_same_solution_on_both_namespaces():
    X, _ = _data(200)
    K = rbf_kernel(X, gamma=0.5)
    rng = np.random.default_rng(2)
    B = rng.normal(size=(200, 3))
    B[:, 1] = 0.0  # a zero column: converged at once, solution 0
    shift = np.array([0.1, 0.5, 1.0])
    x0 = rng.normal(size=(200, 3))
    ref = np.column_stack([np.linalg.solve(K + s * np.eye(200), B[:, j]) for j, s in enumerate(shift)])
    res_np = conjugate_gradient(lambda V: K @ V, B, shift=shift, tol=1e-12, x0=x0)
    Ks = _strict(K)
    res_st = conjugate_gradient(lambda V: Ks @ V, _strict(B), shift=shift, tol=1e-12, x0=_strict(x0))
    assert _is_strict(res_st.x)  # the vectors stayed in the input's namespace
    np.testing.assert_allclose(res_np.x, ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(to_host(res_st.x), res_np.x, rtol=1e-9, atol=1e-10)
    # at tol 1e-12 on this ill-conditioned K (~110 iterations) rounding moves the stop by a few
    # iterations between BLAS kernel sets (measured: 3 under Haswell with one thread)
    assert np.abs(res_st.n_iter - res_np.n_iter).max() <= max(2, 0.05 * res_np.n_iter.max())
    assert np.all(to_host(res_st.x)[:, 1] == 0.0)


def test_rpcholesky_and_nystroem_factors_agree_and_approximate_K():
    X, _ = _data(250)
    K = rbf_kernel(X, gamma=0.3)
    Ks = _strict(K)

    def cols_np(idx):
        return K[:, idx]

    def cols_st(idx):
        return xps.take(Ks, xps.asarray(np.asarray(idx)), axis=1)

    f_np = rpcholesky_factor(cols_np, np.diag(K), 60, block_size=16, random_state=3)
    f_st = rpcholesky_factor(cols_st, xps.asarray(np.diag(K).copy()), 60, block_size=16, random_state=3)
    assert _is_strict(f_st.L)
    np.testing.assert_array_equal(f_st.pivots, f_np.pivots)  # the same host draws
    np.testing.assert_allclose(to_host(f_st.L), f_np.L, rtol=1e-9, atol=1e-11)
    resid = np.trace(K - f_np.L @ f_np.L.T)
    assert resid == pytest.approx(f_np.residual_trace, rel=1e-6, abs=1e-9)
    assert f_st.residual_trace == pytest.approx(f_np.residual_trace, rel=1e-9, abs=1e-12)
    assert resid < 0.05 * np.trace(K)

    n_np = nystroem_factor(cols_np, 250, 40, random_state=4)
    n_st = nystroem_factor(cols_st, 250, 40, random_state=4)
    np.testing.assert_allclose(to_host(n_st.L) @ to_host(n_st.L).T, n_np.L @ n_np.L.T, atol=1e-10)


def test_low_rank_preconditioner_is_woodbury_on_both_namespaces():
    rng = np.random.default_rng(5)
    L = rng.normal(size=(80, 7))
    R = rng.normal(size=(80, 3))
    alphas = np.array([0.2, 1.0, 3.0])
    want = np.column_stack([np.linalg.solve(L @ L.T + a * np.eye(80), R[:, j]) for j, a in enumerate(alphas)])
    p_np = LowRankPreconditioner(L, 0.2)
    p_st = LowRankPreconditioner(_strict(L), 0.2)
    np.testing.assert_allclose(p_np.apply_shifted(R, alphas), want, rtol=1e-10)
    got = p_st.apply_shifted(_strict(R), alphas)
    assert _is_strict(got)
    np.testing.assert_allclose(to_host(got), want, rtol=1e-10)
    np.testing.assert_allclose(to_host(p_st.apply(_strict(R[:, 0]))), want[:, 0], rtol=1e-10)


@pytest.mark.parametrize(
    ("kernel", "reference", "budget", "dtype"),
    [
        ("rbf", lambda X: rbf_kernel(X, gamma=0.4), 10**9, "auto"),  # all tiles cached, float64
        ("rbf", lambda X: rbf_kernel(X, gamma=0.4), 1_000_000, "float64"),  # most recomputed
        ("laplacian", lambda X: laplacian_kernel(X, gamma=0.4), 1_000_000, "float64"),  # host blocks
    ],
)
@pytest.mark.parametrize("xp", ["numpy", "strict"])
def test_device_gram_matvec_columns_diag(kernel, reference, budget, dtype, xp):
    X, _ = _data(500)
    K = reference(X)
    V = np.random.default_rng(6).normal(size=(500, 2))
    ns = xps if xp == "strict" else namespace(X)
    op = DeviceGram(make_kernel(kernel, gamma=0.4), X, xp=ns, memory_budget=budget, dtype=dtype, n_rhs=2,
                    tile_size=128, panel_rows=48)  # fmt: skip
    info = op.info()
    if budget < 10**9:
        assert 0 < info["cached_tiles"] < info["n_tiles"]  # both paths run
    else:
        assert info["cached_tiles"] == info["n_tiles"]
    Vd = _strict(V) if xp == "strict" else V
    KV = op.matvec(Vd)
    assert namespace(KV) is namespace(Vd)
    np.testing.assert_allclose(to_host(KV), K @ V, rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(to_host(op.matvec(Vd[:, 0])), K @ V[:, 0], rtol=1e-12, atol=1e-11)
    idx = np.array([3, 77, 401])
    np.testing.assert_allclose(to_host(op.columns(idx)), K[:, idx], rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(to_host(op.columns(idx))[idx, [0, 1, 2]], 1.0)
    np.testing.assert_allclose(to_host(op.diag()), np.ones(500))


def test_device_gram_ard_rbf_matches_the_host_tiler():
    X, _ = _data(300, d=4)
    kernel = make_kernel("rbf", length_scale=(0.5, 1.0, 2.0, 4.0))
    K = GramTiler(kernel, X).dense()
    op = DeviceGram(kernel, X, xp=xps, memory_budget=10**8, dtype="float64", tile_size=128, panel_rows=32)
    V = np.random.default_rng(7).normal(size=(300, 1))
    np.testing.assert_allclose(to_host(op.matvec(_strict(V))), K @ V, rtol=1e-12, atol=1e-11)


def test_solve_dual_same_on_both_namespaces_with_weights_and_probes():
    X, y = _data(300)
    K = rbf_kernel(X, gamma=0.5)
    Ks = _strict(K)
    c = np.random.default_rng(8).integers(0, 3, size=300).astype(float)
    alphas = np.array([0.05, 0.5])
    L = rpcholesky_factor(lambda i: K[:, i], np.diag(K), 60, random_state=0).L
    s = np.sqrt(c)
    Lw = s[:, None] * L
    common = dict(fit_intercept=True, n_probes=4, tol=1e-11, random_state=1, sample_weight=c)
    a = solve_dual(lambda V: K @ V, y[:, None], alphas, factor=Lw, **common)
    b = solve_dual(lambda V: Ks @ V, _strict(y[:, None]), alphas, factor=_strict(Lw), **common)
    assert isinstance(b.coef, np.ndarray) and isinstance(b.intercept, np.ndarray)  # host results
    np.testing.assert_allclose(b.coef, a.coef, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(b.intercept, a.intercept, rtol=1e-9)
    np.testing.assert_allclose(b.df, a.df, rtol=1e-6)
    assert b.alpha == a.alpha
    # and the weighted solution is that of the repeated rows (dense reference)
    keep = np.repeat(np.arange(300), c.astype(int))
    Kr, yr = K[np.ix_(keep, keep)], y[keep]
    H = np.eye(keep.size) - 1.0 / keep.size
    ar = np.linalg.solve(H @ Kr @ H + a.alpha * np.eye(keep.size), H @ yr)
    fitted = K[:, keep] @ ar
    np.testing.assert_allclose(K @ b.coef[:, 0] + b.intercept[0], fitted + (yr - Kr @ ar).mean(), rtol=1e-6)


@pytest.mark.parametrize(
    "params",
    [
        dict(alpha=0.1),
        dict(alpha=0.1, memory_budget="8MB", dtype="float64"),  # tiles recomputed on the device
        dict(alpha=[0.01, 0.1, 1.0]),  # GCV with the exact df: the same α chosen
        dict(alpha=0.1, kernel="matern", nu=1.5),
    ],
)
def test_exact_fit_on_array_api_strict_equals_the_cpu_fit(params):
    """The estimator's device path (DeviceGram + the namespace numerics), run on array-api-strict
    instead of CuPy, gives the CPU fit: float64 coefficients to 1e-8 relative, the same α."""
    X, y = _data(400)
    params = dict(params)
    kernel = params.pop("kernel", "rbf")
    cpu = ExactKernelRidge(kernel, tol=1e-12, random_state=0, **params).fit(X, y)
    dev = ExactKernelRidge(kernel, tol=1e-12, random_state=0, **params)
    dev._check_params()
    dev._fit_on(as_dataset(X, y), None, _StrictDevice())
    assert isinstance(dev.dual_coef_, np.ndarray) and isinstance(dev.X_fit_, np.ndarray)
    assert dev.alpha_ == cpu.alpha_
    rel = np.abs(dev.dual_coef_ - cpu.dual_coef_).max() / np.abs(cpu.dual_coef_).max()
    assert rel < 1e-8
    assert dev.intercept_ == pytest.approx(cpu.intercept_, rel=1e-9, abs=1e-10)
    np.testing.assert_allclose(dev.predict(X[:50]), cpu.predict(X[:50]), rtol=1e-8, atol=1e-9)
    assert dev.solver_info_["gram"]["device_namespace"] == "array_api_strict"


def test_bootstrap_weights_and_percentile_band_on_both_namespaces():
    w = BootstrapWeights(seed_entropy=11, replicates=(0, 3, 5), n=1000)
    like = xps.asarray(np.zeros(2))
    W_np, W_st = w(100, 400), w(100, 400, like=like)
    assert _is_strict(W_st)
    np.testing.assert_array_equal(to_host(W_st), W_np)  # drawn on the host: bitwise equal
    P = np.random.default_rng(9).normal(size=(41, 7, 2))
    for level in (0.9, 0.5, 0.37):
        a = percentile_band(P, level)
        b = percentile_band(_strict(P), level)
        for got, want in zip(b, a):
            np.testing.assert_allclose(to_host(got), want, rtol=1e-13, atol=1e-15)


def test_spectral_path_with_eigh_in_another_namespace_gives_the_same_scores():
    """ExactKernelRidgeCV's one O(n³) step on a device (``eigh_on``): same eigenvalues, scores
    and choice as LAPACK on the host."""
    from bigkernel.numerics.loo import closed_form_scores, spectral_path
    from bigkernel.numerics.namespace import eigh_on

    X, y = _data(250)
    K = rbf_kernel(X, gamma=0.5)
    alphas = np.logspace(-4, 0, 5)
    for fit_intercept in (True, False):
        a = spectral_path(K, y, fit_intercept=fit_intercept)
        b = spectral_path(K, y, fit_intercept=fit_intercept, eigh=eigh_on(xps))
        np.testing.assert_allclose(b.eigvals, a.eigvals, rtol=1e-9, atol=1e-12)
        sa, sb = closed_form_scores(a, alphas), closed_form_scores(b, alphas)
        np.testing.assert_allclose(sb.loo_mse, sa.loo_mse, rtol=1e-8)
        np.testing.assert_allclose(sb.gcv, sa.gcv, rtol=1e-8)
        np.testing.assert_allclose(b.coef(1e-2), a.coef(1e-2), rtol=1e-7, atol=1e-10)


def test_device_expansion_predicts_as_the_host_expansion():
    """Prediction of a dual model on a device (array-api-strict standing in for CuPy): the same
    values as the host's KernelExpansion; pickling drops the device copies."""
    import contextlib
    import pickle

    from bigkernel.numerics.device_gram import DeviceExpansion
    from bigkernel.numerics.gram_tiles import KernelExpansion

    X, _ = _data(700, d=3)
    Z, _ = _data(300, d=3, seed=5)
    rng = np.random.default_rng(3)
    coef, b = rng.normal(size=(700, 2)), np.array([0.5, -1.0])
    for kernel in (make_kernel("rbf", length_scale=(0.5, 1.0, 2.0)), make_kernel("laplacian", gamma=0.3)):
        host = KernelExpansion(GramTiler(kernel, X), coef, b)
        dev = DeviceExpansion(host, lambda: (xps, contextlib.nullcontext()), block=128)
        np.testing.assert_allclose(dev(Z), host(Z), rtol=1e-12, atol=1e-12)
        assert dev.n_outputs == 2
    rbf = KernelExpansion(GramTiler(make_kernel("rbf", gamma=0.3), X), coef, b)
    dev = DeviceExpansion(rbf, _StrictNamespace(), block=256)
    dev(Z)
    assert dev._arrays is not None  # device copies made on first use
    again = pickle.loads(pickle.dumps(dev))
    assert again._arrays is None  # never pickled
    np.testing.assert_allclose(again(Z), rbf(Z), rtol=1e-12, atol=1e-12)


class _StrictDevice:
    """A stand-in :class:`~bigkernel.devices.Device` whose namespace is array-api-strict (the
    device path of the exact solver without a GPU)."""

    is_gpu = True
    xp = xps

    def activate(self):
        import contextlib

        return contextlib.nullcontext()

    def free_memory(self):
        return None

    def __str__(self) -> str:
        return "array_api_strict"


class _StrictNamespace:
    """A picklable ``() -> (xp, context)`` for array-api-strict."""

    def __call__(self):
        import contextlib

        return xps, contextlib.nullcontext()


def test_exact_model_predicts_on_the_host_when_its_gpu_is_not_usable():
    import pickle

    from bigkernel import ExactKernelRidge
    from bigkernel.devices import CPU, Device, DeviceNamespace
    from bigkernel.models._dual import predict_namespace

    assert predict_namespace(CPU) is None
    gpu = predict_namespace(Device("cuda", 1))  # resolved in each task (devices.task_device)
    assert gpu == DeviceNamespace(Device("cuda", 1)) and pickle.loads(pickle.dumps(gpu)) == gpu
    try:
        import cupy  # noqa: F401
    except ImportError:
        for spec in ("cuda", "auto", "cpu"):
            assert ExactKernelRidge(device=spec)._predict_device() == CPU


def test_device_gram_with_sparse_points_uses_host_blocks():
    import scipy.sparse as sp

    X, _ = _data(300)
    Xs = sp.csr_array(np.where(np.abs(X) > 0.7, X, 0.0))
    K = rbf_kernel(Xs.toarray(), gamma=0.4)
    op = DeviceGram(make_kernel("rbf", gamma=0.4), Xs, xp=xps, memory_budget=10**8, dtype="float64", tile_size=128)
    assert not op.fast
    V = np.random.default_rng(2).normal(size=(300, 1))
    np.testing.assert_allclose(to_host(op.matvec(_strict(V))), K @ V, rtol=1e-10, atol=1e-10)
