"""Evidence that a kernel is positive semi-definite on given data (layer 1: pure numpy)."""

from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from bigkernel.errors import ParameterError
from bigkernel.kernels._blocks import _as_2d
from bigkernel.kernels.base import Kernel

logger = logging.getLogger(__name__)

__all__ = ["PSDCheck", "check_psd"]


@dataclass(frozen=True)
class PSDCheck:
    """Result of :func:`check_psd`.

    Attributes
    ----------
    min_eigenvalue, max_eigenvalue : float
        Extreme eigenvalues of the sample Gram matrix.
    n_sample : int
        Rows used.
    is_psd : bool
        ``min_eigenvalue >= -rtol * |max_eigenvalue|`` (round-off allowance).
    """

    min_eigenvalue: float
    max_eigenvalue: float
    n_sample: int
    is_psd: bool


def check_psd(
    kernel: Kernel,
    X: ArrayLike,
    *,
    n_sample: int = 1000,
    random_state: int | np.random.Generator | None = None,
    rtol: float = 1e-10,
) -> PSDCheck:
    """Smallest eigenvalue of the Gram matrix of a random row sample of ``X``.

    A negative value beyond round-off proves the kernel is not PSD on this data; a value
    >= 0 is evidence, not proof, for the whole data set.

    Parameters
    ----------
    kernel : Kernel
    X : array-like of shape (n, d)
    n_sample : int, default=1000
        Rows sampled without replacement (all rows if ``n <= n_sample``); cost O(n_sample³).
    random_state : int, Generator or None
    rtol : float, default=1e-10

    Returns
    -------
    PSDCheck
    """
    X = _as_2d(X, "X")
    if isinstance(n_sample, bool) or not isinstance(n_sample, numbers.Integral) or n_sample < 2:
        raise ParameterError(f"check_psd: n_sample must be an integer >= 2, found {n_sample!r}")
    rng = np.random.default_rng(random_state)
    rows = np.sort(rng.choice(len(X), size=n_sample, replace=False)) if len(X) > n_sample else slice(None)
    K = kernel(X[rows])
    w = np.linalg.eigvalsh(0.5 * (K + K.T))
    lo, hi = float(w[0]), float(w[-1])
    result = PSDCheck(lo, hi, K.shape[0], lo >= -rtol * max(abs(hi), np.finfo(float).tiny))
    logger.debug("check_psd(%s): %s", kernel.name, result)
    return result
