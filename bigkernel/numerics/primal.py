"""Primal ridge solve from sufficient statistics (layer 1).

Objective (scikit-learn's scaling): Σ (yᵢ - φᵢᵀβ - b)² + α‖β‖², intercept b unpenalized.

With ``fit_intercept`` the system is centred in feature space from the one-pass sums
(kernel-regression-with-bias post): ΦcᵀΦc = ΦᵀΦ - n μμᵀ, Φcᵀyc = Φᵀy - n μ ȳᵀ, b = ȳ - μᵀβ.
One eigendecomposition ΦcᵀΦc = V diag(s) Vᵀ then gives, for every α at once,

    β(α) = V (z / (s + α)),  z = Vᵀ Φcᵀyc
    df(α) = [1 if intercept] + Σ s / (s + α)                  (trace of the hat matrix)
    RSS(α) = ycᵀyc - Σ z² (s + 2α) / (s + α)²
    GCV(α) = n · RSS(α) / (n - df(α))²

On the host the eigenvectors are left factored (:mod:`bigkernel.numerics.tridiagonal`:
``V = Q W``, Householder reflectors of the tridiagonal reduction and the eigenvectors of the
tridiagonal matrix): z and β(α) cost ``O(D²)`` each, and the dense ``V`` (``2D³`` flops, LAPACK's
back-transformation) is formed only when read (:attr:`EigenPath.eigvecs`: the posterior
variance forms its kept columns on first use). The tridiagonal matrix's eigenvectors (MRRR,
about half of the decomposition's time at D = 2048) wait too (:class:`LazyProjection`): at α
well above the rounding of the eigenvalues, β(α) = Q (T + αI)⁻¹ Qᵀb and the path's sums

    Σ z²/(s + α) = cᵀu,  Σ z²/(s + α)² = uᵀu,  u = (T + αI)⁻¹ c,  c = Qᵀb

cost ``O(D)`` per α after ``O(D²)`` for c, so a fit at one α never forms them; z (``spectrum_``,
the saved state, α near the rounding floor) forms them on first read. A fitted model's
``spectrum_`` always reads z (``PathSpectrum.shifted`` False): its curves are then the same bits
before and after a save and load, whatever was read first.

At one α not even the eigenvalues are needed: :func:`solve_primal` takes β, df, GCV and the
evidence from one Cholesky factor of G + αI (:mod:`bigkernel.numerics.primal_cholesky`; a third
of the decomposition's flops, all BLAS-3) and keeps G in a deferred :class:`SystemDecomposition`,
decomposed on first read of the spectrum, the posterior variance or the saved state. It declines
where the eigenvalues must decide (α near their rounding, a GCV score near its rounding bound).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg

from bigkernel.devices import CPU, Device, task_device, to_host
from bigkernel.errors import DataError, ParameterError
from bigkernel.numerics.evidence import EvidencePath, evidence_path
from bigkernel.numerics.primal_cholesky import solve_one_alpha
from bigkernel.numerics.sums import SufficientStats
from bigkernel.numerics.threads import PicklesWithoutLock, lapack_limit
from bigkernel.numerics.tridiagonal import FactoredEigenvectors, factored_eigh

logger = logging.getLogger(__name__)

#: default relative α grid for ``alpha="gcv"``: multiples of the mean eigenvalue of ΦcᵀΦc
GCV_GRID = np.logspace(-9, 1, 41)


#: the shifted tridiagonal route serves α only above this multiple of the most negative
#: eigenvalue of T (the sums' rounding): T + αI is then safely definite, and β(α) differs from
#: the clipped spectrum's (s < 0 counted as 0) by at most 1e-3 relative in those rounding
#: directions alone. Both are solutions of the rounded system to within its own rounding:
#: float32 features, D = 300, n = 3,000, α at 14× that eigenvalue moved predictions by 5e-4
#: between the two, float32 against float64 features by 1.3e-2 (session 13)
SHIFT_MARGIN = 1e3


class LazyProjection(PicklesWithoutLock):
    """``z = Vᵀb`` of a factored eigendecomposition whose tridiagonal eigenvectors are not formed
    (module notes): ``c = Qᵀb`` now, ``z`` on first read of :meth:`value`, and until then the
    path's sums and β at α by ``(T + αI)⁻¹ c`` (:meth:`shifted`).

    Parameters
    ----------
    vectors : FactoredEigenvectors
    b : ndarray of shape (D, k)
        The right-hand sides (``Φcᵀyc``).
    floor : float
        α at or below which :meth:`shifted` declines (``SHIFT_MARGIN`` times the most negative
        eigenvalue of T; 0 when none is negative).
    """

    def __init__(self, vectors: FactoredEigenvectors, b: np.ndarray, floor: float) -> None:
        self.vectors, self.b, self.floor = vectors, np.asarray(b, dtype=np.float64), float(floor)
        self.qtb = vectors.apply_q_transpose(self.b)
        self._z: np.ndarray | None = None
        self._lock = threading.Lock()

    @property
    def formed(self) -> bool:
        """Whether ``z`` exists (then every path quantity reads it)."""
        return self._z is not None or self.vectors.formed

    def value(self) -> np.ndarray:
        """``z = Vᵀb`` (D, k): forms the tridiagonal eigenvectors on first use."""
        with self._lock:
            if self._z is None:
                self._z = self.vectors.apply_transpose(self.b)
            return self._z

    def shifted(self, alphas: np.ndarray) -> list[np.ndarray] | None:
        """``[(T + αI)⁻¹ c for α in alphas]``, or None when ``z`` is formed (use it), an α is
        at or below :attr:`floor`, or ``T + αI`` is not positive definite."""
        alphas = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
        if self.formed or not np.all(alphas > self.floor):
            return None
        out = []
        for a in alphas:
            u = self.vectors.shifted_solve(float(a), self.qtb)
            if u is None:
                return None
            out.append(u)
        return out


class SystemDecomposition(PicklesWithoutLock):
    """The eigendecomposition of a centred system ``G`` (symmetric, float64): the eigenvalues
    (clipped at 0), the eigenvectors (dense or factored, :func:`symmetric_eigh`) and
    ``z = Vᵀb`` (or its :class:`LazyProjection`), computed now or, ``deferred``, on first read.

    A solve at one α by Cholesky (:mod:`bigkernel.numerics.primal_cholesky`) defers it: the
    fitted model's spectrum, its posterior variance and its saved state read it when asked,
    and a fit that reads none of them never pays for it. ``G`` is kept until then (and reduced
    in place by the decomposition: no second D × D array).

    Parameters
    ----------
    G : ndarray of shape (D, D)
        Exactly symmetric; owned by this object from now on.
    b : ndarray of shape (D, k)
    device : Device, default=CPU
    factored : bool, default=True
        As :func:`eigen_path`'s.
    deferred : bool, default=False
    """

    def __init__(
        self,
        G: np.ndarray | None,
        b: np.ndarray | None,
        *,
        device: Device = CPU,
        factored: bool = True,
        deferred: bool = False,
        parts: tuple | None = None,
    ) -> None:
        self._lock = threading.Lock()
        if parts is not None:  # already decomposed (:meth:`known`)
            self._input, self._parts = None, parts
            self.n_features = int(np.shape(parts[0])[0])
            return
        self._input = (G, np.asarray(b, dtype=np.float64), device, factored)
        self._parts = None
        self.n_features = int(G.shape[0])
        if not deferred:
            self.parts()

    @classmethod
    def known(cls, eigvals: np.ndarray, vectors: Any, z_source: np.ndarray | LazyProjection) -> SystemDecomposition:
        """A decomposition from its parts (a saved spectrum: ``vectors`` None)."""
        return cls(None, None, parts=(eigvals, vectors, z_source))

    @property
    def decomposed(self) -> bool:
        """Whether the eigenvalues exist (a deferred decomposition has not been read yet: False)."""
        return self._parts is not None

    def parts(self) -> tuple[np.ndarray, Any, np.ndarray | LazyProjection]:
        """``(eigenvalues clipped at 0, eigenvectors, z or its LazyProjection)``, formed once."""
        with self._lock:
            if self._parts is None:
                G, b, device, factored = self._input
                s, V = symmetric_eigh(G, device, factored=factored, overwrite=True, vectors=False)
                if isinstance(V, FactoredEigenvectors):
                    z = LazyProjection(V, b, SHIFT_MARGIN * max(-float(s.min(initial=0.0)), 0.0))
                else:
                    z = V.T @ b
                self._parts, self._input = (np.maximum(s, 0.0), V, z), None
            return self._parts


def _projection(source: np.ndarray | LazyProjection) -> np.ndarray:
    return source.value() if isinstance(source, LazyProjection) else source


def _path_sums(
    eigvals: np.ndarray, source: np.ndarray | LazyProjection, alphas: Any, shifted: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(Σ z²/(s + α), Σ z²/(s + α)²)`` per α and target, each (A, k): with ``shifted``, by the
    shifted tridiagonal solves while ``z`` is not formed and every α allows them; else from ``z``."""
    a = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
    if shifted and isinstance(source, LazyProjection):
        us = source.shifted(a)
        if us is not None:
            cross = np.stack([np.einsum("dk,dk->k", source.qtb, u) for u in us])
            return cross, np.stack([np.einsum("dk,dk->k", u, u) for u in us])
    z2 = _projection(source)[np.newaxis] ** 2
    denom = eigvals[np.newaxis, :, np.newaxis] + a[:, np.newaxis, np.newaxis]
    return (z2 / denom).sum(axis=1), (z2 / denom**2).sum(axis=1)


