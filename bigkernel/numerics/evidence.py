"""The evidence (log marginal likelihood) of kernel ridge read as a Gaussian process (layer 1).

The Bayesian reading (kernel-construction post): prior ``f ~ GP(0, σ²k)``, noise variance
``σ²α``, so ``y ~ N(0, σ²(K + αI))`` and the ridge fit is the posterior mean. The log evidence

    log p(y | α, σ²) = −½ [yᵀ(K + αI)⁻¹y / σ² + log|K + αI| + N log 2πσ²]

needs, for every α, one quadratic form and one log-determinant, both from quantities the fit
already has:

* primal (``K = ΦΦᵀ``, D features): ``log|ΦΦᵀ + αI| = Σⱼ log(sⱼ + α) + (N − D) log α`` and
  ``yᵀ(ΦΦᵀ + αI)⁻¹y = (yᵀy − Σⱼ zⱼ²/(sⱼ + α)) / α`` with ``sⱼ`` the eigenvalues of ΦᵀΦ and
  ``z = VᵀΦᵀy`` — :meth:`bigkernel.numerics.primal.PathSpectrum.evidence`;
* dual: the eigenvalues of the (centred) Gram matrix and ``yᵀa(α)`` of the dual solution; or,
  without the eigenvalues (large n), one Cholesky factor of ``K + αI`` per α
  (:func:`cholesky_log_det`). The quadratic form, and so ``σ̂²`` below, needs neither: it is
  ``ycᵀa(α)`` of the solution the fit already has, at any n.

**Intercept** (``fit_intercept=True``): the unpenalised intercept is a flat prior of unit
density on ``b``. Integrating it out, ``∫ N(y; b1 + f, σ²αI) db``, leaves the centred problem
on the ``N = n − 1`` dimensions orthogonal to ``1`` times ``n^(−1/2)``:

    log p(y) = −½ [ycᵀ(K̄ + αI)⁻¹yc / σ² + log|K̄ + αI|₁⊥ + (n − 1) log 2πσ² + log n]

with ``K̄ = HKH`` (``ΦcΦcᵀ`` in the primal) and the determinant over ``1⊥``. This is the
restricted (REML) likelihood; it is the limit of the evidence of the kernel ``k + c`` plus
``½ log 2πσ²c`` as ``c → ∞``. Without intercept, ``N = n`` and there is no ``log n`` term.

**Restricted determinant from a Cholesky factor**: with ``C = K + αI`` and ``u = 1/√n``,
``|C|₁⊥ = |C| · uᵀC⁻¹u`` (the Schur complement of ``C`` in an orthonormal basis ``[Q, u]``), so
``log|K̄ + αI|₁⊥ = 2 Σ log Lᵢᵢ + log(1ᵀC⁻¹1) − log n`` with ``C = LLᵀ``.

**Signal variance** σ²: for each α its maximum-evidence value ``σ̂² = yᵀ(K + αI)⁻¹y / N``
(closed form; over ``1⊥`` with intercept), which gives the profile evidence
``−½ [N (log 2πσ̂² + 1) + log|K + αI| (+ log n)]``. The estimators report that profile value
and choose ``alpha="evidence"`` by it; :meth:`EvidencePath.log_likelihood` gives the value at
any fixed σ² (σ² = 1 is scikit-learn's ``GaussianProcessRegressor`` at the same kernel and α).

Sample weights ``c`` are read as repeated rows (``n = Σc``), as everywhere else in bigkernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

__all__ = ["EvidencePath", "cholesky_log_det", "evidence_path", "log_det_path"]

_LOG_2PI = float(np.log(2 * np.pi))


def log_det_path(eigvals: np.ndarray, alphas: np.ndarray, n_dims: float) -> np.ndarray:
    """``log|M + αI|`` over ``n_dims`` dimensions when ``M``'s non-trivial eigenvalues are
    ``eigvals`` (the others are 0), for every α: ``Σ log(λ + α) + (n_dims − len(λ)) log α``.

    Exact for the primal (``n_dims = n``, λ the eigenvalues of ΦᵀΦ: Sylvester's identity) and for
    a dual spectrum that includes the intercept's zero eigenvalue (it adds ``log α``, removed by
    ``n_dims = n − 1``). Shape (A,).
    """
    lam = np.maximum(np.asarray(eigvals, dtype=np.float64), 0.0)
    a = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
    return np.log(lam[None, :] + a[:, None]).sum(axis=1) + (float(n_dims) - lam.size) * np.log(a)


@dataclass(frozen=True)
class EvidencePath:
    """Quadratic forms and log-determinants along an α grid: the evidence at any σ².

    Attributes
    ----------
    alphas : ndarray of shape (A,)
    quad : ndarray of shape (A, k)
        ``ycᵀ(K̄ + αI)⁻¹yc`` per α and target (NaN where it is below its rounding error).
    log_det : ndarray of shape (A,)
        ``log|K̄ + αI|`` over the ``n_dims`` dimensions; NaN where it was not computed (the
        exact path beyond its eigenvalue limit: ``sigma2`` is known, the evidence value is not).
    n : float
        Rows (``Σc`` with sample weights).
    fit_intercept : bool
        The intercept integrated out under a flat prior (see the module docstring).
    """

    alphas: np.ndarray
    quad: np.ndarray
    log_det: np.ndarray
    n: float
    fit_intercept: bool

    @property
    def n_dims(self) -> float:
        """Dimensions of the likelihood: ``n − 1`` with an intercept, else ``n``."""
        return self.n - 1.0 if self.fit_intercept else self.n

    def sigma2(self) -> np.ndarray:
        """Maximum-evidence signal variance ``σ̂² = quad / n_dims`` per α and target, (A, k)."""
        return self.quad / max(self.n_dims, 1.0)

    def log_likelihood(self, sigma2: float | np.ndarray | None = None) -> np.ndarray:
        """Log evidence per α and target, shape (A, k).

        ``sigma2=None``: the profile value at ``σ̂²(α)`` (maximum over σ²); a number (or an
        array broadcasting to (A, k)): at that fixed signal variance. ``-inf`` where the
        quadratic form is not reliable (below its rounding error); NaN where the
        log-determinant was not computed.
        """
        N = self.n_dims
        const = 0.5 * np.log(self.n) if self.fit_intercept else 0.0
        ld = self.log_det[:, None]
        if sigma2 is None:
            s2 = self.sigma2()
            with np.errstate(divide="ignore", invalid="ignore"):
                out = -0.5 * (N * (_LOG_2PI + np.log(s2) + 1.0) + ld) - const
        else:
            s2 = np.asarray(sigma2, dtype=np.float64)
            out = -0.5 * (self.quad / s2 + ld + N * (_LOG_2PI + np.log(s2))) - const
        out = np.where(np.isfinite(out) & (self.quad > 0), out, -np.inf)
        return np.where(np.isnan(ld), np.nan, out)

    def best(self) -> int:
        """Index of the α of largest profile evidence, summed over targets (each with its own
        σ̂²: targets are independent given α); the largest α when none is reliable (or known)."""
        total = self.log_likelihood().sum(axis=1)
        if not np.isfinite(total).any():
            return int(np.argmax(self.alphas))
        return int(np.argmax(np.where(np.isfinite(total), total, -np.inf)))


def evidence_path(
    eigvals: np.ndarray | None,
    quad: np.ndarray,
    alphas: np.ndarray,
    n: float,
    fit_intercept: bool,
    log_det: np.ndarray | None = None,
) -> EvidencePath:
    """The :class:`EvidencePath` of a spectrum (eigenvalues of ΦcᵀΦc, or of the centred Gram
    matrix including the intercept's zero) and the quadratic forms ``quad`` (A, k).

    Without ``eigvals``, ``log_det`` (A,) gives the log-determinants (e.g. from
    :func:`cholesky_log_det`); with neither, they are NaN (``sigma2`` is still known)."""
    alphas = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
    n_dims = n - 1.0 if fit_intercept else float(n)
    quad = np.asarray(quad, dtype=np.float64).reshape(alphas.size, -1)
    if eigvals is not None:
        ld = log_det_path(eigvals, alphas, n_dims)
    elif log_det is not None:
        ld = np.asarray(log_det, dtype=np.float64).reshape(alphas.size)
    else:
        ld = np.full(alphas.size, np.nan)
    return EvidencePath(alphas, quad, ld, float(n), bool(fit_intercept))


def cholesky_log_det(
    K: np.ndarray, alpha: float, fit_intercept: bool, sample_weight: np.ndarray | None = None
) -> float:
    """``log|K̄ + αI|`` over the likelihood's dimensions from one Cholesky factor — the value
    :func:`log_det_path` gives from the centred spectrum, without an eigendecomposition.

    ``K`` is the dense (uncentred) Gram matrix, not modified (a factor of the same size is
    allocated). With weights ``c > 0`` (repeated rows, ``n = Σc``) the factor is of
    ``C = K + α diag(1/c)``: ``log|diag(s) K diag(s) + αI| = log|C| + Σ log c``, the intercept's
    direction is ``s = √c`` (``sᵀM⁻¹s/sᵀs = 1ᵀC⁻¹1/Σc``) and the ``Σc − n`` repeated
    dimensions add ``log α`` each (see the module docstring). NaN when ``C`` is not positive
    definite (an indefinite kernel at a small α).
    """
    n = K.shape[0]
    c = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    C = np.array(K, dtype=np.float64, copy=True)
    C[np.diag_indices(n)] += alpha if c is None else alpha / c
    try:
        L = scipy.linalg.cholesky(C, lower=True, overwrite_a=True, check_finite=False)
    except np.linalg.LinAlgError:
        return float("nan")
    n_eff = float(n) if c is None else float(c.sum())
    out = 2.0 * float(np.log(np.diag(L)).sum())
    if c is not None:
        out += float(np.log(c).sum()) + (n_eff - n) * float(np.log(alpha))
    if fit_intercept:
        v = scipy.linalg.cho_solve((L, True), np.ones(n), check_finite=False)
        out += float(np.log(v.sum())) - float(np.log(n_eff))
    return out
