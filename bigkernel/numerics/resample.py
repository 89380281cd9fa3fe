"""Bootstrap resampling weights and percentile bands (layer 1: pure numpy).

A bootstrap replicate is n draws with replacement from n rows. Instead of materialising the
resampled rows we draw how many times each row is picked: counts ~ Multinomial(n, 1/n each),
so a weighted fit with these counts is the refit on the resampled data.

Out-of-core scheme (the *resampling scheme*, see :data:`SCHEME`)
----------------------------------------------------------------
Rows are cut, by global row index, into fixed *virtual blocks* of ``block_rows`` rows
(default :data:`BLOCK_ROWS`; unrelated to the Dask chunking). For replicate ``r``:

1. block totals ``t ~ Multinomial(n, block_sizes / n)`` are drawn from the replicate seed
   ``SeedSequence(entropy, spawn_key=(r,))``; this is O(n / block_rows), cheap even for n = 1e8;
2. inside block ``j`` the ``t[j]`` draws land uniformly on the block's rows — a
   Multinomial(t[j], uniform) drawn as ``t[j]`` uniform integers then ``bincount`` — from the
   child seed ``SeedSequence(entropy, spawn_key=(r, j))``.

Together this is exactly Multinomial(n, 1/n) over all rows. Any row range ``[start, stop)`` only
touches the blocks it overlaps, and every block is drawn whole from its own seed, so the counts of
a row do not depend on how ``[0, n)`` is split into ranges, on the worker count, on retries or on
task order.

Seeds: ``SeedSequence(entropy, spawn_key=(r,))`` is exactly what
``SeedSequence(entropy).spawn(B)[r]`` returns, but it does not depend on ``B``: growing the
number of replicates keeps the existing ones bitwise identical. The seed must be an explicit
integer (``random_state=None`` is resolved to an integer entropy by the caller and recorded,
otherwise a run could not be resumed).

``method="poisson"`` gives iid Poisson(1) weights per row (same block seeds). It is an
approximation of the bootstrap: the total weight is not exactly n. It is never the default.

Note: numpy does not promise that ``Generator`` streams stay identical across numpy releases
(NEP 19), so bitwise reproducibility holds for a fixed numpy version.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from bigkernel.errors import ParameterError
from bigkernel.numerics.namespace import as_namespace_array, is_numpy, namespace
from bigkernel.validation import is_integer

__all__ = [
    "BLOCK_ROWS",
    "METHODS",
    "SCHEME",
    "Band",
    "BootstrapWeights",
    "bootstrap_counts",
    "bootstrap_counts_batch",
    "percentile_band",
    "replicate_seed",
    "replicate_seeds",
]

#: Rows per virtual block. Part of the resampling scheme: changing it changes every replicate.
BLOCK_ROWS = 2**16

#: Resampling methods accepted by :func:`bootstrap_counts`.
METHODS = ("multinomial", "poisson")

#: Name of the resampling scheme; record it (with ``method`` and ``block_rows``) in any store
#: fingerprint so that results from a different scheme are never mixed.
SCHEME = "bigkernel-blocked-multinomial-v1"

SeedLike = int | np.integer | np.random.SeedSequence

# (entropy, spawn_key prefix, pool_size): hashable identity of a root SeedSequence.
_Root = tuple[int | tuple[int, ...], tuple[int, ...], int]
_DEFAULT_POOL_SIZE = np.random.SeedSequence(0).pool_size


# --------------------------------------------------------------------------------------------
# Seeds
# --------------------------------------------------------------------------------------------
def _root(seed: SeedLike) -> _Root:
    """Return the hashable identity of the root seed, validating it."""
    if isinstance(seed, np.random.SeedSequence):
        entropy = seed.entropy
        if not isinstance(entropy, (int, np.integer)):
            entropy = tuple(int(e) for e in entropy)
        else:
            entropy = int(entropy)
        return entropy, tuple(int(k) for k in seed.spawn_key), int(seed.pool_size)
    if is_integer(seed):
        if seed < 0:
            raise ParameterError(f"seed must be a non-negative integer; found {seed}.")
        return int(seed), (), _DEFAULT_POOL_SIZE
    raise ParameterError(
        "seed must be a non-negative int or a numpy.random.SeedSequence; found "
        f"{type(seed).__name__}. Resolve random_state=None to an integer entropy first "
        "(e.g. numpy.random.SeedSequence().entropy) and record it, so the run can be resumed."
    )


def _seed_sequence(root: _Root, key: tuple[int, ...]) -> np.random.SeedSequence:
    entropy, prefix, pool_size = root
    return np.random.SeedSequence(entropy, spawn_key=prefix + key, pool_size=pool_size)


def _check_replicate(replicate: int) -> int:
    try:
        r = operator.index(replicate)
    except TypeError:
        raise ParameterError(f"replicate must be an integer; found {type(replicate).__name__}.") from None
    if r < 0:
        raise ParameterError(f"replicate must be >= 0; found {r}.")
    return r


def replicate_seed(seed: SeedLike, replicate: int) -> np.random.SeedSequence:
    """Seed of one bootstrap replicate.

    Parameters
    ----------
    seed : int or numpy.random.SeedSequence
        Root seed of the bootstrap run.
    replicate : int
        Replicate index, ``>= 0``.

    Returns
    -------
    numpy.random.SeedSequence
        ``SeedSequence(entropy, spawn_key=seed.spawn_key + (replicate,))`` — the same as
        ``SeedSequence(seed).spawn(B)[replicate]`` for any ``B > replicate``.
    """
    return _seed_sequence(_root(seed), (_check_replicate(replicate),))


def replicate_seeds(seed: SeedLike, n_replicates: int) -> list[np.random.SeedSequence]:
    """Seeds of replicates ``0 .. n_replicates - 1``.

    Equal to ``SeedSequence(seed).spawn(n_replicates)`` for a fresh ``SeedSequence``, but built
    from explicit spawn keys so replicate ``r`` does not depend on ``n_replicates`` (nor on how
    many children a passed ``SeedSequence`` has already spawned).

    Parameters
    ----------
    seed : int or numpy.random.SeedSequence
        Root seed of the bootstrap run.
    n_replicates : int
        Number of replicates ``B``.

    Returns
    -------
    list of numpy.random.SeedSequence
    """
    root = _root(seed)
    n_replicates = operator.index(n_replicates)
    if n_replicates < 0:
        raise ParameterError(f"n_replicates must be >= 0; found {n_replicates}.")
    return [_seed_sequence(root, (r,)) for r in range(n_replicates)]


# --------------------------------------------------------------------------------------------
# Counts
# --------------------------------------------------------------------------------------------
def _n_blocks(n: int, block_rows: int) -> int:
    return -(-n // block_rows)


@functools.lru_cache(maxsize=256)
def _block_totals(root: _Root, replicate: int, n: int, block_rows: int) -> np.ndarray:
    """Draws per virtual block for one replicate (read-only; cached: reused by every range)."""
    n_blocks = _n_blocks(n, block_rows)
    sizes = np.full(n_blocks, block_rows, dtype=np.float64)
    sizes[-1] = n - block_rows * (n_blocks - 1)
    rng = np.random.Generator(np.random.PCG64(_seed_sequence(root, (replicate,))))
    totals = rng.multinomial(n, sizes / n).astype(np.int64)
    totals.setflags(write=False)
    return totals


def _block_weights(root: _Root, replicate: int, block: int, size: int, total: int, method: str) -> np.ndarray:
    """Weights of the whole virtual block ``block`` (length ``size``), int64."""
    rng = np.random.Generator(np.random.PCG64(_seed_sequence(root, (replicate, block))))
    if method == "multinomial":
        # Multinomial(total, uniform over size) == bincount of `total` uniform picks (exact, fast).
        picks = rng.integers(0, size, total, dtype=np.int64)
        return np.bincount(picks, minlength=size)
    return rng.poisson(1.0, size)


def _check_range(n: int, start: int, stop: int, method: str, block_rows: int) -> tuple[int, ...]:
    try:
        n, start, stop, block_rows = (operator.index(v) for v in (n, start, stop, block_rows))
    except TypeError:
        raise ParameterError("n, start, stop and block_rows must be integers.") from None
    if n < 1:
        raise ParameterError(f"n must be >= 1; found {n}.")
    if not 0 <= start <= stop <= n:
        raise ParameterError(
            f"row range must satisfy 0 <= start <= stop <= n; found start={start}, stop={stop}, n={n}."
        )
    if block_rows < 1:
        raise ParameterError(f"block_rows must be >= 1; found {block_rows}.")
    if method not in METHODS:
        raise ParameterError(f"method must be one of {METHODS}; found {method!r}.")
    return n, start, stop, block_rows


def _counts_into(
    out: np.ndarray,
    root: _Root,
    replicate: int,
    n: int,
    start: int,
    stop: int,
    method: str,
    block_rows: int,
) -> None:
    if stop == start:
        return
    totals = _block_totals(root, replicate, n, block_rows) if method == "multinomial" else None
    for j in range(start // block_rows, (stop - 1) // block_rows + 1):
        b0 = j * block_rows
        b1 = min(b0 + block_rows, n)
        total = int(totals[j]) if totals is not None else 0
        w = _block_weights(root, replicate, j, b1 - b0, total, method)
        lo, hi = max(start, b0), min(stop, b1)
        out[lo - start : hi - start] = w[lo - b0 : hi - b0]


def bootstrap_counts(
    seed: SeedLike,
    replicate: int,
    n: int,
    start: int,
    stop: int,
    method: str = "multinomial",
    *,
    block_rows: int = BLOCK_ROWS,
) -> np.ndarray:
    """Bootstrap weights of one replicate for global rows ``[start, stop)``.

    Parameters
    ----------
    seed : int or numpy.random.SeedSequence
        Root seed of the bootstrap run (not the replicate's seed).
    replicate : int
        Replicate index ``r >= 0``; its seed is :func:`replicate_seed` ``(seed, r)``.
    n : int
        Total number of rows of the data set (the bootstrap draws n times).
    start, stop : int
        Global row range, ``0 <= start <= stop <= n``.
    method : {"multinomial", "poisson"}, default="multinomial"
        ``"multinomial"``: exact bootstrap counts, summing to ``n`` over ``[0, n)``.
        ``"poisson"``: iid Poisson(1) weights, an approximation whose total is only close to n.
    block_rows : int, default=BLOCK_ROWS
        Virtual block size of the resampling scheme. Changing it changes the replicates.

    Returns
    -------
    ndarray of shape (stop - start,), float64
        Integer-valued weights. Bitwise identical whatever split of ``[0, n)`` into ranges is
        used to request them.
    """
    n, start, stop, block_rows = _check_range(n, start, stop, method, block_rows)
    root = _root(seed)
    out = np.empty(stop - start, dtype=np.float64)
    _counts_into(out, root, _check_replicate(replicate), n, start, stop, method, block_rows)
    return out


def bootstrap_counts_batch(
    seed: SeedLike,
    replicates: Sequence[int],
    n: int,
    start: int,
    stop: int,
    method: str = "multinomial",
    *,
    block_rows: int = BLOCK_ROWS,
) -> np.ndarray:
    """Bootstrap weights of several replicates for global rows ``[start, stop)``.

    Parameters
    ----------
    seed : int or numpy.random.SeedSequence
        Root seed of the bootstrap run.
    replicates : sequence of int
        Replicate indices, in the order of the output rows.
    n, start, stop, method, block_rows
        As in :func:`bootstrap_counts`.

    Returns
    -------
    ndarray of shape (len(replicates), stop - start), float64
        Row ``i`` equals ``bootstrap_counts(seed, replicates[i], n, start, stop, method)``.
    """
    n, start, stop, block_rows = _check_range(n, start, stop, method, block_rows)
    root = _root(seed)
    reps = [_check_replicate(r) for r in replicates]
    out = np.empty((len(reps), stop - start), dtype=np.float64)
    for i, r in enumerate(reps):
        _counts_into(out[i], root, r, n, start, stop, method, block_rows)
    return out


@dataclass(frozen=True)
class BootstrapWeights:
    """Picklable weights provider: ``weights(start, stop)`` -> array of shape (m, stop - start).

    Parameters
    ----------
    seed_entropy : int
        Root seed (integer entropy) of the bootstrap run.
    replicates : tuple of int
        The ``m`` replicates whose weights are produced, in this order.
    n : int
        Total number of rows.
    method : {"multinomial", "poisson"}, default="multinomial"
        See :func:`bootstrap_counts`.
    block_rows : int, default=BLOCK_ROWS
        Virtual block size of the resampling scheme.

    Examples
    --------
    >>> w = BootstrapWeights(seed_entropy=0, replicates=(0, 1), n=10)
    >>> w(0, 4).shape
    (2, 4)
    """

    seed_entropy: int
    replicates: tuple[int, ...]
    n: int
    method: str = "multinomial"
    block_rows: int = BLOCK_ROWS

    def __post_init__(self) -> None:
        _root(self.seed_entropy)
        reps = tuple(_check_replicate(r) for r in self.replicates)
        object.__setattr__(self, "replicates", reps)
        _check_range(self.n, 0, self.n, self.method, self.block_rows)

    def __call__(self, start: int, stop: int, like: Any = None) -> np.ndarray:
        """Weights of rows ``[start, stop)``, shape ``(m, stop - start)``, float64.

        ``like``: an array of any namespace (a chunk on a GPU): the weights are returned in its
        namespace, on its device. They are always drawn on the host (the same counts on every
        device, bitwise) and copied once per call.
        """
        W = bootstrap_counts_batch(
            self.seed_entropy,
            self.replicates,
            self.n,
            start,
            stop,
            self.method,
            block_rows=self.block_rows,
        )
        if like is None or isinstance(like, np.ndarray):
            return W
        return as_namespace_array(namespace(like), W, like=like)


# --------------------------------------------------------------------------------------------
# Percentile band
# --------------------------------------------------------------------------------------------
class Band(NamedTuple):
    """Pointwise bootstrap summary: each field has the shape of one replicate's predictions."""

    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def percentile_band(predictions: np.ndarray, confidence_level: float = 0.9) -> Band:
    """Mean and percentile band over the replicate axis.

    Parameters
    ----------
    predictions : array-like of shape (B, ...)
        Replicate predictions, replicates along axis 0.
    confidence_level : float, default=0.9
        Central coverage in (0, 1). The band is the ``50·(1 − c)`` and ``50·(1 + c)``
        percentiles — 5 % and 95 % for ``c = 0.9`` (computed as ``50 ∓ 50·c`` so that these are
        exactly 5.0 and 95.0).

    Returns
    -------
    Band
        ``(mean, lower, upper)``, each of shape ``predictions.shape[1:]``. Percentiles use
        ``numpy.percentile(..., method="linear")`` (numpy's default, type 7 of Hyndman & Fan),
        so the result depends only on the values, not on how they were produced.
    """
    xp = namespace(predictions) if hasattr(predictions, "shape") else namespace()
    p = as_namespace_array(xp, predictions, dtype=xp.float64)
    if p.ndim < 1 or p.shape[0] < 1:
        raise ParameterError(
            f"predictions must have at least one replicate along axis 0; found shape {tuple(p.shape)}."
        )
    c = float(confidence_level)
    if not 0.0 < c < 1.0:
        raise ParameterError(f"confidence_level must be in (0, 1); found {confidence_level}.")
    half = 50.0 * c
    if is_numpy(xp):
        lower, upper = np.percentile(p, [50.0 - half, 50.0 + half], axis=0, method="linear")
    else:  # the standard has no percentile: numpy's "linear" rule on the sorted replicates
        q = xp.sort(p, axis=0)
        lower, upper = (_linear_percentile(xp, q, pct) for pct in (50.0 - half, 50.0 + half))
    return Band(mean=xp.mean(p, axis=0), lower=lower, upper=upper)


def _linear_percentile(xp: Any, q: Any, pct: float) -> Any:
    """Percentile ``pct`` of sorted ``q`` along axis 0 by numpy's ``method="linear"``:
    ``q[⌊h⌋] + (h − ⌊h⌋)(q[⌊h⌋+1] − q[⌊h⌋])`` with ``h = (B − 1)·pct/100``."""
    h = (q.shape[0] - 1) * pct / 100.0
    lo = int(math.floor(h))
    hi = min(lo + 1, q.shape[0] - 1)
    frac = h - lo
    return q[lo, ...] + frac * (q[hi, ...] - q[lo, ...])