class _ReadsDecomposition:
    """The eigenvalues and ``z`` of a ``decomposition`` attribute (a :class:`SystemDecomposition`,
    decomposed on first read): what :class:`PathSpectrum` and :class:`EigenPath` share."""

    @property
    def eigvals(self) -> np.ndarray:
        """Eigenvalues of ΦcᵀΦc, clipped at 0, shape (D,)."""
        return self.decomposition.parts()[0]

    @property
    def z_source(self) -> np.ndarray | LazyProjection:
        """``Vᵀ Φcᵀ yc`` (D, k), or what forms it when read."""
        return self.decomposition.parts()[2]

    @property
    def z(self) -> np.ndarray:
        """``Vᵀ Φcᵀ yc``, shape (D, k) (formed on first read when the path is lazy)."""
        return _projection(self.z_source)


@dataclass(frozen=True)
class PathSpectrum(_ReadsDecomposition):
    """What df(α), RSS(α) and GCV(α) need for any α: the eigenvalues and Vᵀ Φcᵀ yc, no eigenvectors.

    O(D·k) numbers, kept by the fitted primal estimators (``spectrum_``) so that the GCV and df
    curves around any α cost no pass over the data and no new eigendecomposition.
    """

    decomposition: SystemDecomposition  # eigenvalues and z (deferred until read after a Cholesky solve)
    yy: np.ndarray  # (k,) ycᵀyc
    n: float
    fit_intercept: bool
    eps: float = 1e-13  # relative precision of the sums (see sums.sums_precision)
    # the fit's own α by (T + αI)⁻¹ while z is not formed; False (a fitted model's
    # ``spectrum_``): always z, so its curves do not depend on what was read before (bitwise
    # the same before and after save/load)
    shifted: bool = False

    def df(self, alphas: np.ndarray) -> np.ndarray:
        """Effective degrees of freedom (trace of the hat matrix), shape (A,)."""
        s = self.eigvals
        return float(self.fit_intercept) + (s / (s + np.asarray(alphas)[:, np.newaxis])).sum(axis=1)

    def rss(self, alphas: np.ndarray) -> np.ndarray:
        """Training residual sum of squares from the sums, shape (A, k):
        ``ycᵀyc − Σ z² (s + 2α)/(s + α)²``, the sum split as ``Σ z²/(s + α) + α Σ z²/(s + α)²``."""
        a = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
        cross, norm2 = _path_sums(self.eigvals, self.z_source, a, self.shifted)
        # clip: RSS is a difference of sums and may round just below zero
        return np.maximum(self.yy[np.newaxis, :] - (cross + a[:, np.newaxis] * norm2), 0.0)

    def rss_error(self, alphas: np.ndarray) -> np.ndarray:
        """Rounding-error bound of :meth:`rss`: eps·(yᵀy + 2|βᵀΦᵀy| + s_max‖β‖²), shape (A, k).

        RSS is a difference of large sums; with small α, ‖β‖ is large and that difference can
        be pure rounding (even negative), which would make the worst α look best.
        """
        cross, norm2 = _path_sums(self.eigvals, self.z_source, alphas, self.shifted)
        s_max = float(self.eigvals.max(initial=0.0))
        return self.eps * (self.yy[np.newaxis, :] + 2 * cross + s_max * norm2)

    def gcv(self, alphas: np.ndarray) -> np.ndarray:
        """Generalized cross-validation score n·RSS/(n - df)², shape (A, k).

        inf where df >= n, and where the RSS from the sums is not above 10× its rounding error
        (see :meth:`rss_error`): such a score is not a measurement and must never be chosen.
        """
        resid_df = (self.n - self.df(alphas))[:, np.newaxis]
        safe = np.where(resid_df > 0, resid_df, 1.0)
        rss = self.rss(alphas)
        reliable = (resid_df > 0) & (rss > 10 * self.rss_error(alphas))
        return np.where(reliable, self.n * rss / safe**2, np.inf)

    def evidence(self, alphas: np.ndarray) -> EvidencePath:
        """The evidence of every α (:mod:`bigkernel.numerics.evidence`) from the sums.

        ``ycᵀ(ΦcΦcᵀ + αI)⁻¹yc = (ycᵀyc − Σ z²/(s + α)) / α``, a difference of sums like RSS:
        NaN (never chosen) where it is not above 10× its rounding error.
        """
        a = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
        explained = _path_sums(self.eigvals, self.z_source, a, self.shifted)[0]
        num = self.yy[np.newaxis, :] - explained
        err = self.eps * (self.yy[np.newaxis, :] + explained)
        quad = np.where(num > 10 * err, num, np.nan) / a[:, None]
        return evidence_path(self.eigvals, quad, a, self.n, self.fit_intercept)


