"""Where a computation runs: the ``device`` of estimators, ``bootstrap()`` and jobs.

``"cpu"`` (default) computes with numpy; ``"cuda"`` / ``"cuda:N"`` with CuPy on GPU ``N``;
``"auto"`` picks GPU 0 when CuPy sees one, else the CPU (logged). Nothing GPU-related is
imported unless a device asks for it: CuPy is imported by :func:`resolve_device` only for a
``cuda`` or ``auto`` request.

A :class:`Device` moves arrays (``asarray`` to the device, ``to_host`` back) and gives the
array namespace the numerics use (array-api-compat's numpy or CuPy namespace); numerics take
their namespace from their inputs (``array_api_compat.array_namespace``), so the same code runs
on numpy, CuPy and array-api-strict.

One :class:`Device` from the estimator to the task
--------------------------------------------------
The ``device`` *parameter* (text) is resolved once, by :func:`resolve_device`, at the start of a
fit (the estimators' ``_fit_device``), of a prediction (``_predict_device``), of a job and of
``bootstrap(device=...)``. Everything below takes that :class:`Device` object unchanged: the
solvers, the graph builders (``graph.stream.stats_graph``), the numerics (``numerics.sums``,
``numerics.primal``) and the predictors (:class:`DeviceNamespace`). A ``Device`` is a frozen
value: it pickles to dask workers as ``(kind, index)`` and tokenizes by value, so equal devices
give equal graph keys.

One function, :func:`task_device`, turns it into the device a task computes on. Outside a dask
worker (numpy in-process fits, the threaded scheduler) that is the device itself, its GPU
ordinal included. Inside a dask worker the ordinal is re-resolved: a dask-cuda worker sees only
its own GPU, as ``cuda:0`` (``CUDA_VISIBLE_DEVICES``), so the fit's ``cuda:N`` — an ordinal of
the client's machine — is replaced by that worker's GPU (as ``"cuda"`` without an ordinal was
before the ``Device`` went into the graph).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from bigkernel.errors import DeviceError, ParameterError

logger = logging.getLogger(__name__)

#: the forms ``device`` takes (checked by :func:`parse_device`; the estimators' tables use it)
DEVICE_PATTERN = re.compile(r"^(cpu|auto|cuda)(?::(\d+))?$")

#: what to tell a user whose machine lacks CuPy
INSTALL_HINT = 'pip install "bigkernel[gpu]"  (CuPy for CUDA 12 and dask-cuda)'


@dataclass(frozen=True)
class Device:
    """A resolved compute device.

    Attributes
    ----------
    kind : {"cpu", "cuda"}
    index : int or None
        The GPU ordinal for ``kind == "cuda"``.
    """

    kind: str
    index: int | None = None

    def __post_init__(self) -> None:
        # the one form every layer below the estimator relies on: check it where it is made
        if self.kind == "cpu" and self.index is None:
            return
        if self.kind != "cuda" or not isinstance(self.index, int) or isinstance(self.index, bool) or self.index < 0:
            raise ValueError(f"a Device is ('cpu', None) or ('cuda', ordinal >= 0); got {self.kind!r}, {self.index!r}")

    def __dask_tokenize__(self) -> tuple:
        """Tokenized by value (equal devices give equal graph keys in every process)."""
        return ("bigkernel.devices.Device", self.kind, self.index)

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    @property
    def is_gpu(self) -> bool:
        """True for a CUDA device."""
        return self.kind == "cuda"

    @property
    def xp(self) -> ModuleType:
        """The array namespace of this device (array-api-compat's numpy or CuPy wrapper)."""
        if self.is_gpu:
            return importlib.import_module("array_api_compat.cupy")
        return importlib.import_module("array_api_compat.numpy")

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        """Make this device current (CuPy allocations and kernels go to GPU ``index``)."""
        if not self.is_gpu:
            yield
            return
        cp = _import_cupy()
        with cp.cuda.Device(self.index):
            yield

    def asarray(self, a: Any, dtype: Any = None) -> Any:
        """``a`` as an array on this device (a host→device copy for a GPU)."""
        if not self.is_gpu:
            return np.asarray(a, dtype=dtype)
        cp = _import_cupy()
        with cp.cuda.Device(self.index):
            return cp.asarray(a, dtype=dtype)

    def free_memory(self) -> int | None:
        """Free bytes on the GPU now, counting what CuPy's default pool holds unused (it is
        free to this process); None for the CPU (host budgets come from psutil)."""
        if not self.is_gpu:
            return None
        cp = _import_cupy()
        with cp.cuda.Device(self.index):
            free, _total = cp.cuda.runtime.memGetInfo()
            return int(free) + int(cp.get_default_memory_pool().free_bytes())


#: the CPU (compare devices with ``==`` or ``is_gpu``: an unpickled CPU is equal, not identical)
CPU = Device("cpu")


def task_device(device: Device) -> Device:
    """The device a task computes on, given the fit's resolved ``device``.

    The one place a :class:`Device` is re-resolved below the estimator: every GPU code path of
    the numerics calls it where it runs (``numerics.sums.block_stats``,
    ``numerics.primal.symmetric_eigh``, :class:`DeviceNamespace`).

    Parameters
    ----------
    device : Device
        The fit's device (never its text: see the module docstring).

    Returns
    -------
    Device
        ``device`` itself on the CPU and outside a dask worker. Inside a dask worker a GPU
        device becomes the worker's own GPU, ``cuda:0`` as the worker sees it: a dask-cuda
        worker's ``CUDA_VISIBLE_DEVICES`` starts with its GPU, so the ordinal the client
        resolved does not name it there.

    Raises
    ------
    TypeError
        For anything but a :class:`Device` (a ``device`` parameter passed down as text).
    DeviceError
        In a worker that sees no GPU.
    """
    if not isinstance(device, Device):
        raise TypeError(
            f"expected a bigkernel.devices.Device, got {device!r}: the estimator resolves its device "
            "parameter once (resolve_device) and passes the Device down"
        )
    if not device.is_gpu or not _in_dask_worker():
        return device
    return resolve_device("cuda")  # the worker's own GPU (and a DeviceError where it has none)


def _in_dask_worker() -> bool:
    """Whether this code runs in a task on a ``distributed`` worker (never imports it)."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return False
    try:
        distributed.get_worker()
    except ValueError:  # "No worker found": the client, or another scheduler
        return False
    return True


@dataclass(frozen=True)
class DeviceNamespace:
    """Picklable ``() -> (xp, context)`` of a GPU :class:`Device`, resolved where it is called
    (:func:`task_device`: a dask worker's own GPU): the array namespace and a context manager
    making the device current, as ``numerics.device_gram.DeviceExpansion`` takes them."""

    device: Device

    def __call__(self) -> tuple[ModuleType, contextlib.AbstractContextManager]:
        device = task_device(self.device)
        return device.xp, device.activate()


def to_host(a: Any) -> np.ndarray:
    """A host numpy array of any namespace's array: numpy passes through, CuPy is copied
    device→host, another namespace's array (array-api-strict) is moved to its namespace's
    default device first (array-api-strict's test devices refuse a direct numpy conversion)."""
    if isinstance(a, np.ndarray):
        return a
    if type(a).__module__.startswith("cupy"):
        return a.get()  # cupy.ndarray.get() copies to the host
    to_device = getattr(a, "to_device", None)
    if to_device is not None and hasattr(a, "__array_namespace__"):
        a = to_device(a.__array_namespace__().__array_namespace_info__().default_device())
    return np.asarray(a)


def parse_device(spec: Any) -> tuple[str, int | None]:
    """Split a ``device`` value into (kind, index), or raise :class:`ParameterError`.

    Accepts None (the CPU), ``"cpu"``, ``"auto"``, ``"cuda"`` and ``"cuda:N"``.
    """
    if spec is None:
        return "cpu", None
    m = DEVICE_PATTERN.match(spec) if isinstance(spec, str) else None
    if m is None or (m.group(2) is not None and m.group(1) != "cuda"):
        raise ParameterError(f"device must be 'cpu', 'cuda', 'cuda:N' (a GPU ordinal) or 'auto'; got {spec!r}")
    return m.group(1), None if m.group(2) is None else int(m.group(2))


def resolve_device(spec: Any = "cpu") -> Device:
    """The :class:`Device` for a ``device`` parameter.

    Parameters
    ----------
    spec : {"cpu", "cuda", "cuda:N", "auto"} or None
        None means ``"cpu"``.

    Returns
    -------
    Device

    Raises
    ------
    ParameterError
        For a value of the wrong form.
    DeviceError
        For ``"cuda"`` / ``"cuda:N"`` when CuPy is missing, no GPU is visible or GPU ``N`` does
        not exist (never a silent CPU fit).
    """
    kind, index = parse_device(spec)
    if kind == "cpu":
        return CPU
    if kind == "auto":
        n, why = _gpu_count()
        if n > 0:
            logger.info("device='auto': using cuda:0 (%d GPU(s) visible to CuPy)", n)
            return Device("cuda", 0)
        logger.info("device='auto': using the CPU (%s)", why)
        return CPU
    n, why = _gpu_count()
    if n == 0:
        raise DeviceError(
            f"device={spec!r} needs CuPy and a CUDA GPU, but {why}. Install the GPU extra with "
            f"{INSTALL_HINT} on a machine with an NVIDIA GPU and driver, or use device='cpu' "
            "(or 'auto' to take a GPU only when one is there)."
        )
    index = 0 if index is None else index
    if index >= n:
        raise DeviceError(
            f"device={spec!r}: CuPy sees {n} GPU(s) (cuda:0 … cuda:{n - 1}); pick one of those, "
            "or check CUDA_VISIBLE_DEVICES"
        )
    return Device("cuda", index)


def _import_cupy() -> ModuleType:
    try:
        return importlib.import_module("cupy")
    except ImportError as exc:  # resolve_device checked it; this guards direct Device use
        raise DeviceError(f"CuPy is not installed ({exc}); install it with {INSTALL_HINT}") from None


def _gpu_count() -> tuple[int, str]:
    """(number of GPUs CuPy sees, why none when 0)."""
    try:
        cp = importlib.import_module("cupy")
    except ImportError as exc:
        return 0, f"CuPy is not installed ({exc})"
    try:
        n = int(cp.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError without a driver/GPU; its type lives in cupy
        return 0, f"CuPy cannot reach a CUDA GPU ({type(exc).__name__}: {exc})"
    return n, "" if n else "CuPy sees no CUDA GPU"
