"""Whether float32 features are accurate enough for a fitted one-pass primal model.

The default feature dtype (``dtype="auto"``) computes the random Fourier features in float32
(numpy's float32 ``cos`` is SIMD, its float64 ``cos`` a scalar libm loop, and the float32
``syrk`` is twice the float64 one). Each sub-block of ``r`` rows (at most 8192) is multiplied in
float32, ``PᵀP`` with ``P = [φ | y | 1]``, and every sum across sub-blocks and every solve is
float64. After the pass, :func:`float32_check` estimates how far float32 rounding moves the
model at the chosen α, against the same model fitted on float64 features.

**The errors.** Two roundings differ from a float64 pass:

- *the features*: ``φ̂ = φ + E``; an entry of E is the rounding of the float32 argument
  ``ωᵀx + b`` (absolute ~u·|ωᵀx + b|, u = 2⁻²⁴) times ``sin``, plus that of ``cos`` and of the
  product input's y column. :func:`feature_rounding` measures its RMS (scaled features) on
  points at the edge of the training range with the fit's own map (sparse X: sparse rows
  with the data's mean number of stored entries): the same code path, its arguments at least
  as large as the data's;
- *the float32 block products*: a sub-block's sum ``Σₜ pₜⱼpₜₖ`` is accumulated in float32; its
  rounding error is a sum of roundings of the partial sums, with a standard deviation
  ``ρ·|T|`` for a sum whose terms trend to a total T. :func:`product_rounding` measures ρ for
  this BLAS at ``r`` rows (about 2u for OpenBLAS's blocked kernels); on another device the
  bound of a sequential sum, ``ρ = u√r/3``, is used. ``|T| ≤ r·c²`` for a block of ΦᵀΦ
  (``|φ| ≤ c``, c = the feature scale, whatever the rows' order; ``r·w_max·c²`` with row
  weights, which enter as ``√w·φ``), ``√(r c²·Σ_block y²)`` for Φᵀy (Cauchy–Schwarz).

Rounding to nearest makes these errors zero-mean and, from block to block and entry to entry,
independent: they add in quadrature, not in absolute value (the previous estimate added them in
absolute value and in the worst direction, 5–1000× above the measured differences, and grew as
√n).

**Propagation.** With G = ΦcᵀΦc (centred) and R = (G + αI)⁻¹, β̂ − β = R w to first order, where

    w = Eᵀr + Φcᵀ(e_y − Eβ) + (A_y − Aβ) [+ the centring's share of A's column of ones]

(r the training residuals, e_y the rounding of y, A the block products' errors). With
independent entries, ``E‖Φc R w‖² = Σⱼ Mⱼⱼ Var(wⱼ)`` where ``M = RGR = V diag(s/(s+α)²) Vᵀ``
is known from the fit's eigendecomposition. So the estimates are:

- *the predictions* (RMS over the training rows, in units of sd(y)):
  ``√(Σⱼ Mⱼⱼ Var(wⱼ)/n + Var(v)·Σ(s/(s+α))²/n + σ_E²‖β‖²)``, the last term the rounding of a new
  point's own features, ``Var(v) = σ_y² + σ_E²‖β‖²``. :data:`SPREAD` times it is compared with
  the tolerance: an estimate of the largest change at points like the training rows;
- *the posterior standard deviation*: a quadratic form ``φcᵀRφc`` moves by ``qᵀδGq`` (q = Rφc),
  of standard deviation ``√2·σ_G‖q‖²`` for a Gram error with entries of variance ``σ_G²``, and
  by ``2φcᵀRE(x)`` from the point's own features (standard deviation ``2σ_E‖q‖``). Over the
  training rows ``φcᵀRφc`` averages ``df/n`` and ``‖q‖²`` averages ``Σ s/(s+α)²/n``; the std
  moves by half the relative change: ``√((σ_G Σ s/(s+α)² / (√2 df))² + (σ_E √(n Σ s/(s+α)²) / df)²)``.
  The signal variance σ̂² ∝ ``J = RSS + α‖β‖² = yᵀy − bᵀRb`` (stationary in β) moves by
  ``−2βᵀδb + βᵀδGβ``, and the std everywhere by half of ``δJ/J``. :data:`SPREAD` times the
  RMS of the three is compared with the tolerance;
- *the α path*: an eigenvalue above the noise floor ``2σ_G√D`` (the norm of a D × D random
  matrix of such entries) moves by ``√2σ_G`` and df(α) by ``√2σ_G·α/(s + α)²``; an eigenvalue
  below it is taken as rounding noise (float32's positive noise eigenvalues, the negative ones
  clipped to 0), whose whole ``s/(s + α)`` is df that float64 features would not have: counted
  twice. (On the 1-d sine, n = 300 and 600, D = 512, the noise part alone was 0.94–1.0 of the
  measured df difference at every α of the grid.) GCV and the evidence move with df. A grid α is *resolved* where
  that is at most :data:`FLOAT32_STD_RTOL`·df(α). The chosen α must be resolved and, when it
  was chosen from a grid, not the smallest resolved α of a grid that goes below them (the
  float64 optimum could lie among the unresolved ones). ``alpha_floor`` is the smallest
  resolved grid α.

The check fails when the mean's estimate exceeds :data:`FLOAT32_RTOL` or the standard
deviation's :data:`FLOAT32_STD_RTOL`; the solver then redoes the pass in float64 (and says so).
``scripts/bench_dtype_check.py`` compares the estimates with the measured differences
(docs/benchmarks.md).

This module is numpy and scipy.sparse only (layer rule: numerics imports nothing from the solvers or
models).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "FLOAT32_RTOL",
    "FLOAT32_STD_RTOL",
    "SPREAD",
    "Float32Check",
    "Float32Rounding",
    "feature_rounding",
    "float32_check",
    "product_rounding",
]

#: tolerance of :func:`float32_check` for the mean: predictions within this fraction of the
#: standard deviation of y of the model fitted on float64 features
FLOAT32_RTOL = 1e-3

#: tolerance of :func:`float32_check` for the posterior standard deviation (relative)
FLOAT32_STD_RTOL = 1e-2

#: standard deviations (of the rounding model, at a point like the training rows) an estimate
#: adds up to: the model's variance differs from point to point (rare rows weigh more: the
#: largest change over 20,000 held-out rows was up to 16× the RMS change, the 99.9th
#: percentile up to 8.6×), and the model's RMS was 2–3× the measured one
#: (scripts/bench_dtype_check.py), so 6 covers the largest change of every kept case measured
SPREAD = 6.0

#: float32 unit roundoff
_U32 = float(np.finfo(np.float32).eps) / 2

#: points and product columns of the measurements behind :class:`Float32Rounding`
_PROBE_POINTS, _PROBE_COLUMNS = 256, 128
#: bytes of one batch of dense probe points: a sparse fit's rows are wide (d = 40,000: 256
#: dense points were 82 MB a copy, and the check's peak 268 MB against the pass's 5 MB)
_PROBE_BATCH_BYTES = 128 * 1024


@dataclass(frozen=True)
class Float32Rounding:
    """The two roundings a float32 pass adds (see the module notes).

    Attributes
    ----------
    feature_sd : float
        RMS rounding error of one scaled float32 feature (:func:`feature_rounding`).
    product_rel : float
        Relative standard deviation ρ of a float32 block product's sum (:func:`product_rounding`).
    block_rows : float
        Rows one float32 product sums, times the largest row weight (a weighted row enters the
        products as ``√w·φ``: a block's sums are at most ``block_rows·c²``).
    feature_scale : float
        The constant factor c of the features (``|φ| ≤ c``).
    """

    feature_sd: float
    product_rel: float
    block_rows: float
    feature_scale: float


@dataclass(frozen=True)
class Float32Check:
    """The outcome of :func:`float32_check` (estimates relative to the scales named there).

    Attributes
    ----------
    ok : bool
        Both estimates within their tolerances and the α path resolved at the choice.
    mean_error : float
        Estimated change of a prediction (``SPREAD`` × RMS), in units of the standard
        deviation of y (largest over targets).
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


def feature_rounding(
    fmap: Any, x_min: np.ndarray, x_max: np.ndarray, seed: int = 0, *, nnz_per_row: float | None = None
) -> float:
    """RMS of ``φ₃₂ − φ₆₄`` (scaled features) of ``fmap`` on points at the edge of the range.

    Each coordinate of a probe point is ``±max(|x_min|, |x_max|)`` (random signs): every
    term of the argument ``ωᵀx`` is at least as large as at any training row, and so is its
    float32 rounding. Both dtypes go through ``fmap.transform_unscaled``, the pass's own code.

    Sparse X (``nnz_per_row`` given, the mean stored entries of a training row): the probe
    points are CSR rows with that many entries on average (``⌊m⌋`` or ``⌊m⌋ + 1``), in random
    columns of nonzero range, each ``±`` its column's reach: the argument's terms are the
    data's at their largest, its length the data's mean (the RMS rounding grows with the
    terms' number), and the features go through the sparse path the pass took. A dense point
    of a wide sparse input would add d − nnz terms that no training row has (an estimate
    ~√(d/nnz) too large) and fill the map's dense-path caches (d × D).

    Parameters
    ----------
    fmap : FeatureMap
        Anything with ``transform_unscaled(X, dtype)``, ``scale`` and ``n_features_in``.
    x_min, x_max : ndarray of shape (n_features,)
        The training range.
    seed : int, default=0
    nnz_per_row : float or None, default=None
        Sparse X: its mean stored entries per row; None: dense probe points.

    Returns
    -------
    float
        inf when the range is not finite.
    """
    reach = np.maximum(np.abs(np.asarray(x_min, float)), np.abs(np.asarray(x_max, float)))
    if not np.all(np.isfinite(reach)):
        return np.inf
    rng = np.random.default_rng(seed)
    if nnz_per_row is None:
        step = max(1, _PROBE_BATCH_BYTES // (8 * reach.shape[0]))
        batches = (_dense_probe(rng, reach, min(step, _PROBE_POINTS - lo)) for lo in range(0, _PROBE_POINTS, step))
    else:
        batches = _sparse_probes(rng, reach, float(nnz_per_row), int(fmap.n_components))
    total, count = 0.0, 0
    for X in batches:
        lo = np.asarray(fmap.transform_unscaled(X, np.float32), dtype=np.float64)
        hi = np.asarray(fmap.transform_unscaled(X, np.float64), dtype=np.float64)
        total, count = total + float(np.sum((lo - hi) ** 2)), count + lo.size
    return float(np.sqrt(total / count) * fmap.scale)


def _dense_probe(rng: np.random.Generator, reach: np.ndarray, rows: int) -> np.ndarray:
    """``rows`` dense probe points: ``±reach`` with random signs (drawn as int8)."""
    return (rng.integers(0, 2, size=(rows, reach.shape[0]), dtype=np.int8) * 2 - 1) * reach


def _sparse_probes(rng: np.random.Generator, reach: np.ndarray, nnz_per_row: float, width: int) -> Iterator[Any]:
    """:data:`_PROBE_POINTS` sparse probe points (CSR, float64) in batches of about
    :data:`_PROBE_BATCH_BYTES` (their entries and their ``width`` features): row i has
    ``⌊m⌋ + [uᵢ < m − ⌊m⌋]`` entries (mean m, capped at the columns of nonzero reach) in
    distinct random columns of nonzero reach, ``±reach``."""
    cols = np.flatnonzero(reach > 0)
    m = min(max(nnz_per_row, 0.0), float(cols.size))
    counts = np.floor(m).astype(int) + (rng.random(_PROBE_POINTS) < m - np.floor(m))
    counts = np.minimum(counts, cols.size)
    step = max(1, _PROBE_BATCH_BYTES // (8 * max(int(np.ceil(m)), width, 1)))
    for lo in range(0, _PROBE_POINTS, step):
        k = counts[lo : lo + step]
        indices = np.concatenate([np.sort(rng.choice(cols, size=c, replace=False)) for c in k])
        data = (rng.integers(0, 2, size=indices.size, dtype=np.int8) * 2 - 1) * reach[indices]
        indptr = np.concatenate([[0], np.cumsum(k)])
        yield sp.csr_matrix((data, indices, indptr), shape=(k.size, reach.shape[0]))


@functools.cache
def product_rounding(block_rows: int, width: int = _PROBE_COLUMNS, sequential: bool = False) -> float:
    """Relative standard deviation ρ of a float32 ``PᵀP`` sum of ``block_rows`` trending terms.

    ``sequential=False`` measures it for numpy's BLAS: the diagonal of ``PᵀP`` for a
    ``block_rows × min(width, 1024)`` block of values uniform in [−1, 1] as cosines are (terms
    p² ≥ 0: sums that grow with every row, the largest partial sums for their total), float32
    against float64 on the same values; at least u. A BLAS may pick its kernel by the product's
    shape (cuBLAS: 1.6u at 512 columns, 10u at 2048, 8192 rows, measured on an H200), hence the
    pass's own width up to 1024.
    ``sequential=True`` (a GPU's products): the bound of a sum accumulated term after term,
    ``u√r/3`` (partial sums ``t·T/r``, each rounding uniform in ±u); cuBLAS stayed below it in
    every shape measured.

    Parameters
    ----------
    block_rows : int
    width : int, default=128
        Columns of the pass's product (D + targets + 1).
    sequential : bool, default=False

    Returns
    -------
    float
    """
    r = max(int(block_rows), 1)
    if sequential:
        return max(_U32 * np.sqrt(r) / 3, _U32)
    cols = int(np.clip(width, 1, 1024))
    P = np.random.default_rng(0).random((r, cols), dtype=np.float32) * np.float32(2) - np.float32(1)
    exact = np.einsum("ij,ij->j", P.astype(np.float64), P.astype(np.float64))
    rel = (np.diagonal(P.T @ P).astype(np.float64) - exact) / exact
    return max(float(np.sqrt(np.mean(rel**2))), _U32)


def _prediction_error(path: Any, beta: np.ndarray, alpha: float, stats: Any, rounding: Float32Rounding) -> np.ndarray:
    """RMS change of the predictions per target (absolute units of y), module notes."""
    s, V, n = np.maximum(path.eigvals, 0.0), path.eigvecs, max(float(path.n), 1.0)
    c, r, se = rounding.feature_scale, min(rounding.block_rows, n), rounding.feature_sd
    rho2 = rounding.product_rel**2
    y2 = np.asarray(stats.sum_yy[0], float)  # raw Σy² (the product input holds raw y)
    b0 = np.asarray(path.mean_y, float) - np.asarray(path.mean_phi, float) @ beta
    beta2 = np.sum(beta**2, axis=0)
    mu2 = np.asarray(path.mean_phi, float) ** 2
    rss = path.spectrum().rss(np.array([alpha]))[0]
    # Var(wⱼ): block products of Φᵀy (and of the centring's ones column), of ΦᵀΦ·β, then Eᵀr
    var_w = rho2 * r * c**2 * (y2 + n * b0**2 + n * beta2 * (c**2 + mu2[:, None])) + se**2 * rss
    m_diag = (V**2) @ (s / (s + alpha) ** 2)  # diag of R G R
    y_sd2 = _U32**2 / 3 * y2 / n  # the rounding of y in the product input, per row
    h2 = float(np.sum((s / (s + alpha)) ** 2))
    ms = (m_diag @ var_w) / n + (y_sd2 + se**2 * beta2) * h2 / n + se**2 * beta2
    return np.sqrt(ms)


def float32_check(
    path: Any,
    coef: np.ndarray,
    alpha: float,
    alphas: np.ndarray,
    stats: Any,
    rounding: Float32Rounding,
    *,
    rtol: float = FLOAT32_RTOL,
    std_rtol: float = FLOAT32_STD_RTOL,
) -> Float32Check:
    """Estimate how far float32 features move a primal ridge model (see the module notes).

    Parameters
    ----------
    path : EigenPath
        The fit's eigendecomposition of the centred ΦᵀΦ (features scaled): ``eigvals``,
        ``eigvecs``, ``mean_phi``, ``mean_y``, ``yy``, ``n`` and ``spectrum()``.
    coef : ndarray of shape (D, k)
        β at ``alpha``.
    alpha : float
        The chosen α.
    alphas : ndarray of shape (A,)
        The α path scored (``[alpha]`` when α was fixed).
    stats : SufficientStats
        The pass's sums (one set): raw ``sum_yy``.
    rounding : Float32Rounding
        The roundings of the pass (:func:`feature_rounding`, :func:`product_rounding`).
    rtol : float, default=FLOAT32_RTOL
    std_rtol : float, default=FLOAT32_STD_RTOL

    Returns
    -------
    Float32Check
    """
    s = np.maximum(np.asarray(path.eigvals, float), 0.0)
    beta = np.asarray(coef, float).reshape(s.shape[0], -1)
    n = max(float(path.n), 1.0)
    y_sd = np.sqrt(np.maximum(np.asarray(path.yy, float), 0.0) / n)
    y_sd = np.where(y_sd > 0, y_sd, 1.0)
    mean_error = float(np.max(SPREAD * _prediction_error(path, beta, alpha, stats, rounding) / y_sd, initial=0.0))
    # per-entry standard deviation of the centred Gram's error: block products (|T| ≤ r c² per
    # block), the centring's column sums Σφ (|T| ≤ r c, times μ), and ΦᵀE + EᵀΦ (≤ σ_E²·n c²)
    c, r = rounding.feature_scale, min(rounding.block_rows, n)
    mu2 = float(np.max(np.asarray(path.mean_phi, float) ** 2, initial=0.0))
    sigma_g = float(
        np.sqrt(rounding.product_rel**2 * n * r * c**2 * (c**2 + 2 * mu2) + 2 * rounding.feature_sd**2 * n * c**2)
    )
    std_error = _std_error(
        s, alpha, n, sigma_g, rounding.feature_sd, _sigma2_error(path, beta, alpha, stats, rounding, sigma_g)
    )
    df_error, floor, path_ok = _path_check(s, alpha, alphas, sigma_g, std_rtol)
    ok = bool(np.isfinite(mean_error) and np.isfinite(std_error) and mean_error <= rtol and std_error <= std_rtol)
    return Float32Check(ok and path_ok, mean_error, std_error, df_error, floor, float(rtol), float(std_rtol))


def _sigma2_error(
    path: Any, beta: np.ndarray, alpha: float, stats: Any, rounding: Float32Rounding, sigma_g: float
) -> float:
    """Relative change of σ̂² (largest over targets): ``σ̂² ∝ J = RSS + α‖β‖² = yᵀy − bᵀRb``,
    stationary in β, moves by ``−2βᵀδb + βᵀδGβ`` with the sums' rounding."""
    n = max(float(path.n), 1.0)
    c, r, se = rounding.feature_scale, min(rounding.block_rows, n), rounding.feature_sd
    b0 = np.asarray(path.mean_y, float) - np.asarray(path.mean_phi, float) @ beta
    y2, yy = np.asarray(stats.sum_yy[0], float), np.asarray(path.yy, float)
    var_b = rounding.product_rel**2 * r * c**2 * (y2 + n * b0**2) + se**2 * yy  # per entry of δb
    beta2 = np.sum(beta**2, axis=0)
    rss = path.spectrum().rss(np.array([alpha]))[0]
    J = rss + alpha * beta2
    var_j = 4 * beta2 * var_b + 2 * sigma_g**2 * beta2**2
    rel = np.where(J > 0, np.sqrt(var_j) / np.where(J > 0, J, 1.0), np.inf)
    return float(np.max(rel, initial=0.0))


def _std_error(s: np.ndarray, alpha: float, n: float, sigma_g: float, feature_sd: float, sigma2_rel: float) -> float:
    """Relative change of the posterior std at a point like the training rows (module notes):
    ``φcᵀRφc`` averages df/n over them, ``‖Rφc‖²`` averages ``Σ s/(s+α)²/n``; σ̂² moves the
    std everywhere by half its own relative change."""
    df = float(np.sum(s / (s + alpha)))
    if df <= 0:
        return 0.0
    tr_m = float(np.sum(s / (s + alpha) ** 2))
    gram = sigma_g * tr_m / (np.sqrt(2) * df)
    own = feature_sd * np.sqrt(n * tr_m) / df
    return float(SPREAD * np.sqrt(gram**2 + own**2 + (sigma2_rel / 2) ** 2))


def _path_check(
    s: np.ndarray, alpha: float, alphas: np.ndarray, sigma_g: float, std_rtol: float
) -> tuple[float, float, bool]:
    """(df error at α, the smallest resolved grid α, whether the choice is resolved), module
    notes: an eigenvalue above the noise floor ``2σ_G√D`` moves by ``√2σ_G``; those below it
    are taken as rounding noise and their whole df counted, twice."""
    noise = s < 2 * sigma_g * np.sqrt(s.shape[0])
    grid = np.unique(np.append(np.asarray(alphas, float), alpha))
    a = grid[:, None]
    resolved_part = (np.where(noise, 0.0, np.sqrt(2) * sigma_g) * a / (s + a) ** 2).sum(axis=1)
    df_errors = resolved_part + 2 * np.where(noise, s / (s + a), 0.0).sum(axis=1)
    resolved = df_errors <= std_rtol * np.maximum((s[None, :] / (s[None, :] + grid[:, None])).sum(axis=1), 1.0)
    floor = float(grid[resolved].min()) if resolved.any() else np.inf
    chosen = int(np.searchsorted(grid, alpha))
    path_ok = bool(resolved[chosen]) and (resolved.all() or alpha > floor)
    return float(df_errors[chosen]), floor, path_ok