@dataclass(frozen=True)
class EigenPath(_ReadsDecomposition):
    """Eigendecomposition of a (centred) primal system, reusable for any α.

    ``vectors`` is the dense ``V`` or, from the host's tridiagonal route, a
    :class:`~bigkernel.numerics.tridiagonal.FactoredEigenvectors` (``V = Q W`` never formed
    unless :attr:`eigvecs` is read): β(α), df, GCV and the evidence need only ``V x`` and
    ``Vᵀb``.
    """

    decomposition: SystemDecomposition  # eigenvalues, V and z (deferred until read after a Cholesky solve)
    mean_phi: np.ndarray  # (D,) μ (zeros without intercept)
    mean_y: np.ndarray  # (k,) ȳ (zeros without intercept)
    yy: np.ndarray  # (k,) ycᵀyc
    n: float
    fit_intercept: bool
    eps: float = 1e-13  # relative precision of the sums (see sums.sums_precision)

    @property
    def vectors(self) -> np.ndarray | FactoredEigenvectors:
        """``V`` (D, D), dense or factored."""
        return self.decomposition.parts()[1]

    @property
    def n_features(self) -> int:
        """D (known without the decomposition)."""
        return self.decomposition.n_features

    @property
    def eigvecs(self) -> np.ndarray:
        """``V``, shape (D, D) (formed on first use when factored: ``2D³`` flops)."""
        v = self.vectors
        return v.dense() if isinstance(v, FactoredEigenvectors) else v

    def rotate(self, X: np.ndarray) -> np.ndarray:
        """``V X`` for X of shape (D, m), without forming ``V`` when it is factored."""
        v = self.vectors
        return v.apply(X) if isinstance(v, FactoredEigenvectors) else v @ X

    def eigvec_columns(self, keep: np.ndarray) -> np.ndarray:
        """The eigenvectors selected by ``keep`` (mask or indices), shape (D, r), C order."""
        v = self.vectors
        return v.columns(keep) if isinstance(v, FactoredEigenvectors) else np.ascontiguousarray(v[:, keep])

    def coef(self, alpha: float) -> np.ndarray:
        """β(α), shape (D, k): ``Q (T + αI)⁻¹ Qᵀb`` while the path is lazy and α allows it."""
        src = self.z_source
        if isinstance(src, LazyProjection):
            u = src.shifted(np.array([alpha]))
            if u is not None:
                return src.vectors.apply_q(u[0])
        return self.rotate(self.z / (self.eigvals + alpha)[:, np.newaxis])

    def intercept(self, coef: np.ndarray) -> np.ndarray:
        """b = ȳ - μᵀβ, shape (k,)."""
        return self.mean_y - self.mean_phi @ coef

    def spectrum(self, shifted: bool = False) -> PathSpectrum:
        """The eigenvector-free part: df, RSS and GCV for any α (``shifted``: by the shifted
        tridiagonal solves while z is not formed, for the fit's own α; see :class:`PathSpectrum`)."""
        return PathSpectrum(self.decomposition, self.yy, self.n, self.fit_intercept, self.eps, shifted)

    # the path's own df/RSS/GCV (the solve's): by the shifted solves while z is not formed
    def df(self, alphas: np.ndarray) -> np.ndarray:
        """Effective degrees of freedom (trace of the hat matrix), shape (A,)."""
        return self.spectrum(shifted=True).df(alphas)

    def rss(self, alphas: np.ndarray) -> np.ndarray:
        """Training residual sum of squares from the sums, shape (A, k)."""
        return self.spectrum(shifted=True).rss(alphas)

    def rss_error(self, alphas: np.ndarray) -> np.ndarray:
        """Rounding-error bound of :meth:`rss` (see :meth:`PathSpectrum.rss_error`), shape (A, k)."""
        return self.spectrum(shifted=True).rss_error(alphas)

    def gcv(self, alphas: np.ndarray) -> np.ndarray:
        """GCV score n·RSS/(n - df)², inf where unreliable (:meth:`PathSpectrum.gcv`), shape (A, k)."""
        return self.spectrum(shifted=True).gcv(alphas)


