"""Memory budgets, default ranks, size limits and the Gram operator choice: one module.

Every number that decides how much memory a solver may take, or which path a size goes to,
lives here, so that the estimators, the solvers, the replicate plans and :class:`KernelRidge`'s
choice read the same rule:

* :func:`resolve_memory_budget` (host bytes of a ``memory_budget`` parameter) and
  :func:`device_budget` (GPU bytes);
* :func:`default_exact_rank` (the exact solver's preconditioner rank) and
  :func:`reserve_bytes` (the exact solver's working memory besides the Gram operator);
* the exact path's limits: :data:`EXACT_DF_MAX_N`, :data:`EXACT_EVIDENCE_MAX_N`,
  :data:`DEFAULT_PROBES`, :data:`DENSE_POSTERIOR_MAX_N`;
* :func:`gram_operator`: the host-vs-GPU (and distributed-vs-in-task) choice of the
  :class:`~bigkernel.solvers.base.GramOperator` a solve runs on;
* :func:`solver_rule`: exact, Nyström or random features for ``n`` points within a budget
  (:meth:`bigkernel.KernelRidge.choose_solver` applies it);
* :func:`nystroem_direct_limit`: the most Nyström centres the one-pass solver takes, past which
  :class:`~bigkernel.KernelRidge` fits Nyström by Falkon's CG (``solver="cg"``).
"""

from __future__ import annotations

import logging
import math
from numbers import Real
from typing import Any

import numpy as np
import psutil
from dask.utils import parse_bytes

from bigkernel.devices import Device
from bigkernel.errors import ParameterError
from bigkernel.kernels.base import Kernel
from bigkernel.kernels.registry import kernel_serves
from bigkernel.numerics.device_gram import DeviceGram
from bigkernel.numerics.gram_tiles import LocalGram, plan_gram
from bigkernel.runtime import active_client, local_threads
from bigkernel.solvers.base import GramOperator
from bigkernel.solvers.gram_operator import DistributedGram

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MEMORY_FRACTION",
    "DEFAULT_PROBES",
    "DENSE_POSTERIOR_MAX_N",
    "DEVICE_MEMORY_FRACTION",
    "EXACT_DF_MAX_N",
    "EXACT_EVIDENCE_MAX_N",
    "NYSTROEM_DIRECT_MAX_COMPONENTS",
    "NYSTROEM_DIRECT_SQUARES",
    "NYSTROEM_MAX_N",
    "default_exact_rank",
    "device_budget",
    "gram_operator",
    "nystroem_direct_limit",
    "reserve_bytes",
    "resolve_memory_budget",
    "solver_rule",
]

