"""Deterministic row assignment (holdout, folds) from a seed and the global row index.

A counter-based hash (splitmix64) of ``(seed, row)`` gives each row a uniform number in [0, 1),
so the assignment of a row never depends on the chunking, the worker or the task order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

_M1, _M2, _GOLDEN = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def row_uniforms(seed: int, start: int, stop: int) -> np.ndarray:
    """Uniform [0, 1) numbers for rows ``[start, stop)``, a pure function of (seed, row)."""
    # scalar uint64 products warn on wrap-around; array products wrap silently, as intended
    key = np.full(1, seed % 2**64, dtype=np.uint64) * _M2
    z = np.arange(start, stop, dtype=np.uint64) * _GOLDEN + key
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


@dataclass(frozen=True)
class HoldoutSplit:
    """Rows with ``row_uniforms < fraction`` are held out (group 1); the rest train (group 0).

    A row partition for the one-pass statistics (``keep=(0,)``: only the training rows are
    summed) and, through :meth:`groups`, for the evaluation pass.
    """

    seed: int
    fraction: float
    n_groups: int = 2
    keep: tuple[int, ...] = (0,)

    def groups(self, start: int, stop: int) -> np.ndarray:
        """Group id (0 train, 1 holdout) of rows ``[start, stop)``."""
        return (row_uniforms(self.seed, start, stop) < self.fraction).astype(np.int64)


@dataclass(frozen=True)
class FoldSplit:
    """K folds: row i goes to fold ``floor(K · u_i)``; all folds kept (one statistics set each).

    The seed is offset from the holdout hash's so fold and holdout assignments are independent.
    """

    seed: int
    n_groups: int = 5

    @property
    def keep(self) -> tuple[int, ...]:
        return tuple(range(self.n_groups))

    def groups(self, start: int, stop: int) -> np.ndarray:
        """Fold id of rows ``[start, stop)``."""
        u = row_uniforms(self.seed ^ 0x5EED_F01D, start, stop)
        return np.minimum((u * self.n_groups).astype(np.int64), self.n_groups - 1)


class PartitionRows:
    """Row weights of a row partition: 1 for the kept groups' rows, 0 otherwise (the SVM and
    Falkon passes take weights as ``weights(start, stop) -> (1, rows)`` only)."""

    def __init__(self, partition: Any) -> None:
        self.partition = partition

    def __call__(self, start: int, stop: int) -> np.ndarray:
        g = np.asarray(self.partition.groups(start, stop))
        return np.isin(g, self.partition.keep)[np.newaxis].astype(np.float64)

    def __dask_tokenize__(self):
        return ("bigkernel._RowsOf", self.partition)  # dask tokenizes the (frozen dataclass) partition


def row_weights_of(weights: Any) -> Callable[[int, int], np.ndarray] | None:
    """The row-weight callable of ``weights``: a row partition (``groups`` / ``keep``) becomes
    :class:`PartitionRows`; a callable or None is returned as it is."""
    return PartitionRows(weights) if hasattr(weights, "groups") else weights