def centred_system(
    stats: SufficientStats, fit_intercept: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """(G, b, yy, μ, ȳ, n) of the single set in ``stats``, centred if ``fit_intercept``."""
    if stats.n.shape[0] != 1:
        raise ValueError("centred_system expects statistics of one set; use stats.select(i)")
    n = float(stats.n[0])
    if n <= 0:
        raise DataError("no rows to fit: the training set is empty (or all weights are zero)")
    G, b, yy = stats.gram[0], stats.phi_y[0], stats.sum_yy[0]
    D, k = b.shape
    if not fit_intercept:
        return G, b, yy, np.zeros(D), np.zeros(k), n
    mu, ybar = stats.sum_phi[0] / n, stats.sum_y[0] / n
    return G - n * np.outer(mu, mu), b - n * np.outer(mu, ybar), yy - n * ybar**2, mu, ybar, n


#: above this many features the eigendecomposition of a GPU fit runs on the GPU (below it, the
#: host's LAPACK is as fast as the copies there and back)
EIGH_DEVICE_MIN_FEATURES = 8192


def symmetric_eigh(
    G: np.ndarray, device: Device = CPU, *, factored: bool = False, overwrite: bool = False, vectors: bool = True
) -> tuple[np.ndarray, np.ndarray | FactoredEigenvectors]:
    """Eigenvalues and eigenvectors of the symmetric float64 matrix ``G`` (host arrays).

    On the host (on the BLAS threads other processes leave idle:
    :func:`~bigkernel.numerics.threads.lapack_limit`): LAPACK ``evd``, or with ``factored`` the
    tridiagonal route :func:`~bigkernel.numerics.tridiagonal.factored_eigh` (the eigenvectors
    as reflectors and the tridiagonal matrix's eigenvectors; ``overwrite`` lets it reduce ``G``
    in place; ``vectors=False`` leaves the tridiagonal eigenvectors to be formed when read). If
    ``device`` is a GPU and ``G`` has more than :data:`EIGH_DEVICE_MIN_FEATURES`
    rows: ``xp.linalg.eigh`` in float64 on that GPU, dense ``V`` (the fit's
    :class:`~bigkernel.devices.Device`, taken by :func:`~bigkernel.devices.task_device`: in a
    bootstrap task on a dask-cuda worker, that worker's GPU).
    """
    dev = task_device(device)
    if G.shape[0] > EIGH_DEVICE_MIN_FEATURES:
        if dev.is_gpu:
            with dev.activate():
                s, V = dev.xp.linalg.eigh(dev.asarray(G))
                return to_host(s), to_host(V)
    if factored:
        return factored_eigh(G, overwrite=overwrite, vectors=vectors)
    with lapack_limit(G.shape[0]):
        return scipy.linalg.eigh(G, driver="evd", check_finite=False, overwrite_a=overwrite)


def eigen_path(
    stats: SufficientStats,
    fit_intercept: bool = True,
    eps: float = 1e-13,
    device: Device = CPU,
    factored: bool = True,
) -> EigenPath:
    """Eigendecompose the centred system of ``stats`` (one set) once, for any α.

    ``eps`` is the relative precision of the sums (``sums.sums_precision(dtype)``); ``device``
    where a large system is decomposed (:func:`symmetric_eigh`); ``factored`` (default) keeps
    the eigenvectors as the tridiagonal reduction's factors on the host (``V`` formed only when
    read: :attr:`EigenPath.eigvecs`; the tridiagonal eigenvectors too, :class:`LazyProjection`),
    False forms them (LAPACK ``evd``).
    """
    G, b, yy, mu, ybar, n = centred_system(stats, fit_intercept)
    decomposition = SystemDecomposition(symmetrized(G), b, device=device, factored=factored)
    return EigenPath(decomposition, mu, ybar, np.maximum(yy, 0.0), n, fit_intercept, eps)


def symmetrized(G: np.ndarray) -> np.ndarray:
    """``(G + Gᵀ)/2``, a new array: float32 block products are symmetric only to rounding."""
    S = G + G.T
    S *= 0.5
    return S


#: the ``alpha`` words: a default grid scored by GCV, or by the evidence (maximum marginal likelihood)
ALPHA_MODES = ("gcv", "evidence")


def resolve_alphas(alpha, path: EigenPath | None = None) -> tuple[np.ndarray, bool]:
    """Turn an ``alpha`` parameter into a grid; returns (alphas, select).

    ``alpha`` may be a positive number, a sequence of positive numbers (selected by GCV),
    ``"gcv"`` or ``"evidence"`` (a default log grid relative to the mean eigenvalue of the
    centred system, scored by GCV resp. the evidence).
    """
    if isinstance(alpha, str):
        if alpha not in ALPHA_MODES:
            raise ParameterError(f"alpha must be a positive number, a list of them, 'gcv' or 'evidence', got {alpha!r}")
        if path is None:
            return GCV_GRID.copy(), True
        scale = max(float(path.eigvals.mean()), np.finfo(float).tiny)
        return GCV_GRID * scale, True
    arr = np.atleast_1d(np.asarray(alpha, dtype=object))
    try:
        arr = arr.astype(np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"alpha must be a positive number, a list of them or 'gcv', got {alpha!r}") from None
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr) & (arr > 0)):
        raise ParameterError(f"alpha must be positive and finite, got {alpha!r}; use e.g. alpha=1.0e-3")
    return arr, arr.size > 1


