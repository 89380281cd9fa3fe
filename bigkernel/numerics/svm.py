"""The primal SVM on explicit features, one pass per iteration (layer 1: numpy only).

Objective of one class column (targets ``y ∈ {−1, +1}``, row weights ``c ≥ 0``, features φ,
margins ``mᵢ = yᵢ(φᵢᵀw + b)``), in the ridge scaling of bigkernel (scikit-learn's ``Ridge``)::

    P(w, b) = Σᵢ cᵢ L(mᵢ) + α‖w‖²                    (b unpenalised)

``L`` is the squared hinge ``max(0, 1 − m)²`` or the hinge ``max(0, 1 − m)``. scikit-learn's
``LinearSVC`` minimises ``½‖w‖² + C Σᵢ cᵢ L(mᵢ)``; dividing by C gives the same minimiser with
``α = 1 / (2C)`` (``LinearSVC`` also penalises its intercept, scaled by ``intercept_scaling``).

One pass evaluates, for every class, the trial points ``w + s·d`` of a grid of step sizes ``s``
along the current direction ``d`` (per-row margins are linear in ``s``, so a grid costs a few
flops per row and step, beside the D² of the Hessian) and the Hessian at one step. The driver
then keeps the grid point of least objective (a line search that costs no extra pass), whose
gradient and dual point are exact, and takes the next Newton direction from that gradient and
the Hessian of the same pass (exact when the full step was taken).

Over features kept in memory (small data, :mod:`bigkernel.numerics.svm_kept`) a pass returns
each row's curvature weight instead of the Hessian sums, and the Newton step is solved through
the curved rows when they are at most D (:mod:`bigkernel.numerics.svm_directions`).

The hinge is solved through its Huber smoothing ``L_μ`` (:func:`loss_terms`), which is C¹
and piecewise quadratic, so Newton applies; ``0 ≤ L − L_μ ≤ μ/2``. Every pass also gives the
dual point ``λᵢ = −cᵢ L'(mᵢ)`` and with it the duality gap of the *exact* problem
(:func:`evaluate`), a certificate of how far the iterate is from the exact optimum.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from bigkernel.errors import ParameterError
from bigkernel.numerics.threads import LAPACK_SAMPLE_MIN_N, blas_thread_limit, lapack_limit

LOSSES = ("squared_hinge", "hinge")


def check_loss(loss: str) -> str:
    """``loss`` if this module solves it, else a :class:`ParameterError` naming the choices."""
    if loss not in LOSSES:
        raise ParameterError(f"the primal SVM solves loss in {LOSSES}, got {loss!r}")
    return loss


def loss_terms(m: np.ndarray, loss: str, mu: np.ndarray | float | None = None):
    """Per-row loss ``L(m)``, dual ratio ``−L'(m)`` and curvature ``L''(m)`` of margins ``m``.

    ``loss="squared_hinge"``: ``L = max(0, 1 − m)²`` (``mu`` is ignored). ``loss="hinge"`` with
    smoothing ``mu > 0`` (broadcast against ``m``): the Huber hinge

    - ``0`` for ``m ≥ 1``,
    - ``(1 − m)² / (2μ)`` for ``1 − μ < m < 1``,
    - ``1 − m − μ/2`` for ``m ≤ 1 − μ``,

    whose dual ratio lies in [0, 1] (so ``λ = c·(−L')`` is feasible for the exact hinge's dual).

    The hinge's "curvature" is the Newton matrix's weight, not ``L_μ''``: ``1/μ`` in the band
    and, outside it, ``min(1/μ, 1/(2|1 − m|))``, the curvature of the quadratic majoriser of
    the hinge at ``m`` (``max(0, r) ≤ (r + r²/(2|r₀|) + |r₀|/2) / 2``). With ``L_μ''`` alone a
    small band leaves almost every row without curvature and Newton steps overshoot by orders
    of magnitude; the majoriser's weights keep every row in the model, weighted by how far it is
    from the kink (iteratively reweighted least squares away from the band, Newton inside it).
    """
    r = 1.0 - m
    if loss == "squared_hinge":
        act = r > 0
        rp = np.where(act, r, 0.0)
        return rp * rp, 2.0 * rp, 2.0 * act
    mu = np.asarray(mu, dtype=np.float64)
    band = (r > 0) & (r < mu)
    lin = r >= mu
    value = np.where(band, r * r / (2.0 * mu), 0.0) + np.where(lin, r - 0.5 * mu, 0.0)
    ratio = np.where(band, r / mu, 0.0) + lin
    # outside the band, the curvature 1/(2|r|) of the hinge's quadratic majoriser at r
    curv = np.where(band, 1.0 / mu, np.minimum(1.0 / mu, 0.5 / np.maximum(np.abs(r), 1e-300)))
    return value, ratio, curv


def _dual_coefficient(loss: str, mu: np.ndarray) -> np.ndarray:
    """κ of the smoothed problem's dual ``Σλ − κ Σλ²/c − ‖Σλyφ‖²/(4α)`` (per class)."""
    return np.full_like(mu, 0.25) if loss == "squared_hinge" else 0.5 * mu


@dataclass
class SVMPassState:
    """What one pass needs: the current point, the direction, the steps to evaluate.

    Coefficients act on the *scaled* features φ = ``fmap.scale`` · ``transform_unscaled``.

    Attributes
    ----------
    coef : ndarray of shape (D, k)
    intercept : ndarray of shape (k,)
    direction : ndarray of shape (D, k)
    direction_b : ndarray of shape (k,)
    steps : ndarray of shape (k, G)
        Step sizes ``s`` at which each class's trial point ``w + s·d`` is evaluated.
    hess_step : ndarray of shape (k,)
        Step at which each class's Hessian is summed; NaN: none (a converged class).
    loss : {"squared_hinge", "hinge"}
    mu : ndarray of shape (k,)
        Huber smoothing of the hinge per class (unused for the squared hinge).
    """

    coef: np.ndarray
    intercept: np.ndarray
    direction: np.ndarray
    direction_b: np.ndarray
    steps: np.ndarray
    hess_step: np.ndarray
    loss: str
    mu: np.ndarray

    @property
    def hess_classes(self) -> np.ndarray:
        """Indices of the classes whose Hessian the pass sums."""
        return np.flatnonzero(np.isfinite(self.hess_step))

    def __dask_tokenize__(self):
        # a digest of every array's bytes (numerics/ imports no dask): passes differ by state
        h = hashlib.sha1(self.loss.encode())
        for a in (self.coef, self.intercept, self.direction, self.direction_b, self.steps, self.hess_step, self.mu):
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        return ("bigkernel.SVMPassState", h.hexdigest())


@dataclass
class SVMPassSums:
    """Sums of one pass, float64; ``k`` classes, ``G`` steps, ``h`` classes with a Hessian.

    Index ``[..., 0]`` / ``[..., 1]`` of ``lam``, ``lam2``, ``v``: rows with y = +1 / y = −1.

    Attributes
    ----------
    weight : float
        Σ c over the rows.
    loss : ndarray of shape (k, G)
        Σ c L(m) of the loss being minimised (the smoothed hinge for ``"hinge"``).
    hinge : ndarray of shape (k, G)
        Σ c max(0, 1 − m), the exact hinge (the certificate of ``loss="hinge"``).
    lam, lam2 : ndarray of shape (k, G, 2)
        Σ λ and Σ λ²/c, with λ = c·(−L'(m)).
    v : ndarray of shape (k, G, 2, D)
        Σ λ φ.
    hess : ndarray of shape (h, D, D)
        Σ c L''(m) φφᵀ at each class's ``hess_step``.
    hess_phi : ndarray of shape (h, D)
        Σ c L''(m) φ (the intercept's column).
    hess_c : ndarray of shape (h,)
        Σ c L''(m).
    n_curved : ndarray of shape (h,)
        Rows with L'' > 0 at the Hessian step (the rows of the syrk).
    curv : ndarray of shape (h, n), optional
        The per-row weights ``c·L''`` themselves, in place of ``hess`` and ``hess_phi`` (then of
        shape (h, 0, 0) and (h, 0)), from a pass over features held in memory
        (:class:`~bigkernel.numerics.svm_kept.KeptFeatures`); not summed by ``+``.
    """

    weight: float
    loss: np.ndarray
    hinge: np.ndarray
    lam: np.ndarray
    lam2: np.ndarray
    v: np.ndarray
    hess: np.ndarray
    hess_phi: np.ndarray
    hess_c: np.ndarray
    n_curved: np.ndarray
    curv: np.ndarray | None = None

    @classmethod
    def zeros(cls, n_components: int, n_classes: int, n_steps: int, n_hess: int, hessian: bool = True) -> SVMPassSums:
        """All-zero sums, the identity of ``+`` (``hessian=False``: ``hess`` and ``hess_phi`` empty)."""
        D, k, G, h = n_components, n_classes, n_steps, n_hess
        Dh = D if hessian else 0
        return cls(
            0.0, np.zeros((k, G)), np.zeros((k, G)), np.zeros((k, G, 2)), np.zeros((k, G, 2)),
            np.zeros((k, G, 2, D)), np.zeros((h, Dh, Dh)), np.zeros((h, Dh)), np.zeros(h), np.zeros(h),
        )  # fmt: skip

    def __add__(self, other: SVMPassSums) -> SVMPassSums:
        return SVMPassSums(*(getattr(self, f) + getattr(other, f) for f in _SUM_FIELDS))


_SUM_FIELDS = ("weight", "loss", "hinge", "lam", "lam2", "v", "hess", "hess_phi", "hess_c", "n_curved")


def accumulate_block(
    acc: SVMPassSums, phi: np.ndarray, Y: np.ndarray, c: np.ndarray, state: SVMPassState, scale: float
) -> None:
    """Add one feature sub-block to ``acc`` (features unscaled: the caller folds ``scale`` in).

    Parameters
    ----------
    acc : SVMPassSums
    phi : ndarray of shape (rows, D)
        Unscaled features (float32 or float64); the products run in their dtype.
    Y : ndarray of shape (rows, k)
        ±1 targets.
    c : ndarray of shape (rows,)
        Row weights > 0 (zero-weight rows are dropped by the caller).
    state : SVMPassState
    scale : float
        The feature map's scale (φ = scale · phi).
    """
    f, delta = accumulate_grid(acc, phi, Y, c, state, scale)
    curv = curvature_weights(f, delta, Y, c, state)
    for group in equal_rows(curv):  # classes of equal weights (e.g. every class at w = 0) share a syrk
        w = curv[group[0]]
        keep = np.flatnonzero(w > 0)
        if keep.size == 0:
            continue
        p = phi[keep]
        ps = p * np.sqrt(w[keep]).astype(phi.dtype)[:, None]
        hess = ps.T @ ps  # a syrk over the curved rows only
        hess_phi = w[keep].astype(phi.dtype) @ p
        for i in group:
            acc.hess[i] += hess
            acc.hess_phi[i] += hess_phi
            acc.hess_c[i] += w[keep].sum()
            acc.n_curved[i] += keep.size


def equal_rows(a: np.ndarray) -> list[list[int]]:
    """Indices of the rows of ``a`` grouped by equality, each group in order of first index."""
    groups: list[list[int]] = []
    for i in range(a.shape[0]):
        g = next((g for g in groups if np.array_equal(a[g[0]], a[i])), None)
        if g is None:
            groups.append([i])
        else:
            g.append(i)
    return groups


def accumulate_grid(
    acc: SVMPassSums, phi: np.ndarray, Y: np.ndarray, c: np.ndarray, state: SVMPassState, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """The line-search part of :func:`accumulate_block` (everything but the Hessian sums).

    Returns
    -------
    f, delta : ndarray of shape (rows, k)
        Float64 decision values at the current point and their change along the direction.
    """
    k = Y.shape[1]
    # margins of the current point and along the direction, float64 like the predictions
    WD = np.concatenate([state.coef, state.direction], axis=1) * scale
    FD = phi @ WD.astype(phi.dtype, copy=False)
    f = FD[:, :k].astype(np.float64) + state.intercept
    delta = FD[:, k:].astype(np.float64) + state.direction_b
    m = (Y * f)[:, :, None] + (Y * delta)[:, :, None] * state.steps[None, :, :]  # (rows, k, G)
    value, ratio, _ = loss_terms(m, state.loss, state.mu[None, :, None])
    cw = c[:, None, None]
    acc.weight += float(c.sum())
    acc.loss += np.einsum("r,rkg->kg", c, value)
    acc.hinge += np.einsum("r,rkg->kg", c, np.maximum(1.0 - m, 0.0))
    pos = (Y > 0)[:, :, None]
    lam = cw * ratio
    lam_pn = np.stack([np.where(pos, lam, 0.0), np.where(pos, 0.0, lam)], axis=-1)  # (rows, k, G, 2)
    acc.lam += lam_pn.sum(axis=0)
    acc.lam2 += np.einsum("rkgs,rkg->kgs", lam_pn, ratio)  # λ²/c = λ·ratio
    prod = phi.T @ lam_pn.reshape(phi.shape[0], -1).astype(phi.dtype, copy=False)
    acc.v += prod.T.reshape(acc.v.shape)
    return f, delta


def curvature_weights(
    f: np.ndarray, delta: np.ndarray, Y: np.ndarray, c: np.ndarray, state: SVMPassState
) -> np.ndarray:
    """Per-row Newton weights ``c·L''`` at each Hessian class's ``hess_step``, shape (h, rows)."""
    out = np.zeros((state.hess_classes.size, Y.shape[0]))
    for i, j in enumerate(state.hess_classes):
        mh = Y[:, j] * (f[:, j] + state.hess_step[j] * delta[:, j])
        out[i] = c * loss_terms(mh, state.loss, state.mu[j])[2]
    return out


def fold_scale(acc: SVMPassSums, scale: float) -> SVMPassSums:
    """Sums of unscaled features → sums of the scaled features φ = scale · phi (in place)."""
    acc.v *= scale
    acc.hess *= scale * scale
    acc.hess_phi *= scale
    return acc


@dataclass
class StepEvaluation:
    """Objective, gradient and duality gap of every trial point of a pass (per class, step).

    Attributes
    ----------
    objective : ndarray of shape (k, G)
        P of the loss being minimised (smoothed for the hinge).
    grad_w : ndarray of shape (k, G, D)
    grad_b : ndarray of shape (k, G)
    gap : ndarray of shape (k, G)
        Duality gap of the minimised problem, P − D(λ̃) ≥ P − P*.
    exact_objective, exact_gap : ndarray of shape (k, G)
        The same for the exact loss (equal to the above for the squared hinge): the gap
        ``exact_gap`` bounds the distance to the exact optimum, ``exact_objective − P*``.
    """

    objective: np.ndarray
    grad_w: np.ndarray
    grad_b: np.ndarray
    gap: np.ndarray
    exact_objective: np.ndarray
    exact_gap: np.ndarray


def evaluate(sums: SVMPassSums, state: SVMPassState, alpha: float, fit_intercept: bool) -> StepEvaluation:
    """Objective, gradient and duality gaps at every trial point ``w + s·d`` of the pass.

    Dual point: ``λᵢ = −cᵢ L'(mᵢ)``. With an intercept, the dual requires ``Σ λᵢ yᵢ = 0``; the
    side (y = +1 or −1) with the larger Σλ is scaled down to balance, which keeps λ in its
    domain (``0 ≤ λ ≤ c`` for the hinge), so ``D(λ̃)`` is a lower bound of the optimum and
    ``P − D(λ̃)`` an upper bound of ``P − P*`` (and ``α‖w − w*‖² ≤ P − P*``, strong convexity).
    """
    W = state.coef.T[:, None, :] + state.steps[:, :, None] * state.direction.T[:, None, :]  # (k, G, D)
    pen = alpha * np.einsum("kgd,kgd->kg", W, W)
    v_pm = sums.v[:, :, 0, :] - sums.v[:, :, 1, :]
    grad_w = 2.0 * alpha * W - v_pm
    lam_p, lam_n = sums.lam[..., 0], sums.lam[..., 1]
    grad_b = -(lam_p - lam_n) if fit_intercept else np.zeros_like(lam_p)
    if fit_intercept:
        # scale the larger side down so that Σ λ̃ y = 0
        a_p = np.where(lam_p > lam_n, _ratio(lam_n, lam_p), 1.0)
        a_n = np.where(lam_n > lam_p, _ratio(lam_p, lam_n), 1.0)
    else:
        a_p = a_n = np.ones_like(lam_p)
    v = a_p[..., None] * sums.v[:, :, 0, :] - a_n[..., None] * sums.v[:, :, 1, :]
    sum_lam = a_p * lam_p + a_n * lam_n
    sum_lam2 = a_p**2 * sums.lam2[..., 0] + a_n**2 * sums.lam2[..., 1]
    quad = np.einsum("kgd,kgd->kg", v, v) / (4.0 * alpha)
    kappa = _dual_coefficient(state.loss, state.mu)[:, None]
    objective = sums.loss + pen
    gap = objective - (sum_lam - kappa * sum_lam2 - quad)
    if state.loss == "squared_hinge":
        exact_objective, exact_gap = objective, gap
    else:
        exact_objective = sums.hinge + pen
        exact_gap = exact_objective - (sum_lam - quad)
    return StepEvaluation(objective, grad_w, grad_b, gap, exact_objective, exact_gap)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.ones_like(num), where=den > 0)


def newton_direction(
    hess: np.ndarray,
    hess_phi: np.ndarray,
    hess_c: float,
    grad_w: np.ndarray,
    grad_b: float,
    alpha: float,
    fit_intercept: bool,
) -> tuple[np.ndarray, float]:
    """Solve ``H [dw; db] = −[g_w; g_b]`` with ``H = [[Σ cL''φφᵀ + 2αI, Σ cL''φ], [·ᵀ, Σ cL'']]``.

    The bordered (D+1) system is solved by Cholesky in float64. When no row has curvature the
    intercept's diagonal entry is 0 (the objective is locally linear in b): it is floored at a
    small multiple of the feature block's mean diagonal (:func:`intercept_floor`), so the line
    search sees a long but finite intercept step instead of a singular system.
    """
    A = bordered_matrix(hess, hess_phi, hess_c, alpha, fit_intercept)
    rhs = -np.append(grad_w, grad_b) if fit_intercept else -grad_w
    return split_direction(spd_solver(A)(rhs), hess.shape[0])


def bordered_matrix(
    hess: np.ndarray, hess_phi: np.ndarray, hess_c: float, alpha: float, fit_intercept: bool
) -> np.ndarray:
    """The Newton matrix of :func:`newton_direction`: (D+1)² with an intercept, else D²."""
    D = hess.shape[0]
    if not fit_intercept:
        return hess + 2.0 * alpha * np.eye(D)
    A = np.empty((D + 1, D + 1))
    A[:D, :D] = hess
    A[:D, :D].flat[:: D + 1] += 2.0 * alpha
    A[:D, D] = A[D, :D] = hess_phi
    A[D, D] = max(hess_c, intercept_floor(alpha, float(np.trace(hess)), D))
    return A


def intercept_floor(alpha: float, trace_hess: float, D: int) -> float:
    """Least intercept diagonal of the Newton matrix: 1e-8 × the feature block's mean diagonal
    ``(trace(Σ cL''φφᵀ) + 2αD) / D``."""
    return 1e-8 * (trace_hess + 2.0 * alpha * D) / D


def split_direction(sol: np.ndarray, D: int) -> tuple[np.ndarray, float]:
    """``(dw, db)`` of a solved system: ``sol[:D], sol[D]`` (``db = 0`` when ``sol`` has D entries)."""
    return (sol[:D], float(sol[D])) if sol.shape[0] > D else (sol, 0.0)


def spd_solver(A: np.ndarray):
    """``b ↦ A⁻¹b`` for a symmetric positive (semi)definite ``A``: Cholesky, or a symmetric
    eigendecomposition (eigenvalues clipped at round-off) when Cholesky fails.

    The factorisation runs on one BLAS thread below ``LAPACK_SAMPLE_MIN_N`` rows and else on
    the threads other processes leave idle (:func:`~bigkernel.numerics.threads.lapack_limit`):
    OpenBLAS's busy-waiting threads made a 300 × 300 Cholesky take 0.25 s on two threads
    against 1 ms on one while other processes held the 2-core machine.
    """
    n = A.shape[0]
    limit = blas_thread_limit(1) if n < LAPACK_SAMPLE_MIN_N else lapack_limit(n)
    try:
        with limit:
            cf = scipy.linalg.cho_factor(A, check_finite=False)
        return lambda b: scipy.linalg.cho_solve(cf, b, check_finite=False)
    except np.linalg.LinAlgError:
        with lapack_limit(n):
            w, U = np.linalg.eigh(0.5 * (A + A.T))
        floor = max(float(w[-1]), 1.0) * A.shape[0] * np.finfo(float).eps
        inv = 1.0 / np.maximum(w, floor)
        return lambda b: U @ (inv.reshape((-1,) + (1,) * (b.ndim - 1)) * (U.T @ b))
