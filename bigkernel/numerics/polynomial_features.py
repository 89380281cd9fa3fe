"""Feature maps of the polynomial kernel ``(γ xᵀy + c₀)^k`` (layer 1: numpy/scipy, no dask).

Two maps, one interface (that of :class:`~bigkernel.numerics.fourier_features.FeatureMap` and
:class:`~bigkernel.numerics.nystroem_features.NystroemMap`: ``transform_unscaled``, ``scale``,
``n_components``, ``n_features_in``, ``standardized``, ``to_metadata`` / ``arrays`` /
``from_arrays``), so the one-pass statistics, the primal path, persistence, the CV estimators
and the bootstrap take them unchanged.

**Explicit monomials** (``method="explicit"``). With ``x̃ = (√γ x₁, …, √γ x_d, √c₀)``,
``(γ xᵀy + c₀)^k = (x̃ᵀỹ)^k = Σ_{|a|=k} (k choose a) x̃^a ỹ^a`` over the multi-indices ``a`` of
``d + 1`` variables (multinomial theorem), so ``φ_a(x) = √(k choose a) · x̃^a`` gives
``φ(x)ᵀφ(y) = (γ xᵀy + c₀)^k`` exactly, with ``C(d + k, k)`` features (``C(d + k − 1, k)``
for ``c₀ = 0``: the monomials without the constant variable). Used when that count fits
``n_components``.

**TensorSketch** (``method="tensorsketch"``, Pham & Pagh 2013; scikit-learn's
``PolynomialCountSketch``): ``k`` independent count sketches ``C_t(x̃) ∈ ℝ^D`` (hash
``h_t: [d+1] → [D]``, signs ``s_t``), multiplied in the Fourier domain:
``φ(x) = IFFT(Π_t FFT(C_t(x̃)))``, the count sketch of ``x̃^{⊗k}``; ``E φ(x)ᵀφ(y) = (x̃ᵀỹ)^k``
with variance ``O(1/D)``. Used when the monomials do not fit.

Both are fixed by ``(d, D, degree, γ, c₀, seed)`` alone, so a row's features never depend on
the chunking.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import DTypeLike

from bigkernel._sparse import is_sparse
from bigkernel.errors import DataError, ParameterError
from bigkernel.kernels.dot_product import Polynomial

logger = logging.getLogger(__name__)

__all__ = ["POLYNOMIAL_METHODS", "PolynomialFeatureMap", "make_polynomial_map", "n_monomials"]

#: how a polynomial map is built: "auto" picks explicit when the monomials fit n_components
POLYNOMIAL_METHODS = ("auto", "explicit", "tensorsketch")
#: the explicit map is refused above this many monomials (its index table is monomials × degree)
MAX_MONOMIALS = 2**22


def n_monomials(n_features: int, degree: int, coef0: float) -> int:
    """Features of the explicit map: ``C(d + k, k)``, or ``C(d + k − 1, k)`` when ``coef0 = 0``."""
    d = int(n_features) + (0 if coef0 == 0 else 1)
    return math.comb(d + int(degree) - 1, int(degree))


def _monomials(n_vars: int, degree: int) -> tuple[np.ndarray, np.ndarray]:
    """Index table ``(M, k)`` (each row a sorted k-tuple of variables: the monomial
    ``Π_t x̃[idx_t]``) and ``√(multinomial coefficient)`` of each, in lexicographic order."""
    rows = list(itertools.combinations_with_replacement(range(n_vars), degree))
    index = np.array(rows, dtype=np.int64).reshape(len(rows), degree)
    log_fact = np.array([math.lgamma(j + 1) for j in range(degree + 1)])
    counts = np.zeros((index.shape[0], n_vars), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(index.shape[0]), degree), index.ravel()), 1)
    # multinomial k! / Π aⱼ! in log space: exact to rounding even for large coefficients
    log_coef = log_fact[degree] - log_fact[counts].sum(axis=1)
    return index, np.exp(0.5 * log_coef)


@dataclass(frozen=True, eq=False)
class PolynomialFeatureMap:
    """Features of ``(γ xᵀy + coef0)^degree``: explicit monomials or a TensorSketch.

    Build one with :func:`make_polynomial_map`; restore one with :meth:`from_arrays`.

    Attributes
    ----------
    n_features_in : int
    n_components : int
        ``C(d + k, k)`` (explicit; ``C(d + k − 1, k)`` for ``coef0 = 0``) or D (tensorsketch).
    degree : int
    gamma, coef0 : float
    method : {"explicit", "tensorsketch"}
        Which map this is (``feature_map_.method`` of a fitted estimator).
    hashes, signs : ndarray of shape (degree, d + 1) or None
        TensorSketch's bucket and ±1 sign of each (augmented) input coordinate per factor.
    mean, std : ndarray of shape (d,) or None
        Input standardization applied first.
    params : dict
        Description (seed, requested n_components) for the metadata.
    """

    n_features_in: int
    n_components: int
    degree: int
    gamma: float
    coef0: float
    method: str
    hashes: np.ndarray | None = None
    signs: np.ndarray | None = None
    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    params: dict[str, Any] = field(default_factory=dict)
    kernel: str = "polynomial"
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.method == "explicit":
            n_vars = self.n_features_in + (0 if self.coef0 == 0 else 1)
            index, weights = _monomials(n_vars, self.degree)
            if index.shape[0] != self.n_components:  # pragma: no cover - constructors agree
                raise DataError(f"explicit polynomial map: {index.shape[0]} monomials, expected {self.n_components}")
            object.__setattr__(self, "_index", index)
            object.__setattr__(self, "_weights", weights)

    def exact_kernel(self) -> Polynomial:
        """The exact kernel this map represents (explicit) or approximates (tensorsketch)."""
        return Polynomial(self.degree, self.gamma, self.coef0)

    # ------------------------------------------------------------------ features
    def _augmented(self, X: np.ndarray) -> np.ndarray:
        """``x̃ = (√γ x, √c₀)`` in float64 (``√c₀`` dropped when ``c₀ = 0``)."""
        if X.ndim != 2 or X.shape[1] != self.n_features_in:
            raise DataError(
                f"X has {X.shape[1] if X.ndim == 2 else X.shape} features, but the feature map "
                f"expects {self.n_features_in}; pass data with the same columns as in fit"
            )
        if is_sparse(X):
            raise DataError(
                "the polynomial random-feature map does not take sparse X (its monomials and sketch "
                "read dense rows); use NystroemRidge or ExactKernelRidge with kernel='polynomial', "
                "which do, or pass X.toarray()"
            )
        X = np.asarray(X, dtype=np.float64)
        if self.mean is not None:
            X = (X - self.mean) / self.std
        cols = [X * math.sqrt(self.gamma)]
        if self.coef0 != 0:
            cols.append(np.full((X.shape[0], 1), math.sqrt(self.coef0)))
        return np.hstack(cols)

    def transform_unscaled(self, X: np.ndarray, dtype: DTypeLike = np.float64) -> np.ndarray:
        """``φ(X)``, shape (n, n_components), in ``dtype`` (the scale is 1).

        Products are formed in float64 and cast at the end: a monomial of degree k in float32
        would lose k roundings, and the FFT of the sketch its cancellation.
        """
        dtype = np.dtype(dtype)
        Xa = self._augmented(X)
        if self.method == "explicit":
            out = Xa[:, self._index[:, 0]]
            for t in range(1, self.degree):
                out *= Xa[:, self._index[:, t]]
            out *= self._weights
        else:
            out = self._sketch(Xa)
        return out if out.dtype == dtype else out.astype(dtype)

    transform = transform_unscaled

    def _count_sketches(self) -> list[sp.csr_matrix]:
        """One sparse ``(d + 1, D)`` count-sketch matrix per factor, built once per map."""
        cache = self.__dict__.get("_sketch_cache")
        if cache is None:
            n_in = self.hashes.shape[1]
            cache = [
                sp.csr_matrix((self.signs[t], (np.arange(n_in), self.hashes[t])), shape=(n_in, self.n_components))
                for t in range(self.degree)
            ]
            self.__dict__["_sketch_cache"] = cache
        return cache

    def _sketch(self, Xa: np.ndarray) -> np.ndarray:
        D = self.n_components
        if Xa.shape[1] != self.hashes.shape[1]:  # pragma: no cover - _augmented checked the columns
            raise DataError(f"sketch expects {self.hashes.shape[1]} augmented columns, found {Xa.shape[1]}")
        prod = None
        for S in self._count_sketches():
            f = np.fft.rfft(np.asarray((S.T @ Xa.T).T), n=D, axis=1)  # sparse × dense: O(n d)
            prod = f if prod is None else prod * f
        return np.fft.irfft(prod, n=D, axis=1)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_sketch_cache", None)
        return state

    def standardized(self, mean: np.ndarray, std: np.ndarray) -> PolynomialFeatureMap:
        """The same map, applied to ``(x − mean) / std``."""
        return PolynomialFeatureMap(
            self.n_features_in, self.n_components, self.degree, self.gamma, self.coef0, self.method,
            self.hashes, self.signs, np.asarray(mean, float), np.asarray(std, float), dict(self.params),
        )  # fmt: skip

    # ------------------------------------------------------------------ persistence
    def to_metadata(self) -> dict[str, Any]:
        """JSON-able description (arrays are saved separately: :meth:`arrays`)."""
        return {
            "kind": "polynomial", "kernel": self.kernel, "n_features_in": self.n_features_in,
            "n_components": self.n_components, "degree": self.degree, "gamma": self.gamma,
            "coef0": self.coef0, "method": self.method, "standardized": self.mean is not None,
            "scale": self.scale, "params": self.params,
        }  # fmt: skip

    def arrays(self) -> dict[str, np.ndarray]:
        """The map's arrays by their saved names (the explicit map has none of its own)."""
        out: dict[str, np.ndarray] = {}
        if self.method == "tensorsketch":
            out["poly_hashes"], out["poly_signs"] = self.hashes, self.signs
        if self.mean is not None:
            out["poly_mean"], out["poly_std"] = self.mean, self.std
        return out

    @classmethod
    def from_arrays(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> PolynomialFeatureMap:
        """Rebuild a map from :meth:`to_metadata` and :meth:`arrays` output."""
        d, m, k = int(meta["n_features_in"]), int(meta["n_components"]), int(meta["degree"])
        coef0, method = float(meta["coef0"]), str(meta["method"])
        hashes = signs = None
        if method == "explicit":
            if n_monomials(d, k, coef0) != m:
                raise DataError(f"explicit polynomial map of d={d}, degree={k} has {n_monomials(d, k, coef0)} "
                                f"features, the saved model says {m}")  # fmt: skip
        elif method == "tensorsketch":
            hashes, signs = np.asarray(arrays["poly_hashes"], np.int64), np.asarray(arrays["poly_signs"], float)
            n_in = d + (0 if coef0 == 0 else 1)
            if hashes.shape != (k, n_in) or signs.shape != (k, n_in) or hashes.min() < 0 or hashes.max() >= m:
                raise DataError(
                    f"TensorSketch hashes {hashes.shape} and signs {signs.shape} do not fit the map: expected "
                    f"({k}, {n_in}) with buckets in [0, {m})"
                )
        else:
            raise DataError(f"unknown polynomial map method {method!r}; expected explicit or tensorsketch")
        mean, std = arrays.get("poly_mean"), arrays.get("poly_std")
        return cls(
            d, m, k, float(meta["gamma"]), coef0, method, hashes, signs,
            None if mean is None else np.asarray(mean, float), None if std is None else np.asarray(std, float),
            dict(meta.get("params", {})),
        )  # fmt: skip


def make_polynomial_map(
    n_features_in: int,
    n_components: int,
    seed: int,
    *,
    degree: int = 3,
    gamma: float | None = None,
    coef0: float = 1.0,
    method: str = "auto",
) -> PolynomialFeatureMap:
    """A feature map of ``(γ xᵀy + coef0)^degree`` with at most ``n_components`` features.

    Parameters
    ----------
    n_features_in : int
        Input dimension d.
    n_components : int
        Features D allowed.
    seed : int
        Fixes the TensorSketch hashes (the explicit map has no random part).
    degree : int, default=3
    gamma : float, optional
        Default ``1 / d`` (scikit-learn's).
    coef0 : float, default=1.0
        ``>= 0`` (``< 0`` is not a PSD kernel and has no real feature map).
    method : {"auto", "explicit", "tensorsketch"}, default="auto"
        ``"auto"``: the explicit monomials when their number ``C(d + k, k)`` is at most
        ``n_components`` (the kernel exactly), else TensorSketch.

    Returns
    -------
    PolynomialFeatureMap
        Its ``method`` says which map was built (also logged).
    """
    if isinstance(coef0, Real) and coef0 < 0:
        raise ParameterError(
            f"polynomial kernel with coef0={coef0} < 0 is not positive semi-definite and has no feature "
            "map; use coef0 >= 0 (or the exact or Nyström path)"
        )
    probe = Polynomial(degree, 1.0 if gamma is None else gamma, coef0)  # the kernel's own checks
    d, D = int(n_features_in), int(n_components)
    if d < 1 or D < 1:
        raise ParameterError(f"n_features_in and n_components must be positive, found {d} and {D}")
    if method not in POLYNOMIAL_METHODS:
        raise ParameterError(f"method must be one of {list(POLYNOMIAL_METHODS)}, found {method!r}")
    k, g, c0 = probe.degree, 1.0 / d if gamma is None else probe.gamma, probe.coef0
    M = n_monomials(d, k, c0)
    if method == "auto":
        method = "explicit" if M <= min(D, MAX_MONOMIALS) else "tensorsketch"
    params = {"seed": int(seed), "n_components_requested": D}
    if method == "explicit":
        if M > MAX_MONOMIALS:
            raise ParameterError(f"the explicit map of d={d}, degree={k} has {M:,} monomials; use tensorsketch")
        logger.info("polynomial features: explicit monomial map, %d monomials (n_components=%d; exact kernel)", M, D)
        return PolynomialFeatureMap(d, M, k, g, c0, "explicit", params=params)
    rng = np.random.default_rng(seed)
    n_in = d + (0 if c0 == 0 else 1)
    hashes = rng.integers(0, D, size=(k, n_in))
    signs = rng.choice(np.array([-1.0, 1.0]), size=(k, n_in))
    logger.info(
        "polynomial features: TensorSketch with %d components (the explicit map would need C(%d + %d, %d) = %s)",
        D, d, k, k, f"{M:,}",
    )  # fmt: skip
    return PolynomialFeatureMap(d, D, k, g, c0, "tensorsketch", hashes, signs, params=params)
