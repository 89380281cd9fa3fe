"""The hinge SVM's dual on a kept Gram matrix: SMO, all classes at once (layer 1: numpy only).

The primal of one class column (:mod:`bigkernel.numerics.svm`, ``loss="hinge"``) is
``P(w, b) = Σᵢ cᵢ max(0, 1 − yᵢ(φᵢᵀw + b)) + α‖w‖²`` with ``b`` unpenalised. Divided by 2α it is
the C-SVM ``½‖w‖² + Σᵢ Cᵢ ξᵢ`` with per-row bounds ``Cᵢ = cᵢ / (2α)``, whose dual is ::

    min_a  ½ aᵀQa − Σ a,   0 ≤ aᵢ ≤ Cᵢ,   Σ aᵢ yᵢ = 0  (the equality only with an intercept),

with ``Q = (y yᵀ) ⊙ K``, ``K = ΦΦᵀ`` the Gram matrix of the scaled features, and
``w = Σ aᵢ yᵢ φᵢ`` (in the dual point of :func:`bigkernel.numerics.svm.evaluate`, λ = 2α a).

:func:`solve_hinge_dual` solves it by SMO with libsvm's second-order working-set selection
(WSS2: Fan, Chen & Lin, JMLR 6, 2005): ``i`` the most violating index of ``I_up``, ``j`` of
``I_low`` the one whose pair step decreases the objective most. The pair moves along
``aᵢ += yᵢt, aⱼ −= yⱼt`` (which keeps ``Σ a y``), ``t = min(bᵢⱼ / qᵢⱼ, bounds)`` with
``qᵢⱼ = Kᵢᵢ + Kⱼⱼ − 2Kᵢⱼ`` and the gradient ``G = Qa − 1`` moves by
``t · y ⊙ (K[i] − K[j])``, a row of K whatever the labels. Without an intercept there is no
equality: greedy coordinate descent on the largest projected gradient (one row of K a step).
The k one-vs-rest classes share K (only y changes) and step together: one iteration is a
few numpy operations on (k, n) arrays, so the Python overhead is paid once per step for all
classes.

Stopping rule: every :data:`CHECK_EVERY` iterations the relative duality gap of the exact
hinge problem, ``(P(w, b*) − D(a)) / P`` with ``b*`` the intercept minimising P at ``w``
(:func:`best_intercept`), is computed for every class from the gradient (O(k·n log n)); when
a class meets ``tol`` the gradient is recomputed from K (one (k, n) × (n, n) product, free of
the steps' drift) and the gap again before the class stops. This is the certificate of
:func:`bigkernel.numerics.svm_newton.solve_svm`, so ``tol`` means the same as for the primal
Newton path and ``α‖w − w*‖² ≤ gap · P``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bigkernel.numerics.svm_kept import GRAM_ROWS, KeptFeatures
from bigkernel.numerics.svm_newton import SVMSolution

#: iterations between two gap checks (each sorts the k × n decision values)
CHECK_EVERY = 64
#: the dual is solved when the kept rows are at most this many per feature (and n ≤ GRAM_ROWS):
#: beyond, the primal Newton steps (D × D systems) cost as little as the SMO steps, whose number
#: and cost both grow with n (``scripts/bench_svm.py --case d``, 3 classes, tol 1e-4: the dual
#: 1.2–4.8× faster at n/D = 4–10, 0.7–1.2× at n/D = 20; docs/benchmarks.md)
DUAL_ROWS_PER_FEATURE = 10
#: signs of the pair's moves: aᵢ += yᵢt, aⱼ −= yⱼt
_PAIR_SIGNS = np.array([1.0, -1.0])
#: floor of a pair's curvature ``qᵢⱼ`` (libsvm's TAU)
TAU = 1e-12


@dataclass
class DualSolution:
    """Result of :func:`solve_hinge_dual`; ``k`` classes, ``n`` rows.

    Attributes
    ----------
    dual : ndarray of shape (n, k)
        ``aᵢ yᵢ`` per row and class: ``w = Φᵀ dual`` (scaled features Φ).
    intercept : ndarray of shape (k,)
    objective : ndarray of shape (k,)
        Exact primal objective ``Σ c max(0, 1 − m) + α‖w‖²`` at ``(w, intercept)``.
    gap : ndarray of shape (k,)
        Relative duality gap ``(P − D) / P`` of the exact problem.
    converged : ndarray of bool, shape (k,)
    n_iter : int
        SMO (or coordinate) iterations, all classes stepping together.
    """

    dual: np.ndarray
    intercept: np.ndarray
    objective: np.ndarray
    gap: np.ndarray
    converged: np.ndarray
    n_iter: int


def solve_hinge_dual(
    gram: np.ndarray,
    Y: np.ndarray,
    c: np.ndarray,
    alpha: float,
    *,
    fit_intercept: bool = True,
    tol: float = 1e-4,
    max_iter: int = 100_000,
) -> DualSolution:
    """Minimise ``Σ c max(0, 1 − y(φᵀw + b)) + α‖w‖²`` per class through its dual (module docstring).

    Parameters
    ----------
    gram : ndarray of shape (n, n)
        ``K = ΦΦᵀ`` of the scaled float64 features (symmetric positive semidefinite).
    Y : ndarray of shape (n, k)
        ±1 targets, one column per class.
    c : ndarray of shape (n,)
        Row weights > 0.
    alpha : float
        Penalty (LinearSVC's ``C = 1 / (2α)``).
    fit_intercept : bool
        Unpenalised intercept (the dual's equality ``Σ a y = 0``).
    tol : float
        Stop a class when its relative duality gap is ≤ ``tol``.
    max_iter : int
        Most iterations (all classes together).

    Returns
    -------
    DualSolution
    """
    K = np.asarray(gram, dtype=np.float64)
    Yt = np.ascontiguousarray(np.asarray(Y, dtype=np.float64).T)  # (k, n)
    C = np.asarray(c, dtype=np.float64) / (2.0 * alpha)
    k, n = Yt.shape
    if n == 0:  # no rows: w = 0, b = 0 and P = D = 0
        return DualSolution(np.zeros((0, k)), np.zeros(k), np.zeros(k), np.zeros(k), np.ones(k, dtype=bool), 0)
    A, G = np.zeros((k, n)), -np.ones((k, n))
    active = np.ones(k, dtype=bool)
    steps = (_PairSteps if fit_intercept else _CoordinateSteps)(K, C)
    n_iter, rows = 0, np.arange(0)  # rows: the classes loaded in `steps`
    while True:
        if rows.size:
            A[rows], G[rows] = steps.A, steps.gradient()
            active[rows[steps.done]] = False  # optimal to rounding: no step left to take
        cert = certificate(G, A, Yt, C, fit_intercept)
        if n_iter >= max_iter or not active.any() or (active & (cert[2] <= tol)).any():
            # a class met tol (or the end): certify on the exact gradient, free of the steps' drift
            G = Yt * ((A * Yt) @ K) - 1.0
            cert = certificate(G, A, Yt, C, fit_intercept)
        active &= cert[2] > tol
        if not active.any() or n_iter >= max_iter:
            break
        rows = np.flatnonzero(active)
        steps.load(Yt[rows], A[rows], G[rows])
        for _ in range(min(CHECK_EVERY, max_iter - n_iter)):
            steps.step()
            n_iter += 1
    intercept, objective, gap = cert
    objective = 2.0 * alpha * objective  # the SVM scaling back to Σ c L + α‖w‖²
    return DualSolution((A * Yt).T, intercept, objective, gap, gap <= tol, n_iter)


class _PairSteps:
    """SMO steps (WSS2 pairs) of the classes loaded, all at once (see the module docstring).

    Holds, per loaded class, ``a``, ``V = −y ⊙ G`` and the masks of ``I_up`` / ``I_low``, kept
    up to date at the two entries a step changes.
    """

    def __init__(self, K: np.ndarray, C: np.ndarray) -> None:
        self.K, self.kd, self.C = K, np.diagonal(K).copy(), C

    def load(self, Y: np.ndarray, A: np.ndarray, G: np.ndarray) -> None:
        self.Y, self.A, self.V = Y, A, -Y * G
        self.r = np.arange(Y.shape[0])
        self.up, self.low = _masks(A, Y, self.C)
        self.done = np.zeros(Y.shape[0], dtype=bool)

    def gradient(self) -> np.ndarray:
        """``G = Qa − 1`` of the loaded classes (updated step by step)."""
        return -self.Y * self.V

    def step(self) -> None:
        r, A, V, Y, C, K = self.r, self.A, self.V, self.Y, self.C, self.K
        i = np.argmax(np.where(self.up, V, -np.inf), axis=1)
        b = V[r, i][:, None] - V  # bᵢₜ = −yᵢGᵢ + yₜGₜ
        Ki = K[i]
        q = np.maximum(self.kd[i][:, None] + self.kd - 2.0 * Ki, TAU)
        bp = np.where(self.low, np.maximum(b, 0.0), 0.0)
        score = bp * bp / q  # the decrease of the pair's unclipped step, 0 for no candidate
        j = np.argmax(score, axis=1)
        ok = (score[r, j] > 0) & self.up[r, i]
        self.done |= ~ok
        # the pair moves along aᵢ += yᵢt, aⱼ −= yⱼt: per entry the sign s and the room to its bound
        ij, rr = np.stack([i, j], axis=1), r[:, None]
        y2, a2, C2 = Y[rr, ij], A[rr, ij], C[ij]
        s = y2 * _PAIR_SIGNS
        room = np.where(s > 0, C2 - a2, a2)
        t = np.where(ok, np.minimum(b[r, j] / q[r, j], room.min(axis=1)), 0.0)
        # a bound reached is set exactly (no rounding residue that would keep the row free)
        hit = (t[:, None] == room) & ok[:, None]
        new = np.where(hit, np.where(s > 0, C2, 0.0), a2 + s * t[:, None])
        A[rr, ij] = new
        self.up[rr, ij], self.low[rr, ij] = _masks(new, y2, C2)
        V -= t[:, None] * (Ki - K[j])


def _masks(a: np.ndarray, y: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Membership of ``I_up`` (``a`` may move so that ``y·a`` grows) and ``I_low`` (shrinks)."""
    pos = y > 0
    below, above = a < C, a > 0
    return np.where(pos, below, above), np.where(pos, above, below)


class _CoordinateSteps:
    """Greedy coordinate steps (no intercept: no equality) of the classes loaded, all at once:
    the coordinate of largest projected gradient moves to its clipped 1-D minimiser."""

    def __init__(self, K: np.ndarray, C: np.ndarray) -> None:
        self.K, self.kd, self.C = K, np.maximum(np.diagonal(K), TAU), C

    def load(self, Y: np.ndarray, A: np.ndarray, G: np.ndarray) -> None:
        self.Y, self.A, self.G = Y, A, G
        self.r = np.arange(Y.shape[0])
        self.done = np.zeros(Y.shape[0], dtype=bool)

    def gradient(self) -> np.ndarray:
        """``G = Qa − 1`` of the loaded classes (updated step by step)."""
        return self.G

    def step(self) -> None:
        r, A, G, C = self.r, self.A, self.G, self.C
        pg = np.where(A <= 0, np.minimum(G, 0.0), np.where(A >= C, np.maximum(G, 0.0), G))
        i = np.argmax(np.abs(pg), axis=1)
        ok = pg[r, i] != 0
        self.done |= ~ok
        ai = A[r, i]
        delta = np.where(ok, np.clip(ai - G[r, i] / self.kd[i], 0.0, C[i]) - ai, 0.0)
        A[r, i] = ai + delta
        G += (delta * self.Y[r, i])[:, None] * self.Y * self.K[i]


def certificate(G: np.ndarray, A: np.ndarray, Y: np.ndarray, C: np.ndarray, fit_intercept: bool):
    """``(b*, P, (P − D) / P)`` per class, in the SVM scaling ``½‖w‖² + Σ Cᵢ ξᵢ``.

    ``G = Qa − 1`` exact, so the decision values without intercept are ``F = y ⊙ (G + 1)`` and
    ``‖w‖² = aᵀ(G + 1)``; ``b*`` minimises the primal at ``w`` (0 without an intercept).
    """
    F = Y * (G + 1.0)
    wnorm2 = np.einsum("kn,kn->k", A, G + 1.0)
    b = best_intercept(F, Y, C) if fit_intercept else np.zeros(Y.shape[0])
    hinge = np.maximum(0.0, 1.0 - Y * (F + b[:, None])) @ C
    primal = 0.5 * wnorm2 + hinge
    dual = A.sum(axis=1) - 0.5 * wnorm2
    gap = (primal - dual) / np.maximum(primal, np.finfo(float).tiny)
    return b, primal, gap


def best_intercept(F: np.ndarray, Y: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Per class, the ``b`` minimising ``Σᵢ Cᵢ max(0, 1 − yᵢ(Fᵢ + b))``.

    The term of row i has its kink at ``tᵢ = yᵢ − Fᵢ``; the slope in ``b`` is
    ``−Σ_{y=+1} C + Σ_{tᵢ ≤ b} Cᵢ`` (each kink adds ``Cᵢ``), so the minimiser is the first
    sorted kink at which the running sum of C reaches ``Σ_{y=+1} C`` (a weighted quantile).
    """
    t = Y - F
    order = np.argsort(t, axis=1, kind="stable")
    cum = np.cumsum(C[order], axis=1)
    need = (C * (Y > 0)).sum(axis=1)
    idx = np.minimum(np.argmax(cum >= need[:, None] * (1 - 1e-15), axis=1), t.shape[1] - 1)
    return np.take_along_axis(t, order, axis=1)[np.arange(t.shape[0]), idx]


def prefers_dual(n: int, n_components: int) -> bool:
    """Whether the hinge fit of ``n`` kept rows of ``n_components`` features takes the dual: the
    Gram matrix is formed (``n ≤ GRAM_ROWS``) and ``n ≤ DUAL_ROWS_PER_FEATURE · n_components``."""
    return n <= GRAM_ROWS and n <= DUAL_ROWS_PER_FEATURE * n_components


def kept_hinge_fit(features: KeptFeatures, alpha: float, fit_intercept: bool, tol: float, max_iter: int) -> SVMSolution:
    """The hinge fit of kept features through the dual on their Gram matrix, as an
    :class:`~bigkernel.numerics.svm_newton.SVMSolution` of one pass (the featurisation).

    ``max_iter`` passes allow ``max_iter · n`` SMO steps (each reads a row or two of the Gram
    matrix: n steps read about as much as one sweep of it). The history holds one entry per
    class, ``pass`` 1, with the SMO steps (``dual_iter``) and the support vectors
    (``n_curved``: rows with ``a > 0``).
    """
    n, k = features.Y.shape
    sol = solve_hinge_dual(
        features.gram(np.arange(n)), features.Y, features.c, alpha,
        fit_intercept=fit_intercept, tol=tol, max_iter=max(1, max_iter) * max(n, 1),
    )  # fmt: skip
    coef = features.phi64.T @ sol.dual
    n_sv = np.count_nonzero(sol.dual, axis=0)
    history = [
        {
            "pass": 1, "class": j, "step": float("nan"), "objective": float(sol.objective[j]),
            "exact_objective": float(sol.objective[j]), "gap": float(sol.gap[j]), "grad_norm": float("nan"),
            "mu": None, "n_curved": int(n_sv[j]), "dual_iter": sol.n_iter,
        }
        for j in range(k)
    ]  # fmt: skip
    return SVMSolution(coef, sol.intercept, 1, sol.converged, sol.objective, sol.gap, history)
