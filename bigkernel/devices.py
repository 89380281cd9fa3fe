"""Where a computation runs: the ``device`` of estimators, ``bootstrap()`` and jobs.

``"cpu"`` (default) computes with numpy; ``"cuda"`` / ``"cuda:N"`` with CuPy on GPU ``N``;
``"auto"`` picks GPU 0 when CuPy sees one, else the CPU (logged). Nothing GPU-related is
imported unless a device asks for it: CuPy is imported by :func:`resolve_device` only for a
``cuda`` or ``auto`` request.

A :class:`Device` moves arrays (``asarray`` to the device, ``to_host`` back) and gives the
array namespace the numerics use (array-api-compat's numpy or CuPy namespace); numerics take
their namespace from their inputs (``array_api_compat.array_namespace``), so the same code runs
on numpy, CuPy and array-api-strict.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
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


CPU = Device("cpu")


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
