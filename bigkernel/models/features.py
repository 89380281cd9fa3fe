"""The feature maps as scikit-learn transformers: :class:`RandomFeatures` (like scikit-learn's
RBFSampler) and :class:`NystroemFeatures` (like Nystroem), numpy or dask in, numpy or lazy dask
out, with a zarr writer for outputs larger than memory.

Each draws its map exactly as the matching ridge estimator does (the same parameters, the same
seed → the same map), so ``Ridge`` on ``RandomFeatures(...).fit_transform(X)`` is
``RandomFeatureRidge(...)`` with the same α.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, ClassVar, Self

import dask.array as da
import numpy as np
from numpy.typing import ArrayLike, DTypeLike
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from bigkernel._sparse import check_real
from bigkernel.data.frames import validate_data
from bigkernel.data.sources import Dataset, as_dataset
from bigkernel.errors import DataError
from bigkernel.io.model_store import register_model, save_model
from bigkernel.kernels.registry import document_kernels
from bigkernel.models._base import SPARSE_OK, ArrayIn, KernelLike, RandomStateLike, check_estimator_params
from bigkernel.models._streamed import FeaturesOutMixin
from bigkernel.models.nystroem import NystroemRidge
from bigkernel.models.random_features import RandomFeatureRidge
from bigkernel.numerics.nystroem_features import NystroemMap
from bigkernel.solvers.random_features import feature_map_arrays, feature_map_from_state

__all__ = ["NystroemFeatures", "RandomFeatures"]

#: parameters of the ridge estimators that are about the fit, not the map
_FIT_ONLY = ("alpha", "fit_intercept", "chunk_rows")


def _map_constraints(ridge: type, init: Any) -> dict[str, list]:
    """The ridge estimator's table entries of the parameters ``init`` (a transformer's
    ``__init__``) takes: one table per parameter, and a parameter the ridge estimator gains
    reaches the transformer when its ``__init__`` lists it."""
    names = set(inspect.signature(init).parameters) - {"self"}
    return {k: v for k, v in ridge._parameter_constraints.items() if k in names and k not in _FIT_ONLY}


class _FeatureTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, FeaturesOutMixin, BaseEstimator):
    """Fit draws the map of ``_ridge`` (a ridge estimator class) on X; transform gives φ(X)."""

    _ridge: ClassVar[type]
    _parameter_constraints: ClassVar[dict[str, list]] = {}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()  # TransformerMixin's resets the transformer tags
        tags.transformer_tags.preserves_dtype = [str(np.dtype(self.dtype))]
        tags.input_tags.sparse = True  # scipy.sparse X, as the ridge estimators (dense features out)
        return tags

    def _ridge_for_map(self):
        """A ridge estimator with this transformer's parameters: it draws the map."""
        params = self.get_params(deep=False)
        return self._ridge(**params)

    def fit(self, X: ArrayIn, y: Any = None) -> Self:
        """Draw the feature map for X's columns (Nyström: sample landmarks from X's rows).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            numpy input is checked (finite, numeric); a dask array is read only where the map
            needs values (the Nyström landmark rows, the column moments for ``standardize``).
        y : ignored

        Returns
        -------
        self
        """
        check_estimator_params(self)
        ridge = self._ridge_for_map()
        ridge._check_rules()
        ds = self._fit_data(X)
        fixed = ridge.make_solver().prepare(ds)  # the scaling and the map, as the ridge's fit draws them
        self.feature_map_ = fixed.fmap
        self._n_features_out = fixed.fmap.n_components
        if self.standardize:
            self.scaler_mean_, self.scaler_scale_ = fixed.scaler
        return self

    def _fit_data(self, X) -> Dataset:
        if isinstance(X, da.Array):
            ds = as_dataset(X)
            if ds.X.shape[0] < 1:
                raise DataError("X is empty")
            self.n_features_in_ = int(ds.X.shape[1])
            self.set_input_facts(ds.X.dtype)
            return ds
        check_real(X, "X")
        X = validate_data(self, X, reset=True, dtype=[np.float64, np.float32], **SPARSE_OK)
        self.set_input_facts(X.dtype, getattr(self, "feature_names_in_", None))
        return as_dataset(X)

    def set_input_facts(
        self, X_dtype: DTypeLike, feature_names: Sequence[str] | None = None, target_names: Sequence[str] | None = None
    ) -> None:
        """The training X's dtype and column names (saved with the transformer; no targets)."""
        self.X_dtype_in_ = np.dtype(X_dtype).name
        if feature_names is None:
            self.__dict__.pop("feature_names_in_", None)
        else:
            self.feature_names_in_ = np.asarray(feature_names, dtype=object)

    def save(self, path: str, *, overwrite: bool = False) -> str:
        """Save the fitted transformer as a zarr group with JSON metadata (no pickle); read it
        back with :func:`bigkernel.load`.

        Parameters
        ----------
        path : str
        overwrite : bool, default=False

        Returns
        -------
        str
            ``path``.
        """
        return save_model(self, path, overwrite=overwrite)

    def _set_map(self, fmap: Any, attrs: dict) -> None:
        self.feature_map_ = fmap
        self._n_features_out = fmap.n_components
        self.n_features_in_ = int(attrs["n_features_in_"])


