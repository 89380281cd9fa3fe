"""Falkon's preconditioner for a whole α grid from one eigendecomposition of ``K_MM``.

:class:`~bigkernel.numerics.falkon.FalkonPreconditioner` holds ``T`` and one Cholesky factor
``A_α`` per distinct α: ``(1 + #α) · M² · 8`` bytes, 26 GB for M = 20,000 and 7 α. The same
preconditioner (the same ``B Bᵀ``, hence the same CG iterates up to round-off) comes from one
``M × M`` matrix for every α: with ``K = K_MM + εI = U Λ Uᵀ``,

    B_α B_αᵀ = ((n_w / M) K̃ᵀK̃ + α K)⁻¹,   K̃ = K − 1μᵀ   (Falkon's, centred by μ)

and ``Uᵀ(K̃ᵀK̃ / M + (α/n_w) K)U = D_α + E`` with ``D_α = Λ² / M + (α/n_w) Λ`` diagonal and
``E = (M μ̂μ̂ᵀ − ŝμ̂ᵀ − μ̂ŝᵀ) / M`` of rank 2 (``μ̂ = Uᵀμ``, ``ŝ = UᵀK1``), so

    B_α = U D_α^{-1/2} (I + Z_α Ω_α Z_αᵀ)^{-1/2} / √n_w = U D_α^{-1/2} (I + Z_α c_α Z_αᵀ) / √n_w

with ``Z_α`` (M × 2, orthonormal) and ``Ω_α`` from a 2 × 2 eigenproblem: ``O(M)`` per α.
Every apply is one GEMM with ``U`` for all columns at once plus ``O(M)`` work per column.
The build is one ``eigh`` (``driver="evr"``: ``K_MM`` is overwritten and the eigenvectors take
one more ``M × M``, so the peak is ``2 · M² · 8`` bytes); it costs about 20 Cholesky factorisations
of the same order (measured on this project's 2-core machine: 12.2 s against 0.59 s at M = 4000).

Falkon's centres only: a generalized ``eigh(S, K)`` for a sample of rows (as the Cholesky route
can take) loses the sample's accuracy when ``K_MM`` is ill-conditioned (measured, 1-d rbf data,
M = 120, α/n = 1e-10: 96 iterations against 9 for the Cholesky route's panels and 15 for the
centres), so it is not offered.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike

from bigkernel.errors import DataError
from bigkernel.numerics.falkon import check_alphas, check_kmm, check_positive, check_vector

logger = logging.getLogger(__name__)

__all__ = ["EigenFalkonPreconditioner"]


class EigenFalkonPreconditioner:
    """Falkon's preconditioner for every CG column from one eigendecomposition of ``K_MM``.

    Same interface and the same ``B_c B_cᵀ`` as
    :class:`~bigkernel.numerics.falkon.FalkonPreconditioner` (uniform centre weights), in
    ``M² · 8`` bytes whatever the number of α. Build it with :meth:`build`.

    Attributes
    ----------
    alphas : ndarray of shape (m,)
        The α of each CG column.
    distinct_alphas : ndarray of shape (n_factors,)
        Sorted distinct α; ``column_factor[c]`` indexes it.
    column_factor : ndarray of shape (m,)
    n_w : float
        Total weight of the rows.
    jitter : float
        What was added to ``K_MM``'s (round-off clipped) eigenvalues.
    n_centres : int
        ``M``.
    eigenvalues : ndarray of shape (M,)
        ``Λ``, the eigenvalues of ``K_MM + jitter·I`` (negative round-off clipped at 0 first).
    """

    def __init__(
        self,
        U: np.ndarray,
        lam: np.ndarray,
        alphas: np.ndarray,
        n_w: float,
        jitter: float,
        mean,
    ) -> None:
        self._U, self.eigenvalues = U, lam
        self.alphas = alphas
        self.distinct_alphas, self.column_factor = np.unique(alphas, return_inverse=True)
        self.n_w, self.jitter, self.n_centres = float(n_w), float(jitter), int(U.shape[0])
        F = None
        if mean is not None:  # the rank-2 centring term in U's basis: E = F G Fᵀ
            F = np.column_stack([U.T @ mean, lam * U.sum(axis=0)])  # [μ̂, ŝ = ΛUᵀ1]
        G = np.array([[1.0, -1.0 / self.n_centres], [-1.0 / self.n_centres, 0.0]])
        self._factors = [self._factor(a, F, G) for a in self.distinct_alphas]

    @classmethod
    def build(
        cls,
        K_MM: np.ndarray,
        alphas: ArrayLike,
        n_w: float,
        *,
        jitter: float | None = None,
        overwrite: bool = False,
        mean: ArrayLike | None = None,
    ) -> EigenFalkonPreconditioner:
        """Eigendecompose ``K_MM`` once; ``O(M)`` more per distinct α.

        Parameters
        ----------
        K_MM : ndarray of shape (M, M)
            Kernel matrix of the centres (symmetric PSD; the lower triangle is read).
        alphas : array-like of shape (m,) or float
            α of each CG column (> 0).
        n_w : float
            Total weight of the training rows (> 0).
        jitter : float, optional
            Added to the eigenvalues (after clipping round-off negatives at 0); the default is
            :class:`~bigkernel.numerics.falkon.FalkonPreconditioner`'s.
        overwrite : bool, default=False
            Let ``eigh`` overwrite ``K_MM``: the peak drops from ``3 · M² · 8`` to ``2 · M² · 8``.
        mean : array-like of shape (M,), optional
            Weighted column means ``μ`` of ``K_nM`` when the caller centres for an intercept.
        Returns
        -------
        EigenFalkonPreconditioner
        """
        K, jitter = check_kmm(K_MM, jitter)
        M = K.shape[0]
        alphas, n_w = check_alphas(alphas), check_positive("n_w", n_w)
        mean = check_vector("mean", mean, M)
        W = K if overwrite and K.dtype == np.float64 else np.array(K, dtype=np.float64)
        if not np.all(np.isfinite(W)):
            raise DataError("K_MM has NaN or infinite entries: check the kernel parameters (gamma) and the centres")
        # Wᵀ is F-ordered for a C-ordered W: LAPACK then works in W's memory (no third M × M);
        # Wᵀ's upper triangle is W's lower one
        A = W.T if W.flags.c_contiguous else W
        lower = not W.flags.c_contiguous
        lam, U = scipy.linalg.eigh(A, lower=lower, overwrite_a=True, driver="evr", check_finite=False)
        del W, A
        lam = np.maximum(lam, 0.0) + jitter
        logger.debug("Falkon eigen preconditioner: M = %d, %d distinct alpha, jitter %.3g", M, np.unique(alphas).size,
                     jitter)  # fmt: skip
        return cls(U, lam, alphas, n_w, jitter, mean)

    @staticmethod
    def memory_bytes(M: int) -> int:
        """Peak bytes of :meth:`build` with ``overwrite`` (``K_MM`` and the eigenvectors),
        ``2 · M² · 8``; the built preconditioner holds ``M² · 8`` (:attr:`nbytes`)."""
        return 2 * int(M) * int(M) * 8 + 64 * int(M) * 8

    @property
    def nbytes(self) -> int:
        """Bytes held (the eigenvectors and the per-α vectors)."""
        return int(self._U.nbytes + sum(d.nbytes + Z.nbytes for d, Z, _ in self._factors))

    @property
    def n_factors(self) -> int:
        """Number of distinct α."""
        return len(self._factors)

    def _factor(self, alpha: float, F: np.ndarray | None, G: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(d, Z, ω)`` of one α: ``d = D_α^{-1/2}``, ``I + E' = I + Z diag(ω) Zᵀ``."""
        lam, M = self.eigenvalues, self.n_centres
        d = 1.0 / np.sqrt(lam * lam / M + (alpha / self.n_w) * lam)
        if F is None:
            return d, np.zeros((M, 0)), np.zeros(0)
        Q, R = np.linalg.qr(F * d[:, None])
        omega, W = np.linalg.eigh(R @ G @ R.T)
        # I + E' is positive definite in exact arithmetic (it is Uᵀ(K̃ᵀK̃/M + aK)U scaled): clip round-off
        return d, Q @ W, np.maximum(omega, np.finfo(np.float64).eps - 1.0)

    def _rank2(self, Y: np.ndarray, cols: ArrayLike, power: float, scale_first: bool) -> np.ndarray:
        """Per column ``c`` (factor ``f``): ``(I + E'_f)^power`` applied after (``scale_first``)
        or before multiplying by ``d_f``; ``Y`` is ``(M, len(cols))``, modified in place."""
        which = self.column_factor[np.asarray(cols, dtype=np.intp)]
        for f in np.unique(which):
            sel = np.flatnonzero(which == f)
            d, Z, omega = self._factors[int(f)]
            block = Y[:, sel]
            if scale_first:
                block *= d[:, None] if power < 0 else 1.0 / d[:, None]
            if omega.size:
                block += Z @ (((1.0 + omega) ** power - 1.0)[:, None] * (Z.T @ block))
            if not scale_first:
                block *= d[:, None]
            Y[:, sel] = block
        return Y

    def apply(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray:
        """``B_c V_c = U d_c ⊙ (I + E'_c)^{-1/2} V_c / √n_w`` for every column of ``cols``."""
        Y = self._rank2(self._block(V, cols).copy(), cols, -0.5, scale_first=False)
        return (self._U @ Y) / math.sqrt(self.n_w)

    def apply_t(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray:
        """``B_cᵀ V_c = (I + E'_c)^{-1/2} d_c ⊙ Uᵀ V_c / √n_w``."""
        Y = self._rank2(self._U.T @ self._block(V, cols), cols, -0.5, scale_first=True)
        return Y / math.sqrt(self.n_w)

    def apply_inv(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray:
        """``B_c⁻¹ V_c = √n_w (I + E'_c)^{1/2} Uᵀ V_c / d_c``."""
        Y = self._rank2(self._U.T @ self._block(V, cols), cols, 0.5, scale_first=True)
        return Y * math.sqrt(self.n_w)

    def penalty_matvec(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray:
        """``B_cᵀ (K_MM + jitter·I) B_c V_c`` (``UᵀKU = Λ``: no product with ``U``)."""
        Y = self._rank2(self._block(V, cols).copy(), cols, -0.5, scale_first=False)
        Y *= self.eigenvalues[:, None]
        return self._rank2(Y, cols, -0.5, scale_first=True) / self.n_w

    def kmm_matvec(self, V: np.ndarray) -> np.ndarray:
        """``K_MM V = U Λ Uᵀ V − jitter · V`` for ``V`` of shape (M,) or (M, k) ."""
        V = np.asarray(V, dtype=np.float64)
        X = V[:, None] if V.ndim == 1 else V
        if X.ndim != 2 or X.shape[0] != self.n_centres:
            raise DataError(
                f"kmm_matvec needs V of shape ({self.n_centres},) or ({self.n_centres}, k), found {V.shape}"
            )
        out = self._U @ (self.eigenvalues[:, None] * (self._U.T @ X)) - self.jitter * X
        return out[:, 0] if V.ndim == 1 else out

    def _block(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray:
        V = np.asarray(V, dtype=np.float64)
        k = np.size(cols)
        if V.ndim != 2 or V.shape != (self.n_centres, k):
            raise DataError(f"V must have shape ({self.n_centres}, len(cols) = {k}), found {V.shape}")
        return V
