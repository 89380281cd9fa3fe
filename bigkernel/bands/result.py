"""What a bootstrap run returns (layer 3): :class:`BootstrapResult`, read back from its store.

:func:`bigkernel.bootstrap` and :func:`bigkernel.load_bootstrap` both end in
:func:`read_result`: the band is always computed from the replicates in the zarr store
(:mod:`bigkernel.io.band_store`), so a resumed or reloaded run gives the same numbers as the run
that wrote it. :func:`out_of_range` flags evaluation points outside the training range.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dask.array as da
import numpy as np

from bigkernel.errors import IncompleteStoreError
from bigkernel.io.band_store import BootstrapStore

__all__ = ["BootstrapResult", "out_of_range", "read_result"]


# --------------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class BootstrapResult:
    """Pointwise bootstrap interval and the replicate predictions behind it.

    With ``interval="confidence"``, ``lower``/``upper`` are a pointwise confidence band for the
    fitted function f̂(x) at ``confidence_level`` (percentile bootstrap); not an interval for a
    new observation — use ``interval="prediction"`` for that (then ``lower``/``upper`` are the
    prediction interval and ``confidence_lower``/``confidence_upper`` the confidence band of
    the same replicates). See :mod:`bigkernel.bands.bootstrap`.

    Attributes
    ----------
    mean : ndarray of shape (n_eval,) or (n_eval, n_targets)
        Mean of the replicate predictions per evaluation point (and target; 1-D when ``y`` was
        1-D).
    lower, upper : ndarray of shape (n_eval,) or (n_eval, n_targets)
        The requested interval (see ``interval``).
    predictions : dask.array.Array of shape (B, n_eval) or (B, n_eval, n_targets)
        Lazy replicate predictions, read from the zarr store.
    n_computed : int
        Replicates computed by this call.
    n_reused : int
        Replicates found complete in the store and reused.
    store : str
        Path (or URL) of the zarr store.
    confidence_level : float
        Central coverage of the interval.
    n_bootstraps : int
        Number of replicates B.
    random_state : int
        Seed (entropy) of the resampling; pass it again to resume or reproduce the run.
    method : str
        ``"multinomial"`` or ``"poisson"``.
    X_eval : ndarray of shape (n_eval, n_features) or None
        Evaluation points (read from the store; None for stores written without them).
    interval : {"confidence", "prediction"}
        What ``lower``/``upper`` are: the confidence band of f̂(x), or the prediction interval
        for a new observation y at x.
    confidence_lower, confidence_upper : ndarray like ``lower``
        The confidence band of f̂(x) (equal to ``lower``/``upper`` when ``interval`` is
        ``"confidence"``).
    out_of_range : ndarray of bool, shape (n_eval,)
        Evaluation point outside the per-feature training range ``[data_min, data_max]`` of at
        least one feature: there the interval reflects the model's extrapolation. All False
        when the range is unknown (stores written before it was recorded).
    data_min, data_max : ndarray of shape (n_features,) or None
        Per-feature range of the training X; None when unknown.
    """

    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    predictions: da.Array
    n_computed: int
    n_reused: int
    store: str
    confidence_level: float
    n_bootstraps: int
    random_state: int
    method: str
    X_eval: np.ndarray | None = None
    interval: str = "confidence"
    confidence_lower: np.ndarray | None = field(default=None)
    confidence_upper: np.ndarray | None = field(default=None)
    out_of_range: np.ndarray | None = field(default=None)
    data_min: np.ndarray | None = None
    data_max: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.confidence_lower is None:
            object.__setattr__(self, "confidence_lower", self.lower)
        if self.confidence_upper is None:
            object.__setattr__(self, "confidence_upper", self.upper)
        if self.out_of_range is None:
            object.__setattr__(self, "out_of_range", np.zeros(self.mean.shape[0], dtype=bool))

    @property
    def width(self) -> np.ndarray:
        """Interval width ``upper - lower`` per evaluation point (and target)."""
        return self.upper - self.lower

    def __repr__(self) -> str:
        return (
            f"BootstrapResult(interval={self.interval!r}, n_bootstraps={self.n_bootstraps}, "
            f"n_eval={self.mean.shape[0]}, confidence_level={self.confidence_level}, "
            f"method={self.method!r}, n_out_of_range={int(np.sum(self.out_of_range))}, "
            f"n_computed={self.n_computed}, n_reused={self.n_reused}, store={self.store!r})"
        )


def out_of_range(X_eval: np.ndarray, data_min: np.ndarray | None, data_max: np.ndarray | None) -> np.ndarray:
    """Evaluation points outside the per-feature range ``[data_min, data_max]`` in any feature.

    Parameters
    ----------
    X_eval : ndarray of shape (n_eval, n_features)
    data_min, data_max : ndarray of shape (n_features,) or None
        The training range; None (unknown) flags nothing.

    Returns
    -------
    ndarray of bool, shape (n_eval,)
    """
    E = np.asarray(X_eval, dtype=np.float64)
    if data_min is None or data_max is None:
        return np.zeros(E.shape[0], dtype=bool)
    return ((E < data_min) | (E > data_max)).any(axis=1)


def read_result(store: BootstrapStore, confidence_level: float, n_computed: int, interval: str) -> BootstrapResult:
    """The :class:`BootstrapResult` of a complete ``store``: its band at ``confidence_level``
    (the prediction interval from its residual sample for ``interval="prediction"``), the lazy
    replicate predictions, the evaluation points and their out-of-range flags.

    Parameters
    ----------
    store : BootstrapStore
    confidence_level : float
    n_computed : int
        Replicates the calling run computed (the others count as reused).
    interval : {"confidence", "prediction"}

    Returns
    -------
    BootstrapResult

    Raises
    ------
    IncompleteStoreError
        ``interval="prediction"`` and the store holds no residual sample.
    """
    fp = store.fingerprint
    single = int(fp.get("data", {}).get("y_ndim", 2)) == 1
    band = store.read_band(confidence_level)
    lower, upper = band.lower, band.upper
    if interval == "prediction":
        found = store.read_residuals()
        if found is None:
            raise IncompleteStoreError(
                f"bootstrap store {store.path!r} holds no residual sample, so it has no "
                "prediction interval: run bigkernel.bootstrap(..., interval='prediction') with "
                "this store (its replicates are reused), or read interval='confidence'."
            )
        lower, upper = store.read_prediction_interval(found[0], int(fp["seed"]), confidence_level)
    preds = store.predictions_dask()
    arrays = [band.mean, lower, upper, band.lower, band.upper]
    if single:
        arrays = [a[:, 0] for a in arrays]
        preds = preds[..., 0]
    mean, lower, upper, c_lower, c_upper = arrays
    E = store.read_eval_points()
    lo, hi = store.read_range()
    flags = out_of_range(E, lo, hi) if E is not None else np.zeros(store.n_eval, dtype=bool)
    return BootstrapResult(
        mean=mean, lower=lower, upper=upper, predictions=preds,
        n_computed=n_computed, n_reused=store.n_replicates - n_computed, store=store.path,
        confidence_level=confidence_level, n_bootstraps=store.n_replicates,
        random_state=int(fp.get("seed", -1)), method=str(fp.get("resampling", {}).get("method")),
        X_eval=E, interval=interval, confidence_lower=c_lower, confidence_upper=c_upper,
        out_of_range=flags, data_min=lo, data_max=hi,
    )  # fmt: skip
