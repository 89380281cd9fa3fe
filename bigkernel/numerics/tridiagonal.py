"""Symmetric eigendecomposition with the eigenvectors left in factored form (layer 1).

``G = Q T Qᵀ`` (LAPACK ``dsytrd``: Householder reflectors, ``T`` tridiagonal), then
``T = W diag(s) Wᵀ`` (MRRR, ``dstemr``: every eigenvalue and every eigenvector of ``T`` in
``O(D²)``). The eigenvectors of ``G`` are ``V = Q W``. This is LAPACK's ``dsyevr`` without its
last step, the back-transformation ``Q W`` (``dormtr``, ``2D³`` flops): a ridge path needs
``Vᵀb`` and ``V x`` for a few vectors, which the reflectors apply in ``O(D²)`` each
(``dormqr``, as ``dormtr`` does for a lower ``dsytrd``), so the dense ``V`` is formed only when
something asks for it (:meth:`FactoredEigenvectors.dense`: the posterior variance, fold
coefficients of many α). With ``vectors=False`` even ``W`` waits (eigenvalues by ``dsterf``):
a ridge solve at one α is ``Q (T + αI)⁻¹ Qᵀb`` (:meth:`FactoredEigenvectors.shifted_solve`),
and ``W`` is formed when something reads it.

Measured on the project's shared 2-core AMD EPYC (OpenBLAS 0.3.30, D = 2048, one BLAS thread,
load average 3; ``bench_rff.py _measure lapack``, docs/benchmarks.md): ``scipy.linalg.eigh``
(``evd``) 2.00 s, ``evr`` 2.18 s; ``dsytrd`` 0.61 s, with ``dstemr`` 1.22 s, with ``Vᵀb`` and
``β`` (this module's route) 1.29 s. Session 13, 2 BLAS threads, load 1.7: ``dsytrd`` 0.36 s,
with ``dstemr``, ``Vᵀb`` and ``β`` 1.10 s, with ``dsterf`` and the shifted β (``vectors=False``)
0.51 s.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import scipy.linalg
from scipy.linalg import lapack

from bigkernel.numerics.threads import PicklesWithoutLock, lapack_limit

logger = logging.getLogger(__name__)

__all__ = ["FactoredEigenvectors", "factored_eigh"]


class FactoredEigenvectors(PicklesWithoutLock):
    """The eigenvectors ``V = Q W`` of a symmetric matrix, kept as ``dsytrd``'s reflectors and
    the tridiagonal matrix ``T`` (its eigenvectors ``W`` formed on first use).

    Parameters
    ----------
    reflectors : ndarray of shape (D - 1, D - 1), Fortran order
        The Householder vectors of a lower ``dsytrd`` below its sub-diagonal, shifted one row up
        (``a[1:, :-1]``: the unit diagonal is implicit), as ``dormqr`` reads them.
    tau : ndarray of shape (D - 1,)
        Their scalar factors.
    W : ndarray of shape (D, D) or None
        Eigenvectors of the tridiagonal matrix (columns, ascending eigenvalues); None: formed
        from ``diagonal`` and ``offdiagonal`` (MRRR) when first needed.
    diagonal, offdiagonal : ndarray of shapes (D,) and (D - 1,), optional
        ``T`` (required when ``W`` is None).

    Notes
    -----
    ``Q e₁ = e₁``: the reflectors act on rows 2…D only. :meth:`dense` caches ``V`` and then
    drops the factors (``V`` serves every later product). Until ``W`` is read, a ridge solve at
    one α needs only ``Q (T + αI)⁻¹ Qᵀ b`` (:meth:`apply_q`, :meth:`shifted_solve`): ``O(D²)``
    instead of MRRR's eigenvectors (about half of the decomposition's time at D = 2048).
    """

    def __init__(
        self,
        reflectors: np.ndarray,
        tau: np.ndarray,
        W: np.ndarray | None = None,
        *,
        diagonal: np.ndarray | None = None,
        offdiagonal: np.ndarray | None = None,
    ) -> None:
        if W is None and (diagonal is None or offdiagonal is None):
            raise ValueError("FactoredEigenvectors needs W or the tridiagonal matrix (diagonal, offdiagonal)")
        self.reflectors, self.tau, self.W = reflectors, tau, W
        self.diagonal, self.offdiagonal = diagonal, offdiagonal
        self._dense: np.ndarray | None = None
        self._lock = threading.Lock()

    @property
    def shape(self) -> tuple[int, int]:
        """``(D, D)``."""
        with self._lock:
            if self._dense is not None:
                return self._dense.shape
            D = (self.W if self.W is not None else self.diagonal).shape[0]
        return D, D

    @property
    def formed(self) -> bool:
        """Whether the eigenvectors of ``T`` (or ``V`` itself) exist yet."""
        with self._lock:
            return self._dense is not None or self.W is not None

    def _parts(self) -> tuple[np.ndarray | None, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(V or None, (reflectors, tau, W))`` read together, ``W`` formed if needed:
        :meth:`dense` may drop the factors from another thread (a predict graph's tasks)
        between two attribute reads."""
        with self._lock:
            if self._dense is None and self.W is None:
                self.W = tridiagonal_eigh(self.diagonal, self.offdiagonal)[1]
            return self._dense, (self.reflectors, self.tau, self.W)

    @staticmethod
    def _apply_q(reflectors: np.ndarray, tau: np.ndarray, X: np.ndarray, trans: str) -> np.ndarray:
        """``Q X`` (``trans="N"``) or ``Qᵀ X`` (``"T"``) for X of shape (D, m), a new array."""
        out = np.array(X, dtype=np.float64, order="F", ndmin=2)
        if tau.size == 0 or out.shape[1] == 0:
            return out
        c = np.asfortranarray(out[1:])
        _, work, info = lapack.dormqr("L", trans, reflectors, tau, c, -1)
        lwork = max(int(work[0]), 1)
        with lapack_limit(out.shape[0]):
            cq, _, info = lapack.dormqr("L", trans, reflectors, tau, c, lwork, overwrite_c=1)
        if info != 0:  # only an illegal argument: a bug here, not bad data
            raise RuntimeError(f"LAPACK dormqr failed (info={info})")
        out[1:] = cq
        return out

    def _reduction(self) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            if self._dense is not None:
                raise RuntimeError("the reduction's factors were dropped when V was formed; use V")
            return self.reflectors, self.tau

    def apply_q(self, X: np.ndarray) -> np.ndarray:
        """``Q X`` (the reduction's orthogonal factor) for X of shape (D, m), float64."""
        return self._apply_q(*self._reduction(), X, "N")

    def apply_q_transpose(self, X: np.ndarray) -> np.ndarray:
        """``Qᵀ X`` for X of shape (D, m), float64."""
        return self._apply_q(*self._reduction(), X, "T")

    def shifted_solve(self, alpha: float, C: np.ndarray) -> np.ndarray | None:
        """``(T + αI)⁻¹ C`` for C of shape (D, m) (LAPACK ``dptsv``: ``O(D·m)``), or None
        where ``T + αI`` is not positive definite."""
        with self._lock:
            d, e = self.diagonal, self.offdiagonal
        if d is None:
            raise RuntimeError("the tridiagonal matrix was dropped when V was formed; use V")
        C = np.array(C, dtype=np.float64, order="F", ndmin=2)
        if d.shape[0] == 0:
            return C
        _, _, x, info = lapack.dptsv(d + float(alpha), e, C)
        return x if info == 0 else None

    def apply(self, X: np.ndarray) -> np.ndarray:
        """``V X`` for X of shape (D, m) (or (D,)), float64."""
        X = np.asarray(X, dtype=np.float64)
        V, (refl, tau, W) = self._parts()
        if V is not None:
            return V @ X
        return self._apply_q(refl, tau, W @ X.reshape(X.shape[0], -1), "N").reshape(X.shape)

    def apply_transpose(self, X: np.ndarray) -> np.ndarray:
        """``Vᵀ X`` for X of shape (D, m) (or (D,)), float64."""
        X = np.asarray(X, dtype=np.float64)
        V, (refl, tau, W) = self._parts()
        if V is not None:
            return V.T @ X
        return (W.T @ self._apply_q(refl, tau, X.reshape(X.shape[0], -1), "T")).reshape(X.shape)

    def columns(self, keep: np.ndarray) -> np.ndarray:
        """The eigenvectors selected by ``keep`` (boolean mask or indices), shape (D, r),
        C order: ``Q W[:, keep]`` (``O(D²r)``), or a slice of :meth:`dense` once formed."""
        V, (refl, tau, W) = self._parts()
        if V is not None:
            return np.ascontiguousarray(V[:, keep])
        return np.ascontiguousarray(self._apply_q(refl, tau, W[:, keep], "N"))

    def dense(self) -> np.ndarray:
        """``V`` as a (D, D) array (formed once, ``2D³`` flops; the factors are then dropped)."""
        self._parts()  # W, formed if needed
        with self._lock:
            if self._dense is None:
                self._dense = np.ascontiguousarray(self._apply_q(self.reflectors, self.tau, self.W, "N"))
                self.reflectors = self.tau = self.W = None  # type: ignore[assignment]
                self.diagonal = self.offdiagonal = None
            return self._dense


