"""K-fold cross-validation from per-fold sufficient statistics (layer 1).

With statistics S_k of each fold, the training system of fold k is S − S_k (S = Σ S_k), and the
validation error of any (β, b) on fold k needs only S_k:

    ‖y_k − Φ_kβ − b‖² = y_kᵀy_k − 2βᵀΦ_kᵀy_k − 2b Σy_k + βᵀΦ_kᵀΦ_kβ + 2b βᵀΣφ_k + n_k b²

so the whole α path of every fold — and, with one statistics set per feature map, every γ —
comes from the single data pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bigkernel.numerics.primal import eigen_path
from bigkernel.numerics.sums import SufficientStats


def subtract(total: SufficientStats, part: SufficientStats) -> SufficientStats:
    """Statistics of the rows in ``total`` but not in ``part`` (both with one set)."""
    return SufficientStats(*(a - b for a, b in zip(
        (total.n, total.sum_phi, total.sum_y, total.sum_yy, total.gram, total.phi_y),
        (part.n, part.sum_phi, part.sum_y, part.sum_yy, part.gram, part.phi_y))))  # fmt: skip


def validation_sse(fold: SufficientStats, coef: np.ndarray, intercept: np.ndarray, eps: float = 1e-13) -> np.ndarray:
    """Σ squared errors on a fold for A coefficient sets: coef (A, D, k), intercept (A, k) → (A, k).

    inf where the value is not above 10× its rounding error eps·Σ|terms| (a difference of large
    sums when ‖β‖ is large: pure rounding must never look like a perfect fit).
    """
    G, Py, sphi = fold.gram[0], fold.phi_y[0], fold.sum_phi[0]
    n, sy, syy = fold.n[0], fold.sum_y[0], fold.sum_yy[0]
    b = intercept
    A, D, k = coef.shape
    C = coef.transpose(1, 0, 2).reshape(D, A * k)  # all α and targets as columns: one gemm
    quad = (C * (G @ C)).sum(axis=0).reshape(A, k)
    cross = (coef * Py[np.newaxis]).sum(axis=1)
    lin = (sphi @ C).reshape(A, k)
    sse = syy - 2 * cross - 2 * b * sy + quad + 2 * b * lin + n * b**2
    err = eps * (np.abs(syy) + 2 * np.abs(cross) + 2 * np.abs(b * sy) + np.abs(quad) + 2 * np.abs(b * lin) + n * b**2)
    return np.where(sse > 10 * err, sse, np.inf)


@dataclass(frozen=True)
class CVPath:
    """Per-fold validation errors over an α grid."""

    alphas: np.ndarray  # (A,)
    sse: np.ndarray  # (K, A, k) validation squared errors
    n: np.ndarray  # (K,) validation rows per fold
    tss: np.ndarray  # (K, k) validation total sum of squares about the fold mean

    def mse(self) -> np.ndarray:
        """Validation MSE per fold and α, averaged over targets: (K, A)."""
        n = np.maximum(self.n, 1.0)[:, None, None]  # an empty fold (tiny data) scores 0, not a warning
        return (self.sse / n).mean(axis=2)

    def r2(self) -> np.ndarray:
        """Validation R² per fold and α, averaged over targets: (K, A)."""
        tss = self.tss[:, None, :]
        # a fold with constant y has no R² (nan), as in scikit-learn's r2_score for one sample
        ratio = np.divide(self.sse, tss, out=np.full(self.sse.shape, np.nan), where=tss > 0)
        return (1.0 - ratio).mean(axis=2)


def cv_path(folds: SufficientStats, alphas: np.ndarray, fit_intercept: bool = True, eps: float = 1e-13) -> CVPath:
    """K-fold CV errors for every α from the statistics of K folds (leading axis K).

    ``eps`` is the relative precision of the sums; unreliable errors are inf (never chosen).
    """
    alphas = np.asarray(alphas, dtype=np.float64)
    total = folds.total()
    K = folds.n.shape[0]
    sse = []
    for k in range(K):
        fold = folds.select(k)
        path = eigen_path(subtract(total, fold), fit_intercept, eps)
        # β(α) for all α at once: V (z / (s + α)), shape (A, D, k)
        scaled = path.z[np.newaxis] / (path.eigvals[np.newaxis, :, None] + alphas[:, None, None])
        coef = path.eigvecs @ scaled  # (D, D) @ (A, D, k) → (A, D, k)
        intercept = path.mean_y[np.newaxis] - (path.mean_phi @ coef)
        sse.append(validation_sse(fold, coef, intercept, eps))
    n = folds.n.copy()
    tss = folds.sum_yy - folds.sum_y**2 / np.where(n > 0, n, 1)[:, None]
    return CVPath(alphas, np.array(sse), n, tss)
