"""Symmetric eigendecomposition with the eigenvectors left in factored form (layer 1).

``G = Q T Qᵀ`` (LAPACK ``dsytrd``: Householder reflectors, ``T`` tridiagonal), then
``T = W diag(s) Wᵀ`` (MRRR, ``dstemr``: every eigenvalue and every eigenvector of ``T`` in
``O(D²)``). The eigenvectors of ``G`` are ``V = Q W``. This is LAPACK's ``dsyevr`` without its
last step, the back-transformation ``Q W`` (``dormtr``, ``2D³`` flops): a ridge path needs
``Vᵀb`` and ``V x`` for a few vectors, which the reflectors apply in ``O(D²)`` each
(``dormqr``, as ``dormtr`` does for a lower ``dsytrd``), so the dense ``V`` is formed only when
something asks for it (:meth:`FactoredEigenvectors.dense`: the posterior variance, fold
coefficients of many α).

Measured on the project's shared 2-core AMD EPYC (OpenBLAS 0.3.30, D = 2048, one BLAS thread,
load average 3; ``bench_rff.py _measure lapack``, docs/benchmarks.md): ``scipy.linalg.eigh``
(``evd``) 2.00 s, ``evr`` 2.18 s; ``dsytrd`` 0.61 s, with ``dstemr`` 1.22 s, with ``Vᵀb`` and
``β`` (this module's route) 1.29 s.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import scipy.linalg
from scipy.linalg import lapack

from bigkernel.numerics.threads import lapack_limit

logger = logging.getLogger(__name__)

__all__ = ["FactoredEigenvectors", "factored_eigh"]


class FactoredEigenvectors:
    """The eigenvectors ``V = Q W`` of a symmetric matrix, kept as ``dsytrd``'s reflectors and
    the eigenvectors ``W`` of the tridiagonal matrix.

    Parameters
    ----------
    reflectors : ndarray of shape (D - 1, D - 1), Fortran order
        The Householder vectors of a lower ``dsytrd`` below its sub-diagonal, shifted one row up
        (``a[1:, :-1]``: the unit diagonal is implicit), as ``dormqr`` reads them.
    tau : ndarray of shape (D - 1,)
        Their scalar factors.
    W : ndarray of shape (D, D)
        Eigenvectors of the tridiagonal matrix (columns, ascending eigenvalues).

    Notes
    -----
    ``Q e₁ = e₁``: the reflectors act on rows 2…D only. :meth:`dense` caches ``V`` and then
    drops the factors (``V`` serves every later product).
    """

    def __init__(self, reflectors: np.ndarray, tau: np.ndarray, W: np.ndarray) -> None:
        self.reflectors, self.tau, self.W = reflectors, tau, W
        self._dense: np.ndarray | None = None
        self._lock = threading.Lock()

    @property
    def shape(self) -> tuple[int, int]:
        """``(D, D)``."""
        D = (self.W if self._dense is None else self._dense).shape[0]
        return D, D

    def _parts(self) -> tuple[np.ndarray | None, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(V or None, (reflectors, tau, W))`` read together: :meth:`dense` may drop the factors
        from another thread (a predict graph's tasks) between two attribute reads."""
        with self._lock:
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
        with self._lock:
            if self._dense is None:
                self._dense = np.ascontiguousarray(self._apply_q(self.reflectors, self.tau, self.W, "N"))
                self.reflectors = self.tau = self.W = None  # type: ignore[assignment]
            return self._dense

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def factored_eigh(G: np.ndarray, overwrite: bool = False) -> tuple[np.ndarray, FactoredEigenvectors]:
    """Eigenvalues (ascending) and factored eigenvectors of the symmetric float64 matrix ``G``.

    Parameters
    ----------
    G : ndarray of shape (D, D)
        Exactly symmetric (one triangle is read: which one depends on the memory order).
    overwrite : bool, default=False
        Let the reduction overwrite ``G`` (no copy when ``G`` is C- or Fortran-contiguous).

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
    try:
        s, W = scipy.linalg.eigh_tridiagonal(d, e, check_finite=False, lapack_driver="stemr")
    except np.linalg.LinAlgError:  # MRRR did not converge (rare): implicit QL/QR, O(D³) but no back-transform
        logger.info("dstemr did not converge on the %d × %d tridiagonal matrix; using dstev", D, D)
        s, W = scipy.linalg.eigh_tridiagonal(d, e, check_finite=False, lapack_driver="stev")
    return s, FactoredEigenvectors(reflectors, tau, W)
