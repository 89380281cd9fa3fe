"""Preconditioned conjugate gradients over a matvec callable, several right-hand sides at once.

The solver never sees the kernel: it gets ``matvec(V) = A V`` for an ``(n, k)`` block ``V``
(Falkon's ``solve(X0, B, mmv, ...)`` design). Column ``j`` solves ``(A + shift_j I) x_j = b_j``
with its own CG recurrence (own step sizes), vectorised across columns, so one call can solve
several targets and several ridge penalties α together: every matvec is shared. Columns that
converge drop out of the active set and the matvec is then called on the remaining columns only.

All arithmetic is float64, whatever ``matvec`` returns. Written once for every array namespace
(:mod:`~bigkernel.numerics.namespace`): with CuPy input the vectors stay on the GPU and only the
per-column scalars (step checks, residual norms) come to the host.
"""

from __future__ import annotations

import logging
import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from sklearn.exceptions import ConvergenceWarning

from bigkernel.errors import DataError, NotPSDError, ParameterError
from bigkernel.numerics.namespace import as_namespace_array, is_numpy, namespace, take_rows, to_host
from bigkernel.validation import check_int

logger = logging.getLogger(__name__)

__all__ = ["CGResult", "conjugate_gradient"]

Matvec = Callable[[Any], Any]

#: Stagnation, judged at each true-residual recompute. CG decreases the energy
#: φ(x) = ½xᵀAx − bᵀx = −½xᵀ(b + r) at every step (its residual need not decrease: it rose 20×
#: in a test), until round-off bounds the accuracy it can reach (about ε·cond); past that the
#: iterates drift and, left running to max_iter, blow up (measured: relative residual 2.7e-9 at
#: iteration 200 of an exact fit, 1e45 at 9,000). A column stops when φ rises above its best
#: by more than its rounding (this relative margin of Σ|xᵢ(bᵢ + rᵢ)|), or when neither φ nor the
#: true residual has improved for this many iterations (at least two recomputes; unpreconditioned
#: CG on an ill-conditioned rbf system went 100 iterations without either and then converged)
ENERGY_RTOL = 1e-8
STALL_ITERATIONS = 500


@dataclass(frozen=True)
class CGResult:
    """Result of :func:`conjugate_gradient`.

    For a 1-D right-hand side the per-column fields are scalars.

    Attributes
    ----------
    x : ndarray of shape (n,) or (n, m)
        Solutions.
    n_iter : int or ndarray of shape (m,)
        Iterations each column ran.
    residual : float or ndarray of shape (m,)
        Relative residual ``‖b − (A + shift I) x‖ / ‖b‖`` per column, from the CG recurrence
        (refreshed with the true residual every ``recompute_every`` iterations).
    converged : bool or ndarray of shape (m,)
        ``residual <= tol``.
    n_matvec : int
        Calls of ``matvec`` (iterations plus residual recomputations), the cost that matters
        when every matvec is a pass over the Gram matrix.
    breakdown : bool or ndarray of shape (m,) or None
        With ``on_breakdown="stop"``: the columns CG stopped at a breakdown (``pᵀAp`` or
        ``rᵀM⁻¹r`` not > 0; ``x`` holds their last iterate before it). None with ``"raise"``.
    stagnated : bool or ndarray of shape (m,)
        Columns stopped above ``tol`` because CG stopped making progress (see
        :data:`ENERGY_RTOL`): ``tol`` is below what round-off lets CG reach for this system.
    """

    x: np.ndarray
    n_iter: Any
    residual: Any
    converged: Any
    n_matvec: int = 0
    breakdown: Any = None
    stagnated: Any = False


class _Operator:
    """``V ↦ A V + shift[cols] V`` with shape checks and a call counter; ``matvec(V, cols)``
    when ``column_matvec`` (each column its own operator)."""

    def __init__(self, matvec: Matvec, shift: np.ndarray | None, n: int, xp: Any, column_matvec: bool = False) -> None:
        self.matvec, self.shift, self.n, self.calls, self.xp = matvec, shift, n, 0, xp
        self.column_matvec = column_matvec

    def __call__(self, V: Any, cols: np.ndarray) -> Any:
        self.calls += 1
        out = self.matvec(V, cols.copy()) if self.column_matvec else self.matvec(V)
        AV = as_namespace_array(self.xp, out, like=V, dtype=self.xp.float64)
        if tuple(AV.shape) != tuple(V.shape):
            raise DataError(f"matvec returned shape {tuple(AV.shape)}, expected {tuple(V.shape)} (same as its input)")
        if self.shift is not None:
            AV = AV + V * as_namespace_array(self.xp, self.shift[cols], like=V)
        return AV