@dataclass(frozen=True)
class PrimalSolution:
    """Coefficients for the chosen α and the whole path's diagnostics."""

    coef: np.ndarray  # (D, k)
    intercept: np.ndarray  # (k,)
    alpha: float
    alphas: np.ndarray  # (A,)
    df: np.ndarray  # (A,)
    gcv: np.ndarray  # (A, k)
    spectrum: PathSpectrum | None = None  # df and GCV at any other α
    evidence: EvidencePath | None = None  # the evidence along ``alphas``
    path: EigenPath | None = None  # the eigenvectors (the posterior variance needs them)


def best_index(scores: np.ndarray, alphas: np.ndarray) -> int:
    """Index of the smallest finite score; if none is finite, the largest α (safest), logged."""
    finite = np.isfinite(scores)
    if finite.any():
        return int(np.argmin(np.where(finite, scores, np.inf)))
    logger.warning(
        "no α on the grid has a score above its rounding error; using the largest, %.3g", float(np.max(alphas))
    )
    return int(np.argmax(alphas))


def solve_primal(
    stats: SufficientStats,
    alpha="gcv",
    fit_intercept: bool = True,
    eps: float = 1e-13,
    device: Device = CPU,
    *,
    decompose: bool = False,
) -> PrimalSolution:
    """Solve the ridge problem of ``stats`` for ``alpha`` (number, list, ``"gcv"`` or
    ``"evidence"``).

    When several α are given the one with the smallest GCV (averaged over targets, as
    scikit-learn's RidgeCV does by default) is chosen, among scores above their rounding error;
    ``alpha="evidence"`` chooses the largest profile evidence (summed over targets).
    ``device``: where a system of more than 8192 features is decomposed (:func:`symmetric_eigh`).
    At one α the solve is a Cholesky factor, the eigendecomposition deferred to first read,
    unless ``decompose`` (the caller reads it at once: the float32 check of ``dtype="auto"``).
    """
    resolve_alphas(alpha)  # validate before the eigendecomposition
    if not decompose and not isinstance(alpha, str) and np.size(alpha) == 1:
        sol = _solve_by_cholesky(stats, float(np.ravel(alpha)[0]), fit_intercept, eps, device)
        if sol is not None:
            return sol
    path = eigen_path(stats, fit_intercept, eps, device)
    alphas, select = resolve_alphas(alpha, path)
    gcv = path.gcv(alphas)
    spectrum = path.spectrum()  # the model's: z on first read
    ev = path.spectrum(shifted=True).evidence(alphas)
    if isinstance(alpha, str) and alpha == "evidence":
        best = ev.best()
    else:
        best = best_index(gcv.mean(axis=1), alphas) if select else 0
    coef = path.coef(float(alphas[best]))
    return PrimalSolution(
        coef, path.intercept(coef), float(alphas[best]), alphas, path.df(alphas), gcv, spectrum, ev, path
    )


