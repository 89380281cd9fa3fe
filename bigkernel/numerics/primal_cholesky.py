"""The primal ridge solve at one α by Cholesky (layer 1): no eigendecomposition.

At one α the fit needs β = (G + αI)⁻¹b and the α path's sums at that α only:

    Σ z²/(s + α) = bᵀβ,   Σ z²/(s + α)² = βᵀβ,   Σ s/(s + α) = D − α·tr((G + αI)⁻¹),
    Σ log(s + α) = 2 Σ log diag(L),   G + αI = LLᵀ,

with tr((G + αI)⁻¹) = ‖L⁻¹‖²_F. That is one Cholesky factor and one triangular inverse,
``2D³/3`` flops in BLAS-3, against the tridiagonal reduction's ``4D³/3`` (half of it
matrix-vector products, memory-bound) and the eigenvalues after it: at D = 2048 about 0.1 s
against 0.5–0.8 s on two cores (``scripts/bench_rff.py --case a``, the post-pass rows).

The route declines (None) where the eigenvalue route must decide, so that its answers never
differ from that route's beyond rounding:

- α within :data:`~bigkernel.numerics.primal.SHIFT_MARGIN` of G's most negative (rounding)
  eigenvalue: ``G + (α/margin)I`` is then not positive definite (its Cholesky fails), and the
  eigenvalue route clips those eigenvalues at 0, which moves β by more than rounding;
- α below :data:`MIN_RELATIVE_ALPHA` of ‖G‖: ``tr((G + αI)⁻¹)`` is then rounded by about
  ``D²·ε·‖G‖/α``, more than the eigenvalues' ``D·ε·‖G‖/α``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import lapack

from bigkernel.numerics.threads import lapack_limit

#: the Cholesky route serves α at or above this multiple of ‖G‖_F (an upper bound of the
#: largest eigenvalue): cond(G + αI) ≤ 1e10. The worst-case rounding of df = D − α·tr((G + αI)⁻¹),
#: D²·ε·‖G‖/α, is far from what happens: at α = 1e-9·s_max (D = 150, rank-deficient) the two
#: routes' df differed by 1.9e-6, within the eigenvalue route's own D·ε·s_max/α = 1.5e-5
#: (tests/test_primal_cholesky.py checks D²·ε·s_max/α over α from 1e-12·s_max up)
MIN_RELATIVE_ALPHA = 1e-10


@dataclass(frozen=True)
class OneAlphaSums:
    """What a one-α fit needs from ``G + αI`` (k targets).

    Attributes
    ----------
    coef : ndarray of shape (D, k)
        β = (G + αI)⁻¹b.
    cross : ndarray of shape (k,)
        bᵀβ = Σ z²/(s + α).
    norm2 : ndarray of shape (k,)
        βᵀβ = Σ z²/(s + α)².
    df_sum : float
        Σ s/(s + α) = D − α·tr((G + αI)⁻¹).
    log_det : float
        Σ log(s + α) = log|G + αI|.
    norm_bound : float
        ‖G‖_F, an upper bound of the largest eigenvalue (for rounding bounds).
    """

    coef: np.ndarray
    cross: np.ndarray
    norm2: np.ndarray
    df_sum: float
    log_det: float
    norm_bound: float


def solve_one_alpha(G: np.ndarray, b: np.ndarray, alpha: float, margin: float) -> OneAlphaSums | None:
    """The one-α sums of the symmetric system ``G`` (D, D) and right-hand sides ``b`` (D, k)
    by Cholesky, or None where the eigenvalue route must serve (module notes): α below
    :data:`MIN_RELATIVE_ALPHA`·‖G‖_F, or ``G + (α/margin)I`` not positive definite.

    ``G`` is not modified (one D × D scratch array is allocated).
    """
    D = G.shape[0]
    bound = float(np.linalg.norm(G))
    if not alpha >= MIN_RELATIVE_ALPHA * bound:
        return None
    b = np.asarray(b, dtype=np.float64)
    with lapack_limit(D):
        # G is symmetric: Gᵀ (Fortran order for a C-order G) is G, copied without a transpose
        scratch = np.array(G.T, dtype=np.float64, order="F")
        diag = np.diag_indices(D)
        scratch[diag] += alpha / margin
        _, info = lapack.dpotrf(scratch, lower=1, clean=0, overwrite_a=1)
        if info != 0:  # an eigenvalue at or below −α/margin: within the margin of G's rounding
            return None
        scratch[...] = G.T
        scratch[diag] += alpha
        L, info = lapack.dpotrf(scratch, lower=1, clean=1, overwrite_a=1)
        if info != 0:  # pragma: no cover - G + αI is above a definite G + (α/margin)I
            return None
        coef, info = lapack.dpotrs(L, b, lower=1)
        if info != 0:  # pragma: no cover - a factor that dpotrf returned is valid
            return None
        log_det = 2.0 * float(np.log(np.diag(L)).sum())
        inv, info = lapack.dtrtri(L, lower=1, overwrite_c=1)
        if info != 0:  # pragma: no cover - a Cholesky factor has a positive diagonal
            return None
    trace_inv = float(np.einsum("ij,ij->", inv, inv))  # L⁻¹ is lower triangular (dpotrf clean=1)
    cross = np.einsum("dk,dk->k", b, coef)
    norm2 = np.einsum("dk,dk->k", coef, coef)
    return OneAlphaSums(coef, cross, norm2, float(D) - alpha * trace_inv, log_det, bound)
