"""bigkernel: kernel ridge regression for large n, out of core on Dask.

Public API: :class:`RandomFeatureRidge`, :func:`load`, :func:`make_data`.
"""

from bigkernel._version import __version__
from bigkernel.data.sources import open_source
from bigkernel.data.synthetic import SyntheticSpec, make_data
from bigkernel.errors import (
    BigkernelError,
    ClusterError,
    ConfigError,
    DataError,
    DataNotFoundError,
    ModelFormatError,
    NonFiniteError,
    OutputExistsError,
    ParameterError,
    StoreMismatchError,
)
from bigkernel.models.persist import load
from bigkernel.models.random_features import RandomFeatureRidge
from bigkernel.models.random_features_cv import RandomFeatureRidgeCV

__all__ = [
    "__version__",
    "BigkernelError",
    "ClusterError",
    "ConfigError",
    "DataError",
    "DataNotFoundError",
    "ModelFormatError",
    "NonFiniteError",
    "OutputExistsError",
    "ParameterError",
    "RandomFeatureRidge",
    "RandomFeatureRidgeCV",
    "StoreMismatchError",
    "SyntheticSpec",
    "load",
    "make_data",
    "open_source",
]
