"""Closed-form leave-one-out and GCV of exact kernel ridge over an α path (layer 1: numpy only).

Objective (scikit-learn's scaling, as :mod:`bigkernel.numerics.dual`):
``Σ (yᵢ − f(xᵢ))² + α‖f‖²``, ``f(x) = Σ aᵢ k(x, xᵢ) + b``, the intercept ``b`` unpenalized.

With an intercept the fit is the ridge on the centred Gram matrix ``K̄ = HKH``
(``H = I − 11ᵀ/n``) plus ``ȳ``; without one, on ``K``. One eigendecomposition
``K̄ = U Λ Uᵀ`` gives, for every α at once (``w_j = α/(λ_j + α)``, ``c = Uᵀ(y − ȳ)``):

* fitted values ``ŷ = ȳ + U diag(1 − w) c``, residuals ``y − ŷ = U diag(w) c``,
  ``RSS = Σ_j w_j² c_j²``;
* the hat matrix ``S = 11ᵀ/n + U diag(1 − w) Uᵀ`` (no ``11ᵀ/n`` without intercept), its
  diagonal ``h_ii`` and ``df = tr S = [1] + Σ_j λ_j/(λ_j + α)``;
* leave-one-out residuals ``eᵢ = (yᵢ − ŷᵢ)/(1 − h_ii)`` — exact for a linear smoother whose
  refit on n − 1 points is the same ridge (true here, intercept included: ``S`` reproduces
  constants) — and the LOO mean squared error ``Σ eᵢ²/n``;
* GCV ``= n·RSS/(n − df)²`` (LOO with every ``h_ii`` replaced by their mean ``df/n``), equal to
  :func:`bigkernel.numerics.dual.solve_dual`'s.

The intercept's direction is deflated exactly rather than left to the eigensolver: a Householder
reflector ``P`` maps ``1/√n`` to ``e₁``, so ``Q = P[:, 1:]`` is an orthonormal basis of ``1⊥``,
``K̄ = Q (QᵀKQ) Qᵀ``, and ``U = QV`` with ``QᵀKQ = VΛVᵀ`` of size n − 1. Then every column of
``U`` is orthogonal to ``1`` to rounding, ``Σ_j U_ij² = 1 − 1/n``, and
``1 − h_ii = Σ_j U_ij² w_j`` is a sum of non-negative terms (no cancellation for small α);
``P`` is applied on the fly, so ``U`` is never stored — only ``V``.

Guards (scores reported as ``inf``, never chosen): α at or below the eigenvalues' rounding floor
``n·ε·max|λ|`` (or ``λ_min + α`` not above it, for an indefinite kernel), and a leverage
``1 − h_ii`` (LOO) or ``1 − df/n`` (GCV) at or below ``1000·n·ε`` (``ε`` the float64 machine
epsilon): the computed ``1 − h_ii`` carries an absolute error ~``n·ε``.

Memory: the eigendecomposition works in place on the caller's Gram matrix (``overwrite=True``)
and keeps one ``n × n`` float64 array (``V``); scoring works on row blocks of ``U`` of at most
``block_bytes``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from bigkernel.errors import DataError, ParameterError
from bigkernel.numerics.threads import lapack_limit

logger = logging.getLogger(__name__)

__all__ = ["ClosedFormScores", "SpectralPath", "closed_form_scores", "leverage_floor", "spectral_path"]

_EPS = float(np.finfo(np.float64).eps)
#: bytes of a row block of ``U`` (and of its square) while scoring
DEFAULT_BLOCK_BYTES = 32 * 2**20


def leverage_floor(n: int) -> float:
    """Smallest ``1 − h_ii`` (and ``1 − df/n``) trusted: ``1000·n·ε`` (relative error ≤ 1e-3)."""
    return 1e3 * n * _EPS


@dataclass(frozen=True)
class SpectralPath:
    """One eigendecomposition of the (centred) Gram matrix and the projected targets.

    Attributes
    ----------
    eigvals : ndarray of shape (m,)
        Eigenvalues ``λ`` of ``QᵀKQ`` (m = n − 1, with intercept) or of ``K`` (m = n), those
        within the rounding floor of 0 set to 0.
    eigvecs : ndarray of shape (m, m)
        ``V``; the eigenvectors of ``K̄`` are ``U = QV`` (``U = V`` without intercept).
    proj : ndarray of shape (m, k)
        ``c = Uᵀ(Y − ȳ)``.
    ybar : ndarray of shape (k,)
        Target means (zeros without intercept).
    reflector : ndarray of shape (n,) or None
        Householder vector ``u`` of ``P = I − 2uuᵀ`` (None without intercept).
    reflector_v : ndarray of shape (m,) or None
        ``Vᵀu[1:]``: row ``i`` of ``U`` is ``V[i − 1] − 2uᵢ·reflector_v`` (``V[−1] = 0``).
    kv : ndarray of shape (m,) or None
        ``QᵀK1/√n``: gives the intercept ``b = ȳ − 1ᵀKa/n`` of a dual solution.
    noise : float
        Rounding floor of the eigenvalues, ``n·ε·max|λ|``.
    n : int
    """

    eigvals: np.ndarray
    eigvecs: np.ndarray
    proj: np.ndarray
    ybar: np.ndarray
    reflector: np.ndarray | None
    reflector_v: np.ndarray | None
    kv: np.ndarray | None
    noise: float
    n: int

    @property
    def fit_intercept(self) -> bool:
        return self.reflector is not None

    # ------------------------------------------------------------------ U without storing it
    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of ``U`` (a new array of shape (stop − start, m))."""
        if self.reflector is None:
            return self.eigvecs[start:stop].copy()
        m = self.eigvecs.shape[0]
        out = np.zeros((stop - start, m))
        lo = max(start, 1)
        if stop > lo:
            out[lo - start :] = self.eigvecs[lo - 1 : stop - 1]
        out -= 2.0 * self.reflector[start:stop, None] * self.reflector_v[None, :]
        return out

    def apply(self, X: np.ndarray) -> np.ndarray:
        """``U X`` for ``X`` of shape (m, k) → (n, k)."""
        Y = self.eigvecs @ X
        if self.reflector is None:
            return Y
        u = self.reflector
        out = np.empty((self.n, X.shape[1]))
        out[0] = 0.0
        out[1:] = Y
        out -= 2.0 * u[:, None] * (u[1:] @ Y)[None, :]
        return out

    # ------------------------------------------------------------------ one α
    def df(self, alphas: np.ndarray) -> np.ndarray:
        """Degrees of freedom ``tr S`` per α (intercept included), eigenvalues clipped at 0."""
        lam = np.maximum(self.eigvals, 0.0)
        alphas = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
        base = 1.0 if self.fit_intercept else 0.0
        return base + (lam[:, None] / (lam[:, None] + alphas[None, :])).sum(axis=0)

    def coef(self, alpha: float) -> np.ndarray:
        """Dual coefficients ``a = U diag(1/(λ + α)) c`` of shape (n, k) (``1ᵀa = 0`` with an
        intercept): ``(K̄ + αI) a = H(Y − ȳ)``."""
        return self.apply(self.proj / (self.eigvals + alpha)[:, None])

    def intercept(self, alpha: float) -> np.ndarray:
        """``b = ȳ − 1ᵀK a/n`` (zeros without intercept), so ``f(x) = k(x)ᵀa + b``."""
        if self.reflector is None:
            return np.zeros_like(self.ybar)
        x = self.eigvecs @ (self.proj / (self.eigvals + alpha)[:, None])
        return self.ybar - (self.kv @ x) / np.sqrt(self.n)

    def fitted(self, alpha: float) -> np.ndarray:
        """In-sample fitted values ``ŷ`` of shape (n, k)."""
        lam = self.eigvals
        return self.ybar + self.apply(self.proj * (lam / (lam + alpha))[:, None])

    def residuals(self, alpha: float) -> np.ndarray:
        """``Y − ŷ = U diag(w) c`` of shape (n, k) (accurate for small α too)."""
        return self.apply(self.proj * (alpha / (self.eigvals + alpha))[:, None])

    def one_minus_leverage(self, alpha: float) -> np.ndarray:
        """``1 − h_ii`` of shape (n,), ``Σ_j U_ij² α/(λ_j + α)``."""
        w = alpha / (self.eigvals + alpha)
        out = np.empty(self.n)
        for lo, hi in _row_blocks(self.n, self.eigvecs.shape[0], DEFAULT_BLOCK_BYTES):
            Ub = self.rows(lo, hi)
            out[lo:hi] = (Ub * Ub) @ w
        return out

    def loo_residuals(self, alpha: float) -> np.ndarray:
        """Leave-one-out residuals ``(yᵢ − ŷᵢ)/(1 − h_ii)`` of shape (n, k)."""
        return self.residuals(alpha) / self.one_minus_leverage(alpha)[:, None]