def _solve_by_cholesky(
    stats: SufficientStats, alpha: float, fit_intercept: bool, eps: float, device: Device
) -> PrimalSolution | None:
    """:func:`solve_primal` at one α from one Cholesky factor
    (:func:`~bigkernel.numerics.primal_cholesky.solve_one_alpha`), the eigendecomposition
    deferred to first read (``spectrum_``, the posterior variance, the saved state); None where
    the eigenvalue route must serve: α near G's rounding or too small for the factor's trace,
    a GPU decomposition (D > :data:`EIGH_DEVICE_MIN_FEATURES`), or a GCV score whose
    reliability (:meth:`PathSpectrum.gcv`) needs the largest eigenvalue rather than its bound."""
    G, b, yy, mu, ybar, n = centred_system(stats, fit_intercept)
    if G.shape[0] > EIGH_DEVICE_MIN_FEATURES and task_device(device).is_gpu:
        return None
    G = symmetrized(G)
    one = solve_one_alpha(G, b, alpha, SHIFT_MARGIN)
    if one is None:
        return None
    yy = np.maximum(yy, 0.0)
    df = float(fit_intercept) + one.df_sum
    rss = np.maximum(yy - (one.cross + alpha * one.norm2), 0.0)
    # PathSpectrum.gcv's rounding test with ‖G‖_F for s_max: passing it, the test with s_max passes
    rss_error = eps * (yy + 2 * one.cross + one.norm_bound * one.norm2)
    resid_df = n - df
    if resid_df > 0 and not np.all(rss > 10 * rss_error):
        return None
    gcv = np.where(resid_df > 0, n * rss / (resid_df if resid_df > 0 else 1.0) ** 2, np.inf)
    # the evidence's quadratic form, NaN where it is rounding (as PathSpectrum.evidence)
    num = yy - one.cross
    quad = np.where(num > 10 * eps * (yy + one.cross), num, np.nan) / alpha
    n_dims = n - 1.0 if fit_intercept else n
    log_det = one.log_det + (n_dims - G.shape[0]) * np.log(alpha)
    alphas = np.array([alpha])
    ev = evidence_path(None, quad[np.newaxis], alphas, n, fit_intercept, log_det=np.array([log_det]))
    decomposition = SystemDecomposition(G, b, device=device, deferred=True)
    path = EigenPath(decomposition, mu, ybar, yy, n, fit_intercept, eps)
    coef = one.coef
    return PrimalSolution(
        coef, path.intercept(coef), alpha, alphas, np.array([df]), gcv[np.newaxis], path.spectrum(), ev, path
    )


