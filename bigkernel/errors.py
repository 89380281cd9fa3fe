"""Exception hierarchy.

Every error raised on purpose by bigkernel derives from :class:`BigkernelError`; each subclass
also derives from the built-in a caller would naturally catch (``ValueError``,
``FileNotFoundError``), so ``except ValueError`` keeps working. Messages say what was expected,
what was found and how to fix it.
"""

from __future__ import annotations


class BigkernelError(Exception):
    """Base class of all bigkernel errors."""


class DataError(BigkernelError, ValueError):
    """Input data has the wrong shape, dtype, chunking or values (NaN/inf, empty)."""


class NonFiniteError(DataError):
    """NaN or inf found in the data during the pass; the message names the rows and columns.

    ``bad_rows`` (a :class:`bigkernel.numerics.nonfinite.BadRows`, or None) is the summary
    behind the message, kept through pickling (a cluster's error reaches the client whole).
    """

    def __init__(self, message: str, bad_rows: object = None) -> None:
        super().__init__(message)
        self.bad_rows = bad_rows

    def __reduce__(self):
        return (type(self), (self.args[0], self.bad_rows))


class ParameterError(BigkernelError, ValueError):
    """An estimator or function parameter is out of range or of the wrong type."""


class ConfigError(BigkernelError, ValueError):
    """A job configuration is invalid; the message names the key."""


class DataNotFoundError(BigkernelError, FileNotFoundError):
    """A data source (file, zarr group, array inside a group) does not exist."""


class ModelFormatError(BigkernelError, ValueError):
    """A path does not hold a readable bigkernel model (foreign, truncated, newer format)."""


class StoreMismatchError(BigkernelError, ValueError):
    """A results store was written by a different job and cannot be reused."""


class OutputExistsError(BigkernelError, FileExistsError):
    """An output would overwrite an input or an existing result."""


class IncompleteStoreError(BigkernelError, ValueError):
    """A results store lacks some entries (e.g. bootstrap replicates); the message lists them."""


class ClusterError(BigkernelError, RuntimeError):
    """The Dask cluster could not run the work: the scheduler is unreachable, bigkernel is
    missing on a worker, or a task kept killing its workers (``distributed.KilledWorker``)."""


class NotPSDError(BigkernelError, ArithmeticError):
    """An operator that must be positive (semi-)definite is not: CG breakdown (pᵀAp <= 0), an
    indefinite preconditioner or a kernel Gram matrix with negative eigenvalues."""


class DeviceError(BigkernelError, RuntimeError):
    """The requested compute device cannot be used: CuPy is not installed, no CUDA GPU is
    visible, or the GPU index does not exist. The message says how to install or what to pick."""


class ExtrapolationWarning(UserWarning):
    """Evaluation points lie outside the training data's per-feature range: there the band (or
    prediction) shows the model's extrapolation, which the data do not support."""
