"""Deterministic row assignment (holdout, folds) from a seed and the global row index.

A counter-based hash (splitmix64) of ``(seed, row)`` gives each row a uniform number in [0, 1),
so the assignment of a row never depends on the chunking, the worker or the task order.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    ``split(start, stop)`` returns the training weights (1, rows) — the weights protocol of the
    one-pass statistics — and ``split.groups(start, stop)`` the group ids.
    """

    seed: int
    fraction: float

    def groups(self, start: int, stop: int) -> np.ndarray:
        return (row_uniforms(self.seed, start, stop) < self.fraction).astype(np.int64)

    def __call__(self, start: int, stop: int) -> np.ndarray:
        return (self.groups(start, stop) == 0).astype(np.float64)[np.newaxis, :]