def _row_blocks(n: int, m: int, block_bytes: int):
    rows = max(1, int(block_bytes // (8 * max(m, 1))))
    for lo in range(0, n, rows):
        yield lo, min(n, lo + rows)


def _deflate_in_place(K: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Apply ``P·K·P`` in place (``P`` the Householder reflector with ``P1/√n = e₁``); return
    ``(M, u, g)``: ``M = QᵀKQ`` as a C-contiguous view on the front of ``K``'s buffer,
    ``u`` the reflector's vector and ``g = QᵀK1/√n``.

    ``P = I − 2uuᵀ``, ``u = (v − e₁)/‖v − e₁‖``, ``v = 1/√n``; ``PKP = K − 2(uwᵀ + wuᵀ)``
    with ``z = Ku``, ``w = z − (uᵀz)u``.
    """
    n = K.shape[0]
    v1 = 1.0 / np.sqrt(n)
    u = np.full(n, v1)
    u[0] -= 1.0
    u /= np.linalg.norm(u)
    z = K @ u
    w = z - float(u @ z) * u
    for lo, hi in _row_blocks(n, n, DEFAULT_BLOCK_BYTES):
        K[lo:hi] -= 2.0 * (u[lo:hi, None] * w[None, :] + w[lo:hi, None] * u[None, :])
    g = K[1:, 0].copy()
    # compact the trailing (n−1)² block to the front of the buffer, row by row (each row's
    # destination ends before its source starts, so the copies never overlap)
    flat = K.reshape(-1)
    m = n - 1
    for i in range(m):
        src = (i + 1) * n + 1
        flat[i * m : (i + 1) * m] = flat[src : src + m]
    return flat[: m * m].reshape(m, m), u, g


def _eigh(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and eigenvectors of the symmetric ``M`` (its lower triangle as
    LAPACK reads it; ``M`` is destroyed): LAPACK ``dsyevr`` in place, memory ~2 ``M``.

    On the BLAS threads the other processes leave idle
    (:func:`~bigkernel.numerics.threads.lapack_limit`): the tridiagonal reduction is mostly
    matrix-vector products, each a synchronisation of the BLAS threads, and multi-threaded
    OpenBLAS slows down several times when other processes hold the cores (n=3000 at a load of
    4-7 on 2 cores: 9-12 s on one thread, 27-46 s on two); on an idle machine two threads gain
    ~1.7× (0.6 s against 1.0 s at n=2000).
    """
    # M is C-contiguous; its transpose is the same symmetric matrix in Fortran order, so LAPACK
    # works in M's own buffer (no copy)
    with lapack_limit(M.shape[0]):
        return scipy.linalg.eigh(M.T, overwrite_a=True, check_finite=False, driver="evr")


def spectral_path(
    K: np.ndarray,
    Y: np.ndarray,
    *,
    fit_intercept: bool = True,
    overwrite: bool = False,
    eigh: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None,
) -> SpectralPath:
    """Eigendecompose the (centred) Gram matrix once, for the whole α path.

    Parameters
    ----------
    K : ndarray of shape (n, n)
        Symmetric Gram matrix ``k(X, X)`` (uncentred), float64.
    Y : ndarray of shape (n,) or (n, k)
        Targets.
    fit_intercept : bool, default=True
        Centre (``HKH``, unpenalized intercept); else use ``K``.
    overwrite : bool, default=False
        Work in ``K``'s buffer (it is destroyed); otherwise on a copy.
    eigh : callable, optional
        ``eigh(M) -> (eigenvalues, eigenvectors)`` (host arrays) of a symmetric ``M`` whose
        upper triangle is valid: the one O(n³) step, on a GPU when
        :func:`~bigkernel.numerics.namespace.eigh_on` gives it; default LAPACK on the host.

    Returns
    -------
    SpectralPath

    Raises
    ------
    DataError
        ``K`` not square or not matching ``Y``, fewer than 2 samples, non-finite values.
    """
    K = np.asarray(K)
    Y = np.asarray(Y, dtype=np.float64)
    Y = Y[:, None] if Y.ndim == 1 else Y
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] != Y.shape[0] or Y.ndim != 2:
        raise DataError(f"expected K of shape (n, n) and Y of shape (n,) or (n, k), found {K.shape} and {Y.shape}")
    n = K.shape[0]
    if n < 2:
        raise DataError(f"leave-one-out and GCV need at least 2 samples, found n_samples={n}")
    if not overwrite or K.dtype != np.float64 or not K.flags.c_contiguous or not K.flags.writeable:
        K = np.array(K, dtype=np.float64, order="C")
    if not (np.isfinite(K).all() and np.isfinite(Y).all()):
        raise DataError("K and Y must be finite (found NaN or inf)")
    if fit_intercept:
        ybar = Y.mean(axis=0)
        M, u, g = _deflate_in_place(K)
        lam, V = (eigh or _eigh)(M)
        Yc = Y - ybar
        PY = Yc - 2.0 * u[:, None] * (u @ Yc)[None, :]
        proj = V.T @ PY[1:]
        kv = g
    else:
        ybar = np.zeros(Y.shape[1])
        lam, V = (eigh or _eigh)(K)
        u, proj, kv = None, V.T @ Y, None
    del K
    noise = n * _EPS * float(np.max(np.abs(lam))) if lam.size else 0.0
    lam = np.where(np.abs(lam) <= noise, 0.0, lam)
    if lam.size and lam[0] < -noise:
        logger.warning(
            "the Gram matrix is indefinite (smallest eigenvalue %.3g): the kernel is not "
            "positive semi-definite; alphas with λ_min + α <= noise are never chosen",
            lam[0],
        )
    uv = None if u is None else u[1:] @ V
    path = SpectralPath(lam, V, proj, ybar, u, uv, kv, noise, n)
    return path


@dataclass(frozen=True)
class ClosedFormScores:
    """Scores of every α from one :class:`SpectralPath`.

    Attributes
    ----------
    alphas : ndarray of shape (A,)
    df : ndarray of shape (A,)
        Degrees of freedom ``tr S`` (intercept included).
    rss : ndarray of shape (A, k)
        Residual sum of squares.
    gcv : ndarray of shape (A, k)
        ``n·RSS/(n − df)²``; inf where not reliable.
    loo_mse : ndarray of shape (A, k)
        Leave-one-out mean squared error; inf where not reliable.
    loo_std : ndarray of shape (A,)
        Standard deviation over the n left-out samples of their squared LOO error (averaged
        over targets): what ``std_test_score`` of a ``LeaveOneOut`` grid search reports.
    min_one_minus_leverage : ndarray of shape (A,)
        ``min_i (1 − h_ii)``.
    reliable : ndarray of bool, shape (A,)
        α above the eigenvalues' rounding floor and ``min_i(1 − h_ii)`` above
        :func:`leverage_floor` (LOO); GCV uses ``1 − df/n`` instead of the minimum.
    """

    alphas: np.ndarray
    df: np.ndarray
    rss: np.ndarray
    gcv: np.ndarray
    loo_mse: np.ndarray
    loo_std: np.ndarray
    min_one_minus_leverage: np.ndarray
    reliable: np.ndarray


def closed_form_scores(path: SpectralPath, alphas, *, block_bytes: int = DEFAULT_BLOCK_BYTES) -> ClosedFormScores:
    """LOO MSE, GCV, RSS and df for every α from one eigendecomposition.

    Cost: two GEMMs per row block of ``U`` (``n × m × A·k`` and ``n × m × A``), memory
    ``O(block_bytes + n·A·k)``.

    Parameters
    ----------
    path : SpectralPath
    alphas : array-like of shape (A,)
        Penalties > 0.
    block_bytes : int, default=32 MiB
        Size of a row block of ``U``.

    Returns
    -------
    ClosedFormScores
    """
    alphas = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
    if alphas.ndim != 1 or alphas.size == 0 or not np.all(np.isfinite(alphas) & (alphas > 0)):
        raise ParameterError(f"alphas must be a non-empty list of finite numbers > 0, got {alphas!r}")
    n, lam, c = path.n, path.eigvals, path.proj
    m, k = c.shape
    A = alphas.size
    denom = lam[:, None] + alphas[None, :]  # (m, A)
    with np.errstate(divide="ignore", invalid="ignore"):
        W = alphas[None, :] / denom
    posed = (alphas > path.noise) & (lam.min(initial=np.inf) + alphas > path.noise)
    W = np.where(posed[None, :], W, 0.0)
    rss = np.einsum("ja,jk->ak", W**2, c**2)  # ‖U diag(w) c‖² (U has orthonormal columns)
    df = path.df(alphas)
    C = (W[:, :, None] * c[:, None, :]).reshape(m, A * k)
    sse = np.zeros((A, k))
    s1, s2 = np.zeros(A), np.zeros(A)
    lev_min = np.full(A, np.inf)
    for lo, hi in _row_blocks(n, m, block_bytes):
        Ub = path.rows(lo, hi)
        R = (Ub @ C).reshape(hi - lo, A, k)  # residuals y − ŷ
        Ub *= Ub
        L = Ub @ W  # 1 − h_ii, (b, A)
        lev_min = np.minimum(lev_min, L.min(axis=0))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            E2 = (R / L[:, :, None]) ** 2
        sse += E2.sum(axis=0)
        per_sample = E2.mean(axis=2)  # one left-out sample's squared error (mean over targets)
        s1 += per_sample.sum(axis=0)
        s2 += (per_sample**2).sum(axis=0)
    floor = leverage_floor(n)
    reliable_loo = posed & (lev_min > floor)
    resid_frac = (n - df) / n
    reliable_gcv = posed & (resid_frac > floor)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        loo_mse = np.where(reliable_loo[:, None], sse / n, np.inf)
        gcv = np.where(reliable_gcv[:, None], n * rss / (n - df)[:, None] ** 2, np.inf)
        var = np.maximum(s2 / n - (s1 / n) ** 2, 0.0)
    loo_std = np.where(reliable_loo, np.sqrt(var), np.nan)
    if not reliable_loo.all():
        logger.info(
            "closed-form LOO: %d of %d alphas below the rounding floor (min 1 − h_ii <= %.2g "
            "or α <= %.2g), reported as inf",
            int((~reliable_loo).sum()),
            A,
            floor,
            path.noise,
        )
    return ClosedFormScores(alphas, df, rss, gcv, loo_mse, loo_std, lev_min, reliable_loo)
