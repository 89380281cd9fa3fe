"""Falkon's method in memory: the Nyström preconditioner and CG with one Gram pass per iteration.

The Nyström kernel ridge solution with ``M`` centres ``C`` (``f(x) = k(x, C) β``) solves, per
right-hand-side column ``j`` (scikit-learn's scaling, Falkon's ``λn`` is ``α``)::

    (G + α_j K_MM) β_j = rhs_j,     G = K_nMᵀ W K_nM  (centred for an intercept by the caller)

Falkon (Rudi, Carratino & Rosasco 2017; Meanti et al. 2020) preconditions it with
``B = T⁻¹ A⁻¹ / √n_w``, ``T = chol(K_MM + εM I)``, ``A = chol(T Tᵀ / M + (α / n_w) I)`` (both
upper, ``n_w`` the weight total), since ``B Bᵀ = ((n_w / M) K_MM² + α K_MM)⁻¹`` (with the jitter)
and ``G ≈ (n_w / M) K_MM²`` for centres drawn from the data. CG then runs on
``Bᵀ (G + α K_MM) B γ = Bᵀ rhs``, ``β = B γ``, in ~10–20 iterations whatever ``n``.

:func:`falkon_solve` never sees the data: ``gram(V) = G V`` is the caller's pass (in memory,
tiled, or a Dask pass over out-of-core rows), called once per CG iteration on all the
still-active columns at once. Every column has its own ``α`` (one ``A`` factor per distinct
``α``), so a grid of penalties, several targets and classes ride the same passes. The ``M × M``
factorisations use :func:`~bigkernel.numerics.cholesky.panel_cholesky` (OpenBLAS's threaded
``potrf`` segfaults at orders ≳ 16,000 on some CPUs).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import blas
from sklearn.exceptions import ConvergenceWarning

from bigkernel.errors import DataError, NotPSDError, ParameterError
from bigkernel.numerics.cg import conjugate_gradient
from bigkernel.numerics.cholesky import DEFAULT_BLOCK, panel_cholesky

logger = logging.getLogger(__name__)

__all__ = [
    "JITTER_EPS_MULTIPLE",
    "FalkonPreconditioner",
    "FalkonResult",
    "Preconditioner",
    "factor_kmm",
    "falkon_solve",
]

#: default jitter: this many machine epsilons × the mean diagonal of K_MM × M (≈ 1.1e-13 · M ·
#: mean diag, Falkon's ``pc_epsilon`` of 1e-13 for float64 with ``εM`` on the diagonal)
JITTER_EPS_MULTIPLE = 500.0
#: tiles of the T Tᵀ product (its temporaries are GRAM_TILE² floats)
GRAM_TILE = 2048

Gram = Callable[[np.ndarray], np.ndarray]
StepHook = Callable[[np.ndarray, np.ndarray], None]


class Preconditioner(Protocol):
    """What :func:`falkon_solve` needs of a preconditioner ``B_c`` per CG column ``c``:
    :class:`FalkonPreconditioner` (Cholesky factors) and
    :class:`~bigkernel.numerics.falkon_eigen.EigenFalkonPreconditioner` (one eigendecomposition)."""

    alphas: np.ndarray
    n_w: float
    n_centres: int

    def apply(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray: ...

    def apply_t(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray: ...

    def apply_inv(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray: ...

    def penalty_matvec(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray: ...

    def kmm_matvec(self, V: np.ndarray) -> np.ndarray: ...


class FalkonPreconditioner:
    """Falkon's preconditioner ``B_c = T⁻¹ A_c⁻¹ / √n_w`` for every CG column ``c``.

    Build it with :meth:`build`. It holds ``T`` (upper, ``TᵀT = K_MM + jitter·I``) and one
    upper ``A`` factor per distinct α (``A_αᵀA_α = T Tᵀ / M + (α / n_w) I``), all float64
    ``M × M``: ``(1 + n_factors) · M² · 8`` bytes. ``K_MM`` itself is not kept:
    :meth:`kmm_matvec` recovers ``K_MM V`` from ``T``.

    Attributes
    ----------
    alphas : ndarray of shape (m,)
        The α of each CG column (repeats allowed).
    distinct_alphas : ndarray of shape (n_factors,)
        Sorted distinct α; ``column_factor[c]`` indexes it.
    column_factor : ndarray of shape (m,)
        Which ``A`` factor column ``c`` uses.
    n_w : float
        Total weight of the rows (``n`` without weights).
    jitter : float
        What was added to ``K_MM``'s diagonal (``εM``).
    n_centres : int
        ``M``.
    """

    def __init__(self, T: np.ndarray, factors: list[np.ndarray], alphas: np.ndarray, n_w: float, jitter: float) -> None:
        self._T = T
        self._A = factors
        self.alphas = alphas
        self.distinct_alphas, self.column_factor = np.unique(alphas, return_inverse=True)
        self.n_w = float(n_w)
        self.jitter = float(jitter)
        self.n_centres = int(T.shape[0])

    @classmethod
    def build(
        cls,
        K_MM: np.ndarray,
        alphas: ArrayLike,
        n_w: float,
        *,
        jitter: float | None = None,
        block: int = DEFAULT_BLOCK,
        overwrite: bool = False,
        mean: ArrayLike | None = None,
        centre_weights: ArrayLike | None = None,
        sketch: Callable[[], Iterable[np.ndarray]] | None = None,
    ) -> FalkonPreconditioner:
        """Factor ``T`` and one ``A`` per distinct α.

        Parameters
        ----------
        K_MM : ndarray of shape (M, M)
            Kernel matrix of the centres (symmetric PSD; one triangle is read).
        alphas : array-like of shape (m,) or float
            α of each CG column (> 0; repeats share one factor).
        n_w : float
            Total weight of the training rows (``n`` without weights), > 0.
        jitter : float, optional
            Added to ``K_MM``'s diagonal before factoring (Falkon's ``εM``). Default
            ``JITTER_EPS_MULTIPLE · eps · mean(diag K_MM) · M`` (≈ 1.1e-13 · M · mean diag):
            enough for round-off in the Cholesky of a Gram with (near) duplicate centres to
            stay positive; raise it when :class:`~bigkernel.errors.NotPSDError` says so.
        block : int, default=4096
            Diagonal block order of :func:`~bigkernel.numerics.cholesky.panel_cholesky`.
        overwrite : bool, default=False
            Factor ``T`` over ``K_MM`` (destroys it): the peak memory drops by ``M² · 8``.
        mean : array-like of shape (M,), optional
            The weighted column means ``μ`` of ``K_nM`` when the caller centres for an
            intercept (``G = K̃ᵀWK̃``, ``K̃ = K_nM − 1μᵀ``): the preconditioner then
            approximates the centred ``G`` by the centred centres,
            ``(n_w / M) (K_MM − 1μᵀ)ᵀ(K_MM − 1μᵀ)`` (a rank-2 change of ``T Tᵀ``, no extra
            cost). Measured: 10–30 % fewer iterations at small α.
        centre_weights : array-like of shape (M,), optional
            The row weights of the centres (when they are training rows): ``G`` is then
            approximated by the weighted centres, ``(n_w / Σw_C) K_MM W_C K_MM``. With all rows
            as centres the preconditioner is then exact. Zero weights are allowed.
        sketch : callable, optional
            Panels of other rows than the centres (a uniform sample of the training rows,
            centred and weighted): ``sketch()`` yields ``Z_p`` with ``S = Σ Z_pᵀZ_p ≈ G / n_w``
            (:func:`~bigkernel.numerics.nystroem_block.sketch_panels`). Then ``B Bᵀ = (n_w S +
            α K)⁻¹`` and ``A_α = chol(T⁻ᵀ S T⁻¹ + (α/n_w) I)``, ``T⁻ᵀ S T⁻¹`` formed as
            ``Σ (T⁻ᵀZ_pᵀ)(T⁻ᵀZ_pᵀ)ᵀ`` (``2·m·M²`` flops): positive semi-definite however
            ill-conditioned ``T`` is (from a formed ``S`` by two triangular solves it was not:
            a pivot of −1.8e-6 with 1-d rbf centres). Excludes ``mean`` and ``centre_weights``
            (the sketch carries its own centring and weights). Measured (8,000 rows, 5-d,
            M = 300, α/n = 1e-7): 81 iterations with Falkon's centres, 24 with a sketch of 4M
            rows, 10 with 16M rows.

        Returns
        -------
        FalkonPreconditioner

        Raises
        ------
        NotPSDError
            ``K_MM + jitter·I`` is not positive definite (say what to raise).
        ParameterError
            A non-positive α or ``n_w``, a negative jitter.

        Notes
        -----
        Peak memory: :meth:`memory_bytes`. ``T Tᵀ`` is formed once in one ``M × M`` array (by
        tiles, using ``T``'s triangle: ``M³/3`` flops); each distinct α factors a
        copy of it (retried with a small shift when round-off leaves a negative pivot).
        """
        K, jitter = check_kmm(K_MM, jitter)
        alphas = check_alphas(alphas)
        n_w = check_positive("n_w", n_w)
        T, jitter = factor_kmm(K, jitter, block=block, overwrite=overwrite)
        M = T.shape[0]
        distinct = np.unique(alphas)
        if sketch is not None:
            if mean is not None or centre_weights is not None:
                raise ParameterError(
                    "give sketch alone: it carries its own centring and weights (mean, centre_weights)"
                )
            P = _sketch_panels_inner(T, sketch)
        else:
            P = _nystroem_inner(T, check_vector("mean", mean, M), check_vector("centre_weights", centre_weights, M))
        factors = _a_factors(P, distinct, n_w, block)
        logger.debug("Falkon preconditioner: M = %d, %d distinct alpha, jitter %.3g", M, distinct.size, jitter)
        return cls(T, factors, alphas, n_w, jitter)

    @classmethod
    def from_inner(
        cls, T: np.ndarray, P: np.ndarray, alphas: ArrayLike, n_w: float, jitter: float, *, block: int = DEFAULT_BLOCK
    ) -> FalkonPreconditioner:
        """The preconditioner of a factor ``T`` (:func:`factor_kmm`) and an inner matrix ``P``
        formed by the caller: ``T⁻ᵀ S T⁻¹``, ``S ≈ G / n_w`` (e.g. summed over row blocks in a
        pass, :func:`~bigkernel.numerics.nystroem_block.kernel_block_products` with ``factor``).

        Parameters
        ----------
        T : ndarray of shape (M, M)
            Upper factor of ``K_MM + jitter·I``.
        P : ndarray of shape (M, M)
            Symmetric (positive semi-definite up to round-off); overwritten by nothing (copied per α).
        alphas : array-like of shape (m,) or float
        n_w : float
        jitter : float
            What :func:`factor_kmm` added to ``K_MM``'s diagonal.
        block : int, default=4096

        Returns
        -------
        FalkonPreconditioner
        """
        alphas = check_alphas(alphas)
        n_w = check_positive("n_w", n_w)
        M = T.shape[0]
        P = np.asarray(P, dtype=np.float64)
        if P.shape != (M, M) or not np.all(np.isfinite(P)):
            raise DataError(f"the inner matrix must be a finite ({M}, {M}) array, found shape {P.shape}")
        factors = _a_factors(P, np.unique(alphas), n_w, block)
        return cls(T, factors, alphas, n_w, jitter)

    @staticmethod
    def memory_bytes(M: int, n_distinct_alphas: int, *, block: int = DEFAULT_BLOCK) -> int:
        """Peak bytes of :meth:`build` with ``overwrite`` (``T`` over ``K_MM``): ``T``, the
        ``T Tᵀ`` array (or ``T⁻ᵀ S T⁻¹`` of the ``sketch``) and one factor per distinct α
        (each factored on a copy of it), ``(2 + n_distinct_alphas) · M² · 8``, plus the
        Cholesky's panel temporaries; without ``overwrite`` one ``M² · 8`` more. The built
        preconditioner holds ``(1 + n_distinct_alphas) · M² · 8`` (:attr:`nbytes`)."""
        M, k = int(M), int(n_distinct_alphas)
        return (2 + k) * M * M * 8 + 2 * M * min(M, block) * 8

    @property
    def nbytes(self) -> int:
        """Bytes held by the factors."""
        return int(self._T.nbytes + sum(A.nbytes for A in self._A))

    @property
    def n_factors(self) -> int:
        """Number of ``A`` factors (distinct α); ``T`` is not counted."""
        return len(self._A)

    def factor(self, c: int) -> np.ndarray:
        """The upper ``A`` factor of CG column ``c`` (read-only view; shared by equal α)."""
        A = self._A[int(self.column_factor[c])].view()
        A.flags.writeable = False
        return A

    @property
    def T(self) -> np.ndarray:
        """The upper factor of ``K_MM + jitter·I`` (read-only view)."""
        T = self._T.view()
        T.flags.writeable = False
        return T

    def apply(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray:
        """``B_c V_c = T⁻¹ A_c⁻¹ V_c / √n_w`` for every column ``c`` of ``cols`` (``V`` (M, k))."""
        V = self._block(V, cols)
        out = self._per_factor(V, cols, lambda A, X: _tri(A, X, solve=True, transpose=False))
        return _tri(self._T, out, solve=True, transpose=False) / math.sqrt(self.n_w)

    def apply_t(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray:
        """``B_cᵀ V_c = A_c⁻ᵀ T⁻ᵀ V_c / √n_w`` for every column ``c`` of ``cols``."""
        V = _tri(self._T, self._block(V, cols), solve=True, transpose=True)
        out = self._per_factor(V, cols, lambda A, X: _tri(A, X, solve=True, transpose=True))
        return out / math.sqrt(self.n_w)

    def apply_inv(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray:
        """``B_c⁻¹ V_c = √n_w A_c T V_c`` (from a coefficient guess to CG's variable)."""
        V = _tri(self._T, self._block(V, cols), solve=False, transpose=False)
        out = self._per_factor(V, cols, lambda A, X: _tri(A, X, solve=False, transpose=False))
        return out * math.sqrt(self.n_w)

    def penalty_matvec(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray:
        """``B_cᵀ (K_MM + jitter·I) B_c V_c = A_c⁻ᵀ A_c⁻¹ V_c / n_w`` (no ``T``: positive
        definite whatever the rank of ``K_MM``)."""
        V = self._block(V, cols)
        return (
            self._per_factor(
                V, cols, lambda A, X: _tri(A, _tri(A, X, solve=True, transpose=False), solve=True, transpose=True)
            )
            / self.n_w
        )

    def kmm_matvec(self, V: np.ndarray) -> np.ndarray:
        """``K_MM V = Tᵀ (T V) − jitter · V`` for ``V`` of shape (M,) or (M, k)."""
        V = np.asarray(V, dtype=np.float64)
        X = V[:, None] if V.ndim == 1 else V
        if X.ndim != 2 or X.shape[0] != self.n_centres:
            raise DataError(
                f"kmm_matvec needs V of shape ({self.n_centres},) or ({self.n_centres}, k), found {V.shape}"
            )
        TV = _tri(self._T, _tri(self._T, X, solve=False, transpose=False), solve=False, transpose=True)
        out = TV - self.jitter * X
        return out[:, 0] if V.ndim == 1 else out

    def _block(self, V: np.ndarray, cols: ArrayLike) -> np.ndarray:
        V = np.asarray(V, dtype=np.float64)
        k = np.size(cols)
        if V.ndim != 2 or V.shape != (self.n_centres, k):
            raise DataError(f"V must have shape ({self.n_centres}, len(cols) = {k}), found {V.shape}")
        return V

    def _per_factor(self, V: np.ndarray, cols: ArrayLike, fn: Callable) -> np.ndarray:
        """``fn(A_f, V[:, columns of factor f])`` for each factor among ``cols``."""
        which = self.column_factor[np.asarray(cols, dtype=np.intp)]
        first = int(which[0]) if which.size else 0
        if np.all(which == first):
            return fn(self._A[first], V) if which.size else V.copy()
        out = np.empty_like(V)
        for f in np.unique(which):
            sel = np.flatnonzero(which == f)
            out[:, sel] = fn(self._A[int(f)], V[:, sel])
        return out


def _tri(U: np.ndarray, X: np.ndarray, *, solve: bool, transpose: bool) -> np.ndarray:
    """``U⁻¹X``, ``U⁻ᵀX``, ``U X`` or ``UᵀX`` for upper ``U`` (C-ordered), by BLAS trsm/trmm on
    ``Uᵀ`` (its F-ordered lower view: no copy of ``U``); ``X`` is not modified."""
    L = U.T  # F-contiguous, lower; op(L) = U when trans_a=1
    B = np.array(X, dtype=np.float64, order="F")
    fn = blas.dtrsm if solve else blas.dtrmm
    return fn(1.0, L, B, side=0, lower=1, trans_a=0 if transpose else 1, overwrite_b=1)


def _nystroem_inner(T: np.ndarray, mean: np.ndarray | None, weights: np.ndarray | None) -> np.ndarray:
    """``(T − v1ᵀ) W (T − v1ᵀ)ᵀ / Σw`` (upper triangle), ``v = T⁻ᵀμ`` (0 without ``mean``),
    ``W`` the centre weights (I without): ``T Tᵀ / M`` in Falkon's plain case. The centred
    form is a rank-2 change of ``T W Tᵀ``: ``− s vᵀ − v sᵀ + (Σw) v vᵀ``, ``s = T w``."""
    M = T.shape[0]
    w = np.ones(M) if weights is None else weights
    total = float(w.sum())
    if not total > 0:
        raise ParameterError(f"centre_weights must have a positive sum, found {total!r}")
    P = _t_tt(T, 1.0 / total, None if weights is None else np.sqrt(w))
    if mean is not None:
        v = _tri(T, mean[:, None], solve=True, transpose=True)[:, 0]
        s = T @ w
        for i0 in range(0, M, GRAM_TILE):  # row chunks: no M × M temporaries
            i1 = min(M, i0 + GRAM_TILE)
            P[i0:i1] += v[i0:i1, None] * (v - s / total) - s[i0:i1, None] * (v / total)
    return P


def _sketch_panels_inner(T: np.ndarray, panels: Callable[[], Iterable[np.ndarray]]) -> np.ndarray:
    """``Σ_p Y_p Y_pᵀ``, ``Y_p = T⁻ᵀ Z_pᵀ`` (upper triangle filled by syrk, then mirrored)."""
    M = T.shape[0]
    P = np.zeros((M, M), order="F")
    L = T.T  # lower, F-ordered: L⁻¹ = T⁻ᵀ
    for Z in panels():
        Z = np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != M or not np.all(np.isfinite(Z)):
            raise DataError(f"sketch panels must be finite (rows, {M}) arrays, found shape {Z.shape}")
        Y = blas.dtrsm(1.0, L, np.array(Z.T, order="F"), side=0, lower=1, trans_a=0, overwrite_b=1)
        P = blas.dsyrk(1.0, Y, beta=1.0, c=P, trans=0, lower=0, overwrite_c=1)
    iu = np.triu_indices(M, 1)
    P[iu[1], iu[0]] = P[iu]
    return np.ascontiguousarray(P)


def factor_kmm(
    K_MM: ArrayLike, jitter: float | None = None, *, block: int = DEFAULT_BLOCK, overwrite: bool = False
) -> tuple[np.ndarray, float]:
    """``T`` (upper, ``TᵀT = K_MM + jitter·I``) and the jitter (see :meth:`FalkonPreconditioner.build`).

    Parameters
    ----------
    K_MM : array-like of shape (M, M)
    jitter : float, optional
        Default ``JITTER_EPS_MULTIPLE · eps · mean(diag K_MM) · M``.
    block : int, default=4096
    overwrite : bool, default=False
        Factor over ``K_MM`` (when float64).

    Returns
    -------
    T : ndarray of shape (M, M)
    jitter : float

    Raises
    ------
    NotPSDError
        ``K_MM + jitter·I`` is not positive definite (the message says what to raise).
    """
    K, jitter = check_kmm(K_MM, jitter)
    M = K.shape[0]
    W = K if overwrite and K.dtype == np.float64 else np.array(K, dtype=np.float64)
    W[np.diag_indices(M)] += jitter
    try:
        return panel_cholesky(W, block=block, overwrite=True), jitter
    except NotPSDError as exc:
        raise NotPSDError(
            f"K_MM + jitter·I (M = {M}, jitter = {jitter:.3g}) is not positive definite: {exc} "
            f"Pass a larger jitter (e.g. {10 * max(jitter, 1e-300):.3g}) or distinct centres."
        ) from None


def check_kmm(K_MM: ArrayLike, jitter: float | None) -> tuple[np.ndarray, float]:
    """``K_MM`` as a square array with M >= 1 and the jitter (default ``JITTER_EPS_MULTIPLE · eps
    · mean(diag K_MM) · M``; a given one must be finite and >= 0): what both preconditioners check."""
    K = np.asarray(K_MM)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] == 0:
        raise DataError(f"K_MM must be a square (M, M) array with M >= 1, found shape {K.shape}")
    if jitter is None:
        return K, JITTER_EPS_MULTIPLE * np.finfo(np.float64).eps * float(np.mean(np.diagonal(K))) * K.shape[0]
    if not (math.isfinite(jitter) and jitter >= 0):
        raise ParameterError(f"jitter must be a finite float >= 0, found {jitter!r}")
    return K, float(jitter)


def check_vector(name: str, value: ArrayLike | None, M: int) -> np.ndarray | None:
    if value is None:
        return None
    v = np.asarray(value, dtype=np.float64)
    if v.shape != (M,) or not np.all(np.isfinite(v)) or (name == "centre_weights" and np.any(v < 0)):
        raise ParameterError(
            f"{name} must be a finite float array of shape ({M},)"
            + (" with no negative value" if name == "centre_weights" else "")
            + f", found shape {v.shape}"
        )
    return v


#: shifts tried when ``P + (α/n_w) I`` has round-off negative pivots (× P's mean diagonal)
SHIFT_STEPS = (0.0, 1e-12, 1e-10, 1e-8, 1e-6)


def _a_factors(P: np.ndarray, distinct: np.ndarray, n_w: float, block: int) -> list[np.ndarray]:
    """``chol(P + (α / n_w + δ) I)`` (upper) per α of ``distinct`` (ascending), each on a copy of
    ``P`` (so a failed pivot can be retried with a shift).

    ``P`` is positive semi-definite in exact arithmetic, but ``T⁻ᵀ S T⁻¹`` (a sketch) or the
    centred ``T Tᵀ`` carry round-off of ``‖S‖ · cond(T)²`` that a tiny ``α / n_w`` does not cover
    (measured: a pivot of −2.3e-8 at α/n = 2.3e-10, M = 2,000, diamonds). ``δ`` is then the
    smallest of :data:`SHIFT_STEPS` (× ``P``'s mean diagonal) that factors: it changes only the
    preconditioner, not the system CG solves (``Bᵀ K B = A⁻ᵀA⁻¹ / n_w`` whatever ``A``), so the
    solution is the same; only the iteration count can grow.
    """
    M = P.shape[0]
    scale = max(float(np.mean(np.diagonal(P))), np.finfo(np.float64).tiny)
    factors, step = [], 0
    for alpha in distinct:
        while True:
            S = P.copy()
            S[np.diag_indices(M)] += alpha / n_w + SHIFT_STEPS[step] * scale
            try:
                factors.append(panel_cholesky(S, block=block, overwrite=True))
                break
            except NotPSDError:
                if step + 1 == len(SHIFT_STEPS):
                    raise
                step += 1  # the smaller α needs the larger shift: keep it for the larger ones
                logger.info("Falkon preconditioner: shifting P by %.1e × its mean diagonal (round-off)",
                            SHIFT_STEPS[step])  # fmt: skip
    return factors


def _t_tt(T: np.ndarray, scale: float, col_scale: np.ndarray | None = None) -> np.ndarray:
    """``scale · (T D)(T D)ᵀ`` (upper triangle filled, C-ordered) for upper ``T`` and
    ``D = diag(col_scale)`` (I by default), tile by tile: tile ``(I, J)``, ``I <= J``, is
    ``T[I, J0:] D² T[J, J0:]ᵀ`` (``T[J, :J0]`` is zero), ``M³/3`` flops, temporaries of one tile
    row."""
    M = T.shape[0]
    P = np.zeros((M, M))
    d2 = None if col_scale is None else col_scale**2
    for j0 in range(0, M, GRAM_TILE):
        j1 = min(M, j0 + GRAM_TILE)
        right = T[j0:j1, j0:] if d2 is None else T[j0:j1, j0:] * d2[j0:]
        for i0 in range(0, j1, GRAM_TILE):
            i1 = min(M, i0 + GRAM_TILE)
            np.matmul(T[i0:i1, j0:], right.T, out=P[i0:i1, j0:j1])
    P *= scale
    return P


def check_positive(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = float("nan")
    if not (math.isfinite(v) and v > 0) or isinstance(value, bool):
        raise ParameterError(f"{name} must be a finite float > 0, found {value!r}")
    return v


def check_alphas(alphas: ArrayLike) -> np.ndarray:
    a = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a) & (a > 0)):
        raise ParameterError(
            f"alphas must be finite floats > 0, one per CG column (shape (m,)), found {np.asarray(alphas)!r}; "
            "Falkon needs a positive penalty (α = 0 leaves the system singular)"
        )
    return a


@dataclass(frozen=True)
class FalkonResult:
    """Result of :func:`falkon_solve`.

    Attributes
    ----------
    beta : ndarray of shape (M, m)
        Coefficients of the centres, one column per right-hand side (``(M,)`` for a 1-D one).
    n_iter : int
        CG iterations = passes of ``gram`` in the loop (the longest column's count).
    n_iter_per_column : ndarray of shape (m,)
        Iterations each column ran before it stopped.
    residual : ndarray of shape (m,)
        Final relative residual of each column in the preconditioned system,
        ``‖Bᵀrhs − Bᵀ(G + αK_MM)B γ‖ / ‖Bᵀrhs‖`` (the CG recurrence's value).
    history : ndarray of shape (n_iter + 1, m)
        Row ``i``: the relative residuals after iteration ``i`` (row 0: before the first, 1
        from zero, 0 for a zero right-hand side). A column that stopped holds its last value.
    converged : ndarray of shape (m,)
        ``residual <= tol``.
    n_gram_calls : int
        Calls of ``gram``: ``n_iter``, plus one for the initial residual when ``x0`` is given.
    breakdown : ndarray of shape (m,)
        Columns CG stopped at a breakdown (``on_breakdown="stop"``; all False otherwise).
    """

    beta: np.ndarray
    n_iter: int
    n_iter_per_column: np.ndarray
    residual: np.ndarray
    history: np.ndarray
    converged: np.ndarray
    n_gram_calls: int
    breakdown: np.ndarray | None = None


class _System:
    """``γ ↦ B_cᵀ (G + α_c K) B_c γ`` per column (``K = K_MM + jitter·I``, or ``K_MM`` exactly
    when ``exact_kmm``), counting the ``gram`` calls."""

    def __init__(self, gram: Gram, prec: Preconditioner, alphas: np.ndarray, exact_kmm: bool) -> None:
        self.gram, self.prec, self.alphas, self.calls, self.exact_kmm = gram, prec, alphas, 0, exact_kmm
        self.first: np.ndarray | None = None  # H γ0 of the initial call (x0 only)

    def __call__(self, V: np.ndarray, cols: np.ndarray) -> np.ndarray:
        U = self.prec.apply(V, cols)  # directions in coefficient space: β moves by step · U
        self.calls += 1
        GU = np.asarray(self.gram(U), dtype=np.float64)
        if GU.shape != U.shape:
            raise DataError(f"gram returned shape {GU.shape}, expected {U.shape} (the shape of its input)")
        if self.exact_kmm:
            out = self.prec.apply_t(GU + self.prec.kmm_matvec(U) * self.alphas[cols], cols)
        else:
            out = self.prec.apply_t(GU, cols) + self.prec.penalty_matvec(V, cols) * self.alphas[cols]
        if self.first is None:
            self.first = out
        return out


def falkon_solve(
    gram: Gram,
    rhs: ArrayLike,
    prec: Preconditioner,
    alphas: ArrayLike,
    *,
    tol: float = 1e-6,
    max_iter: int = 100,
    step_hook: StepHook | None = None,
    x0: ArrayLike | None = None,
    exact_kmm: bool = False,
    on_breakdown: str = "raise",
) -> FalkonResult:
    """Solve ``(G + α_j K_MM) β_j = rhs_j`` for every column ``j`` by Falkon's preconditioned CG.

    ``K_MM`` carries the preconditioner's jitter unless ``exact_kmm`` (see there).

    Parameters
    ----------
    gram : callable
        ``gram(V) -> G V`` for ``V`` of shape ``(M, k)``, ``1 <= k <= m`` (the still-active
        columns): ``G = K_nMᵀ W K_nM`` (centred for an intercept by the caller), symmetric PSD.
        Called exactly once per CG iteration, on the active directions mapped to coefficient
        space (``U = B P``), so one call is one pass over the data.
    rhs : array-like of shape (M,) or (M, m)
        Right-hand sides ``K_nMᵀ W y`` (centred).
    prec : Preconditioner
        A :class:`FalkonPreconditioner` or an
        :class:`~bigkernel.numerics.falkon_eigen.EigenFalkonPreconditioner`, built for these
        ``alphas`` (``prec.alphas`` must equal them).
    alphas : array-like of shape (m,) or float
        Penalty of each column (a float: all columns).
    tol : float, default=1e-6
        Stop a column when its relative residual in the preconditioned system is ``<= tol``.
    max_iter : int, default=100
        Most iterations (passes).
    step_hook : callable, optional
        ``step_hook(cols, step)`` after each iteration's ``gram`` call: ``cols`` the active
        columns, ``step`` (float64) their CG step sizes, so that ``β_c += step_c · U_c`` with
        ``U`` the ``gram`` call's input. A caller that saved ``L U`` during that call (e.g.
        held-out predictions ``K_vM U``) keeps ``L β`` current with ``q_c += step_c (L U)_c``
        (starting from ``L x0``, or zero).
    x0 : array-like of shape (M,) or (M, m), optional
        Initial coefficients ``β`` (zeros by default). Costs one more ``gram`` call (the
        initial residual), made before the loop and not followed by ``step_hook``.
    exact_kmm : bool, default=False
        False (Falkon's choice): the penalty is ``α βᵀ(K_MM + jitter·I)β``, applied in the
        preconditioned variable as ``α A⁻ᵀA⁻¹ / n_w`` (no ``T``), so the operator is positive
        definite whatever the numerical rank of ``K_MM``; the solution differs from the exact
        one by ``O(jitter · α)`` (jitter ≈ 1.1e-13 · M · mean diag by default: far below
        ``tol`` where ``K_MM`` is well conditioned). True: ``K_MM`` exactly
        (:meth:`FalkonPreconditioner.kmm_matvec`); CG can then break down
        (:class:`~bigkernel.errors.NotPSDError`) when ``K_MM`` is numerically singular
        (smooth kernel, few dimensions, close centres: measured in 1-D rbf data).
    on_breakdown : {"raise", "stop"}, default="raise"
        ``"stop"``: a column whose CG breaks down (round-off makes the computed operator
        indefinite at a tiny α) stops at its last iterate, marked in
        ``FalkonResult.breakdown``, and the others go on (a grid of α); ``"raise"``:
        :class:`~bigkernel.errors.NotPSDError`.

    Returns
    -------
    FalkonResult

    Raises
    ------
    NotPSDError
        CG breakdown: ``gram`` is not PSD (the message names column and iteration), unless
        ``on_breakdown="stop"``.
    ParameterError, DataError
        ``alphas`` do not match ``prec``; shapes that do not match ``M``.

    Warns
    -----
    ConvergenceWarning
        Some column is above ``tol`` after ``max_iter`` passes; the message says what to change.

    Notes
    -----
    The residual is never recomputed from scratch (``b − H γ`` would cost a pass): CG's
    recurrence alone gives it (``recompute_every`` is set past ``max_iter``). In the
    preconditioned variable the system is well conditioned, so the drift stays far below the
    tolerances used here (``1e-6`` and looser).
    """
    R = np.asarray(rhs, dtype=np.float64)
    squeeze = R.ndim == 1
    R = R[:, None] if squeeze else R
    if R.ndim != 2 or R.shape[0] != prec.n_centres or R.shape[1] == 0:
        raise DataError(f"rhs must have shape ({prec.n_centres},) or ({prec.n_centres}, m), found {np.shape(rhs)}")
    m = R.shape[1]
    alphas = _match_alphas(alphas, prec, m)
    system = _System(gram, prec, alphas, exact_kmm)
    cols = np.arange(m)
    b = prec.apply_t(R, cols)
    g0 = None if x0 is None else prec.apply_inv(_initial(x0, R, squeeze), cols)
    rows: list[np.ndarray] = []

    def record(it: int, X: np.ndarray, residual: np.ndarray) -> None:
        rows.append(residual.copy())

    res = conjugate_gradient(
        system, b, x0=g0, tol=tol, max_iter=max_iter, recompute_every=max_iter + 1,
        callback=record, column_matvec=True, step_callback=step_hook, warn_not_converged=False,
        on_breakdown=on_breakdown,
    )  # fmt: skip
    beta = prec.apply(res.x, cols)
    result = FalkonResult(
        beta=beta[:, 0] if squeeze else beta,
        n_iter=int(res.n_iter.max(initial=0)),
        n_iter_per_column=res.n_iter,
        residual=res.residual,
        history=_history(b, rows, system, g0 is not None),
        converged=res.converged,
        n_gram_calls=system.calls,
        breakdown=np.zeros(m, bool) if res.breakdown is None else np.asarray(res.breakdown, bool),
    )
    _report(result, alphas, tol, max_iter, prec)
    return result


def _match_alphas(alphas: ArrayLike, prec: Preconditioner, m: int) -> np.ndarray:
    a = np.asarray(alphas, dtype=np.float64)
    a = np.full(m, float(a)) if a.ndim == 0 else a
    if a.shape != (m,) or a.shape != prec.alphas.shape or not np.array_equal(a, prec.alphas):
        raise ParameterError(
            f"alphas must be the {prec.alphas.size} values the preconditioner was built for, one per "
            f"column of rhs ({m}), found {np.asarray(alphas)!r}; build it with "
            "FalkonPreconditioner.build(K_MM, alphas, n_w)"
        )
    return a


def _initial(x0: ArrayLike, R: np.ndarray, squeeze: bool) -> np.ndarray:
    X = np.asarray(x0, dtype=np.float64)
    X = X[:, None] if squeeze and X.ndim == 1 else X
    if X.shape != R.shape:
        raise DataError(f"x0 must have the shape of rhs, {R.shape[:1] if squeeze else R.shape}, found {np.shape(x0)}")
    return X


def _history(b: np.ndarray, rows: list[np.ndarray], system: _System, with_x0: bool) -> np.ndarray:
    """Row 0 (1 from zero, 0 for a zero column; with ``x0``, ``‖b − Hγ0‖/‖b‖`` from the initial
    ``gram`` call) on top of the rows CG reported."""
    norm = np.linalg.norm(b, axis=0)
    first = (norm > 0).astype(np.float64)
    if with_x0 and system.first is not None:
        first = np.linalg.norm(b - system.first, axis=0) / np.where(norm > 0, norm, 1.0) * (norm > 0)
    return np.vstack([first[None, :], *[r[None, :] for r in rows]])


def _report(result: FalkonResult, alphas: np.ndarray, tol: float, max_iter: int, prec: Preconditioner) -> None:
    if np.all(result.converged):
        logger.info(
            "Falkon CG converged: %d column(s), %d passes, max relative residual %.3g",
            alphas.size,
            result.n_iter,
            float(np.max(result.residual, initial=0.0)),
        )
        return
    bad = np.flatnonzero(~np.asarray(result.converged) & ~result.breakdown)
    if not bad.size:
        return  # the broken-down columns are the caller's to report (on_breakdown="stop")
    shown = ", ".join(f"column {j} (alpha={alphas[j]:.3g}): {result.residual[j]:.3g}" for j in bad[:5])
    warnings.warn(
        f"Falkon CG did not converge for {bad.size} of {alphas.size} column(s) after max_iter={max_iter} "
        f"passes over the data: relative residual {shown}{', ...' if bad.size > 5 else ''} > tol={tol:g}. "
        "Raise max_iter, loosen tol (1e-4 is often enough for predictions), use a larger alpha "
        f"(alpha / n_w = {float(alphas[bad].min()) / prec.n_w:.3g} is very small), or use fewer or other "
        "centres (near-duplicate centres make K_MM ill-conditioned: draw them with "
        "landmarks='rpcholesky', or raise the jitter).",
        ConvergenceWarning,
        stacklevel=3,
    )
