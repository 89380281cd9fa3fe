"""Checkpoints of a bootstrap run (layer 3): what makes a store this job's, how the batches are
scheduled so that finished replicates land in the store while the run goes on, and the
progress lines read back from the store.

A replicate task writes its own region of the store, its completion flag last
(:meth:`bigkernel.io.band_store.BootstrapStore.write_replicate`): a replicate is in the store
the moment its task ends, whatever the scheduler (local threads or a cluster), and a run that
is interrupted (Ctrl-C, a killed process, a lost cluster) keeps every replicate that landed. A
rerun with the same store computes only the replicates without a flag.

For that to save work, replicates must land *during* the run, not all at its end: batch ``b``
starts its pass over the data once batch ``b - window`` is done, with ``window`` just large
enough to keep every worker thread busy (:func:`batches_in_flight`). With a data set of several
chunks one batch at a time already uses every worker, so batches land one after the other
(measured: B = 24 in 3 batches, n = 200,000 in 8 chunks, 2 threads: before, all 24 replicates
landed in the last 6 % of the run; now a third lands at each third). A data set of fewer chunks
than worker threads runs more batches at once, as before.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from bigkernel.data.sources import Dataset
from bigkernel.errors import ParameterError
from bigkernel.io.band_store import BootstrapStore, array_digest, open_store
from bigkernel.runtime import compute
from bigkernel.validation import is_integer

__all__ = ["STORE_KIND", "StoreProgress", "batches_in_flight", "data_fingerprint", "resolve_seed"]

logger = logging.getLogger("bigkernel.bands.bootstrap")

#: ``fingerprint["kind"]`` of stores written by :func:`bigkernel.bootstrap`.
STORE_KIND = "bigkernel.bootstrap"

#: Rows at each end of a dask data set hashed into the store fingerprint.
_DIGEST_ROWS = 1024

#: Seconds between two reads of the store's completion flags by :class:`StoreProgress` (one
#: small object per replicate): local stores, and stores at URLs (each read a request).
POLL_SECONDS, POLL_SECONDS_URL = 1.0, 10.0


def _chunks_digest(chunks: tuple[int, ...]) -> str:
    return "sha256:" + hashlib.sha256(repr(tuple(int(c) for c in chunks)).encode()).hexdigest()


def data_fingerprint(ds: Dataset, arrays: tuple[Any, Any] | None, client: Any) -> dict[str, Any]:
    """Identity of the training data: shapes, dtypes, row chunking and a content digest.

    In-memory input is hashed whole. Dask input is hashed on its first and last
    ``_DIGEST_ROWS`` rows only (reading every value would cost a pass): this tells different
    data sets apart, not an edit in the middle of a data set of the same shape.
    """
    X, y = ds.X, ds.y
    n = X.shape[0]
    if arrays is not None:
        parts = arrays
        kind = "full"
    else:
        h, t = min(_DIGEST_ROWS, n), max(0, n - _DIGEST_ROWS)
        parts = compute(X[:h], y[:h], X[t:], y[t:], client=client, label="bootstrap-digest")
        kind = f"head-tail-{_DIGEST_ROWS}"
    digest = hashlib.sha256("|".join(array_digest(p) for p in parts).encode()).hexdigest()
    return {
        "n": int(n),
        "d": int(X.shape[1]),
        "y_ndim": int(y.ndim),
        "n_targets": int(1 if y.ndim == 1 else y.shape[1]),
        "dtype_X": str(X.dtype),
        "dtype_y": str(y.dtype),
        # float sums (and their tree reduction) round differently under another chunking
        "row_chunks": {"count": len(X.chunks[0]), "digest": _chunks_digest(X.chunks[0])},
        "digest_kind": kind,
        "digest": "sha256:" + digest,
    }


def resolve_seed(random_state: Any, store_path: str | None) -> int:
    """Integer entropy of the resampling; None reuses an existing store's seed (resume)."""
    if is_integer(random_state):
        if random_state < 0:
            raise ParameterError(f"random_state must be >= 0; found {random_state}.")
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if random_state is not None:
        raise ParameterError(
            "random_state must be None, a non-negative int or a numpy RandomState; found "
            f"{type(random_state).__name__}."
        )
    if store_path is not None:
        try:
            fp = open_store(store_path).fingerprint
        except Exception:
            fp = None
        if isinstance(fp, Mapping) and fp.get("kind") == STORE_KIND and "seed" in fp:
            logger.info("random_state=None: reusing the seed %s recorded in %s", fp["seed"], store_path)
            return int(fp["seed"])
    return int(np.random.SeedSequence().entropy)


def batches_in_flight(workers: int, n_chunks: int) -> int:
    """Batches whose passes may run at once: enough to give every worker thread a chunk.

    Parameters
    ----------
    workers : int
        Worker threads of the scheduler.
    n_chunks : int
        Row chunks of one batch's pass (1 for the exact solver, whose replicate is one task).

    Returns
    -------
    int
        ``ceil(workers / n_chunks)``, at least 1: batch ``b`` waits for batch ``b - window``.
        More would only run batches side by side that then all finish at the end (nothing
        checkpointed until then) and hold more partial sums in memory.
    """
    return max(1, math.ceil(max(1, workers) / max(1, n_chunks)))


class StoreProgress:
    """Log a line each time replicates land in the store, from a client-side thread.

    Reads the store's completion flags every :data:`POLL_SECONDS` (``POLL_SECONDS_URL`` for a
    store at a URL; a replicate is in the store
    once its task ends, on whatever worker), so it works with local threads and a cluster
    alike. Use as a context manager around the run's compute.

    Parameters
    ----------
    store : BootstrapStore
    n_missing : int
        Replicates this run computes.
    """

    def __init__(self, store: BootstrapStore, n_missing: int) -> None:
        self._store, self._todo = store, n_missing
        self._start_done = store.n_replicates - n_missing
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="bigkernel-bootstrap-progress", daemon=True)
        self._seen = self._start_done
        self._t0 = time.perf_counter()

    def __enter__(self) -> StoreProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self._report()
        if exc[0] is not None:  # interrupted or failed: say what is kept
            logger.warning(
                "bootstrap interrupted: %d of %d replicates are in the store %s; rerun with the same "
                "store to compute only the other %d",
                self._seen, self._store.n_replicates, self._store.path, self._store.n_replicates - self._seen,
            )  # fmt: skip

    def _watch(self) -> None:
        while not self._stop.wait(POLL_SECONDS_URL if "://" in self._store.path else POLL_SECONDS):
            self._report()

    def _report(self) -> None:
        try:
            done = int(self._store.done_mask().sum())
        except Exception:  # a flag being replaced as we read: the next poll sees it
            return
        if done > self._seen:
            self._seen = done
            logger.info(
                "bootstrap: %d/%d replicates in the store (%d/%d of this run, %.1f s)",
                done, self._store.n_replicates, done - self._start_done, self._todo,
                time.perf_counter() - self._t0,
            )  # fmt: skip
