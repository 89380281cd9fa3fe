"""The primal SVM's passes and Newton directions over features held in memory (layer 1).

When the data are small (``n·D`` within a memory budget, the caller's choice), featurising every
pass again and summing a D × D Hessian per class is most of the fit: :class:`KeptFeatures`
featurises once, and its passes return the per-row curvature weights ``c·L''`` instead of the
Hessian sums (:attr:`~bigkernel.numerics.svm.SVMPassSums.curv`). :class:`KeptDirections` then
solves each class's Newton system through its curved rows when they are at most D
(:class:`~bigkernel.numerics.svm_directions.DualSystem`, an ``n_a × n_a`` Cholesky on the kept
Gram matrix ``ΦΦᵀ``), else in the feature space from a syrk of those rows
(:class:`~bigkernel.numerics.svm_directions.DenseSystem`); consecutive classes of equal weights
(every class at the first pass) share the factorisation. The line-search sums are those of a streamed
pass (:func:`~bigkernel.numerics.svm.accumulate_grid`, in the same sub-blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bigkernel.numerics.sums import sub_block_edges
from bigkernel.numerics.svm import SVMPassState, SVMPassSums, accumulate_grid, curvature_weights, fold_scale
from bigkernel.numerics.svm_directions import DenseSystem, DualSystem


@dataclass
class KeptRows:
    """Rows of positive weight of some row blocks, featurised: ``a + b`` concatenates (in order).

    Attributes
    ----------
    phi : ndarray of shape (rows, D)
        Unscaled features.
    Y : ndarray of shape (rows, k)
    c : ndarray of shape (rows,)
    """

    phi: np.ndarray
    Y: np.ndarray
    c: np.ndarray

    def __add__(self, other: KeptRows) -> KeptRows:
        return KeptRows(
            *(np.concatenate([a, b]) for a, b in ((self.phi, other.phi), (self.Y, other.Y), (self.c, other.c)))
        )


#: largest n for which the Gram matrix ΦΦᵀ of all kept rows is formed once (n² float64 entries)
GRAM_ROWS = 8192


class KeptFeatures:
    """Features of the rows of positive weight, featurised once.

    Parameters
    ----------
    phi : ndarray of shape (n, D)
        Unscaled features (float32 or float64, the dtype of the streamed pass).
    scale : float
        The feature map's scale (φ = scale · phi).
    Y : ndarray of shape (n, k)
        ±1 targets.
    c : ndarray of shape (n,)
        Row weights > 0.
    block_rows : int
        Sub-blocks of the line-search sums (as in the streamed pass).
    """

    def __init__(self, phi: np.ndarray, scale: float, Y: np.ndarray, c: np.ndarray, block_rows: int = 8192) -> None:
        self.phi, self.scale, self.block_rows = phi, float(scale), int(block_rows)
        self.Y, self.c = np.asarray(Y, dtype=np.float64), np.asarray(c, dtype=np.float64)
        self._phi64: np.ndarray | None = None
        self._gram: np.ndarray | None = None

    @property
    def n_components(self) -> int:
        return self.phi.shape[1]

    def pass_sums(self, state: SVMPassState) -> SVMPassSums:
        """The sums of one pass at ``state``, with per-row curvature weights for the Hessian."""
        n, k = self.Y.shape
        h = state.hess_classes.size
        acc = SVMPassSums.zeros(self.n_components, k, state.steps.shape[1], h, hessian=False)
        curv = np.empty((h, n))
        for lo, hi in sub_block_edges(0, n, self.block_rows):
            Y, c = self.Y[lo:hi], self.c[lo:hi]
            f, delta = accumulate_grid(acc, self.phi[lo:hi], Y, c, state, self.scale)
            curv[:, lo:hi] = curvature_weights(f, delta, Y, c, state)
        fold_scale(acc, self.scale)
        acc.curv, acc.hess_c, acc.n_curved = curv, curv.sum(axis=1), np.count_nonzero(curv > 0, axis=1).astype(float)
        return acc

    @property
    def phi64(self) -> np.ndarray:
        """Scaled float64 features (formed on first use)."""
        if self._phi64 is None:
            self._phi64 = self.scale * self.phi.astype(np.float64)
        return self._phi64

    def gram(self, rows: np.ndarray) -> np.ndarray:
        """``φ_a φ_aᵀ`` of the given rows: from the whole Gram matrix when n ≤ :data:`GRAM_ROWS`."""
        if self.phi.shape[0] > GRAM_ROWS:
            p = self.rows(rows)
            return p @ p.T
        if self._gram is None:
            self._gram = self.phi64 @ self.phi64.T
        return self._gram if rows.size == self._gram.shape[0] else self._gram[np.ix_(rows, rows)]

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """``phi64[rows]`` (no copy when ``rows`` are all rows, in order)."""
        return self.phi64 if rows.size == self.phi.shape[0] else self.phi64[rows]


class KeptDirections:
    """Newton directions of the passes of a :class:`KeptFeatures` (see the module docstring).

    Parameters
    ----------
    features : KeptFeatures
    alpha : float
    fit_intercept : bool
    """

    def __init__(self, features: KeptFeatures, alpha: float, fit_intercept: bool) -> None:
        self.features, self.alpha, self.fit_intercept = features, alpha, fit_intercept
        self._last: tuple[SVMPassSums, np.ndarray, DenseSystem | DualSystem] | None = None
        #: systems solved in the row space ("dual") and the feature space ("dense"), all passes
        self.counts = {"dual": 0, "dense": 0, "shared": 0}

    def __call__(self, sums: SVMPassSums, h: int, grad_w: np.ndarray, grad_b: float) -> tuple[np.ndarray, float]:
        """Direction of the class of Hessian block ``h`` at the gradient ``(grad_w, grad_b)``."""
        w = sums.curv[h]
        last = self._last
        if last is not None and last[0] is sums and np.array_equal(last[1], w):
            self.counts["shared"] += 1
        else:  # only the last system is held (its rows' features are a copy of n_a × D)
            self._last = last = (sums, w, self._system(w))
        return last[2].direction(grad_w, grad_b)

    def _system(self, w: np.ndarray) -> DenseSystem | DualSystem:
        rows = np.flatnonzero(w > 0)
        fx = self.features
        if rows.size <= fx.n_components:
            self.counts["dual"] += 1
            return DualSystem(fx.rows(rows), fx.gram(rows), w[rows], self.alpha, self.fit_intercept)
        self.counts["dense"] += 1
        p = fx.rows(rows)
        ps = p * np.sqrt(w[rows])[:, None]
        return DenseSystem(ps.T @ ps, w[rows] @ p, float(w[rows].sum()), self.alpha, self.fit_intercept)