#: default memory budget: this fraction of the machine's physical memory
DEFAULT_MEMORY_FRACTION = 0.5
#: share of a GPU's free memory taken by default (the rest: CUDA context, CuPy's pool slack)
DEVICE_MEMORY_FRACTION = 0.8
#: ``return_std`` factors ``K + αI`` (one n × n float64 array) up to this n
DENSE_POSTERIOR_MAX_N = 20_000
#: up to this n, df(α) (and so GCV) is exact, from the eigenvalues of the centred Gram matrix;
#: so is the evidence of every α (its log-determinant) at no further cost
EXACT_DF_MAX_N = 2000
#: ``alpha="evidence"`` above :data:`EXACT_DF_MAX_N` and up to this n: one Cholesky factor of
#: ``K + αI`` per α of the 7-point grid gives the log-determinants (the dense K and one factor,
#: 16·n² bytes, must fit half the memory budget). Measured (``scripts/bench_exact_evidence.py``,
#: 2 cores): the evidence fit takes 1.7 s / 8.8 s / 34 s at n = 3,000 / 6,000 / 10,000 (3×, 9×,
#: 14× the fixed-α fit; 2.6 GB peak at 10,000)
EXACT_EVIDENCE_MAX_N = 10_000
#: Hutchinson probes when df is needed (several α) and ``n_probes`` is None
DEFAULT_PROBES = 8
#: above this n (and when the Gram matrix does not fit) the one-pass random features win
NYSTROEM_MAX_N = 2_000_000
#: the most centres M the one-pass Nyström solver takes (past it: Falkon's CG, ``n·M·d`` per
#: iteration). Its pass costs ``n·M²`` flops and its solve an M×M eigendecomposition; measured
#: on this project's 2-core machine (issue 21: a 256k-row table, the same D×D pass of
#: RandomFeatureRidge), the fit took 38 s / 57 s / 180 s at D = 1024 / 2048 / 4096, growing as
#: D² from there (extrapolated: ~12 min at 8192, ~50 min at 16,384), while the CG takes 10–20
#: passes of ``n·M·d``. Past order ~16,000 the bundled OpenBLAS's multi-threaded Cholesky also
#: crashes (SIGSEGV) on that machine's AMD EPYC (issue 21).
NYSTROEM_DIRECT_MAX_COMPONENTS = 8192
#: float64 M×M arrays the one-pass Nyström fit holds at its peak: ``K_mm``, its eigenvectors and
#: ``K_mm^(-1/2)`` (the map); the summed ``ΦᵀΦ``, the eigendecomposition's copy and eigenvectors
#: (the α path and the posterior) — besides one partial ``ΦᵀΦ`` per running task
NYSTROEM_DIRECT_SQUARES = 6


def resolve_memory_budget(value: Any) -> int:
    """Host bytes of a ``memory_budget`` parameter.

    Parameters
    ----------
    value : int, float, str or None
        Bytes, a size like ``"4GB"``, or None: half the physical memory (with a distributed
        client active, half of the smaller of that and the workers' total memory limit: the
        Gram cache lives on the workers, the solver's vectors here).

    Returns
    -------
    int
    """
    if value is None:
        total = psutil.virtual_memory().total
        client = active_client()
        if client is not None:
            limits = [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]
            if limits and all(limits):
                total = min(total, sum(limits))
        return int(DEFAULT_MEMORY_FRACTION * total)
    if isinstance(value, str):
        try:
            out = parse_bytes(value)
        except ValueError:
            raise ParameterError(f"memory_budget must be bytes or a size like '4GB', got {value!r}") from None
    elif isinstance(value, Real) and not isinstance(value, bool) and np.isfinite(value):
        out = int(value)
    else:
        raise ParameterError(f"memory_budget must be bytes, a size like '4GB' or None, got {value!r}")
    if out <= 0:
        raise ParameterError(f"memory_budget must be > 0, got {value!r}")
    return int(out)


def device_budget(value: Any, device: Device) -> int:
    """Device bytes of a fit on ``device``.

    ``memory_budget`` when given (capped, with a log line, at the device's free memory), else
    :data:`DEVICE_MEMORY_FRACTION` of the device's free memory (the host numbers do not apply
    to a GPU). A CPU device (the namespace tests) has no free-memory figure: the host rule
    applies.

    Parameters
    ----------
    value : int, float, str or None
        The ``memory_budget`` parameter.
    device : Device
        Where the fit computes (activated by the caller).

    Returns
    -------
    int
    """
    free = device.free_memory()
    if value is None:
        return int(DEVICE_MEMORY_FRACTION * free) if free is not None else resolve_memory_budget(None)
    budget = resolve_memory_budget(value)
    if free is not None and budget > free:
        logger.warning("memory_budget=%s exceeds the GPU's free memory (%.2f GB): using %.2f GB", value,
                       free / 1e9, DEVICE_MEMORY_FRACTION * free / 1e9)  # fmt: skip
        return int(DEVICE_MEMORY_FRACTION * free)
    return budget


def fit_budget(value: Any, device: Device) -> int:
    """The budget of a fit: :func:`device_budget` on a GPU (activated here), else
    :func:`resolve_memory_budget`.

    Parameters
    ----------
    value : int, float, str or None
        The ``memory_budget`` parameter.
    device : Device

    Returns
    -------
    int
    """
    if not device.is_gpu:
        return resolve_memory_budget(value)
    with device.activate():
        return device_budget(value, device)


