"""What every solver's bootstrap replicate plan shares (layer 3): derived seeds, the JSON
fingerprint of an estimator, feature-map digests, and the gate that orders batches.

The plan interface itself is :class:`~bigkernel.solvers.base.ReplicatePlan`; each solver
builds its own plan (random features / Nyström: one weighted pass per batch; exact: one
weighted dual solve per replicate task).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import dask
import numpy as np
from dask.delayed import Delayed

from bigkernel.errors import DataError
from bigkernel.io.band_store import BootstrapStore, array_digest
from bigkernel.numerics.resample import BootstrapWeights
from bigkernel.solvers.base import ReplicatePlan

__all__ = [
    "ReplicatePlan",
    "check_n_features",
    "class_name",
    "derived_seed",
    "feature_map_digest",
    "fingerprint_params",
    "gated",
    "jsonable",
    "per_replicate_tasks",
    "run_replicate",
    "task_cache_budget",
    "with_counts",
]


def derived_seed(seed_entropy: int) -> int:
    """Feature-map (landmark, preconditioner) seed derived from the bootstrap seed (disjoint
    from the replicate seeds)."""
    ss = np.random.SeedSequence(seed_entropy, spawn_key=(2**32,))
    return int(ss.generate_state(1, np.uint32)[0] & 0x7FFFFFFF)


def jsonable(value: Any) -> Any:
    """Estimator parameters as JSON values (arrays → lists, numpy scalars → Python)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real):
        return float(value)
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.dtype):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, type):
        return value.__name__
    if hasattr(value, "to_dict"):  # a Kernel object
        return jsonable(value.to_dict())
    return repr(value)


def feature_map_digest(fmap: Any) -> str:
    """Digest of a feature map (random Fourier or Nyström): metadata and every array."""
    h = hashlib.sha256()
    h.update(repr(sorted(jsonable(fmap.to_metadata()).items())).encode())
    if hasattr(fmap, "arrays"):
        arrays = fmap.arrays()
    else:
        arrays = {"weights": fmap.weights, "offsets": np.zeros(0) if fmap.offsets is None else fmap.offsets}
    for name in sorted(arrays):
        h.update(name.encode())
        h.update(array_digest(np.asarray(arrays[name])).encode())
    return "sha256:" + h.hexdigest()


def gate(weights: BootstrapWeights, *done: Any) -> BootstrapWeights:
    """The weights, handed over only once the ``done`` tasks (an earlier batch) have run."""
    return weights


def gated(weights: BootstrapWeights, after: Sequence[Delayed]) -> Any:
    """``weights`` as a delayed value that waits for ``after`` (or as is when there is none)."""
    return dask.delayed(gate, pure=True)(weights, *after) if after else weights


def class_name(est: Any) -> str:
    """The estimator's class as the fingerprint records it (module and qualified name)."""
    return f"{type(est).__module__}.{type(est).__qualname__}"


def fingerprint_params(est: Any, **override: Any) -> dict[str, Any]:
    """``est.get_params()`` as the fingerprint records them: without what changes where or how
    a replicate runs but not its values (chunking, device, verbose)."""
    params = est.get_params(deep=False)
    params.pop("chunk_rows", None)  # the chunking is recorded with the data
    params.pop("device", None)  # where replicates run, not what they are: a store serves any device
    params.pop("verbose", None)  # how progress is shown, not what is computed
    params.update(override)
    return jsonable(params)


def check_n_features(est: Any, d: int) -> None:
    """Refuse evaluation data of another width than the fitted estimator's."""
    if est.n_features_in_ != d:
        raise DataError(f"the fitted {type(est).__name__} expects {est.n_features_in_} features; X has {d}.")


def run_replicate(model: Any, data: Any, index: int, replicate: int, store: BootstrapStore) -> int:
    """Task body: ``model.run`` for replicate ``replicate`` (column ``index`` of its batch)."""
    return model.run(data, index, replicate, store)


def task_cache_budget(budget: int, workers: int) -> int:
    """Bytes of Gram tiles one exact replicate task may cache: its share of the budget."""
    return budget // max(1, workers)


def with_counts(data: tuple[np.ndarray, np.ndarray], weights: Any) -> tuple:
    """``(X, Y, counts)``: the in-memory training rows and one batch's bootstrap counts (m, n)."""
    X, Y = data
    return X, Y, weights(0, X.shape[0])


def per_replicate_tasks(model: Any, data: Any, replicates: Sequence[int], store: BootstrapStore) -> list[Delayed]:
    """One :func:`run_replicate` task per replicate over one batch's ``data`` (the plans whose
    replicate is a whole fit in one task: the exact solver's and the Nyström CG solver's)."""
    token = dask.base.tokenize(store.path, data.key)
    return [
        dask.delayed(run_replicate, pure=True)(
            model, data, i, r, store, dask_key_name=f"bootstrap-replicate-{r}-{token}"
        )
        for i, r in enumerate(replicates)
    ]