@dataclass(frozen=True)
class PrimalExpansion:
    """Predictions ``φ(X)β + b`` of a fitted primal model on numpy blocks (the dual path's
    counterpart is :class:`bigkernel.numerics.gram_tiles.KernelExpansion`).

    Parameters
    ----------
    fmap : FeatureMap or NystroemMap
        Anything with ``transform_unscaled(X, dtype)`` and ``scale``.
    coef : ndarray of shape (n_components, n_outputs)
    intercept : ndarray of shape (n_outputs,)
    dtype : {"float64", "float32"}
        Dtype of the features.
    block_rows : int
        Rows featurised at a time (bounds the feature block's memory).
    """

    fmap: Any
    coef: np.ndarray
    intercept: np.ndarray
    dtype: str = "float64"
    block_rows: int = 8192

    @property
    def n_outputs(self) -> int:
        """Number of predicted columns."""
        return int(self.coef.shape[1])

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """Float64 predictions of shape (n_rows, n_outputs)."""
        out = np.empty((X.shape[0], self.coef.shape[1]), dtype=np.float64)
        beta = self.coef * self.fmap.scale
        for lo in range(0, X.shape[0], self.block_rows):
            phi = self.fmap.transform_unscaled(X[lo : lo + self.block_rows], self.dtype)
            # β can be large with cancelling terms: keep the product in float64 even for float32 φ
            out[lo : lo + self.block_rows] = phi @ beta + self.intercept
        return out


