"""Residuals of a fit and the bootstrap prediction interval (layer 1: pure numpy).

A percentile band of refitted predictions describes the variability of the fitted function
f̂(x). An interval for a *new observation* ``y = f(x) + ε`` must add the noise. Following
Davison & Hinkley (1997, Algorithm 6.4), replicate ``r`` gives the prediction error

    δ*_r(x) = f̂*_r(x) − (f̂(x) + ε*_{r,x}),

where f̂*_r is the replicate's refit and ε* a residual of the original fit drawn at random; the
interval is ``[f̂(x) − q_hi(δ*), f̂(x) − q_lo(δ*)]``, i.e. the percentiles over replicates of
``2 f̂(x) − f̂*_r(x) + ε*_{r,x}``.

Residuals, out of core and bounded
----------------------------------
One pass over the data computes ``r_i = y_i − f̂(x_i)`` chunk by chunk and keeps

* the count ``n`` and the sums ``Σr``, ``Σr²`` over all rows (for centring and the RSS), and
* a *bounded sample*: the ``capacity`` rows (default :data:`RESIDUAL_SAMPLE_ROWS`) with the
  smallest splitmix64 hash of ``(seed, row)`` — a uniform sample without replacement that
  depends only on the seed and the row indices, never on the chunking (each chunk keeps its own
  smallest ``capacity``, partial samples merge by keeping the smallest ``capacity`` again).

The sampled residuals are centred by the mean over *all* rows and inflated by
``√(n / (n − df))`` (``df`` the effective degrees of freedom of the fit), because fitted
residuals are smaller than the errors they stand for. Assumption: the errors are homoscedastic
(same distribution at every x) and independent of x; the interval is then pointwise, for one
new observation at each evaluation point.

Draws
-----
``ε*_{r,x}`` is a uniform pick among the sampled residuals (the same row for every target, so
the targets keep their correlation). Each replicate takes :data:`DRAWS_PER_REPLICATE` picks per
point: the noise dominates the width of a prediction interval, and its tail quantiles from B
single draws would be noisy and biased inwards (at B = 100, the 5 % / 95 % percentiles of B
normal draws average ±1.59σ instead of ±1.645σ); the picks cost nothing next to a refit. The
picks of replicate ``r`` for evaluation points in fixed blocks of :data:`EVAL_BLOCK` come from
``SeedSequence(seed, spawn_key=(DRAW_KEY, r, block))``: they depend on neither the order nor
the slabs the points are read in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bigkernel.errors import DataError, ParameterError
from bigkernel.numerics.splits import row_uniforms

__all__ = [
    "DRAWS_PER_REPLICATE",
    "DRAW_KEY",
    "EVAL_BLOCK",
    "RESIDUAL_SAMPLE_ROWS",
    "ResidualSample",
    "ResidualSummary",
    "finish_residuals",
    "prediction_interval",
    "residual_draws",
    "residual_summary",
]

#: Most residuals kept for the draws (the quantiles of the noise need a few thousand; 20,000
#: float64 per target is 160 kB).
RESIDUAL_SAMPLE_ROWS = 20_000

#: Residual picks per replicate and evaluation point (part of the scheme).
DRAWS_PER_REPLICATE = 16

#: Evaluation points per block of residual draws (part of the scheme: changing it changes them).
EVAL_BLOCK = 4096

#: First spawn-key element of the residual draws: disjoint from the replicate counts'
#: ``(r,)`` / ``(r, block)`` and the plans' derived seed ``(2**32,)``.
DRAW_KEY = 2**32 + 1

#: Offset of the row hash choosing the sampled residuals (so it differs from the holdout and fold
#: hashes of the same seed).
_SAMPLE_HASH = 0x5E51_D0A1


@dataclass
class ResidualSummary:
    """Residual sums over some rows and their bounded sample (adds across chunks).

    Attributes
    ----------
    n : float
        Rows summed.
    sum_r, sum_rr : ndarray of shape (k,)
        Σr and Σr² per target.
    keys : ndarray of shape (s,)
        Hash of each sampled row (the ``capacity`` smallest are kept).
    rows : ndarray of shape (s,), int64
        Global index of each sampled row.
    residuals : ndarray of shape (s, k)
        Their residuals.
    capacity : int
        Most rows kept.
    """

    n: float
    sum_r: np.ndarray
    sum_rr: np.ndarray
    keys: np.ndarray
    rows: np.ndarray
    residuals: np.ndarray
    capacity: int

    def __add__(self, other: ResidualSummary) -> ResidualSummary:
        return _keep_smallest(
            self.n + other.n, self.sum_r + other.sum_r, self.sum_rr + other.sum_rr,
            np.concatenate([self.keys, other.keys]), np.concatenate([self.rows, other.rows]),
            np.concatenate([self.residuals, other.residuals]), min(self.capacity, other.capacity),
        )  # fmt: skip


def _keep_smallest(n, sum_r, sum_rr, keys, rows, residuals, capacity) -> ResidualSummary:
    if keys.size > capacity:
        # ties (probability ~2⁻⁵³) broken by the row index: still chunking-independent
        order = np.lexsort((rows, keys))[:capacity]
        keys, rows, residuals = keys[order], rows[order], residuals[order]
    return ResidualSummary(float(n), sum_r, sum_rr, keys, rows, residuals, int(capacity))


def residual_summary(
    pred: np.ndarray, Y: np.ndarray, start: int, seed: int, capacity: int = RESIDUAL_SAMPLE_ROWS
) -> ResidualSummary:
    """Residual sums and bounded sample of rows ``[start, start + len(Y))``.

    Parameters
    ----------
    pred : ndarray of shape (rows, k)
        Predictions of the fit at these rows.
    Y : ndarray of shape (rows, k)
        Observed targets.
    start : int
        Global index of the first row.
    seed : int
        Seed of the sample (the bootstrap seed).
    capacity : int, default=RESIDUAL_SAMPLE_ROWS
        Most rows kept.

    Returns
    -------
    ResidualSummary
    """
    if capacity < 1:
        raise ParameterError(f"capacity must be >= 1; found {capacity}.")
    Y = np.asarray(Y, dtype=np.float64)
    r = Y - np.asarray(pred, dtype=np.float64).reshape(Y.shape)
    stop = start + Y.shape[0]
    keys = row_uniforms(int(seed) ^ _SAMPLE_HASH, start, stop)
    rows = np.arange(start, stop, dtype=np.int64)
    return _keep_smallest(Y.shape[0], r.sum(axis=0), (r * r).sum(axis=0), keys, rows, r, capacity)


@dataclass(frozen=True)
class ResidualSample:
    """What the prediction interval needs from the original fit.

    Attributes
    ----------
    center : ndarray of shape (n_eval, k)
        Predictions f̂(X_eval) of the original fit (unit weights, the replicates' plan).
    residuals : ndarray of shape (s, k)
        Sampled residuals, centred by the mean over all rows and multiplied by ``scale``.
    rows : ndarray of shape (s,), int64
        Their global row indices (increasing).
    n : int
        Rows of the original fit.
    df : float
        Its effective degrees of freedom.
    scale : float
        ``√(n / (n − df))``.
    mean : ndarray of shape (k,)
        Mean residual over all rows (subtracted).
    rss : ndarray of shape (k,)
        Residual sum of squares over all rows.
    """

    center: np.ndarray
    residuals: np.ndarray
    rows: np.ndarray
    n: int
    df: float
    scale: float
    mean: np.ndarray
    rss: np.ndarray

    @property
    def sigma(self) -> np.ndarray:
        """Noise standard deviation estimate ``√(RSS / (n − df))`` per target."""
        return np.sqrt(self.rss / (self.n - self.df))


def finish_residuals(summary: ResidualSummary, center: np.ndarray, df: float) -> ResidualSample:
    """Centre and inflate the sampled residuals of a whole data set's summary.

    Raises
    ------
    DataError
        ``df`` is not finite or not below the number of rows (the fit interpolates: its
        residuals say nothing about the noise).
    """
    n = round(summary.n)
    if not math.isfinite(df) or not df < n:
        raise DataError(
            f"the prediction interval needs the noise level from the fit's residuals, which "
            f"requires df < n; found df={df!r}, n={n}. Increase alpha (the fit interpolates the "
            "data), or use interval='confidence'."
        )
    mean = summary.sum_r / n
    rss = np.maximum(summary.sum_rr - n * mean * mean, 0.0)
    scale = math.sqrt(n / (n - float(df)))
    order = np.argsort(summary.rows, kind="stable")
    residuals = (summary.residuals[order] - mean) * scale
    return ResidualSample(
        center=np.asarray(center, dtype=np.float64), residuals=residuals, rows=summary.rows[order],
        n=n, df=float(df), scale=scale, mean=mean, rss=rss,
    )  # fmt: skip


def residual_draws(
    seed: int, replicate: int, start: int, stop: int, n_residuals: int, draws: int = DRAWS_PER_REPLICATE
) -> np.ndarray:
    """Indices into the residual sample for replicate ``replicate`` at evaluation points
    ``[start, stop)``, shape (draws, stop - start), int64 (see the module docstring)."""
    out = np.empty((draws, stop - start), dtype=np.int64)
    for b in range(start // EVAL_BLOCK, -(-stop // EVAL_BLOCK)):
        b0 = b * EVAL_BLOCK
        ss = np.random.SeedSequence(int(seed), spawn_key=(DRAW_KEY, int(replicate), b))
        idx = np.random.Generator(np.random.PCG64(ss)).integers(0, n_residuals, (draws, EVAL_BLOCK))
        lo, hi = max(start, b0), min(stop, b0 + EVAL_BLOCK)
        out[:, lo - start : hi - start] = idx[:, lo - b0 : hi - b0]
    return out


def prediction_interval(
    predictions: np.ndarray,
    center: np.ndarray,
    residuals: np.ndarray,
    seed: int,
    start: int,
    confidence_level: float = 0.9,
) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap prediction interval at a slab of evaluation points.

    Parameters
    ----------
    predictions : ndarray of shape (B, e, k)
        Replicate predictions f̂*_r at evaluation points ``[start, start + e)``.
    center : ndarray of shape (e, k)
        The original fit f̂ at those points.
    residuals : ndarray of shape (s, k)
        Centred, inflated residual sample (:attr:`ResidualSample.residuals`).
    seed : int
        The bootstrap seed (draws of replicate ``r``: :func:`residual_draws`).
    start : int
        Index of the slab's first evaluation point.
    confidence_level : float, default=0.9
        Central coverage ``c``; the limits are the ``50·(1 ∓ c)`` percentiles.

    Returns
    -------
    lower, upper : ndarray of shape (e, k)
        Percentiles over replicates ``r`` and their :data:`DRAWS_PER_REPLICATE` picks of
        ``2 f̂(x) − f̂*_r(x) + ε*_{r,x}``.
    """
    P = np.asarray(predictions, dtype=np.float64)
    B, e = P.shape[:2]
    if residuals.shape[0] < 1:
        raise DataError("the residual sample is empty; the prediction interval needs residuals.")
    M = DRAWS_PER_REPLICATE
    values = np.empty((B * M,) + P.shape[1:])
    for r in range(B):
        eps = residuals[residual_draws(seed, r, start, start + e, residuals.shape[0])]  # (M, e, k)
        values[r * M : (r + 1) * M] = (2.0 * center - P[r])[np.newaxis] + eps
    half = 50.0 * float(confidence_level)
    lower, upper = np.percentile(values, [50.0 - half, 50.0 + half], axis=0, method="linear")
    return lower, upper
