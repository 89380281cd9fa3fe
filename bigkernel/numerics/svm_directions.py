"""Newton directions of the primal SVM, in the feature space or through the curved rows (layer 1).

The Newton system of a class (:func:`bigkernel.numerics.svm.newton_direction`) is ::

    [[H, h], [hᵀ, s]] [dw; db] = −[g_w; g_b],   H = SᵀS + 2αI,  h = Sᵀu,  s = uᵀu (floored),

with ``S = diag(u) Φ_a`` the scaled features of the ``n_a`` rows with curvature ``w = c·L'' > 0``
and ``u = √w``. :class:`DenseSystem` factors the (D+1)² bordered matrix. :class:`DualSystem`
solves the same system through the ``n_a × n_a`` matrix ``M = 2αI + SSᵀ`` (Woodbury), which is
cheaper when ``n_a < D``:

- ``H⁻¹r = (r − Sᵀ M⁻¹ S r) / (2α)``;
- the intercept's row exactly, by its Schur complement: ``hᵀH⁻¹g = uᵀM⁻¹Sg`` and
  ``s − hᵀH⁻¹h = 2α uᵀM⁻¹u`` (from ``SSᵀM⁻¹ = I − 2αM⁻¹``), so no cancellation between ``s``
  and ``hᵀH⁻¹h``; the dense solve's floor of the intercept's diagonal
  (:func:`~bigkernel.numerics.svm.intercept_floor`) is added to the complement where it acts.

Both give the dense solve's direction up to rounding. Consecutive classes whose curvature
weights are equal (every class at ``w = 0``) share one factorisation: :class:`DenseDirections`
(the Hessian sums of a streamed pass) and :class:`~bigkernel.numerics.svm_kept.KeptDirections`
(features in memory) hold the last system and its weights (one factor, whatever k).
"""

from __future__ import annotations

import numpy as np

from bigkernel.numerics.svm import (
    SVMPassSums,
    bordered_matrix,
    intercept_floor,
    spd_solver,
    split_direction,
)


class DenseSystem:
    """The bordered (D+1)² Newton matrix of :func:`~bigkernel.numerics.svm.newton_direction`,
    factored once for any number of gradients."""

    def __init__(self, hess: np.ndarray, hess_phi: np.ndarray, hess_c: float, alpha: float, fit_intercept: bool):
        self.D, self.fit_intercept = hess.shape[0], fit_intercept
        self.solve = spd_solver(bordered_matrix(hess, hess_phi, hess_c, alpha, fit_intercept))

    def direction(self, grad_w: np.ndarray, grad_b: float) -> tuple[np.ndarray, float]:
        """``(dw, db)`` solving the Newton system at the gradient ``(grad_w, grad_b)``."""
        rhs = -np.append(grad_w, grad_b) if self.fit_intercept else -grad_w
        return split_direction(self.solve(rhs), self.D)


class DualSystem:
    """The Newton system through the ``n_a`` curved rows (see the module docstring).

    Parameters
    ----------
    phi_a : ndarray of shape (n_a, D)
        Scaled float64 features of the rows with curvature.
    gram_a : ndarray of shape (n_a, n_a)
        ``phi_a @ phi_a.T``.
    w_a : ndarray of shape (n_a,)
        Their curvature weights ``c·L'' > 0``.
    alpha : float
    fit_intercept : bool
    """

    def __init__(
        self, phi_a: np.ndarray, gram_a: np.ndarray, w_a: np.ndarray, alpha: float, fit_intercept: bool
    ) -> None:
        self.phi_a, self.alpha, self.fit_intercept = phi_a, float(alpha), fit_intercept
        u = self.u = np.sqrt(w_a)
        M = gram_a * u[:, None]
        M *= u[None, :]
        M.flat[:: M.shape[0] + 1] += 2.0 * self.alpha
        self.m_inv = spd_solver(M) if M.size else (lambda b: b)
        if fit_intercept:
            # h = Sᵀu = Φ_aᵀw and M⁻¹ S h = M⁻¹ (u ⊙ G_a w), shared by every gradient
            self.h = phi_a.T @ w_a
            self.m_inv_sh = self.m_inv(u * (gram_a @ w_a))
            floor = intercept_floor(self.alpha, float(w_a @ np.diagonal(gram_a)), phi_a.shape[1])
            self.schur = 2.0 * self.alpha * float(u @ self.m_inv(u)) + max(0.0, floor - float(w_a.sum()))

    def direction(self, grad_w: np.ndarray, grad_b: float) -> tuple[np.ndarray, float]:
        """``(dw, db)`` solving the Newton system at the gradient ``(grad_w, grad_b)``."""
        z = self.m_inv(self.u * (self.phi_a @ grad_w))  # M⁻¹ S g
        if not self.fit_intercept:
            return -(grad_w - self.phi_a.T @ (self.u * z)) / (2.0 * self.alpha), 0.0
        db = (float(self.u @ z) - grad_b) / self.schur
        # H⁻¹r for r = g_w + db·h: M⁻¹ S r = M⁻¹ S g + db · M⁻¹ S h
        r, z = grad_w + db * self.h, z + db * self.m_inv_sh
        return -(r - self.phi_a.T @ (self.u * z)) / (2.0 * self.alpha), db


class DenseDirections:
    """Newton directions from the Hessian sums of a streamed pass; consecutive classes of equal
    sums (equal curvature weights, e.g. every class at ``w = 0``) share one factorisation.

    Parameters
    ----------
    alpha : float
    fit_intercept : bool
    """

    def __init__(self, alpha: float, fit_intercept: bool) -> None:
        self.alpha, self.fit_intercept = alpha, fit_intercept
        self._last: tuple[SVMPassSums, int, DenseSystem] | None = None  # one (D+1)² factor held

    def __call__(self, sums: SVMPassSums, h: int, grad_w: np.ndarray, grad_b: float) -> tuple[np.ndarray, float]:
        """Direction of the class of Hessian block ``h`` at the gradient ``(grad_w, grad_b)``."""
        last = self._last
        if last is None or last[0] is not sums or not _equal_blocks(sums, last[1], h):
            system = DenseSystem(sums.hess[h], sums.hess_phi[h], float(sums.hess_c[h]), self.alpha, self.fit_intercept)
            self._last = last = (sums, h, system)
        return last[2].direction(grad_w, grad_b)


def _equal_blocks(sums: SVMPassSums, h0: int, h: int) -> bool:
    return (
        sums.hess_c[h0] == sums.hess_c[h]
        and np.array_equal(sums.hess_phi[h0], sums.hess_phi[h])
        and np.array_equal(sums.hess[h0], sums.hess[h])
    )
