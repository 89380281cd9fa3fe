"""Blocked Cholesky factorisation that never hands LAPACK a large matrix (layer 1).

:func:`panel_cholesky` factors ``A = UᵀU`` by the right-looking blocked algorithm: for each
diagonal block of order ``≤ block``, LAPACK's ``potrf`` factors the block, a triangular solve
(BLAS ``trsm``) gives the panel to its right, and matrix products (BLAS ``gemm``) subtract the
panel's outer product from the trailing matrix, one column chunk at a time (its lower half
only). The flops are those of ``potrf`` (n³/3), almost all in ``gemm``.

Why not ``scipy.linalg.cholesky``: numpy's and scipy's bundled OpenBLAS (0.3.30/0.3.31, SkylakeX
kernels on an AMD EPYC) segfaults in a multi-threaded ``potrf`` of order ≳ 16,000 (issue 21);
``potrf`` calls of order ≤ 4096, ``trsm`` and ``gemm`` do not. The factor is the same up to
round-off (the same algorithm LAPACK runs inside ``potrf``, with a larger block).

Memory: with ``overwrite=True`` and a float64 C- or F-contiguous ``A``, the factor is written
over ``A`` (the returned array is a view of its memory), and the extra memory is one panel
copy (``n × block``) plus one product chunk (``n × min(block, 1024)``), both float64.
"""

from __future__ import annotations

import logging

import numpy as np
from scipy.linalg import blas, lapack

from bigkernel.errors import DataError, NotPSDError
from bigkernel.numerics.threads import blas_thread_limit, lapack_limit
from bigkernel.validation import check_int

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_BLOCK", "panel_cholesky"]

#: order of the diagonal blocks handed to LAPACK's potrf (safe on every CPU measured)
DEFAULT_BLOCK = 4096
#: columns of the trailing matrix updated by one matrix product (bounds its temporary)
UPDATE_CHUNK = 1024


def panel_cholesky(
    A: np.ndarray,
    *,
    block: int = DEFAULT_BLOCK,
    overwrite: bool = False,
    threads: int | None = None,
) -> np.ndarray:
    """Upper-triangular ``U`` with ``UᵀU = A``, factored in diagonal blocks of order ``≤ block``.

    Parameters
    ----------
    A : ndarray of shape (n, n)
        Symmetric positive definite. Only one triangle is read (the upper one of a C-ordered
        array, the lower one of an F-ordered one): the other may hold anything.
    block : int, default=4096
        Largest order of the diagonal blocks factored by LAPACK's ``potrf``; also the width of
        the panels. ``A`` of order ``≤ block`` is one ``potrf`` call.
    overwrite : bool, default=False
        Write the factor over ``A`` when ``A`` is float64 and C- or F-contiguous (the result
        then shares ``A``'s memory, and ``A`` is destroyed even when the factorisation fails);
        otherwise a float64 copy is factored.
    threads : int, optional
        BLAS threads for the factorisation; default
        :func:`~bigkernel.numerics.threads.lapack_limit` (the cores other processes leave idle).

    Returns
    -------
    U : ndarray of shape (n, n)
        Upper triangular (zeros below the diagonal), float64, C-contiguous.

    Raises
    ------
    NotPSDError
        ``A`` is not (numerically) positive definite; the message names the failing pivot and
        block and says what to do (more jitter on the diagonal).
    DataError
        ``A`` is not a square 2-D array.
    """
    block = check_int("block", block, 1)
    A = np.asarray(A)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise DataError(f"panel_cholesky needs a square 2-D array, found shape {A.shape}")
    W = _work_array(A, overwrite)  # F-ordered: its lower triangle becomes L = Uᵀ
    n = W.shape[0]
    if n == 0:
        return W.T
    limit = lapack_limit(n) if threads is None else blas_thread_limit(threads)
    with limit:
        for k0 in range(0, n, block):
            k1 = min(n, k0 + block)
            _factor_diagonal(W, k0, k1, n)
            if k1 < n:
                panel = _solve_panel(W, k0, k1)
                _update_trailing(W, panel, k1, n)
    U = W.T
    for i in range(1, n):  # row by row: no n²-sized index arrays
        U[i, :i] = 0.0
    return U


def _work_array(A: np.ndarray, overwrite: bool) -> np.ndarray:
    """``A`` as an F-contiguous float64 array whose lower triangle holds ``A``'s read triangle."""
    if overwrite and A.dtype == np.float64:
        if A.flags.c_contiguous:
            return A.T
        if A.flags.f_contiguous:
            return A
        logger.debug("panel_cholesky: A is not contiguous, factoring a copy")
    if A.flags.c_contiguous or not A.flags.f_contiguous:
        return np.array(A, dtype=np.float64, order="C").T  # upper of C-ordered A = lower of Aᵀ
    return np.array(A, dtype=np.float64, order="F")


def _factor_diagonal(W: np.ndarray, k0: int, k1: int, n: int) -> None:
    """``W[k0:k1, k0:k1] ← chol(·)`` (lower) by one potrf, or raise NotPSDError."""
    D = np.asfortranarray(W[k0:k1, k0:k1])
    L, info = lapack.dpotrf(D, lower=1, clean=1, overwrite_a=1)
    if info < 0:  # pragma: no cover - an argument error is a bug here
        raise RuntimeError(f"dpotrf: illegal value in argument {-info}")
    if info == 0 and not np.all(np.isfinite(np.diagonal(L))):
        info = int(np.flatnonzero(~np.isfinite(np.diagonal(L)))[0]) + 1
    if info > 0:
        raise _not_pd(k0 + info - 1, k0, k1, n, float(L[info - 1, info - 1]))
    W[k0:k1, k0:k1] = L


def _not_pd(pivot: int, k0: int, k1: int, n: int, value: float) -> NotPSDError:
    return NotPSDError(
        f"panel_cholesky: the matrix of order {n} is not positive definite: pivot {pivot} "
        f"(0-based; in the diagonal block of rows {k0}..{k1 - 1}) is {value:.3g} after the "
        "updates, where a positive number was expected (the leading minor of order "
        f"{pivot + 1} is not positive definite, or holds NaN/inf). Raise the jitter (the "
        "multiple of the mean diagonal added to the diagonal; ×10 or ×100), check that the "
        "kernel is positive definite and that the matrix is symmetric, and drop duplicate "
        "centres."
    )


def _solve_panel(W: np.ndarray, k0: int, k1: int) -> np.ndarray:
    """``L21 ← A21 L11⁻ᵀ`` (trsm), written back into ``W``; returns it (F-contiguous)."""
    panel = np.array(W[k1:, k0:k1], order="F")
    panel = blas.dtrsm(1.0, W[k0:k1, k0:k1], panel, side=1, lower=1, trans_a=1, overwrite_b=1)
    W[k1:, k0:k1] = panel
    return panel


def _update_trailing(W: np.ndarray, panel: np.ndarray, k1: int, n: int) -> None:
    """``A22 ← A22 − L21 L21ᵀ`` on the lower triangle (and the diagonal blocks' upper half,
    which is never read), in column chunks of :data:`UPDATE_CHUNK`."""
    for j0 in range(k1, n, UPDATE_CHUNK):
        j1 = min(n, j0 + UPDATE_CHUNK)
        rows = panel[j0 - k1 :]
        # (chunk × rows)ᵀ: the product comes out F-ordered, as W's columns
        W[j0:, j0:j1] -= (panel[j0 - k1 : j1 - k1] @ rows.T).T
