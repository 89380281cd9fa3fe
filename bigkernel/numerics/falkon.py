# TEMPORARY stand-in (not committed): replaced by helper's numerics/falkon.py
from dataclasses import dataclass
import warnings
import numpy as np
import scipy.linalg as sl
from sklearn.exceptions import ConvergenceWarning


class FalkonPreconditioner:
    @classmethod
    def build(cls, K_MM, alphas, n_w, *, jitter=None, block=4096):
        self = cls()
        M = K_MM.shape[0]
        self.eps = 1e-12 * np.mean(np.diag(K_MM)) * M
        self.T = sl.cholesky(K_MM + self.eps * np.eye(M))
        self.alphas = np.asarray(alphas, float)
        self.n_w = n_w
        self.A = {}
        TT = self.T @ self.T.T / M
        for a in np.unique(self.alphas):
            self.A[a] = sl.cholesky(TT + a / n_w * np.eye(M))
        self.nbytes = (1 + len(self.A)) * M * M * 8
        return self

    def apply(self, V, cols):
        out = np.empty_like(V)
        for i, c in enumerate(cols):
            A = self.A[self.alphas[c]]
            out[:, i] = sl.solve_triangular(self.T, sl.solve_triangular(A, V[:, i])) / np.sqrt(self.n_w)
        return out

    def apply_t(self, V, cols):
        out = np.empty_like(V)
        for i, c in enumerate(cols):
            A = self.A[self.alphas[c]]
            out[:, i] = sl.solve_triangular(A, sl.solve_triangular(self.T, V[:, i], trans="T"), trans="T") / np.sqrt(self.n_w)
        return out

    def kmm_matvec(self, V):
        return self.T.T @ (self.T @ V) - self.eps * V


@dataclass
class FalkonResult:
    beta: np.ndarray
    n_iter: int
    residual: np.ndarray
    history: np.ndarray
    converged: np.ndarray


def falkon_solve(gram, rhs, prec, alphas, *, tol=1e-6, max_iter=100, step_hook=None, x0=None):
    m = rhs.shape[1]
    cols = np.arange(m)
    al = np.asarray(alphas, float)
    def op(G, cols):
        V = prec.apply(G, cols)
        H = gram(V) + prec.kmm_matvec(V) * al[cols]
        return prec.apply_t(H, cols)
    b = prec.apply_t(rhs, cols)
    bn = np.linalg.norm(b, axis=0)
    x = np.zeros_like(b); r = b.copy(); p = r.copy(); rz = (r * r).sum(0)
    hist = [np.ones(m)]
    active = np.ones(m, bool)
    it = 0
    while active.any() and it < max_iter:
        it += 1
        a_cols = np.flatnonzero(active)
        Ap = op(p[:, a_cols], a_cols)
        step = rz[a_cols] / (p[:, a_cols] * Ap).sum(0)
        if step_hook: step_hook(a_cols, step)
        x[:, a_cols] += p[:, a_cols] * step
        r[:, a_cols] -= Ap * step
        rzn = (r[:, a_cols] ** 2).sum(0)
        p[:, a_cols] = r[:, a_cols] + p[:, a_cols] * (rzn / rz[a_cols])
        rz[a_cols] = rzn
        res = np.linalg.norm(r, axis=0) / bn
        hist.append(res.copy())
        active = res > tol
    if active.any():
        warnings.warn("CG did not converge: raise max_iter", ConvergenceWarning)
    return FalkonResult(prec.apply(x, cols), it, res, np.array(hist), ~active)
