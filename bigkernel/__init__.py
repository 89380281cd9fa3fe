"""bigkernel: kernel ridge regression for large n, out of core on Dask.

Public API: :class:`RandomFeatureRidge`, :class:`ExactKernelRidge`, :class:`ExactKernelRidgeCV`,
:class:`NystroemRidge`, :class:`KernelRidge` (picks a solver), :func:`load`, :func:`make_data`,
:func:`progress_bars` (progress of the passes run inside it); :class:`TableEncoder` (one-hot and
missing values of tables);
the feature maps as transformers: :class:`RandomFeatures`, :class:`NystroemFeatures`.
"""

from bigkernel._version import __version__
from bigkernel.bands.bootstrap import BootstrapResult, bootstrap, eval_grid, load_bootstrap
from bigkernel.data.encode import TableEncoder
from bigkernel.data.sources import open_source
from bigkernel.data.synthetic import SyntheticSpec, make_data
from bigkernel.errors import (
    BigkernelError,
    ClusterError,
    ConfigError,
    DataError,
    DataNotFoundError,
    DeviceError,
    ExtrapolationWarning,
    IncompleteStoreError,
    ModelFormatError,
    NonFiniteError,
    OutputExistsError,
    ParameterError,
    StoreMismatchError,
)
from bigkernel.io.model_store import load
from bigkernel.models.exact import ExactKernelRidge
from bigkernel.models.exact_classifier import ExactKernelClassifier, KernelClassifier
from bigkernel.models.exact_cv import ExactKernelRidgeCV
from bigkernel.models.features import NystroemFeatures, RandomFeatures
from bigkernel.models.kernel_ridge import KernelRidge
from bigkernel.models.nystroem import NystroemRidge
from bigkernel.models.random_features import RandomFeatureRidge
from bigkernel.models.random_features_classifier import NystroemClassifier, RandomFeatureClassifier
from bigkernel.models.random_features_classifier_cv import RandomFeatureClassifierCV
from bigkernel.models.random_features_cv import RandomFeatureRidgeCV
from bigkernel.runtime import progress_bars

__all__ = [
    "__version__",
    "BootstrapResult",
    "IncompleteStoreError",
    "bootstrap",
    "eval_grid",
    "load_bootstrap",
    "BigkernelError",
    "ClusterError",
    "ConfigError",
    "DataError",
    "DataNotFoundError",
    "DeviceError",
    "ExactKernelRidge",
    "ExactKernelRidgeCV",
    "ExtrapolationWarning",
    "KernelRidge",
    "ModelFormatError",
    "NonFiniteError",
    "NystroemRidge",
    "NystroemFeatures",
    "OutputExistsError",
    "ParameterError",
    "RandomFeatureRidge",
    "RandomFeatureRidgeCV",
    "RandomFeatures",
    "StoreMismatchError",
    "SyntheticSpec",
    "TableEncoder",
    "load",
    "make_data",
    "open_source",
    "progress_bars",
    "ExactKernelClassifier",
    "KernelClassifier",
    "NystroemClassifier",
    "RandomFeatureClassifier",
    "RandomFeatureClassifierCV",
]
