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


def fold_solutions(folds: SufficientStats, alphas: np.ndarray, fit_intercept: bool = True, eps: float = 1e-13):
    """For each of the K folds (leading axis of ``folds``): ``(fold statistics, coef (A, D, k),
    intercept (A, k))`` of its training system (total − fold), every α from one eigendecomposition."""
    alphas = np.asarray(alphas, dtype=np.float64)
    total = folds.total()
    for k in range(folds.n.shape[0]):
        fold = folds.select(k)
        path = eigen_path(subtract(total, fold), fit_intercept, eps)
        # β(α) for all α at once: V (z / (s + α)), shape (A, D, k), as one GEMM with every α and
        # target a column (a stacked (D, D) @ (A, D, k) is A matrix-vector products: 2-7× slower)
        scaled = path.z[np.newaxis] / (path.eigvals[np.newaxis, :, None] + alphas[:, None, None])
        A, D, k = scaled.shape
        coef = path.rotate(scaled.transpose(1, 0, 2).reshape(D, A * k)).reshape(D, A, k).transpose(1, 0, 2)
        yield fold, coef, path.mean_y[np.newaxis] - (path.mean_phi @ coef)


def cv_path(folds: SufficientStats, alphas: np.ndarray, fit_intercept: bool = True, eps: float = 1e-13) -> CVPath:
    """K-fold CV errors for every α from the statistics of K folds (leading axis K).

    ``eps`` is the relative precision of the sums; unreliable errors are inf (never chosen).
    """
    alphas = np.asarray(alphas, dtype=np.float64)
    sse = [
        validation_sse(fold, coef, intercept, eps)
        for fold, coef, intercept in fold_solutions(folds, alphas, fit_intercept, eps)
    ]
    n = folds.n.copy()
    tss = folds.sum_yy - folds.sum_y**2 / np.where(n > 0, n, 1)[:, None]
    return CVPath(alphas, np.array(sse), n, tss)


# --------------------------------------------------------------------------------------------
# Classification: cross-validated accuracy needs per-row predictions, so a second pass
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FoldDecisions:
    """The one-vs-rest decision of every (γ, fold, α) on held-out rows, for a scoring pass.

    ``coefs[g]`` (K, D, A·c) are fold k's training-system coefficients for every α (the
    feature scale folded in), ``intercepts[g]`` (K, A·c); c = 1 column for two classes (its
    sign decides), else one per class (the largest decides).
    """

    coefs: list[np.ndarray]
    intercepts: list[np.ndarray]
    n_alphas: int
    n_columns: int

    @classmethod
    def from_folds(cls, per_map: list[tuple[SufficientStats, np.ndarray, float]], fit_intercept: bool, eps: float):
        """From ``(fold statistics, α grid, feature scale)`` per feature map (same α count each)."""
        coefs, intercepts = [], []
        for folds, alphas, scale in per_map:
            cs, bs = [], []
            for _, coef, intercept in fold_solutions(folds, alphas, fit_intercept, eps):
                A, D, c = coef.shape
                cs.append(scale * coef.transpose(1, 0, 2).reshape(D, A * c))
                bs.append(intercept.reshape(A * c))
            coefs.append(np.stack(cs))
            intercepts.append(np.stack(bs))
        A = per_map[0][1].size
        return cls(coefs, intercepts, A, coefs[0].shape[2] // A)

    def correct(self, phi: np.ndarray, g: int, k: int, codes: np.ndarray) -> np.ndarray:
        """Correct predictions (A,) of fold ``k``'s models of map ``g`` on held-out rows with
        unscaled features ``phi`` (rows, D) and class codes ``codes`` (rows,)."""
        # float64 product even for float32 features (coefficients may be large and cancel)
        dec = (phi @ self.coefs[g][k] + self.intercepts[g][k]).reshape(phi.shape[0], self.n_alphas, self.n_columns)
        pred = (dec[:, :, 0] > 0).astype(np.intp) if self.n_columns == 1 else np.argmax(dec, axis=2)
        return (pred == codes[:, np.newaxis]).sum(axis=0)


def fold_correct_counts(
    fmaps, decisions: FoldDecisions, X: np.ndarray, codes: np.ndarray, start: int, *,
    folds_of, dtype: str = "float64", block_rows: int = 8192,
) -> np.ndarray:  # fmt: skip
    """Correct held-out predictions and held-out rows of a block: array (G, K, A + 1), the last
    column the row count of each fold (the same for every map).

    ``folds_of(start, stop)`` gives each row's fold (K or more: in no fold). Rows are sorted by
    fold within each sub-block, so each map's features are computed once per row.
    """
    K = decisions.coefs[0].shape[0]
    out = np.zeros((len(fmaps), K, decisions.n_alphas + 1))
    stop = start + X.shape[0]
    first = -(-start // block_rows) * block_rows
    edges = sorted({start, stop, *range(first, stop, block_rows)})
    for lo, hi in zip(edges[:-1], edges[1:]):
        f = np.asarray(folds_of(lo, hi))
        order = np.argsort(f, kind="stable")
        bounds = np.searchsorted(f[order], np.arange(K + 1))
        x, c = X[lo - start : hi - start][order], np.asarray(codes[lo - start : hi - start])[order]
        x, c = x[: bounds[K]], c[: bounds[K]]  # rows in no fold are never featurised
        for g, fmap in enumerate(fmaps):
            phi = fmap.transform_unscaled(x, dtype)
            for k in range(K):
                sl = slice(bounds[k], bounds[k + 1])
                if bounds[k + 1] > bounds[k]:
                    out[g, k, :-1] += decisions.correct(phi[sl], g, k, c[sl])
                    out[g, k, -1] += bounds[k + 1] - bounds[k]
    return out
