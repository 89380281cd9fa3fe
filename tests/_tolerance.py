"""Tolerances that follow the conditioning, for tests that compare solves and eigen-things.

An element-wise ``rtol`` on the solution of an ill-conditioned system tests the BLAS kernel as
much as the code: numpy's and scipy's OpenBLAS pick their kernels at run time (Haswell,
SkylakeX, Zen, ...), and a forward error is only bounded by ``cond(A)·ε`` times a modest constant.
A backward-stable solve, however it is computed, has a normwise backward error of a few ``ε``
whatever ``cond(A)``; a wrong solve (a wrong shift, a dropped term) has one of order 1.
"""

from __future__ import annotations

import numpy as np

EPS = float(np.finfo(np.float64).eps)


def backward_error(A: np.ndarray, X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Normwise backward error of ``X`` as a solution of ``AX = B``, per column (Rigal–Gaches):
    ``‖b − Ax‖ / (‖A‖‖x‖ + ‖b‖)`` in 2-norms, the smallest relative perturbation of ``A`` and
    ``b`` for which ``x`` is exact."""
    X2, B2 = np.atleast_1d(X).reshape(len(A), -1), np.atleast_1d(B).reshape(len(A), -1)
    r = np.linalg.norm(B2 - A @ X2, axis=0)
    return r / (np.linalg.norm(A, 2) * np.linalg.norm(X2, axis=0) + np.linalg.norm(B2, axis=0))


def relative_residual(A: np.ndarray, X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``‖b − Ax‖ / ‖b‖`` per column: what an iterative solver's tolerance bounds."""
    X2, B2 = np.atleast_1d(X).reshape(len(A), -1), np.atleast_1d(B).reshape(len(A), -1)
    return np.linalg.norm(B2 - A @ X2, axis=0) / np.linalg.norm(B2, axis=0)


def assert_backward_stable(A: np.ndarray, X: np.ndarray, B: np.ndarray, c: float = 50.0) -> None:
    """``X`` solves ``AX = B`` to a backward error of at most ``c·ε`` in every column.

    ``c = 50``: Householder/LU/eigen routes give well under ``n·ε`` in practice (under ``1·ε``
    measured for the n ≤ 100 systems of these tests); a solve with a wrong shift or a missing
    term is off by ``|Δα|·‖x‖/(‖A‖‖x‖)``, orders of magnitude above.
    """
    be = backward_error(A, X, B)
    assert np.all(be <= c * EPS), f"backward error {be / EPS} ε exceeds {c} ε"


def assert_forward_close(
    actual: np.ndarray, desired: np.ndarray, cond: float, c: float = 100.0, residual: float = 0.0
) -> None:
    """Normwise forward error ``‖actual − desired‖ / ‖desired‖ ≤ cond·(c·ε + residual)``.

    Two backward-stable solves of a system with condition number ``cond`` agree to
    ``~cond·ε``; an iterative solve stopped at relative residual ``‖b − Ax‖/‖b‖ = residual``
    is off by at most ``cond·residual`` (``‖x − x*‖ ≤ ‖A⁻¹‖‖r‖`` and ``‖b‖ ≤ ‖A‖‖x*‖``).
    """
    a, d = np.asarray(actual, dtype=np.float64), np.asarray(desired, dtype=np.float64)
    err = np.linalg.norm(a - d) / np.linalg.norm(d)
    bound = cond * (c * EPS + residual)
    assert err <= bound, f"relative error {err:.3e} > {bound:.3e} (cond {cond:.3e})"


def product_bound(A: np.ndarray, B: np.ndarray, u: float) -> np.ndarray:
    """Element-wise error bound ``u·(|A| @ |B|)`` of a product ``A @ B`` whose terms carry a
    relative error ``u`` each (rounded entries, another summation order): the right scale for
    an ``atol`` on a matrix-vector product, where ``|AB|`` may be far smaller than ``|A||B|``
    through cancellation and an ``rtol`` on it would test the summation order."""
    return u * (np.abs(A) @ np.abs(B))


def assert_within(actual: np.ndarray, desired: np.ndarray, bound: np.ndarray) -> None:
    """``|actual − desired| ≤ bound`` element-wise (numpy 2.4's ``assert_allclose`` fails to
    format its message for an array ``atol``)."""
    err = np.abs(np.asarray(actual, dtype=np.float64) - desired)
    ratio = np.max(err / np.maximum(bound, np.finfo(np.float64).tiny))
    assert np.all(err <= bound), f"error exceeds its bound by up to {ratio:.3g}×"


def primal_cond(model, X: np.ndarray) -> float:
    """``cond(Φ̄ᵀΦ̄ + αI)`` of a fitted random-feature model at its ``alpha_``, with
    ``Φ̄`` the centred features of ``X``: what its coefficients' rounding is amplified by."""
    P = model.feature_map_.transform(X)
    P = P - P.mean(axis=0)
    w = np.linalg.eigvalsh(P.T @ P)
    return float((w[-1] + model.alpha_) / (max(w[0], 0.0) + model.alpha_))