def default_exact_rank(n: int, memory_budget: int) -> int:
    """Default preconditioner rank of the exact solver: ``min(n, max(100, ⌈7√n⌉))``, and at
    most what keeps the preconditioner (three ``n × r`` float64 arrays) within a quarter of the
    memory budget.

    Larger than :func:`~bigkernel.numerics.precond.default_rank` (``2√n``) because every CG
    iteration here is a pass over the Gram matrix (``O(n²)``) while the preconditioner costs
    ``O(n r²)`` once: measured at n = 20,000 (rbf γ = 0.5, α = 1e-2, tol 1e-6) rank 283 needs
    ~60 iterations, 700 needs 32, 1000 needs 22, 1400 needs 13 — and rank ~1000 gives the
    shortest fit.

    Parameters
    ----------
    n : int
        Training points.
    memory_budget : int
        Bytes.

    Returns
    -------
    int
    """
    by_memory = int(memory_budget // (4 * 3 * 8 * max(n, 1)))
    return int(max(1, min(n, max(100, math.ceil(7.0 * math.sqrt(n))), max(by_memory, 1))))


def reserve_bytes(n: int, d: int, m: int, rank: int) -> int:
    """Memory the exact solver holds besides the Gram operator (bytes).

    CG: about 8 ``(n, m)`` float64 arrays (right-hand sides, solutions, residuals, directions,
    preconditioned residuals, products, temporaries). Preconditioner: 3 ``(n, r)`` arrays at
    peak (factor, centred copy, Woodbury basis) plus one block of candidate columns. Data: the
    training X and Y (the Gram operator counts its own copy of the points).

    Parameters
    ----------
    n, d : int
        Training points and features (d = 0 for a precomputed K).
    m : int
        Columns per matvec (targets × α, probes).
    rank : int
        Preconditioner rank (0: none).

    Returns
    -------
    int
    """
    cg = 8 * n * m * 8
    prec = (3 * n * rank + n * 100) * 8 if rank else 0
    points = 2 * n * (d + 1) * 8
    return cg + prec + points


def gram_operator(
    kernel: Kernel | None,
    X: Any,
    *,
    device: Device,
    memory_budget: int,
    dtype: str,
    n_rhs: int,
    reserve: int,
    in_task: bool = False,
    tiler: Any = None,
) -> GramOperator:
    """The :class:`~bigkernel.solvers.base.GramOperator` of one solve: where its tiles live.

    * on a GPU (``device.is_gpu``, activated by the caller):
      :class:`~bigkernel.numerics.device_gram.DeviceGram`, caching within ``memory_budget``
      (device bytes) next to ``reserve``;
    * on the host inside one task (a bootstrap replicate, ``in_task=True``):
      :class:`~bigkernel.numerics.gram_tiles.LocalGram` caching float64 tiles within
      ``memory_budget − reserve`` (its values do not depend on the budget);
    * on the host for a fit: :class:`~bigkernel.solvers.gram_operator.DistributedGram`, its
      tiles cached on the cluster (``tiler``: a precomputed Gram matrix instead of the kernel's
      tiles).

    Parameters
    ----------
    kernel : Kernel or None
        None with a precomputed ``tiler``.
    X : ndarray of shape (n, d)
        Training points (scaled).
    device : Device
    memory_budget : int
        Bytes for the operator and ``reserve``.
    dtype : {"auto", "float64", "float32"}
        Cached tiles' dtype (see :func:`~bigkernel.numerics.gram_tiles.plan_gram`).
    n_rhs : int
        Most columns per matvec.
    reserve : int
        Bytes the solver holds besides the operator (:func:`reserve_bytes`).
    in_task : bool, default=False
        In-process operator (no dask) for work inside one task.
    tiler : GramTiler or PrecomputedGram, optional
        The tiles' source of a host fit.

    Returns
    -------
    GramOperator
    """
    if device.is_gpu:
        return DeviceGram(kernel, X, xp=device.xp, memory_budget=memory_budget, dtype=dtype, n_rhs=n_rhs,
                          reserve_bytes=reserve)  # fmt: skip
    if in_task:
        return LocalGram(kernel, X, max(0, memory_budget - reserve))
    return DistributedGram(kernel, X, memory_budget=memory_budget, dtype=dtype, n_rhs=n_rhs, reserve_bytes=reserve,
                           tiler=tiler)  # fmt: skip


def solver_rule(n: int, d: int, kernel: Any, memory_budget: int, *, n_rhs: int = 1) -> tuple[str, str]:
    """``(solver, reason)`` for n points in d dimensions: exact when the whole Gram matrix is
    cached within the budget, else Nyström (n <= :data:`NYSTROEM_MAX_N`, or a kernel without a
    random-feature sampler), else random features (see :mod:`bigkernel.models.kernel_ridge`).

    Parameters
    ----------
    n, d : int
    kernel : str or Kernel
        A kernel name or object (objects and names without a spectral sampler exclude random
        features).
    memory_budget : int
        Bytes.
    n_rhs : int, default=1
        Columns per matvec of the exact solver (targets × α, probes).

    Returns
    -------
    (str, str)
        The solver's name and the reason, for the log.
    """
    reserve = reserve_bytes(n, d, n_rhs, default_exact_rank(n, memory_budget))
    gb = memory_budget / 1e9
    try:
        plan = plan_gram(n, d, memory_budget, n_rhs=n_rhs, threads=local_threads(), reserve_bytes=reserve)
        cached = plan.n_cached == len(plan.tiles)
    except ParameterError:
        plan, cached = None, False
    if cached:
        return "exact", (
            f"the Gram matrix of n={n:,} points ({plan.cache_bytes / 1e9:.2f} GB of {plan.cache_dtype} "
            f"tiles) is cached within the memory budget ({gb:.2f} GB)"
        )
    need = 4 * n * (n + 1) / 2 / 1e9
    if not kernel_serves(kernel, "random_features"):
        name = kernel.name if isinstance(kernel, Kernel) else str(kernel)
        return "nystroem", (
            f"the Gram matrix of n={n:,} points ({need:.1f} GB even in float32) does not fit the "
            f"memory budget ({gb:.2f} GB), and kernel {name!r} has no random-feature sampler"
        )
    if n <= NYSTROEM_MAX_N:
        return "nystroem", (
            f"the Gram matrix of n={n:,} points ({need:.1f} GB even in float32) does not fit the "
            f"memory budget ({gb:.2f} GB); n <= {NYSTROEM_MAX_N:,}, so Nyström features (more "
            "accurate than random features at the same size; one extra read for the landmarks)"
        )
    return "random_features", (
        f"n={n:,} > {NYSTROEM_MAX_N:,} and the Gram matrix does not fit the memory budget "
        f"({gb:.2f} GB): random features, one streamed pass"
    )


def nystroem_direct_limit(memory_budget: int) -> int:
    """The most Nyström centres the one-pass (direct) solver takes within ``memory_budget``:
    :data:`NYSTROEM_DIRECT_MAX_COMPONENTS` (its time), or fewer when
    :data:`NYSTROEM_DIRECT_SQUARES` float64 M×M arrays do not fit the budget.

    Parameters
    ----------
    memory_budget : int
        Host bytes (:func:`resolve_memory_budget`): the one-pass system is formed on the host.

    Returns
    -------
    int
        Past this ``n_components``, :meth:`bigkernel.KernelRidge.choose_solver` picks
        ``"cg"``.
    """
    by_memory = math.isqrt(max(int(memory_budget), 0) // (NYSTROEM_DIRECT_SQUARES * 8))
    return max(1, min(NYSTROEM_DIRECT_MAX_COMPONENTS, by_memory))
