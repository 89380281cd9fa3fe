"""Whether float32 features are accurate enough for a fitted one-pass primal model.

The default feature dtype (``dtype="auto"``) computes the random Fourier features in float32
(numpy's float32 ``cos`` is SIMD, its float64 ``cos`` a scalar libm loop, and the float32
``syrk`` is twice the float64 one; every cross-block sum and every solve stays float64). After
the pass the solver knows the spectrum of the centred ΦᵀΦ, the coefficients β and the scale
of y, and :func:`float32_check` estimates how far float32 rounding can move the model at the
chosen α:

- the fitted values, from the rounding of the Gram ``‖δG‖ ≈ ε_G·‖G‖_F`` (``ε_G`` =
  :func:`~bigkernel.numerics.sums.sums_precision` of float32): the perturbation of Φβ is
  ``Φ(G + αI)⁻¹δGβ``, whose RMS over the n rows is at most ``ε_G‖G‖_F‖β‖ / (2√(αn))``
  (``max_s √s/(s + α) = 1/(2√α)``);
- any one prediction, from the rounding of the features themselves (the argument ``ωᵀx + b``
  carries an absolute error of ``u·|ωᵀx + b|``, u the float32 unit roundoff):
  ``u(1 + z_max)·c·‖β‖₁`` with ``c`` the feature scale √(2/D) and ``z_max`` the largest
  argument over the training range;
- the posterior standard deviation: relative ``u(1 + z_max) + δ/(2α)`` (the features'
  rounding, and the Gram's rounding in a quadratic form of (G + αI)⁻¹, ``δ = ε_G‖G‖_F/√D``
  per direction: the float32 eigenvalues below δ are rounding noise of about that size);
- the α path: float32 noise eigenvalues add ``δ·Σ α/(s + α)²`` to df(α) (GCV and the
  evidence move with it); a grid α is *resolved* where that is at most
  :data:`FLOAT32_STD_RTOL`·df(α). The chosen α must be resolved and, when it was chosen from a
  grid, not the smallest resolved α of a grid that goes below them (the float64 optimum could
  lie among the unresolved ones). ``alpha_floor`` is the smallest resolved grid α.

The two mean terms are divided by the standard deviation of y. Each estimate was compared with
the measured float32-vs-float64 difference on 1-d sine data (γ from 0.5 to 1000, α from 1 to
1e-9, D = 512; tests/test_default_dtype.py): the estimates were never below the measured
differences and 5–1000× above them. The check fails when the mean's estimate exceeds
:data:`FLOAT32_RTOL` or the standard deviation's :data:`FLOAT32_STD_RTOL`; the solver then redoes the pass in float64 (and says so).

This module is numpy only (layer rule: numerics imports nothing from the solvers or models).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["FLOAT32_RTOL", "FLOAT32_STD_RTOL", "Float32Check", "float32_check", "fourier_argument_bound"]

#: tolerance of :func:`float32_check` for the mean: predictions within this fraction of the
#: standard deviation of y of the model fitted on float64 features
FLOAT32_RTOL = 1e-3

#: tolerance of :func:`float32_check` for the posterior standard deviation (relative)
FLOAT32_STD_RTOL = 1e-2

#: float32 unit roundoff
_U32 = float(np.finfo(np.float32).eps) / 2


@dataclass(frozen=True)
class Float32Check:
    """The outcome of :func:`float32_check` (estimates relative to the scales named there).

    Attributes
    ----------
    ok : bool
        Both estimates within their tolerances.
    mean_error : float
        Estimated change of the fitted values (RMS) and of a prediction from the features'
        rounding, in units of the standard deviation of y (largest over targets).
    std_error : float
        Estimated relative change of the posterior standard deviation.
    df_error : float
        Estimated change of df at the chosen α (absolute).
    alpha_floor : float
        The smallest grid α whose df, GCV and evidence float32 resolves (inf: none).
    rtol, std_rtol : float
        The tolerances they were compared with (``std_rtol`` also relative to df).
    """

    ok: bool
    mean_error: float
    std_error: float
    df_error: float
    alpha_floor: float
    rtol: float
    std_rtol: float

    def as_dict(self) -> dict:
        """Plain floats and a bool (JSON, log lines, the model store)."""
        return {k: (bool(v) if k == "ok" else float(v)) for k, v in asdict(self).items()}


def fourier_argument_bound(
    weights: np.ndarray, offsets: np.ndarray | None, x_min: np.ndarray, x_max: np.ndarray
) -> float:
    """The largest ``|ωᵀx + b|`` over the box ``[x_min, x_max]`` (``weights`` of shape (d, D)).

    Parameters
    ----------
    weights : ndarray of shape (n_features, n_components)
    offsets : ndarray of shape (n_components,) or None
    x_min, x_max : ndarray of shape (n_features,)

    Returns
    -------
    float
        ``max_j Σ_i |ω_ij|·max(|lo_i|, |hi_i|) + |b_j|``; inf when the range is not finite.
    """
    reach = np.maximum(np.abs(np.asarray(x_min, float)), np.abs(np.asarray(x_max, float)))
    z = reach @ np.abs(np.asarray(weights, float))
    if offsets is not None:
        z = z + np.abs(np.asarray(offsets, float))
    return float(np.max(z, initial=0.0))


def float32_check(
    eigvals: np.ndarray,
    coef: np.ndarray,
    alpha: float,
    alphas: np.ndarray,
    n: float,
    y_ss: np.ndarray,
    *,
    feature_scale: float,
    argument_bound: float,
    gram_eps: float,
    rtol: float = FLOAT32_RTOL,
    std_rtol: float = FLOAT32_STD_RTOL,
) -> Float32Check:
    """Estimate how far float32 features move a primal ridge model (see the module notes).

    Notes
    -----
    One function on purpose: the estimates share their intermediate figures (the Gram's
    rounding, the per-direction noise) and read as the module notes list them.

    Parameters
    ----------
    eigvals : ndarray of shape (D,)
        Eigenvalues of the centred ΦᵀΦ (features scaled).
    coef : ndarray of shape (D, k)
        β at ``alpha``.
    alpha : float
        The chosen α.
    alphas : ndarray of shape (A,)
        The α path scored (``[alpha]`` when α was fixed).
    n : float
        Rows (sum of weights).
    y_ss : ndarray of shape (k,)
        Centred Σ(y − ȳ)² per target.
    feature_scale : float
        The constant factor of the features (√(2/D) for the cos form).
    argument_bound : float
        :func:`fourier_argument_bound` of the map over the training range.
    gram_eps : float
        Relative precision of float32 block products (``sums_precision("float32")``).
    rtol : float, default=FLOAT32_RTOL
    std_rtol : float, default=FLOAT32_STD_RTOL

    Returns
    -------
    Float32Check
    """
    s = np.maximum(np.asarray(eigvals, float), 0.0)
    beta = np.asarray(coef, float).reshape(s.shape[0], -1)
    gram_err = gram_eps * float(np.sqrt(np.sum(s**2)))
    y_sd = np.sqrt(np.maximum(np.asarray(y_ss, float), 0.0) / max(n, 1.0))
    y_sd = np.where(y_sd > 0, y_sd, 1.0)
    fitted = gram_err * np.linalg.norm(beta, axis=0) / (2 * np.sqrt(alpha * max(n, 1.0)))
    phi_err = _U32 * (1 + argument_bound)
    feature = phi_err * feature_scale * np.abs(beta).sum(axis=0)
    mean_error = float(np.max((fitted + feature) / y_sd, initial=0.0))
    delta = gram_err / np.sqrt(s.shape[0])  # rounding noise of the Gram per direction
    std_error = float(phi_err + delta / (2 * alpha))
    grid = np.unique(np.append(np.asarray(alphas, float), alpha))
    df_errors = delta * (grid[:, None] / (s[None, :] + grid[:, None]) ** 2).sum(axis=1)
    resolved = df_errors <= std_rtol * np.maximum((s[None, :] / (s[None, :] + grid[:, None])).sum(axis=1), 1.0)
    floor = float(grid[resolved].min()) if resolved.any() else np.inf
    chosen = int(np.searchsorted(grid, alpha))
    path_ok = bool(resolved[chosen]) and (resolved.all() or alpha > floor)
    ok = bool(np.isfinite(mean_error) and np.isfinite(std_error) and mean_error <= rtol and std_error <= std_rtol)
    return Float32Check(
        ok and path_ok, mean_error, std_error, float(df_errors[chosen]), floor, float(rtol), float(std_rtol)
    )
