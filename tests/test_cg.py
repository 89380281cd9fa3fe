"""Conjugate gradients against dense solves; shifts, preconditioning, warnings, breakdown."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from bigkernel.errors import BigkernelError, DataError, NotPSDError, ParameterError
from bigkernel.kernels import RBF
from bigkernel.numerics.cg import CGResult, conjugate_gradient
from bigkernel.numerics.precond import build_preconditioner, kernel_columns
from tests._tolerance import assert_forward_close, relative_residual

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set


def random_spd(n, cond, seed):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (Q * np.geomspace(1.0, 1.0 / cond, n)) @ Q.T


def mv(A):
    return lambda V: A @ V


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_multi_rhs_matches_dense_solve(seed):
    A = random_spd(80, 1e3, seed)
    B = np.random.default_rng(seed + 10).normal(size=(80, 3))
    res = conjugate_gradient(mv(A), B, tol=1e-10)
    assert isinstance(res, CGResult) and res.converged.all()
    true_rel = relative_residual(A, res.x, B)
    assert np.all(true_rel <= 1e-9) and np.all(res.residual <= 1e-10)
    # stopped at a relative residual r, x is within cond(A)·r of the solution, normwise (an
    # element-wise rtol would hold small components to more than CG promises)
    ref = np.linalg.solve(A, B)
    for j in range(3):
        assert_forward_close(res.x[:, j], ref[:, j], 1e3, residual=true_rel[j])
    assert res.x.shape == (80, 3) and res.n_iter.shape == (3,)


def test_single_rhs_returns_scalars():
    A = random_spd(30, 10.0, 3)
    b = np.ones(30)
    res = conjugate_gradient(mv(A), b, tol=1e-12)
    assert res.x.shape == (30,)
    assert isinstance(res.n_iter, int) and isinstance(res.residual, float) and res.converged is True
    np.testing.assert_allclose(res.x, np.linalg.solve(A, b), rtol=1e-9)


def test_per_column_shifts():
    A = random_spd(60, 1e4, 4)
    B = np.random.default_rng(5).normal(size=(60, 4))
    shifts = np.array([0.0, 1e-3, 1e-1, 10.0])
    res = conjugate_gradient(mv(A), B, shift=shifts, tol=1e-10)
    for j, s in enumerate(shifts):
        # each column solves its own system: its residual is small for that shift only
        As = A + s * np.eye(60)
        r = relative_residual(As, res.x[:, j], B[:, j])[0]
        assert r <= 2e-10
        cond = (1.0 + s) / (1e-4 + s)  # eigenvalues of A span [1e-4, 1]
        assert_forward_close(res.x[:, j], np.linalg.solve(As, B[:, j]), cond, residual=r)
    # a larger shift is better conditioned: no more iterations
    assert res.n_iter[3] <= res.n_iter[2] <= res.n_iter[1]


def test_converged_columns_stop_and_matvec_sees_active_columns_only():
    A = random_spd(50, 1e4, 6)
    B = np.random.default_rng(7).normal(size=(50, 2))
    widths = []

    def matvec(V):
        widths.append(V.shape[1])
        return A @ V

    res = conjugate_gradient(matvec, B, shift=[100.0, 0.0], tol=1e-8)
    assert res.converged.all() and res.n_iter[0] < res.n_iter[1]
    assert widths[0] == 2 and widths[-1] == 1  # the shifted column finished early
    assert res.n_matvec == len(widths)


def test_zero_rhs_and_x0():
    A = random_spd(20, 10.0, 8)
    B = np.zeros((20, 2))
    B[:, 1] = 1.0
    res = conjugate_gradient(mv(A), B, tol=1e-12)
    assert np.all(res.x[:, 0] == 0) and res.n_iter[0] == 0 and res.converged.all()
    exact = np.linalg.solve(A, B)
    warm = conjugate_gradient(mv(A), B, x0=exact, tol=1e-8)
    assert np.all(warm.n_iter == 0) and warm.converged.all()


def test_recompute_every_keeps_the_same_answer():
    A = random_spd(100, 1e3, 9)
    B = np.random.default_rng(10).normal(size=(100, 2))
    ref = np.linalg.solve(A, B)
    for every in (1, 7, 50):
        res = conjugate_gradient(mv(A), B, tol=1e-8, recompute_every=every)
        # cond(A)·tol = 1e-5 is all CG promises: an element-wise rtol=1e-5 measured 0.2 of it
        # on small components; the true residual and the normwise error are what it controls
        r = relative_residual(A, res.x, B)
        assert np.all(r <= 2e-8), r
        for j in range(2):
            assert_forward_close(res.x[:, j], ref[:, j], 1e3, residual=r[j])
    assert conjugate_gradient(mv(A), B, tol=1e-8, recompute_every=1).n_matvec > res.n_matvec


def test_callback_sees_each_iteration():
    A = random_spd(40, 100.0, 11)
    seen = []
    res = conjugate_gradient(mv(A), np.ones(40), tol=1e-10, callback=lambda it, X, r: seen.append((it, r.copy())))
    assert [s[0] for s in seen] == list(range(1, res.n_iter + 1))
    assert seen[-1][1][0] == pytest.approx(res.residual)


def test_float32_matvec_is_accumulated_in_float64():
    A = random_spd(40, 10.0, 12)
    res = conjugate_gradient(lambda V: (A @ V).astype(np.float32), np.ones(40), tol=1e-5)
    assert res.x.dtype == np.float64 and res.converged


def rbf_system(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    kernel = RBF(gamma=10.0)
    return kernel, X, kernel(X), rng.normal(size=(n, 2))


def test_preconditioner_reduces_iterations_on_ill_conditioned_rbf():
    kernel, X, K, B = rbf_system()
    alpha = 1e-4
    plain = conjugate_gradient(mv(K), B, shift=alpha, tol=1e-8)
    P = build_preconditioner(kernel_columns(kernel, X), kernel.diag(X), alpha, rank=100, random_state=0)
    pre = conjugate_gradient(mv(K), B, shift=alpha, preconditioner=P, tol=1e-8)
    ref = np.linalg.solve(K + alpha * np.eye(len(K)), B)
    for res in (plain, pre):
        assert res.converged.all()
        np.testing.assert_allclose(res.x, ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())
    assert pre.n_iter.max() * 3 <= plain.n_iter.min()


def test_preconditioner_with_several_alphas():
    kernel, X, K, B = rbf_system(seed=1)
    alphas = np.array([1e-4, 1e-2])
    P = build_preconditioner(kernel_columns(kernel, X), kernel.diag(X), 1e-4, rank=80, random_state=0)
    # the shift-aware path (apply_shifted) and a plain callable built for alpha=1e-4 both work
    for prec in (P, P.apply):
        res = conjugate_gradient(mv(K), B, shift=alphas, preconditioner=prec, tol=1e-8)
        for j, a in enumerate(alphas):
            ref = np.linalg.solve(K + a * np.eye(len(K)), B[:, j])
            np.testing.assert_allclose(res.x[:, j], ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())


def test_non_convergence_warns_with_figures():
    A = random_spd(50, 1e6, 13)
    with pytest.warns(ConvergenceWarning, match=r"after 2 iterations: relative residual column 0: \d"):
        res = conjugate_gradient(mv(A), np.ones(50), max_iter=2)
    assert not res.converged and res.n_iter == 2 and res.residual > 1e-6


def test_breakdown_on_indefinite_operator():
    A = np.diag([1.0, -2.0, 3.0, -4.0])
    b = np.array([0.1, 1.0, 0.1, 1.0])  # bᵀAb < 0: breaks down at once
    with pytest.raises(NotPSDError, match="column 1 at iteration 1") as info:
        conjugate_gradient(mv(A), np.column_stack([np.ones(4) * [1, 0, 1, 0], b]))
    assert isinstance(info.value, BigkernelError) and isinstance(info.value, ArithmeticError)
    assert "not positive definite" in str(info.value)


def test_a_broken_down_column_stops_and_the_others_finish():
    """on_breakdown="stop": the column whose operator is indefinite stops (marked, not
    converged, its iterate the one before the breakdown); the others reach the dense solution,
    with the step callback never stepping the stopped column."""
    A = random_spd(30, 1e2, 3)
    bad = np.diag(np.r_[np.ones(29), -1e3])  # pᵀAp < 0 once the last coordinate dominates
    rng = np.random.default_rng(4)
    B = rng.normal(size=(30, 3))
    B[-1, 1] = 10.0

    def column_mv(V, cols):
        return np.column_stack([(bad if c == 1 else A) @ V[:, i] for i, c in enumerate(cols)])

    stepped = []
    res = conjugate_gradient(column_mv, B, tol=1e-10, column_matvec=True, on_breakdown="stop",
                             step_callback=lambda cols, step: stepped.append(cols))  # fmt: skip
    assert res.breakdown.tolist() == [False, True, False]
    assert res.converged.tolist() == [True, False, True]
    np.testing.assert_allclose(res.x[:, [0, 2]], np.linalg.solve(A, B[:, [0, 2]]), rtol=1e-7, atol=1e-9)
    assert all(1 not in cols for cols in stepped) and np.all(res.x[:, 1] == 0)  # broke down at iteration 1
    with pytest.raises(NotPSDError, match="column 1 at iteration 1"):
        conjugate_gradient(column_mv, B, tol=1e-10, column_matvec=True)
    assert conjugate_gradient(mv(A), B[:, 0], tol=1e-10).breakdown is None  # "raise": not tracked
    with pytest.raises(ParameterError, match="on_breakdown"):
        conjugate_gradient(mv(A), B, on_breakdown="skip")


def test_breakdown_from_negative_shift():
    with pytest.raises(NotPSDError):
        conjugate_gradient(mv(np.eye(5)), np.ones(5), shift=-2.0)


def test_indefinite_preconditioner_is_reported():
    with pytest.raises(NotPSDError, match="preconditioner"):
        conjugate_gradient(mv(np.eye(5)), np.ones(5), preconditioner=lambda R: -R)


@pytest.mark.parametrize(
    "kwargs,err,match",
    [
        ({"tol": 0.0}, ParameterError, "tol"),
        ({"max_iter": 0}, ParameterError, "max_iter"),
        ({"recompute_every": 0}, ParameterError, "recompute_every"),
        ({"shift": [1.0, 2.0, 3.0]}, ParameterError, r"shape \(2,\)"),
        ({"x0": np.zeros(3)}, DataError, "x0"),
        ({"preconditioner": 3}, ParameterError, "preconditioner"),
    ],
)
def test_bad_arguments(kwargs, err, match):
    with pytest.raises(err, match=match):
        conjugate_gradient(mv(np.eye(4)), np.ones((4, 2)), **kwargs)


def test_wrong_matvec_shape():
    with pytest.raises(DataError, match="matvec returned shape"):
        conjugate_gradient(lambda V: V[:-1], np.ones(4))


def test_column_matvec_gives_each_column_its_operator():
    # column c solves (A + c·I)... through matvec(V, cols), not through shift
    A = random_spd(50, 1e3, 20)
    B = np.random.default_rng(21).normal(size=(50, 4))
    extra = np.array([0.0, 0.01, 1.0, 3.0])
    seen = []

    def matvec(V, cols):
        seen.append(cols.copy())
        return A @ V + V * extra[cols]

    res = conjugate_gradient(matvec, B, column_matvec=True, tol=1e-11, max_iter=500)
    assert res.converged.all()
    for j in range(4):
        ref = np.linalg.solve(A + extra[j] * np.eye(50), B[:, j])
        np.testing.assert_allclose(res.x[:, j], ref, rtol=1e-7, atol=1e-9 * np.abs(ref).max())
    assert [c.tolist() for c in seen[:1]] == [[0, 1, 2, 3]]
    # the better-conditioned columns stop first; later calls get the remaining original indices
    assert any(0 < len(c) < 4 for c in seen) and all(set(c) <= {0, 1, 2, 3} for c in seen)
    assert res.n_iter[3] < res.n_iter[0]


def test_step_callback_keeps_linear_functionals_current():
    # q = L x updated from the by-product L P of each direction matvec, as held-out predictions
    A = random_spd(40, 1e2, 22)
    L = np.random.default_rng(23).normal(size=(7, 40))
    B = np.random.default_rng(24).normal(size=(40, 3))
    q = np.zeros((7, 3))
    last = {}
    calls = []

    def matvec(V, cols):
        last["LP"] = L @ V
        return A @ V

    def on_step(cols, step):
        calls.append(cols.copy())
        assert step.dtype == np.float64 and step.shape == cols.shape
        q[:, cols] += last["LP"] * step

    res = conjugate_gradient(
        matvec, B, column_matvec=True, step_callback=on_step, tol=1e-10, max_iter=200, recompute_every=10**6
    )
    assert res.converged.all()
    np.testing.assert_allclose(q, L @ res.x, rtol=1e-10, atol=1e-12)
    assert len(calls) == res.n_iter.max() == res.n_matvec  # one callback per iteration's matvec
    assert [int(np.sum([j in c for c in calls])) for j in range(3)] == res.n_iter.tolist()


def test_step_callback_without_column_matvec():
    A = random_spd(30, 10.0, 25)
    b = np.ones(30)
    steps = []
    res = conjugate_gradient(mv(A), b, tol=1e-10, step_callback=lambda cols, s: steps.append((cols, s)))
    assert len(steps) == res.n_iter and all(c.tolist() == [0] for c, _ in steps)
    assert all(s[0] > 0 for _, s in steps)


def test_warn_not_converged_off():
    A = random_spd(60, 1e6, 26)
    res = conjugate_gradient(mv(A), np.ones(60), max_iter=2, warn_not_converged=False)  # warnings are errors here
    assert not res.converged