@dataclass(frozen=True)
class FeatureBlocks:
    """The features ``φ(X)`` of a map on numpy blocks, scaled (``φ(x)ᵀφ(x') ≈ k(x, x')``): the
    callable behind ``transform`` (numpy, and per chunk of a dask array).

    Parameters
    ----------
    fmap : FeatureMap or NystroemMap
        Anything with ``transform_unscaled(X, dtype)``, ``scale`` and ``n_components``.
    dtype : {"float64", "float32"}
        Dtype of the features (and of the output).
    block_bytes : int
        Bytes of features computed at a time (bounds the temporaries beside the output).
    """

    fmap: Any
    dtype: str = "float64"
    block_bytes: int = 64 * 2**20

    @property
    def n_outputs(self) -> int:
        """Number of feature columns D."""
        return int(self.fmap.n_components)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """Features of shape (n_rows, D) in ``dtype``."""
        dtype = np.dtype(self.dtype)
        out = np.empty((X.shape[0], self.n_outputs), dtype=dtype)
        rows = max(1, self.block_bytes // (self.n_outputs * dtype.itemsize))
        scale = dtype.type(self.fmap.scale)
        for lo in range(0, X.shape[0], rows):
            phi = self.fmap.transform_unscaled(X[lo : lo + rows], dtype)
            np.multiply(phi, scale, out=out[lo : lo + rows])
        return out