@document_kernels("random_features")
@register_model
class RandomFeatures(_FeatureTransformer):
    """Random Fourier features φ(x) (Rahimi & Recht) as a scikit-learn transformer.

    The map of :class:`~bigkernel.RandomFeatureRidge` with the same parameters: ``fit`` draws
    it from X's width (γ = 1/n_features by default) and ``random_state``; ``transform`` gives
    ``φ(X)`` with ``φ(x)ᵀφ(x') ≈ k(x, x')``. numpy in → numpy out; dask in → a lazy dask array
    (X's row chunks, one column chunk of ``n_components``); :meth:`transform_to_zarr` writes
    outputs larger than memory.

    Parameters
    ----------
    kernel : str, default="rbf"
        A kernel of the registry's random-feature path: one of {kernels} (polynomial: explicit
        monomials or a TensorSketch, like scikit-learn's PolynomialCountSketch), or an alias.
    gamma, length_scale, nu, degree, coef0, n_components, sampler, form, random_state, dtype, standardize
        As in :class:`~bigkernel.RandomFeatureRidge`; ``dtype`` is the output's dtype.

    Attributes
    ----------
    feature_map_ : FeatureMap or PolynomialFeatureMap
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        When fitted on a DataFrame.
    scaler_mean_, scaler_scale_ : ndarray of shape (n_features,)
        With ``standardize=True``.
    """

    _ridge = RandomFeatureRidge

    def __init__(
        self,
        kernel: str = "rbf",
        *,
        gamma: float | None = None,
        length_scale: float | ArrayLike | None = None,
        nu: float | None = 1.5,
        degree: int = 3,
        coef0: float = 1,
        n_components: int = 100,
        sampler: str = "iid",
        form: str = "cos",
        random_state: RandomStateLike = None,
        dtype: DTypeLike = "float64",
        standardize: bool = False,
    ) -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.length_scale = length_scale
        self.nu = nu
        self.degree = degree
        self.coef0 = coef0
        self.n_components = n_components
        self.sampler = sampler
        self.form = form
        self.random_state = random_state
        self.dtype = dtype
        self.standardize = standardize

    _parameter_constraints: ClassVar[dict[str, list]] = _map_constraints(RandomFeatureRidge, __init__)

    def get_model_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted map as JSON attributes and arrays (format v1)."""
        check_is_fitted(self, "feature_map_")
        fm = self.feature_map_
        return {"feature_map": fm.to_metadata(), "n_features_in_": self.n_features_in_}, feature_map_arrays(fm)

    def set_model_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        """Set the map read back from a store."""
        self._set_map(feature_map_from_state(attrs["feature_map"], arrays), attrs)


@document_kernels("nystroem")
@register_model
class NystroemFeatures(_FeatureTransformer):
    """Nyström features ``φ(x) = K_mm^(-1/2) k_m(x)`` as a scikit-learn transformer.

    The map of :class:`~bigkernel.NystroemRidge` with the same parameters: ``fit`` samples
    ``n_components`` landmarks from X's rows as that estimator does (``"rpcholesky"``: pivots
    of a randomly pivoted Cholesky among ``max(4m, 2000)`` uniform candidate rows;
    ``"uniform"``: uniform rows), reading only those rows of a dask X. ``transform`` gives
    ``φ(X)`` with ``φ(x)ᵀφ(x')`` the Nyström approximation of ``k(x, x')``; eigen-directions of
    ``K_mm`` below round-off are dropped, so there may be fewer than ``n_components`` columns
    (``get_feature_names_out`` says how many).

    Parameters
    ----------
    kernel : str, dict or Kernel, default="rbf"
        One of {kernels} (the kernel registry's Nyström path), or a Kernel.
    gamma, degree, coef0, length_scale, nu, kernel_params, n_components, landmarks, random_state, dtype, standardize
        As in :class:`~bigkernel.NystroemRidge`; ``dtype`` is the output's dtype.

    Attributes
    ----------
    feature_map_ : NystroemMap
        Landmarks and ``K_mm^(-1/2)``.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        When fitted on a DataFrame.
    scaler_mean_, scaler_scale_ : ndarray of shape (n_features,)
        With ``standardize=True``.
    """

    _ridge = NystroemRidge

    def __init__(
        self,
        kernel: KernelLike = "rbf",
        *,
        gamma: float | None = None,
        degree: float = 3,
        coef0: float = 1,
        length_scale: float | ArrayLike | None = None,
        nu: float | None = 1.5,
        kernel_params: dict[str, Any] | None = None,
        n_components: int = 100,
        landmarks: str = "rpcholesky",
        random_state: RandomStateLike = None,
        dtype: DTypeLike = "float64",
        standardize: bool = False,
    ) -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.length_scale = length_scale
        self.nu = nu
        self.kernel_params = kernel_params
        self.n_components = n_components
        self.landmarks = landmarks
        self.random_state = random_state
        self.dtype = dtype
        self.standardize = standardize

    _parameter_constraints: ClassVar[dict[str, list]] = _map_constraints(NystroemRidge, __init__)

    def get_model_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted map (landmarks, ``K_mm^(-1/2)``) as JSON attributes and arrays (format v1)."""
        check_is_fitted(self, "feature_map_")
        fm = self.feature_map_
        return {"feature_map": fm.to_metadata(), "n_features_in_": self.n_features_in_}, fm.arrays()

    def set_model_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        """Set the map read back from a store."""
        self._set_map(NystroemMap.from_arrays(attrs["feature_map"], arrays), attrs)