def tridiagonal_eigh(d: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and eigenvectors (columns) of the symmetric tridiagonal matrix
    ``(d, e)``: MRRR (``dstemr``, ``O(D²)``), or implicit QL/QR if it does not converge."""
    try:
        return scipy.linalg.eigh_tridiagonal(d, e, check_finite=False, lapack_driver="stemr")
    except np.linalg.LinAlgError:  # MRRR did not converge (rare): implicit QL/QR, O(D³) but no back-transform
        logger.info("dstemr did not converge on the %d × %d tridiagonal matrix; using dstev", d.shape[0], d.shape[0])
        return scipy.linalg.eigh_tridiagonal(d, e, check_finite=False, lapack_driver="stev")


def factored_eigh(
    G: np.ndarray, overwrite: bool = False, vectors: bool = True
) -> tuple[np.ndarray, FactoredEigenvectors]:
    """Eigenvalues (ascending) and factored eigenvectors of the symmetric float64 matrix ``G``.

    Parameters
    ----------
    G : ndarray of shape (D, D)
        Exactly symmetric (one triangle is read: which one depends on the memory order).
    overwrite : bool, default=False
        Let the reduction overwrite ``G`` (no copy when ``G`` is C- or Fortran-contiguous).
    vectors : bool, default=True
        Compute the tridiagonal matrix's eigenvectors now (MRRR, ``dstemr``); False: the
        eigenvalues only (``dsterf``), the eigenvectors formed when first read.

    Returns
    -------
    eigvals : ndarray of shape (D,)
    vectors : FactoredEigenvectors
    """
    G = np.asarray(G, dtype=np.float64)
    D = G.shape[0]
    if G.ndim != 2 or G.shape[1] != D:
        raise ValueError(f"factored_eigh expects a square matrix, got shape {G.shape}")
    if D <= 1:
        return G.reshape(D).copy(), FactoredEigenvectors(np.zeros((0, 0), order="F"), np.zeros(0), np.eye(D))
    # a C-contiguous symmetric G is the Fortran-contiguous Gᵀ = G: its lower triangle read in place
    A = G.T if G.flags.c_contiguous else np.asfortranarray(G)
    work, _ = lapack.dsytrd_lwork(D, lower=1)
    with lapack_limit(D):
        c, d, e, tau, info = lapack.dsytrd(A, lower=1, lwork=max(int(work), 1), overwrite_a=int(overwrite))
    if info != 0:
        raise RuntimeError(f"LAPACK dsytrd failed (info={info})")
    reflectors = np.asfortranarray(c[1:, :-1])
    del c
    if not vectors:
        s = scipy.linalg.eigvalsh_tridiagonal(d, e, check_finite=False, lapack_driver="sterf")
        return s, FactoredEigenvectors(reflectors, tau, diagonal=d, offdiagonal=e)
    s, W = tridiagonal_eigh(d, e)
    return s, FactoredEigenvectors(reflectors, tau, W, diagonal=d, offdiagonal=e)
