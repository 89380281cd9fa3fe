"""Dual kernel ridge by preconditioned CG over a Gram matvec (layer 1: numpy only).

Objective (scikit-learn's scaling): Σ (yᵢ − f(xᵢ))² + α‖f‖², f(x) = Σ aᵢ k(x, xᵢ) + b.

* Without intercept: ``(K + αI) a = y``.
* With an unpenalized intercept (the kernel-regression-with-bias post): centre in feature space,
  ``K̄ = HKH`` with ``H = I − 11ᵀ/n`` applied to vectors, never formed:
  ``(K̄ + αI) a = Hy``. The solution has ``1ᵀa = 0`` (so ``Ha = a``), and the centred
  prediction ``k̄(x)ᵀa + ȳ`` with ``k̄(x) = H(k(x) − K1/n)`` reduces to ``k(x)ᵀa + b`` with
  ``b = ȳ − 1ᵀK a / n``: one more matvec gives ``b`` and the true final residual.

Every target and every α is a column of one CG run (``shift = α`` per column), so each Gram
matvec is shared. With a low-rank factor ``K ≈ LLᵀ`` the preconditioner is
``(L̃L̃ᵀ + αI)⁻¹`` per column, ``L̃ = HL`` for the centred system (``HKH ≈ (HL)(HL)ᵀ``).

Degrees of freedom ``df(α) = [1] + tr K̄(K̄ + αI)⁻¹`` (the 1 for the intercept):

* exact from the eigenvalues of ``K̄`` when the caller has them (small n);
* else a Hutchinson estimate with the preconditioner as control variate: the low-rank part
  ``Σ λ/(λ + α)`` (eigenvalues of ``L̃ᵀL̃``) is exact, and Rademacher probes ``z`` estimate
  only the remainder ``α zᵀ[(P̃ + αI)⁻¹ − (K̄ + αI)⁻¹] z`` (``P̃ = L̃L̃ᵀ``), whose variance is
  far smaller than that of the plain estimator. The probes ride in the same CG run with a
  looser tolerance: a quadratic form's error is the square of the residual's.

GCV(α) = n·RSS(α)/(n − df(α))² with ``RSS(α) = α²‖a(α)‖²`` (from ``(K̄ + αI)a = Hy``), so a
list of α is scored without extra passes; the α with the smallest GCV (mean over targets) wins.

Sample weights ``c ≥ 0`` (objective ``Σ cᵢ (yᵢ − f(xᵢ))² + α‖f‖²``; integer ``c`` is the fit on
the data with row ``i`` repeated ``cᵢ`` times, e.g. bootstrap counts): with ``s = √c`` the
problem is the unweighted one for ``K̃ = diag(s) K diag(s)``, targets ``s ⊙ y`` and the
intercept's regressor ``s`` instead of ``1`` — so centring becomes the projection
``H_s = I − s sᵀ/Σc`` and ``a = s ⊙ u`` for the solution ``u`` of the transformed system.
``n`` becomes ``Σc`` in GCV (that of the repeated data), and ``RSS = α²‖u‖²`` still holds.

Array namespaces: ``Y``, the factor and ``matvec`` may live on a device (CuPy; array-api-strict
in CI): the CG vectors stay there, the per-α read-outs (RSS, df, GCV) come to the host, and the
returned coefficients and intercept are host numpy arrays (a fitted model is device-free).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bigkernel.errors import ParameterError
from bigkernel.numerics.cg import conjugate_gradient
from bigkernel.numerics.evidence import EvidencePath, evidence_path
from bigkernel.numerics.namespace import as_namespace_array, device_of, is_numpy, namespace, to_host
from bigkernel.numerics.precond import LowRankPreconditioner

logger = logging.getLogger(__name__)

__all__ = ["PROBE_TOL", "DualSolution", "describe_df", "solve_dual"]

#: CG tolerance of the Hutchinson probes: the trace estimate's error is ~ PROBE_TOL²·n
PROBE_TOL = 1e-3


def describe_df(df: float | None, stderr: float | None = None) -> str:
    """``"df=12.3"`` (exact), ``"df=12.3±0.4"`` (estimated) or ``"df not computed"``.

    For logs and reports: what is known about df, never ``nan`` (df is NaN when no probes ran;
    its standard error is 0 when df is exact, NaN when it is not estimated).
    """
    if df is None or not np.isfinite(df):
        return "df not computed"
    if stderr is None or not np.isfinite(stderr) or stderr <= 0:
        return f"df={df:.1f}"
    return f"df={df:.1f}±{stderr:.1f}"


@dataclass(frozen=True)
class DualSolution:
    """Result of :func:`solve_dual` at the chosen α, plus the whole α path's diagnostics.

    Attributes
    ----------
    coef : ndarray of shape (n, k)
        Dual coefficients ``a``.
    intercept : ndarray of shape (k,)
    alpha : float
    alphas : ndarray of shape (A,)
    df, df_stderr : ndarray of shape (A,)
        Degrees of freedom and the standard error of their estimate (0 when exact, NaN when
        not computed).
    df_method : str
        ``"exact"``, ``"hutchinson"`` or ``"none"``.
    gcv : ndarray of shape (A, k)
    n_iter : ndarray of shape (k,)
        CG iterations of each target at the chosen α.
    residual : ndarray of shape (k,)
        True relative residual of the returned solution, ``‖Hy − (K̄ + αI)a‖ / ‖Hy‖``.
    converged : bool
        Every target column at every α reached ``tol``.
    n_matvec : int
        Gram matvecs used (CG plus the final one).
    info : dict
    """

    coef: np.ndarray
    intercept: np.ndarray
    alpha: float
    alphas: np.ndarray
    df: np.ndarray
    df_stderr: np.ndarray
    df_method: str
    gcv: np.ndarray
    n_iter: np.ndarray
    residual: np.ndarray
    converged: bool
    n_matvec: int
    info: dict = field(default_factory=dict)
    #: quadratic forms at every α (so ``sigma2``) always; log-determinants from the eigenvalues
    #: or the caller's ``log_dets``, else NaN
    evidence: EvidencePath | None = None


def _centre(V, s=None):
    """``H V`` with ``H = I − 11ᵀ/n``, or ``H_s V = V − s (sᵀV)/(sᵀs)`` for weights ``s = √c``
    (any array namespace)."""
    xp = namespace(V)
    if s is None:
        return V - xp.mean(V, axis=0)
    return V - s[:, None] * ((s @ V) / (s @ s))[None, :]


def _col_dot(A, B):
    """``Σ_i A_ij B_ij`` per column, as a host array."""
    xp = namespace(A)
    if is_numpy(xp):
        return np.einsum("ij,ij->j", A, B)
    return to_host(xp.sum(A * B, axis=0))


def _check_sample_weight(sample_weight, n: int) -> np.ndarray | None:
    if sample_weight is None:
        return None
    c = np.asarray(sample_weight, dtype=np.float64)
    if c.shape != (n,) or not np.all(np.isfinite(c)) or np.any(c < 0) or not c.sum() > 0:
        raise ParameterError(
            f"sample_weight must be finite, >= 0, not all 0, of shape ({n},); found shape "
            f"{c.shape}" + (f", min {c.min():.3g}, sum {c.sum():.3g}" if c.size else "")
        )
    return np.sqrt(c)


def solve_dual(
    matvec: Callable[[np.ndarray], np.ndarray],
    Y: np.ndarray,
    alphas: np.ndarray,
    *,
    fit_intercept: bool = True,
    factor: np.ndarray | None = None,
    eigenvalues: np.ndarray | None = None,
    n_probes: int = 0,
    tol: float = 1e-6,
    max_iter: int | None = None,
    random_state: int | np.random.Generator | None = None,
    sample_weight: np.ndarray | None = None,
    criterion: str = "gcv",
    log_dets: np.ndarray | None = None,
) -> DualSolution:
    """Solve kernel ridge for every target and α in one preconditioned CG run.

    Parameters
    ----------
    matvec : callable
        ``V ↦ K V`` for ``V`` of shape (n, m) (the uncentred Gram matrix).
    Y : ndarray of shape (n, k)
    alphas : ndarray of shape (A,)
        Penalties (> 0); several are scored by GCV.
    fit_intercept : bool, default=True
    factor : ndarray of shape (n, r), optional
        Low-rank ``L`` with ``K ≈ LLᵀ`` (with ``sample_weight``: ``K̃ = diag(s) K diag(s) ≈ LLᵀ``)
        for the preconditioner; none: plain CG.
    eigenvalues : ndarray, optional
        Eigenvalues of ``K̄`` (of ``K`` without intercept; with ``sample_weight``, of
        ``H_s K̃ H_s``, resp. ``K̃``) for the exact df.
    n_probes : int, default=0
        Hutchinson probes when ``eigenvalues`` is not given (0: df not computed).
    tol : float, default=1e-6
        Relative residual of the target columns.
    max_iter : int, optional
    random_state : int, Generator or None
        Seeds the probes.
    sample_weight : ndarray of shape (n,), optional
        Row weights ``c ≥ 0`` (see the module docstring); the returned ``coef`` and
        ``intercept`` are those of ``f`` on the original scale.
    criterion : {"gcv", "evidence"}, default="gcv"
        How several α are chosen: smallest GCV, or largest profile evidence
        (:mod:`bigkernel.numerics.evidence`; needs ``eigenvalues`` or ``log_dets`` for the
        log-determinant). The evidence path is always returned: its quadratic forms
        ``ycᵀa(α)`` (and so the signal variance) come from the same CG solutions; its
        log-determinants are NaN without ``eigenvalues`` or ``log_dets``.
    log_dets : ndarray of shape (A,), optional
        ``log|K̄ + αI|`` per α over the likelihood's dimensions when ``eigenvalues`` are not
        given (:func:`~bigkernel.numerics.evidence.cholesky_log_det`).

    Returns
    -------
    DualSolution

    Notes
    -----
    One function on purpose: weights, centring, the preconditioner's shifts, one CG run for
    every target × α and the df/GCV read-out share the same operator and must agree on the
    same centred system.
    """
    xp = namespace(Y) if hasattr(Y, "shape") else namespace()
    Y = as_namespace_array(xp, Y, dtype=xp.float64)
    alphas = np.asarray(alphas, dtype=np.float64)
    n, k = Y.shape
    A = alphas.size
    if criterion == "evidence" and eigenvalues is None and log_dets is None:
        raise ParameterError(
            "choosing alpha by the evidence needs the eigenvalues or log_dets (the log-determinant of K + alpha·I)"
        )
    if A > 1 and eigenvalues is None and n_probes < 2:
        raise ParameterError(
            "choosing among several alphas needs df(alpha): give n_probes >= 2 (Hutchinson) or eigenvalues (exact)"
        )
    s_host = _check_sample_weight(None if sample_weight is None else to_host(sample_weight), n)
    n_eff = n if s_host is None else float(s_host @ s_host)  # rows of the (repeated) data set
    s = None if s_host is None else as_namespace_array(xp, s_host, like=Y)
    if fit_intercept:
        ybar = xp.mean(Y, axis=0) if s is None else (s * s) @ Y / n_eff
    else:
        ybar = xp.zeros(k, dtype=xp.float64, device=device_of(Y))
    Yc = Y - ybar if s is None else s[:, None] * (Y - ybar)  # = H_s (s ⊙ Y)

    def kmat(V):  # K̃ V
        return matvec(V) if s is None else s[:, None] * matvec(s[:, None] * V)

    def op(V):
        return _centre(kmat(_centre(V, s)), s) if fit_intercept else kmat(V)

    prec = None
    if factor is not None:
        L = _centre(factor, s) if fit_intercept else factor
        prec = LowRankPreconditioner(L, float(alphas.min()))
    P = n_probes if eigenvalues is None else 0
    Z = None
    if P:
        rng = np.random.default_rng(random_state)
        Z = as_namespace_array(xp, rng.choice(np.array([-1.0, 1.0]), size=(n, P)), like=Y)
        if fit_intercept:
            Z = _centre(Z, s)
    # columns: [targets at α_1, …, targets at α_A, probes at α_1, …, probes at α_A]
    B = xp.concat([Yc] * A + ([Z] * A if P else []), axis=1)
    shift = np.concatenate([np.repeat(alphas, k), np.repeat(alphas, P)])
    tols = np.concatenate([np.full(A * k, tol), np.full(A * P, max(PROBE_TOL, tol))])
    res = conjugate_gradient(op, B, preconditioner=prec, shift=shift, tol=tols, max_iter=max_iter)
    X = res.x
    coefs = [X[:, j * k : (j + 1) * k] for j in range(A)]  # A × (n, k)
    rss = alphas[:, None] ** 2 * np.stack([to_host(xp.sum(c**2, axis=0)) for c in coefs])  # (A, k)

    df, df_se, method = _degrees_of_freedom(alphas, fit_intercept, eigenvalues, prec, Z, X[:, A * k :], n_eff)
    resid_df = n_eff - df
    with np.errstate(invalid="ignore", divide="ignore"):
        gcv = np.where(resid_df[:, None] > 0, n_eff * rss / resid_df[:, None] ** 2, np.inf)
    # ycᵀ(K̄ + αI)⁻¹yc per α and target (host: the evidence is a host object)
    quad = np.stack([_col_dot(Yc, c) for c in coefs])
    ev = evidence_path(eigenvalues, quad, alphas, n_eff, fit_intercept, log_det=log_dets)
    if A > 1:
        best = ev.best() if criterion == "evidence" else int(np.nanargmin(gcv.mean(axis=1)))
    else:
        best = 0
    alpha = float(alphas[best])

    u = _centre(coefs[best], s) if fit_intercept else coefs[best]
    Ku = kmat(u)  # K̃ u = s ⊙ K a
    fitted = _centre(Ku, s) if fit_intercept else Ku
    r = Yc - fitted - alpha * u
    ynorm = np.sqrt(_col_dot(Yc, Yc))
    residual = np.sqrt(_col_dot(r, r)) / np.where(ynorm > 0, ynorm, 1.0)
    if s is None:
        a, Ka_mean = u, xp.mean(Ku, axis=0)
    else:
        # a = s ⊙ u; rows with c = 0 have u = 0. The weighted mean of K a is sᵀ(K̃u)/Σc.
        a, Ka_mean = s[:, None] * u, (s @ Ku) / n_eff
    intercept = to_host(ybar - Ka_mean) if fit_intercept else np.zeros(k)
    a = np.array(to_host(a), dtype=np.float64)  # the fitted model is host numpy, whatever ran it
    n_iter = np.atleast_1d(res.n_iter)[best * k : (best + 1) * k]
    converged = bool(np.all(np.atleast_1d(res.converged)[: A * k]))
    info = {
        "n_iter_all": np.atleast_1d(res.n_iter).tolist(),
        "preconditioner_rank": 0 if prec is None else prec.rank,
        "n_probes": P,
    }
    logger.info(
        "dual solve: n=%d, %d target(s) × %d alpha(s) + %d probe(s); alpha=%.3g, %d iterations, "
        "residual %.2g, %s%s", n, k, A, P, alpha, int(n_iter.max()), float(residual.max()),
        describe_df(float(df[best]), float(df_se[best])), "" if method == "none" else f" ({method})",
    )  # fmt: skip
    return DualSolution(
        a, intercept, alpha, alphas, df, df_se, method, gcv, n_iter, residual, converged,
        res.n_matvec + 1, info, ev,
    )  # fmt: skip


def _degrees_of_freedom(alphas, fit_intercept, eigenvalues, prec, Z, Xz, n):
    """``(df, stderr, method)`` per α (see the module docstring)."""
    base = 1.0 if fit_intercept else 0.0
    A = alphas.size
    if eigenvalues is not None:
        s = np.maximum(np.asarray(eigenvalues, dtype=np.float64), 0.0)
        df = base + (s[None, :] / (s[None, :] + alphas[:, None])).sum(axis=1)
        return df, np.zeros(A), "exact"
    P = 0 if Z is None else Z.shape[1]
    if P == 0:
        return np.full(A, np.nan), np.full(A, np.nan), "none"
    df, se = np.empty(A), np.empty(A)
    for j, alpha in enumerate(alphas):
        x = Xz[:, j * P : (j + 1) * P]
        if prec is not None:
            lam = prec.eigenvalues
            low = float((lam / (lam + alpha)).sum())
            Mz = prec.apply_shifted(Z, np.full(P, alpha))
        else:
            low, Mz = 0.0, Z / alpha
        samples = alpha * _col_dot(Z, Mz - x)
        df[j] = base + low + samples.mean()
        se[j] = samples.std(ddof=1) / np.sqrt(P)
    # df can never exceed n (nor fall below the intercept's 1): clip estimation noise
    return np.clip(df, base, n), se, "hutchinson"
