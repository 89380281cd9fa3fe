"""Random-feature maps on numpy blocks (layer 1: no dask, no files).

A map is fixed by ``(kernel, n_features_in, n_components, seed, ...)`` alone: the frequencies are
drawn once, in float64, from ``numpy.random.default_rng(seed)``, so the features of a row never
depend on how the data is chunked.

The kernels served here are the registry's (:mod:`bigkernel.kernels.registry`, path
``random_features``); their spectral samplers (Rahimi & Recht 2007), with unit length scale
``ℓ = 1`` after dividing inputs by ``ℓ`` (per feature for ARD):

- ``rbf``: k(x, x') = exp(-‖x - x'‖² / (2ℓ²)) = exp(-γ‖x - x'‖²), γ = 1/(2ℓ²);
  frequencies ω ~ N(0, I/ℓ²). ``sampler="orthogonal"`` gives orthogonal random features
  (Yu et al. 2016): QR-orthogonalised Gaussian blocks with χ(d)-distributed row norms.
- ``laplacian``: k = exp(-γ‖x - x'‖₁) with γ = 1/ℓ; ω_j iid Cauchy(0, γ).
- ``matern`` with ν ∈ {0.5, 1.5, 2.5}: scikit-learn's Matérn with length scale ℓ (``gamma`` means
  ℓ = 1/√(2γ), matching the rbf limit ν → ∞); ω ~ multivariate t with 2ν degrees of freedom,
  scaled by 1/ℓ.
- ``fourier``: the fixed 1-D basis of the lecture notes, φ(x) = D^(-1/2) [cos 2πjx, sin 2πjx] for
  j = 1..D/2; it has no random part and no bandwidth.

Forms: ``"cos"``: φ(x) = √(2/D) cos(ωᵀx + b), b ~ U(0, 2π), D frequencies; ``"cossin"``:
φ(x) = √(2/D) [cos ωᵀx, sin ωᵀx] with D/2 frequencies (lower variance, D must be even).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from array_api_compat import array_namespace, is_numpy_namespace
from array_api_compat import device as array_device

from bigkernel._checks import check_choice
from bigkernel._sparse import is_sparse, matmul
from bigkernel.errors import DataError, ParameterError
from bigkernel.kernels.registry import (
    DEFAULT_SAMPLER,
    check_kernel_name,
    kernel_spec,
    length_scale_from_gamma,
    sampler_problem,
)

SAMPLERS = (DEFAULT_SAMPLER, "orthogonal")
FORMS = ("cos", "cossin")


def _unit_frequencies(kernel: str, sampler: str, nu: float, d: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Frequencies of the unit-length-scale kernel, shape (d, m), float64."""
    if kernel == "rbf" and sampler == "orthogonal":
        blocks = []
        for _ in range(-(-m // d)):
            q, r = np.linalg.qr(rng.standard_normal((d, d)))
            q = q * np.sign(np.diag(r))  # make the QR factor unique (Haar-distributed)
            norms = np.sqrt(rng.chisquare(d, size=d))
            blocks.append(q * norms[np.newaxis, :])
        return np.concatenate(blocks, axis=1)[:, :m]
    if kernel == "rbf":
        return rng.standard_normal((d, m))
    if kernel == "laplacian":
        return rng.standard_cauchy((d, m))
    if kernel == "matern":
        z = rng.standard_normal((d, m))
        u = rng.chisquare(2.0 * nu, size=m)
        return z * np.sqrt(2.0 * nu / u)[np.newaxis, :]
    raise ParameterError(f"no spectral sampler for kernel {kernel!r}")


#: bytes of one row tile of the numpy transform (the GEMM's output, read back by the cosines):
#: within a core's L2 here (1 MiB); measured on an 8,192 × 2,048 float32 block, 1 thread: 54 ms
#: in one piece, 47-48 ms in tiles of 64-1,024 rows (the cosines alone 36 ms)
TILE_BYTES = 2**20


@dataclass(frozen=True, eq=False)
class FeatureMap:
    """A fitted feature map: frequencies ``weights`` (d, m) and offsets ``offsets`` (m,).

    Build one with :func:`make_feature_map`; restore one from saved arrays with
    :meth:`from_arrays`. :meth:`transform_unscaled` returns features without the constant
    factor :attr:`scale`, so hot loops can fold that factor into the (small) sums instead of
    multiplying the (large) feature block.
    """

    kernel: str
    n_features_in: int
    n_components: int
    form: str
    weights: np.ndarray
    offsets: np.ndarray | None
    scale: float
    params: dict[str, Any] = field(default_factory=dict)

    def transform_unscaled(self, X: Any, dtype: np.dtype | str = np.float64, out: np.ndarray | None = None) -> Any:
        """Features of the rows of ``X`` divided by :attr:`scale`, shape (n, n_components).

        ``X`` may be an array of any array-API namespace (numpy, CuPy, array-api-strict); the
        features are an array of the same namespace and device. The whole computation, argument
        ``Xω + b`` included, runs in ``dtype``: in float32 the argument carries an absolute
        error of about 1e-6 (|Xω + b| ~ 10), and float64 arrays of n × D would double the
        memory traffic that dominates this step. Sparse ``X`` (scipy.sparse) is multiplied as
        stored: O(nnz · D), never densified.

        ``out`` (numpy only): an (n, n_components) array or view to write the features into, so
        the streamed pass fills its product buffer without a copy.
        """
        if X.ndim != 2 or X.shape[1] != self.n_features_in:
            raise DataError(
                f"X has {X.shape[1] if X.ndim == 2 else X.shape} features, but the feature map "
                f"expects {self.n_features_in}; pass data with the same columns as in fit"
            )
        if is_sparse(X):
            return self._transform_sparse(X, np.dtype(dtype), out)
        xp = array_namespace(X)
        if is_numpy_namespace(xp):
            return self._transform_numpy(np.asarray(X), np.dtype(dtype), out)
        if out is not None:
            raise ParameterError("out= is for numpy inputs only")
        dtype = np.dtype(dtype)
        weights, offsets = self._params_on(xp, dtype, array_device(X))
        z = xp.matmul(xp.astype(X, getattr(xp, dtype.name), copy=False), weights)
        if offsets is not None:
            z = z + offsets
        if self.form == "cos":
            return xp.cos(z)
        return xp.concat([xp.cos(z), xp.sin(z)], axis=1)

    def _transform_sparse(self, X: Any, dtype: np.dtype, out: np.ndarray | None) -> np.ndarray:
        """Sparse X (scipy.sparse): multiplied as stored, O(nnz · D), never densified."""
        weights, offsets = self._params_as(dtype)
        z = matmul(X, weights, dtype)
        if offsets is not None:
            z += offsets
        if self.form == "cos":
            phi = np.cos(z, out=z)
        else:
            phi = np.concatenate([np.cos(z), np.sin(z)], axis=1)
        if out is None:
            return phi
        out[...] = phi
        return out

    def _transform_numpy(self, X: np.ndarray, dtype: np.dtype, out: np.ndarray | None) -> np.ndarray:
        """The numpy fast path of :meth:`transform_unscaled`: every step in place."""
        if out is None:
            out = np.empty((X.shape[0], self.n_components), dtype=dtype)
        if self.form == "cos":
            # [x, 1] @ [ω; b]: the offsets ride in the GEMM instead of one more pass over n × D;
            # in row tiles, so the cosines read the GEMM's output from cache, not from memory
            aug = np.empty((X.shape[0], X.shape[1] + 1), dtype=dtype)
            aug[:, :-1], aug[:, -1] = X, 1.0
            weights = self._augmented_weights(dtype)
            tile = max(1, TILE_BYTES // (self.n_components * dtype.itemsize))
            for lo in range(0, X.shape[0], tile):
                z = np.matmul(aug[lo : lo + tile], weights, out=out[lo : lo + tile])
                np.cos(z, out=z)
            return out
        z = X.astype(dtype, copy=False) @ self._params_as(dtype)[0]
        np.cos(z, out=out[:, : z.shape[1]])
        np.sin(z, out=out[:, z.shape[1] :])
        return out

    def _params_as(self, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
        """``(weights, offsets)`` cast to ``dtype``, cached (hot loop: cast once per map)."""
        cache = self.__dict__.setdefault("_cast_cache", {})
        if dtype not in cache:
            off = None if self.offsets is None else self.offsets.astype(dtype)
            cache[dtype] = (self.weights.astype(dtype, copy=False), off)
        return cache[dtype]

    def _augmented_weights(self, dtype: np.dtype) -> np.ndarray:
        """``[ω; b]`` (d + 1, D) in ``dtype``, cached (b = 0 for a map without offsets)."""
        cache = self.__dict__.setdefault("_cast_cache", {})
        key = ("augmented", dtype)
        if key not in cache:
            off = np.zeros(self.weights.shape[1]) if self.offsets is None else self.offsets
            cache[key] = np.vstack([self.weights, off[np.newaxis, :]]).astype(dtype)
        return cache[key]

    def _params_on(self, xp: Any, dtype: np.dtype, device: Any) -> tuple[Any, Any]:
        """``(weights, offsets)`` in ``dtype`` as arrays of namespace ``xp`` on ``device``,
        cached per (namespace, device, dtype): one host→device copy per map and worker."""
        cache = self.__dict__.setdefault("_cast_cache", {})
        key = (xp.__name__, str(device), dtype.name)
        if key not in cache:
            # copies: array-api-strict may wrap numpy memory, and the cache must stay private
            w, off = (None if a is None else xp.asarray(a.copy(), device=device) for a in self._params_as(dtype))
            cache[key] = (w, off)
        return cache[key]

    def __getstate__(self) -> dict:
        # the cast cache may hold device arrays: never ship it to another process
        state = dict(self.__dict__)
        state.pop("_cast_cache", None)
        return state

    def transform(self, X: Any, dtype: np.dtype | str = np.float64) -> Any:
        """Features φ(x) of the rows of ``X`` (any array namespace), shape (n, n_components)."""
        phi = self.transform_unscaled(X, dtype)
        if isinstance(phi, np.ndarray):
            phi *= phi.dtype.type(self.scale)
            return phi
        return phi * self.scale  # a Python float keeps the array's dtype

    def standardized(self, mean: np.ndarray, scale: np.ndarray) -> FeatureMap:
        """The map of standardized inputs (x - mean) / scale, as a map of raw inputs.

        ωᵀ(x - m)/s + b = (ω/s)ᵀx + (b - (ω/s)ᵀm): the scaling folds into the weights and offsets,
        so the hot loop is unchanged and the saved model carries it.
        """
        if self.kernel == "fourier":
            raise ParameterError("standardize=True does not apply to the fixed Fourier basis on [0, 1]")
        w = self.weights / np.asarray(scale, dtype=np.float64)[:, np.newaxis]
        off = (0.0 if self.offsets is None else self.offsets) - np.asarray(mean, dtype=np.float64) @ w
        params = {**self.params, "standardized": True}
        return FeatureMap(self.kernel, self.n_features_in, self.n_components, self.form, w, off, self.scale, params)

    def to_metadata(self) -> dict[str, Any]:
        """JSON-able description (arrays are saved separately by the persistence layer)."""
        return {
            "kernel": self.kernel,
            "n_features_in": self.n_features_in,
            "n_components": self.n_components,
            "form": self.form,
            "scale": self.scale,
            "params": self.params,
        }

    @classmethod
    def from_arrays(cls, meta: dict[str, Any], weights: np.ndarray, offsets: np.ndarray | None) -> FeatureMap:
        """Rebuild a map from :meth:`to_metadata` output and its saved arrays."""
        weights = np.asarray(weights, dtype=np.float64)
        d, m = int(meta["n_features_in"]), int(meta["n_components"])
        n_freq = m // 2 if meta["form"] == "cossin" else m
        if weights.shape != (d, n_freq):
            raise DataError(f"feature-map weights have shape {weights.shape}, expected {(d, n_freq)}")
        return cls(
            kernel=meta["kernel"],
            n_features_in=d,
            n_components=m,
            form=meta["form"],
            weights=weights,
            offsets=None if offsets is None else np.asarray(offsets, dtype=np.float64),
            scale=float(meta["scale"]),
            params=dict(meta.get("params", {})),
        )


def make_feature_map(
    kernel: str,
    n_features_in: int,
    n_components: int,
    seed: int,
    *,
    gamma: float | None = None,
    length_scale: float | np.ndarray | None = None,
    nu: float = 1.5,
    sampler: str = "iid",
    form: str = "cos",
) -> FeatureMap:
    """Draw a feature map approximating ``kernel`` with ``n_components`` features.

    Parameters
    ----------
    kernel : {"rbf", "laplacian", "matern", "fourier"}
        A kernel the registry's ``random_features`` path serves, or an alias of one.
    n_features_in : int
        Input dimension d.
    n_components : int
        Number of features D (even for ``form="cossin"`` and ``kernel="fourier"``).
    seed : int
        Fixes the frequencies and offsets.
    gamma, length_scale : float, optional
        Bandwidth, one or the other; ``length_scale`` may be an array of shape (d,) (ARD).
        Default: γ = 1/d.
    nu : {0.5, 1.5, 2.5}, default=1.5
        Matérn smoothness.
    sampler : {"iid", "orthogonal"}, default="iid"
        Orthogonal random features are available for ``rbf`` only.
    form : {"cos", "cossin"}, default="cos"

    Returns
    -------
    FeatureMap
    """
    kernel = check_kernel_name(kernel, "random_features").name
    check_choice("sampler", sampler, SAMPLERS)
    check_choice("form", form, FORMS)
    d, m = int(n_features_in), int(n_components)
    if m <= 0:
        raise ParameterError(f"n_components must be a positive integer, got {n_components!r}")
    if kernel == "fourier":
        return _fourier_basis(d, m)
    if kernel not in ("rbf", "laplacian", "matern"):  # polynomial: no spectral sampler
        raise ParameterError(
            f"kernel {kernel!r} has no spectral sampler; its random-feature map is "
            "bigkernel.numerics.polynomial_features.make_polynomial_map (what RandomFeatureRidge uses)"
        )
    if kernel == "matern":
        kernel_spec("matern").check_choice("nu", nu)
    problem = sampler_problem(kernel, sampler)
    if problem:
        raise ParameterError(problem)
    if form == "cossin" and m % 2:
        raise ParameterError(f"form='cossin' needs an even n_components, got {m}")
    ell = _resolve_length_scale(kernel, d, gamma, length_scale)

    rng = np.random.default_rng(seed)
    n_freq = m // 2 if form == "cossin" else m
    weights = np.ascontiguousarray(_unit_frequencies(kernel, sampler, nu, d, n_freq, rng))
    weights /= ell[:, np.newaxis]  # in place: at d = 1e5, D = 512 the matrix alone is 410 MB
    offsets = rng.uniform(0.0, 2.0 * math.pi, size=n_freq) if form == "cos" else None
    params: dict[str, Any] = {
        "length_scale": ell.tolist() if ell.size > 1 and np.ptp(ell) > 0 else float(ell[0]),
        "nu": float(nu),
        "sampler": sampler,
        "seed": int(seed),
    }
    return FeatureMap(kernel, d, m, form, weights, offsets, math.sqrt(2.0 / m), params)


def _fourier_basis(d: int, m: int) -> FeatureMap:
    if d != 1:
        raise DataError(f"kernel='fourier' is the fixed 1-D Fourier basis and needs X with 1 feature, got {d}")
    if m % 2:
        raise ParameterError(f"kernel='fourier' needs an even n_components, got {m}")
    freqs = 2.0 * math.pi * np.arange(1, m // 2 + 1, dtype=np.float64)[np.newaxis, :]
    return FeatureMap("fourier", 1, m, "cossin", freqs, None, 1.0 / math.sqrt(m), {})


def _resolve_length_scale(
    kernel: str, d: int, gamma: float | None, length_scale: float | np.ndarray | None
) -> np.ndarray:
    if gamma is not None and length_scale is not None:
        raise ParameterError("give gamma or length_scale, not both")
    if length_scale is None:
        gamma = 1.0 / d if gamma is None else gamma
        if not (np.isscalar(gamma) and np.isfinite(gamma) and gamma > 0):
            raise ParameterError(f"gamma must be a positive finite number, got {gamma!r}")
        return np.full(d, length_scale_from_gamma(kernel, float(gamma)))
    ell = np.atleast_1d(np.asarray(length_scale, dtype=np.float64))
    if ell.ndim != 1 or ell.size not in (1, d):
        raise ParameterError(
            f"length_scale must be a number or have one entry per feature ({d}), got shape {ell.shape}"
        )
    if not np.all(np.isfinite(ell) & (ell > 0)):
        raise ParameterError(f"length_scale must be positive and finite, got {length_scale!r}")
    return np.broadcast_to(ell, (d,)).copy()
