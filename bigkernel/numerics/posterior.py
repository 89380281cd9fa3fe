"""Posterior standard deviation of the latent f(x) under the Gaussian-process reading (layer 1).

Prior ``f ~ GP(0, σ²k)``, noise variance ``σ²α`` (:mod:`bigkernel.numerics.evidence`); the
ridge fit is the posterior mean and the posterior variance of ``f(x)`` is

* **primal** (features φ, ``ΦcᵀΦc = V diag(s) Vᵀ`` from the fit's one eigendecomposition)::

      Var f(x) = σ²α φcᵀ(ΦcᵀΦc + αI)⁻¹φc [+ σ²α/n]
               = σ² (‖φc‖² − Σⱼ wⱼ (vⱼᵀφc)²) [+ σ²α/n],     wⱼ = sⱼ/(sⱼ + α),

  with ``φc = φ(x) − μ`` (μ the feature mean; φc = φ without intercept). **Intercept**: the
  unpenalised intercept is a flat prior on ``b``; given β its posterior is
  ``N(ȳ − μᵀβ, σ²α/n)``, and integrating ``b`` out of ``f(x) = b + φᵀβ`` is exactly the
  centring, plus that ``σ²α/n`` — the intercept's own uncertainty.
  **Truncation**: only the r directions with ``wⱼ >= rtol`` are kept. A dropped direction's
  term ``wⱼ pⱼ²`` (``pⱼ = vⱼᵀφc``) is left out of the subtraction, so the variance is
  over-estimated by ``Σ_dropped wⱼ pⱼ² <= rtol Σ_dropped pⱼ²``, while the variance itself is at
  least ``Σ_dropped (1 − wⱼ) pⱼ² >= (1 − rtol) Σ_dropped pⱼ²``: the **relative error of the
  variance is at most rtol/(1 − rtol)** (of the std about half that), always upwards, for any
  x. Cost per row ``O(D·r)`` on top of the features, with ``r`` ≈ the directions the data
  determine (a few × df), not ``O(D²)``; no pass over the training data.

* **dual / exact** (``C = K + αI``; universal kriging with a flat prior on ``b``)::

      Var f(x) = σ² [k(x, x) − k(x)ᵀC⁻¹k(x) + (1 − 1ᵀC⁻¹k(x))² / 1ᵀC⁻¹1]

  (no last term without intercept: then it is scikit-learn's ``GaussianProcessRegressor``
  with ``alpha=α`` at σ² = 1) — :class:`DensePosterior` from one Cholesky factor of ``C`` (n up
  to a few 10⁴), or, for larger n, the equivalent centred form
  ``k̃(x, x) − k̃(x)ᵀ(K̄ + αI)⁻¹k̃(x) + α/n`` (``k̃(x) = H(k(x) − K1/n)``) with many right-hand
  sides through preconditioned CG (:func:`cg_unit_variance`; covariances too, and weighted
  fits with ``1`` replaced by ``s = √c`` and ``n`` by ``Σc``).

The classes return the *unit* variance (σ² = 1); the estimators multiply by each target's
``sigma2_``.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg

from bigkernel.errors import DataError
from bigkernel.numerics.cg import conjugate_gradient
from bigkernel.numerics.primal import EigenPath
from bigkernel.numerics.threads import PicklesWithoutLock, lapack_limit

logger = logging.getLogger(__name__)

__all__ = [
    "COV_MAX_ROWS",
    "CGPosterior",
    "POSTERIOR_RTOL",
    "DensePosterior",
    "PrimalPosterior",
    "MeanStdModel",
    "cg_unit_variance",
    "check_cov_rows",
    "primal_posterior",
]

#: directions with sⱼ/(sⱼ + α) below this are dropped: the variance is then over-estimated by
#: at most POSTERIOR_RTOL/(1 − POSTERIOR_RTOL) of itself (see the module docstring)
POSTERIOR_RTOL = 1e-3
#: ``return_cov`` refuses more points than this: the covariance is a dense m × m float64 matrix
#: (4096² × 8 B = 128 MiB), and the dual path holds one more of that size
COV_MAX_ROWS = 4096


def check_cov_rows(m: int) -> None:
    """Refuse a covariance over more than :data:`COV_MAX_ROWS` points, saying why."""
    if m > COV_MAX_ROWS:
        raise DataError(
            f"return_cov=True for {m:,} points would build a dense {m:,} × {m:,} float64 matrix "
            f"({8 * m * m / 2**30:.1f} GiB); it is limited to {COV_MAX_ROWS:,} points. Use "
            "return_std=True (the diagonal, any number of points, streamed) or pass fewer points"
        )


@dataclass(frozen=True)
class PrimalPosterior(PicklesWithoutLock):
    """Unit posterior variance ``Var f(x) / σ²`` of a primal model (see the module docstring).

    Attributes
    ----------
    fmap : FeatureMap or NystroemMap
        Anything with ``transform_unscaled(X, dtype)`` and ``scale``.
    mean_phi : ndarray of shape (D,)
        μ (zeros without intercept).
    directions : ndarray of shape (D, r), or a callable returning ``(directions, weights)``
        The kept eigenvectors of ΦcᵀΦc, or what forms them and their weights on first use
        (:attr:`vecs`: a fit whose eigendecomposition was deferred or left factored pays for
        it only when a variance is asked for).
    kept_weights : ndarray of shape (r,), or None while ``directions`` is a callable
        Their ``s/(s + α)`` (:attr:`weights`).
    alpha : float
    n : float
        Rows of the fit (``Σc`` with sample weights).
    fit_intercept : bool
    rtol : float
        The truncation tolerance the directions were kept with.
    dtype : str
        Dtype of the features (the projections are float64).
    block_rows : int
    """

    fmap: Any
    mean_phi: np.ndarray
    directions: np.ndarray | Callable[[], tuple[np.ndarray, np.ndarray]]
    kept_weights: np.ndarray | None
    alpha: float
    n: float
    fit_intercept: bool
    rtol: float = POSTERIOR_RTOL
    dtype: str = "float64"
    block_rows: int = 4096

    def __post_init__(self) -> None:
        # held while this posterior forms its directions (threads of one predict graph form them
        # once; other posteriors do not wait for it); an attribute, not a field, so that dask
        # tokenizes the posterior by its fields, deterministically
        object.__setattr__(self, "_lock", threading.Lock())

    @property
    def vecs(self) -> np.ndarray:
        """The kept eigenvectors, shape (D, r) (formed on first use, once)."""
        d = self.directions
        if callable(d):
            with self._lock:
                d = self.directions
                if callable(d):
                    d, w = d()
                    d = np.ascontiguousarray(d)
                    object.__setattr__(self, "kept_weights", w)
                    object.__setattr__(self, "directions", d)
        return d

    @property
    def weights(self) -> np.ndarray:
        """The kept directions' ``s/(s + α)``, shape (r,) (formed with :attr:`vecs`)."""
        self.vecs  # noqa: B018 - forms both
        return self.kept_weights

    def __getstate__(self) -> dict:
        self.vecs  # noqa: B018 - a pickled posterior (dask tasks) carries the directions, not their factors
        return super().__getstate__()

    def _centred(self, X: np.ndarray) -> np.ndarray:
        """``φ(X) − μ`` in float64, shape (m, D)."""
        phi = np.asarray(self.fmap.transform_unscaled(X, self.dtype), dtype=np.float64)
        phi *= self.fmap.scale
        if self.fit_intercept:
            phi -= self.mean_phi
        return phi

    def _offset(self) -> float:
        return self.alpha / self.n if self.fit_intercept else 0.0

    def mean_and_variance(
        self, X: np.ndarray, coef: np.ndarray, intercept: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(φ(X)β + b, Var f / σ²)`` of shapes (m, k) and (m,): one feature block and one GEMM
        serve both (``raw @ [sβ | sV | sμ]``, s the map's scale), so the centred block is never
        formed."""
        out = np.empty((X.shape[0], coef.shape[1]))
        var = np.empty(X.shape[0])
        M = self._gemm_matrix(coef)
        for lo in range(0, X.shape[0], self.block_rows):
            raw = self.fmap.transform_unscaled(X[lo : lo + self.block_rows], self.dtype)
            hi = lo + raw.shape[0]
            out[lo:hi], var[lo:hi] = self._block(raw, M, coef.shape[1])
        out += intercept
        return out, var

    def _gemm_matrix(self, coef: np.ndarray | None) -> np.ndarray:
        """``[sβ | sV | sμ]`` (float64; no β for the variance alone, no μ without intercept)."""
        s = self.fmap.scale
        parts = [] if coef is None else [coef * s]
        parts.append(self.vecs * s)
        if self.fit_intercept:
            parts.append((self.mean_phi * s)[:, None])
        return np.hstack(parts)

    def _block(self, raw: np.ndarray, M: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Mean part (rows, k) and unit variance (rows,) of one raw feature block.

        ``φc = s·raw − μ``: ``Vᵀφc = (raw @ sV) − Vᵀμ`` and
        ``‖φc‖² = s²‖raw‖² − 2 raw·sμ + ‖μ‖²``, all in float64 (the product upcasts float32
        features, as :class:`~bigkernel.numerics.primal.PrimalExpansion` does).
        """
        G = raw @ M
        r = self.vecs.shape[1]
        P = G[:, k : k + r]
        s = self.fmap.scale
        norm2 = s * s * np.einsum("ij,ij->i", raw, raw, dtype=np.float64)
        if self.fit_intercept:
            P = P - self.mean_phi @ self.vecs
            mu2 = float(self.mean_phi @ self.mean_phi)
            norm2 += mu2 - 2.0 * G[:, k + r]
        # ≥ 0 in exact arithmetic; rounding can take a point on the data to just below 0
        var = np.maximum(norm2 - (P * P) @ self.weights, 0.0) + self._offset()
        return G[:, :k], var

    def unit_variance(self, X: np.ndarray) -> np.ndarray:
        """``Var f(x) / σ²`` for the rows of ``X``, shape (m,), float64."""
        out = np.empty(X.shape[0])
        M = self._gemm_matrix(None)
        for lo in range(0, X.shape[0], self.block_rows):
            raw = self.fmap.transform_unscaled(X[lo : lo + self.block_rows], self.dtype)
            out[lo : lo + raw.shape[0]] = self._block(raw, M, 0)[1]
        return out

    def unit_cov(self, X: np.ndarray) -> np.ndarray:
        """``Cov(f(X)) / σ²``, shape (m, m) (call :func:`check_cov_rows` first)."""
        phi = self._centred(X)
        P = phi @ self.vecs
        C = phi @ phi.T - (P * self.weights) @ P.T
        C = 0.5 * (C + C.T) + self._offset()
        return C


def primal_posterior(
    path: EigenPath, alpha: float, fmap, *, dtype: str, rtol: float = POSTERIOR_RTOL
) -> PrimalPosterior:
    """The :class:`PrimalPosterior` of a fitted primal path at ``alpha``: keeps the directions
    with ``s/(s + α) >= rtol``, formed from ``path`` when first used (the path's eigenvalues
    then, when its decomposition was deferred, and ``path.eigvec_columns``: a factored path
    forms only the kept columns), and only if a variance is asked for."""
    D = path.n_features
    # float64 feature blocks of ≤ 32 MiB
    rows = int(max(256, min(8192, (32 * 2**20) // (8 * max(D, 1)))))
    return PrimalPosterior(
        fmap, np.asarray(path.mean_phi, dtype=np.float64), functools.partial(_kept_directions, path, alpha, rtol),
        None, float(alpha), float(path.n), bool(path.fit_intercept), float(rtol), dtype, rows,
    )  # fmt: skip


def _kept_directions(path: EigenPath, alpha: float, rtol: float) -> tuple[np.ndarray, np.ndarray]:
    """The eigenvectors of ``path`` with ``s/(s + α) >= rtol`` and those weights."""
    w = path.eigvals / (path.eigvals + alpha)
    keep = w >= rtol
    logger.info("posterior: %d of %d directions kept (s/(s+α) >= %.0e)", int(keep.sum()), w.size, rtol)
    return path.eigvec_columns(keep), w[keep].copy()


class DensePosterior:
    """Unit posterior variance of the exact (dual) model from one Cholesky factor of ``K + αI``.

    Parameters
    ----------
    tiler : GramTiler
        The training points and kernel (``cross`` gives ``k(Z, X)``).
    alpha : float
    fit_intercept : bool
    block : int, default=2048
        Test points per block (memory ``O(block · n)``).
    sample_weight : ndarray of shape (n,), optional
        Row weights ``c > 0`` of the fit (integer ``c`` = repeated rows): ``C = K + α diag(1/c)``,
        the posterior of the fit on the repeated data.
    """

    def __init__(
        self, tiler, alpha: float, fit_intercept: bool, block: int = 2048, sample_weight: np.ndarray | None = None
    ) -> None:
        self.tiler, self.alpha, self.fit_intercept, self.block = tiler, float(alpha), bool(fit_intercept), int(block)
        C = tiler.dense()
        # weights c (repeated rows): row i's noise variance is σ²α/cᵢ
        C[np.diag_indices_from(C)] += self.alpha if sample_weight is None else self.alpha / sample_weight
        t0 = time.perf_counter()
        try:
            with lapack_limit(tiler.n) as threads:  # one thread when other processes hold the cores
                self.chol = scipy.linalg.cholesky(C, lower=True, overwrite_a=True, check_finite=False)
        except np.linalg.LinAlgError:
            raise DataError(
                f"K + alpha·I is not positive definite at alpha={alpha:.3g} (an indefinite kernel, or alpha "
                "below the rounding of K): no posterior variance; use a PSD kernel or a larger alpha"
            ) from None
        if self.fit_intercept:
            self.c1 = scipy.linalg.cho_solve((self.chol, True), np.ones(tiler.n), check_finite=False)
            self.s11 = float(self.c1.sum())
        logger.info(
            "posterior: Cholesky factor of K + alpha·I (n=%s) in %.2fs%s; each point's variance then costs "
            "a triangular solve with it (~n² flops per point)",
            f"{tiler.n:,}", time.perf_counter() - t0, "" if threads is None else f" on {threads} BLAS thread(s)",
        )  # fmt: skip

    def mean_and_variance(
        self, Z: np.ndarray, coef: np.ndarray, intercept: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(k(Z, X)a + b, Var f / σ²)`` of shapes (m, k) and (m,): one kernel block serves both."""
        Z = np.asarray(Z, dtype=np.float64)
        out = np.empty((Z.shape[0], coef.shape[1]))
        var = np.empty(Z.shape[0])
        for lo in range(0, Z.shape[0], self.block):
            Zb = Z[lo : lo + self.block]
            Kz = self.tiler.cross(Zb)
            out[lo : lo + Zb.shape[0]] = Kz @ coef + intercept
            var[lo : lo + Zb.shape[0]] = self._variance(Zb, Kz)
        return out, var

    def _variance(self, Z: np.ndarray, Kz: np.ndarray) -> np.ndarray:
        V = scipy.linalg.solve_triangular(self.chol, Kz.T, lower=True, check_finite=False)
        var = self.tiler.kernel.diag(Z) - np.einsum("ij,ij->j", V, V)
        if self.fit_intercept:
            u = 1.0 - Kz @ self.c1
            var += u * u / self.s11
        return np.maximum(var, 0.0)

    def unit_variance(self, Z: np.ndarray) -> np.ndarray:
        """``Var f(z) / σ²`` for the rows of ``Z``, shape (m,)."""
        Z = np.asarray(Z, dtype=np.float64)
        out = np.empty(Z.shape[0])
        for lo in range(0, Z.shape[0], self.block):
            Zb = Z[lo : lo + self.block]
            out[lo : lo + Zb.shape[0]] = self._variance(Zb, self.tiler.cross(Zb))
        return out

    def unit_cov(self, Z: np.ndarray) -> np.ndarray:
        """``Cov f(Z) / σ²``, shape (m, m)."""
        Z = np.asarray(Z, dtype=np.float64)
        Kz = self.tiler.cross(Z)
        V = scipy.linalg.solve_triangular(self.chol, Kz.T, lower=True, check_finite=False)
        C = np.asarray(self.tiler.kernel(Z), dtype=np.float64) - V.T @ V
        if self.fit_intercept:
            u = 1.0 - Kz @ self.c1
            C += np.outer(u, u) / self.s11
        return 0.5 * (C + C.T)


def _cg_centred_system(matvec, cross, Z, *, fit_intercept, k_mean, s):
    """``(op, B, r)`` of the CG posterior: the operator ``V ↦ (K̄ + 0)V`` of the (weighted,
    centred) system, the right-hand sides ``k̃(Z)`` (n, m) and ``r = k̃``'s correction of the
    prior: ``k(z, z') − r(z) − r(z') + k_bar`` is ``k̃(z, z')`` (r, k_bar: zeros without intercept).

    With square-root weights ``s`` the system is that of ``K̃ = diag(s) K diag(s)`` with the
    intercept's regressor ``s`` instead of ``1`` (:mod:`bigkernel.numerics.dual`): ``n`` becomes
    ``sᵀs = Σc``, the mean ``1ᵀv/n`` the weighted ``sᵀv/sᵀs`` and ``k(z)`` becomes ``s ⊙ k(z)``.
    """
    B = np.asarray(cross(Z), dtype=np.float64).T.copy()  # (n, m)
    n = B.shape[0]
    w = np.ones(n) if s is None else np.asarray(s, dtype=np.float64)
    ww = float(w @ w)
    if s is not None:
        B *= w[:, None]

        def kmat(V: np.ndarray) -> np.ndarray:
            return w[:, None] * matvec(w[:, None] * V)
    else:
        kmat = matvec
    if not fit_intercept:
        return kmat, B, np.zeros(B.shape[1]), 0.0
    if k_mean is None:
        raise DataError("the CG posterior with an intercept needs k_mean = K̃s/sᵀs (K1/n without weights)")

    def centre(V: np.ndarray) -> np.ndarray:
        return V - w[:, None] * ((w @ V) / ww)[None, :]

    r = (w @ B) / ww  # the (weighted) training mean of k(z)
    k_bar = float(w @ k_mean) / ww
    B -= k_mean[:, None]
    B = centre(B)

    def op(V: np.ndarray) -> np.ndarray:
        return centre(kmat(centre(V)))

    return op, B, r, k_bar


def cg_unit_variance(
    matvec: Callable[[np.ndarray], np.ndarray],
    cross: Callable[[np.ndarray], np.ndarray],
    kdiag: np.ndarray,
    Z: np.ndarray,
    *,
    alpha: float,
    fit_intercept: bool,
    k_mean: np.ndarray | None = None,
    preconditioner: Any = None,
    tol: float = 1e-8,
    max_iter: int | None = None,
    sqrt_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Unit posterior variance of the exact model at the rows of ``Z`` by CG, one column each.

    ``(K̄ + αI) V = k̃(Z)`` is solved for every point of ``Z`` together (each CG iteration is one
    Gram matvec with ``len(Z)`` columns), then ``Var/σ² = k̃(z, z) − k̃(z)ᵀV [+ α/n]`` (see the
    module docstring). The error of ``k̃(z)ᵀV`` is ``V*ᵀr`` for the CG residual ``r``: relative
    ``tol=1e-8`` leaves ~1e-8 of the explained part.

    Parameters
    ----------
    matvec : callable
        ``V ↦ K V`` (uncentred Gram matrix of the training points).
    cross : callable
        ``Z ↦ k(Z, X)`` of shape (m, n).
    kdiag : ndarray of shape (m,)
        ``k(z, z)``.
    Z : ndarray of shape (m, d)
    alpha : float
    fit_intercept : bool
    k_mean : ndarray of shape (n,), optional
        ``K1/n`` (with intercept; one matvec, computed once by the caller); with weights
        ``K̃s/sᵀs``.
    preconditioner : LowRankPreconditioner, optional
        For ``K̄`` (built on the centred factor), applied with the shift α.
    tol, max_iter
        CG stopping rule.
    sqrt_weights : ndarray of shape (n,), optional
        ``s = √c`` of a weighted fit (row i's noise ``σ²α/cᵢ``; integer ``c`` = repeated rows).
    """
    op, B, r, k_bar = _cg_centred_system(matvec, cross, Z, fit_intercept=fit_intercept, k_mean=k_mean,
                                         s=sqrt_weights)  # fmt: skip
    n = B.shape[0]
    base = np.asarray(kdiag, dtype=np.float64) - 2.0 * r + k_bar
    res = conjugate_gradient(op, B, preconditioner=preconditioner, shift=alpha, tol=tol, max_iter=max_iter)
    X = res.x.reshape(n, -1)
    var = base - np.einsum("ij,ij->j", B, X)
    return np.maximum(var, 0.0) + (alpha / _rows(sqrt_weights, n) if fit_intercept else 0.0)


def _rows(s: np.ndarray | None, n: int) -> float:
    """Rows of the fit: ``n``, or ``Σc = sᵀs`` with weights."""
    return float(n) if s is None else float(s @ s)


class CGPosterior:
    """Unit posterior variance (and covariance) of the exact model by batched CG
    (:func:`cg_unit_variance`), for n beyond one Cholesky factor: every block of test points is
    one CG run with a column per point over the in-process Gram operator
    (:class:`~bigkernel.numerics.gram_tiles.LocalGram`), preconditioned by a low-rank factor of
    ``K`` (centred with the intercept).

    Parameters
    ----------
    gram : LocalGram
        ``matvec``, ``tiler``.
    alpha : float
    fit_intercept : bool
    factor : ndarray of shape (n, r), optional
        ``K ≈ LLᵀ`` for the preconditioner.
    tol : float, default=1e-8
    max_iter : int, optional
    block : int, default=256
        Test points per CG run (columns of every matvec).
    sample_weight : ndarray of shape (n,), optional
        Row weights ``c > 0`` of the fit (the posterior of :class:`DensePosterior` with weights).
    """

    def __init__(self, gram, alpha: float, fit_intercept: bool, *, factor: np.ndarray | None = None,
                 tol: float = 1e-8, max_iter: int | None = None, block: int = 256,
                 sample_weight: np.ndarray | None = None) -> None:  # fmt: skip
        from bigkernel.numerics.precond import LowRankPreconditioner

        self.gram, self.alpha, self.fit_intercept = gram, float(alpha), bool(fit_intercept)
        self.tol, self.max_iter, self.block = float(tol), max_iter, int(block)
        n = gram.tiler.n
        self.s = None if sample_weight is None else np.sqrt(np.asarray(sample_weight, dtype=np.float64))
        w = np.ones(n) if self.s is None else self.s
        self.k_mean = None
        if fit_intercept:  # K̃s/sᵀs (K1/n without weights)
            self.k_mean = w * gram.matvec((w * w)[:, None])[:, 0] / float(w @ w)
        self.prec = None
        if factor is not None:
            L = factor if self.s is None else w[:, None] * factor
            if fit_intercept:
                L = L - w[:, None] * ((w @ L) / float(w @ w))[None, :]
            self.prec = LowRankPreconditioner(L, self.alpha)

    def _variance(self, Z: np.ndarray) -> np.ndarray:
        tiler = self.gram.tiler
        return cg_unit_variance(
            self.gram.matvec, tiler.cross, tiler.kernel.diag(Z), Z, alpha=self.alpha,
            fit_intercept=self.fit_intercept, k_mean=self.k_mean, preconditioner=self.prec, tol=self.tol,
            max_iter=self.max_iter, sqrt_weights=self.s,
        )  # fmt: skip

    def unit_variance(self, Z: np.ndarray) -> np.ndarray:
        """``Var f(z) / σ²`` for the rows of ``Z``, shape (m,)."""
        Z = np.asarray(Z, dtype=np.float64)
        out = np.empty(Z.shape[0])
        for lo in range(0, Z.shape[0], self.block):
            out[lo : lo + self.block] = self._variance(Z[lo : lo + self.block])
        return out

    def mean_and_variance(
        self, Z: np.ndarray, coef: np.ndarray, intercept: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(k(Z, X)a + b, Var f / σ²)`` of shapes (m, k) and (m,)."""
        Z = np.asarray(Z, dtype=np.float64)
        return self.gram.tiler.cross(Z) @ coef + intercept, self.unit_variance(Z)

    def unit_cov(self, Z: np.ndarray) -> np.ndarray:
        """``Cov f(Z) / σ²``, shape (m, m) (call :func:`check_cov_rows` first): the right-hand
        sides ``k̃(Z)`` (n × m) are kept, and each block of ``block`` columns is one CG run."""
        Z = np.asarray(Z, dtype=np.float64)
        tiler = self.gram.tiler
        op, B, r, k_bar = _cg_centred_system(self.gram.matvec, tiler.cross, Z, fit_intercept=self.fit_intercept,
                                             k_mean=self.k_mean, s=self.s)  # fmt: skip
        C = np.asarray(tiler.kernel(Z), dtype=np.float64) - r[:, None] - r[None, :] + k_bar
        for lo in range(0, Z.shape[0], self.block):
            Bj = B[:, lo : lo + self.block]
            res = conjugate_gradient(op, Bj, preconditioner=self.prec, shift=self.alpha, tol=self.tol,
                                     max_iter=self.max_iter)  # fmt: skip
            C[:, lo : lo + Bj.shape[1]] -= B.T @ res.x.reshape(B.shape[0], -1)
        C = 0.5 * (C + C.T)
        if self.fit_intercept:
            C += self.alpha / _rows(self.s, B.shape[0])
        return C


class MeanStdModel:
    """Mean and posterior std on numpy blocks for :func:`bigkernel.graph.stream.predict_graph`:
    columns ``[mean (k) | std (k)]``, std ``= √(unit variance) · √σ²`` per target. Picklable.

    ``posterior`` has ``mean_and_variance(X, coef, intercept)`` (one feature or kernel block
    serves both); ``transform`` (optional) maps raw inputs first (standardization).
    """

    def __init__(self, posterior, coef: np.ndarray, intercept: np.ndarray, sigma2: np.ndarray, transform=None) -> None:
        self.posterior, self.transform = posterior, transform
        self.coef = np.asarray(coef, dtype=np.float64)
        self.intercept = np.asarray(intercept, dtype=np.float64)
        self.scale = np.sqrt(np.atleast_1d(np.asarray(sigma2, dtype=np.float64)))

    @property
    def n_outputs(self) -> int:
        return 2 * int(self.coef.shape[1])

    def __call__(self, X: np.ndarray) -> np.ndarray:
        if self.transform is not None:
            X = self.transform(X)
        mean, var = self.posterior.mean_and_variance(X, self.coef, self.intercept)
        return np.hstack([mean, np.sqrt(var)[:, None] * self.scale[None, :]])