def _preconditioner(preconditioner: Any, shift: np.ndarray | None, xp: Any) -> Callable[[Any, np.ndarray], Any]:
    """Normalise the preconditioner argument to ``f(R, cols) ≈ (A + shift[cols] I)⁻¹ R``."""
    if preconditioner is None:
        return lambda R, cols: R
    if shift is not None and hasattr(preconditioner, "apply_shifted"):
        apply = lambda R, cols: preconditioner.apply_shifted(R, shift[cols])
    elif hasattr(preconditioner, "apply"):
        apply = lambda R, cols: preconditioner.apply(R)
    elif callable(preconditioner):
        apply = lambda R, cols: preconditioner(R)
    else:
        raise ParameterError(
            "preconditioner must be None, a callable R -> M⁻¹R or an object with apply(R), "
            f"found {type(preconditioner).__name__}"
        )

    def checked(R: Any, cols: np.ndarray) -> Any:
        Z = as_namespace_array(xp, apply(R, cols), like=R, dtype=xp.float64)
        if tuple(Z.shape) != tuple(R.shape):
            raise DataError(f"preconditioner returned shape {tuple(Z.shape)}, expected {tuple(R.shape)}")
        return Z

    return checked


def _column_shifts(shift: ArrayLike | None, m: int) -> np.ndarray | None:
    if shift is None:
        return None
    s = np.asarray(shift, dtype=np.float64)
    if s.ndim == 0:
        s = np.full(m, float(s))
    if s.shape != (m,):
        raise ParameterError(f"shift must be a float or have shape ({m},) (one per column of B), found {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ParameterError(f"shift must be finite, found {s.tolist()}")
    return s


def _column_tols(tol: ArrayLike, m: int) -> np.ndarray:
    """``tol`` as one tolerance per column (a float applies to all)."""
    if np.ndim(tol) == 0:
        if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not (tol > 0 and math.isfinite(tol)):
            raise ParameterError(f"tol must be a finite float > 0, found {tol!r}")
        return np.full(m, float(tol))
    t = np.asarray(tol, dtype=np.float64)
    if t.shape != (m,) or not np.all(np.isfinite(t) & (t > 0)):
        raise ParameterError(f"tol must be a finite float > 0 or one per column of B (shape ({m},)), found {tol!r}")
    return t


def _check_options(max_iter: int | None, recompute_every: int, n: int) -> int:
    check_int("recompute_every", recompute_every, 1)
    return 10 * n if max_iter is None else check_int("max_iter", max_iter, 1)


def _breakdown(what: str, values: Any, cols: np.ndarray, it: int, broken: np.ndarray | None = None) -> np.ndarray:
    """The columns among ``cols`` whose ``values`` (pᵀAp or rᵀz, any namespace) are not > 0:
    marked in ``broken`` (``on_breakdown="stop"``), else NotPSDError (None: raise)."""
    values = to_host(values)
    bad = ~(values > 0)
    if broken is not None:
        if bad.any():
            broken[cols[bad]] = True
            logger.info("CG breakdown at iteration %d in column(s) %s: %s <= 0; stopped", it, cols[bad].tolist(), what)
        return bad
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise NotPSDError(
            f"CG breakdown in column {int(cols[j])} at iteration {it}: {what} = {values[j]:.3g} "
            "<= 0, so the operator"
            + (" (A + shift I)" if what.startswith("p") else "'s preconditioner")
            + " is not positive definite. Check the kernel with check_psd, increase alpha, or "
            "use a PSD kernel / SPD preconditioner."
        )
    return bad


def conjugate_gradient(
    matvec: Matvec,
    B: ArrayLike,
    *,
    preconditioner: Any = None,
    x0: ArrayLike | None = None,
    tol: float | ArrayLike = 1e-6,
    max_iter: int | None = None,
    shift: ArrayLike | None = None,
    recompute_every: int = 50,
    callback: Callable[[int, np.ndarray, np.ndarray], None] | None = None,
    column_matvec: bool = False,
    step_callback: Callable[[np.ndarray, np.ndarray], None] | None = None,
    warn_not_converged: bool = True,
    on_breakdown: str = "raise",
) -> CGResult:
    """Solve ``(A + shift_j I) x_j = b_j`` for every column ``j`` by preconditioned CG.

    Parameters
    ----------
    matvec : callable
        ``matvec(V) -> A V`` for ``V`` of shape ``(n, k)``, any ``1 <= k <= m`` (only the
        columns still iterating are passed). ``A`` must be symmetric positive semi-definite.
        With ``column_matvec=True``, ``matvec(V, cols) -> [A_c V_c]``: ``cols`` (int ndarray
        of shape ``(k,)``, a copy) are the indices in ``B`` of the columns of ``V``, and each
        column ``c`` may have its own symmetric PSD operator ``A_c``.
    B : array-like of shape (n,) or (n, m)
        Right-hand sides.
    preconditioner : callable or object, optional
        Approximates ``(A + shift I)⁻¹``; must be symmetric positive definite. Used as
        ``M.apply_shifted(R, shift_cols)`` when ``shift`` is given and ``M`` has that method
        (:class:`~bigkernel.numerics.precond.LowRankPreconditioner` does: then column ``j``
        gets the exact low-rank preconditioner for its own ``shift_j``), else ``M.apply(R)``,
        else ``M(R)``. A preconditioner built for one α is still valid for other shifts (it
        is SPD, so CG converges to the right answer) but is less effective the further the
        shift is from the α it was built for.
    x0 : array-like of shape (n,) or (n, m), optional
        Initial guess (zeros by default).
    tol : float or array-like of shape (m,), default=1e-6
        Stop a column when ``‖b − (A + shift I)x‖ / ‖b‖ <= tol`` (its own ``tol`` when one
        is given per column: e.g. trace-estimation probes need far less accuracy than the
        solution, since a quadratic form's error is the square of the residual's).
    max_iter : int, optional
        Iterations per column; default ``10 * n`` (as scipy's ``cg``).
    shift : float or array-like of shape (m,), optional
        Per-column diagonal shift, e.g. several ridge penalties α with ``matvec = K``.
    recompute_every : int, default=50
        Replace the recursive residual by the true ``b − (A + shift I)x`` (one extra matvec)
        every this many iterations, to stop round-off drift. Not too often: a true residual
        breaks the recurrence's orthogonality and, at 1, CG can stall near ``ε·cond(A)``.
    callback : callable, optional
        ``callback(n_iter, X, residual)`` after each iteration with the current ``(n, m)``
        solutions and ``(m,)`` relative residuals (read-only views).
    column_matvec : bool, default=False
        Call ``matvec(V, cols)`` with the active columns' indices (see ``matvec``).
    step_callback : callable, optional
        ``step_callback(cols, step)`` once per iteration, right after the ``matvec`` of the
        search directions ``P`` (the iteration's first matvec call): ``cols`` (int, ``(k,)``)
        the active columns, ``step`` (host float64, ``(k,)``) their step sizes, so that
        ``x_c += step_c p_c`` this iteration. A caller can update any quantity linear in the
        solution from that matvec's by-products (``q += step · (L P)`` keeps ``q = L x``,
        e.g. held-out predictions). The column shift and an ``x0`` do not enter these
        by-products: with ``x0`` the caller starts from ``L x0``; a residual recompute
        (``recompute_every``) calls ``matvec`` on ``X``, not on directions (set
        ``recompute_every > max_iter`` to have only direction matvecs).
    warn_not_converged : bool, default=True
        Warn when a column has not converged; a caller with its own, more specific warning
        turns this off.
    on_breakdown : {"raise", "stop"}, default="raise"
        ``"stop"``: a column whose ``pᵀAp`` or ``rᵀM⁻¹r`` is not > 0 stops there (its last
        iterate kept, ``CGResult.breakdown`` marks it, not converged) and the other columns
        go on — for a grid of penalties where round-off breaks the smallest one down.

    A column also stops, not converged, when CG stops making progress on it (checked at each
    recompute, see :data:`ENERGY_RTOL`; ``CGResult.stagnated``): ``tol`` is then below the
    accuracy round-off allows. Without a ``step_callback`` it returns its iterate of least true
    residual (at a recompute); with one, its last (the caller's by-products follow it).

    Returns
    -------
    CGResult

    Raises
    ------
    NotPSDError
        Breakdown: ``pᵀ(A + shift I)p <= 0`` (the operator is not positive definite) or
        ``rᵀM⁻¹r <= 0`` (the preconditioner is not); the message names column and iteration.
        Not with ``on_breakdown="stop"``.

    Warns
    -----
    ConvergenceWarning
        When some column has not reached ``tol`` after ``max_iter`` iterations; the message
        gives the iterations and the relative residuals.

    Notes
    -----
    One function on purpose: the block CG loop keeps its state (residuals, directions, per-
    column convergence, periodic true-residual recompute) in local arrays; splitting it
    would turn that state into an object for no reuse.
    """
    xp = namespace(B) if _is_array(B) else namespace()
    Bm = as_namespace_array(xp, B, dtype=xp.float64)
    squeeze = Bm.ndim == 1
    if squeeze:
        Bm = Bm[:, None]
    if Bm.ndim != 2 or Bm.shape[0] == 0 or Bm.shape[1] == 0:
        raise DataError(
            f"B must have shape (n,) or (n, m) with n, m >= 1, found {tuple(B.shape) if _is_array(B) else np.shape(B)}"
        )
    n, m = Bm.shape
    tols = _column_tols(tol, m)
    max_iter = _check_options(max_iter, recompute_every, n)
    shifts = _column_shifts(shift, m)
    op = _Operator(matvec, shifts, n, xp, column_matvec)
    prec = _preconditioner(preconditioner, shifts, xp)

    # a zero right-hand side has the zero solution: report it converged with residual 0
    b_norm = to_host(_col_norms(xp, Bm))
    safe_norm = np.where(b_norm > 0, b_norm, 1.0)
    nonzero = as_namespace_array(xp, (b_norm > 0).astype(np.float64), like=Bm)
    X = xp.zeros_like(Bm) if x0 is None else _initial(xp, x0, Bm, squeeze) * nonzero
    all_cols = np.arange(m)
    R = Bm if x0 is None else (Bm - op(X, all_cols)) * nonzero
    residual = to_host(_col_norms(xp, R)) / safe_norm
    converged = residual <= tols
    n_iter = np.zeros(m, dtype=np.int64)

    # the active columns only, compacted: converged ones leave the working arrays (and the
    # matvec) and their solutions go back into X
    if on_breakdown not in ("raise", "stop"):
        raise ParameterError(f"on_breakdown must be 'raise' or 'stop', found {on_breakdown!r}")
    broken = np.zeros(m, bool) if on_breakdown == "stop" else None
    active = np.flatnonzero(~converged)
    Xa, Ra, Ba = (take_rows(xp, A, active, axis=1) for A in (X, R, Bm))
    Pa, rz = Ra, None
    if active.size:
        Z = prec(Ra, active)
        rz = _col_dot(xp, Ra, Z)
        bad = _breakdown("rᵀM⁻¹r", rz, active, 0, broken)
        Pa = Z
        if bad.any():  # stopped before a step: x0 (or zero) is their iterate
            X, active, (Xa, Ra, Ba, Pa, rz) = _retire(xp, X, active, bad, Xa, Ra, Ba, Pa, rz)

    # stagnation (at recomputes): per column the least energy φ, the least true residual and
    # its iterate (restorable only when no step_callback tracks the iterates; one more n × m
    # array), and when each last improved
    watch = _Progress(xp, X, Bm, R, residual, step_callback is None, max(STALL_ITERATIONS, 2 * recompute_every))
    stagnated = np.zeros(m, dtype=bool)
    it = 0
    while active.size and it < max_iter:
        it += 1
        APa = op(Pa, active)
        pAp = _col_dot(xp, Pa, APa)
        bad = _breakdown("pᵀAp", pAp, active, it, broken)
        if bad.any():  # no step for them: their iterate is the last one
            X, active, (Xa, Ra, Ba, Pa, rz, APa, pAp) = _retire(xp, X, active, bad, Xa, Ra, Ba, Pa, rz, APa, pAp)
            if not active.size:
                break
        step = rz / pAp
        if step_callback is not None:
            step_callback(active.copy(), np.array(to_host(step), dtype=np.float64))
        Xa = Xa + Pa * step
        if it % recompute_every == 0:
            Ra = Ba - op(Xa, active)
        else:
            Ra = Ra - APa * step
        residual[active] = to_host(_col_norms(xp, Ra)) / safe_norm[active]
        n_iter[active] = it
        done = residual[active] <= tols[active]
        converged[active[done]] = True
        stop = done
        if it % recompute_every == 0:  # a true residual: judge progress on it
            stall = watch.stalled(it, active, done, Xa, Ba, Ra, residual)
            if stall.any():
                stagnated[active[stall]] = True
                logger.info(
                    "CG column(s) %s stopped at iteration %d: no progress since iteration(s) %s "
                    "(least relative residual %s; tol is below round-off's reach)",
                    active[stall].tolist(),
                    it,
                    watch.best_it[active[stall]].tolist(),
                    np.array2string(watch.min_res[active[stall]], precision=3),
                )
                stop = done | stall
        if callback is not None:
            X = _put_columns(xp, X, Xa, active)
            callback(it, X, residual)
        if stop.any():
            X, active, (Xa, Ra, Ba, Pa, rz) = _retire(xp, X, active, stop, Xa, Ra, Ba, Pa, rz)
            if not active.size:
                break
        Z = prec(Ra, active)
        rz_new = _col_dot(xp, Ra, Z)
        bad = _breakdown("rᵀM⁻¹r", rz_new, active, it, broken)
        if bad.any():  # this iteration's step was taken: its iterate stands
            X, active, (Xa, Ra, Ba, Pa, rz, Z, rz_new) = _retire(xp, X, active, bad, Xa, Ra, Ba, Pa, rz, Z, rz_new)
            if not active.size:
                break
        Pa = Z + Pa * (rz_new / rz)
        rz = rz_new
    if active.size:
        X = _put_columns(xp, X, Xa, active)
    X = watch.restore(X, np.flatnonzero(stagnated), residual)

    _report(n_iter, residual, converged | (False if broken is None else broken), tols, max_iter, op.calls,
            warn_not_converged, stagnated, restored=watch.X_best is not None)  # fmt: skip
    if squeeze:
        b0 = None if broken is None else bool(broken[0])
        return CGResult(
            X[:, 0], int(n_iter[0]), float(residual[0]), bool(converged[0]), op.calls, b0, bool(stagnated[0])
        )
    return CGResult(X, n_iter, residual, converged, op.calls, broken, stagnated)


class _Progress:
    """CG's progress per column at true-residual recomputes (see :data:`ENERGY_RTOL`)."""

    def __init__(self, xp: Any, X: Any, B: Any, R: Any, residual: np.ndarray, keep: bool, span: int) -> None:
        self.xp, self.span = xp, span
        self.best_phi, _ = self._energy(X, B, R)
        self.best_it = np.zeros(residual.shape, dtype=np.int64)
        self.min_res, self.min_res_it = residual.copy(), self.best_it.copy()
        self.X_best = xp.asarray(X, copy=True) if keep else None

    def _energy(self, X: Any, B: Any, R: Any) -> tuple[np.ndarray, np.ndarray]:
        """φ = −½xᵀ(b + r) per column and its rounding scale Σ|xᵢ(bᵢ + rᵢ)|."""
        T = X * (B + R)
        return -0.5 * to_host(self.xp.sum(T, axis=0)), to_host(self.xp.sum(self.xp.abs(T), axis=0))

    def stalled(
        self, it: int, active: np.ndarray, done: np.ndarray, Xa: Any, Ba: Any, Ra: Any, residual: np.ndarray
    ) -> np.ndarray:
        """Record iteration ``it`` (``Ra`` true residuals); the mask over ``active`` of the
        columns (not ``done``) that stopped making progress."""
        phi, scale = self._energy(Xa, Ba, Ra)
        margin = ENERGY_RTOL * scale
        best = self.best_phi[active]
        # progress is a decrease of φ beyond its rounding; a rise beyond it is divergence
        progress, rose = phi < best - margin, phi > best + margin
        self.best_phi[active[progress]], self.best_it[active[progress]] = phi[progress], it
        # the iterate kept is the one of least true residual: near round-off's floor φ's
        # differences are below its rounding, the residual still tells the iterates apart
        r = residual[active]
        better = r < self.min_res[active]
        self.min_res[active[better]], self.min_res_it[active[better]] = r[better], it
        if self.X_best is not None and better.any():
            self.X_best = _put_columns(self.xp, self.X_best, Xa, active, better)
        idle = (it - self.best_it[active] >= self.span) & (it - self.min_res_it[active] >= self.span)
        return ~done & (rose | idle)

    def restore(self, X: Any, cols: np.ndarray, residual: np.ndarray) -> Any:
        """``X`` with the least-residual iterate (at a recompute) of the stopped ``cols`` (when
        kept), ``residual`` updated to theirs."""
        if self.X_best is None or not cols.size:
            return X
        residual[cols] = self.min_res[cols]
        return _put_columns(self.xp, X, take_rows(self.xp, self.X_best, cols, axis=1), cols)


def _retire(
    xp: Any, X: Any, active: np.ndarray, stop: np.ndarray, Xa: Any, *others: Any
) -> tuple[Any, np.ndarray, list]:
    """Columns ``stop`` (a mask over ``active``) leave the loop: their iterates go into ``X``, and
    the working arrays (``Xa`` first, columns last axis) keep the others."""
    X = _put_columns(xp, X, Xa, active, stop)
    keep = np.flatnonzero(~stop)
    return X, active[keep], [take_rows(xp, A, keep, axis=A.ndim - 1) for A in (Xa, *others)]


def _is_array(a: Any) -> bool:
    return hasattr(a, "shape") and hasattr(a, "dtype") and not isinstance(a, (list, tuple))


def _col_dot(xp: Any, A: Any, B: Any) -> Any:
    """``Σ_i A_ij B_ij`` per column (numpy: einsum, no temporary)."""
    if is_numpy(xp):
        return np.einsum("ij,ij->j", A, B)
    return xp.sum(A * B, axis=0)


def _col_norms(xp: Any, A: Any) -> Any:
    if is_numpy(xp):
        return np.linalg.norm(A, axis=0)
    return xp.linalg.vector_norm(A, axis=0)


def _put_columns(xp: Any, X: Any, Xa: Any, cols: np.ndarray, which: np.ndarray | None = None) -> Any:
    """``X[:, cols[which]] = Xa[:, which]`` (all of ``cols`` when ``which`` is None), in place;
    column by column outside numpy (the standard assigns slices, not index arrays)."""
    idx = np.arange(cols.size) if which is None else np.flatnonzero(which)
    if is_numpy(xp):
        X[:, cols[idx]] = Xa[:, idx]
        return X
    for i in idx:
        j = int(cols[i])
        X[:, j : j + 1] = Xa[:, int(i) : int(i) + 1]
    return X


def _initial(xp: Any, x0: Any, Bm: Any, squeeze: bool) -> Any:
    X = as_namespace_array(xp, x0, like=Bm, dtype=xp.float64)
    X = xp.asarray(X, copy=True)  # a copy: CG updates it in place
    if squeeze and X.ndim == 1:
        X = X[:, None]
    shape = tuple(Bm.shape)
    if tuple(X.shape) != shape:
        raise DataError(f"x0 must have the shape of B, {shape if not squeeze else shape[:1]}, found {tuple(X.shape)}")
    return X


def _report(
    n_iter: np.ndarray,
    residual: np.ndarray,
    converged: np.ndarray,
    tol: np.ndarray,
    max_iter: int,
    calls: int,
    warn: bool = True,
    stagnated: np.ndarray | None = None,
    restored: bool = True,
) -> None:
    if converged.all():
        logger.info(
            "CG converged: %d right-hand side(s), at most %d iterations, %d matvecs, max relative residual %.3g",
            len(n_iter),
            int(n_iter.max(initial=0)),
            calls,
            float(residual.max(initial=0.0)),
        )
        return
    bad = np.flatnonzero(~converged)
    if not warn:
        logger.info("CG stopped at max_iter=%d with %d of %d column(s) above tol", max_iter, bad.size, len(n_iter))
        return
    shown = ", ".join(f"column {j}: {residual[j]:.3g}" for j in bad[:5]) + (", ..." if bad.size > 5 else "")
    tol_text = f"{tol[0]:g}" if np.all(tol == tol[0]) else f"{tol[bad].min():g}..{tol[bad].max():g}"
    stuck = bad[stagnated[bad]] if stagnated is not None else bad[:0]
    if stuck.size:
        reached = f"{residual[stuck].max():.3g}"
        warnings.warn(
            f"CG stopped before tol={tol_text} for {bad.size} of {len(n_iter)} right-hand side(s): relative "
            f"residual {shown}. {stuck.size} of them stopped improving after {int(n_iter[stuck].max())} "
            f"iterations, at about {reached}: round-off (about 1e-16 × the system's condition number) "
            f"keeps CG from going lower{', and the best iterate was kept' if restored else ''}. Loosen tol "
            f"to {reached} or more, "
            "or increase alpha (it lowers the condition number).",
            ConvergenceWarning,
            stacklevel=3,
        )
        return
    warnings.warn(
        f"CG did not converge for {bad.size} of {len(n_iter)} right-hand side(s) after "
        f"{max_iter} iterations: relative residual {shown} > tol={tol_text}. Increase max_iter, "
        "loosen tol, increase alpha, or use (a higher-rank) preconditioner.",
        ConvergenceWarning,
        stacklevel=3,
    )
