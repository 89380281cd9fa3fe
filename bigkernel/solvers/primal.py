"""The one-pass primal solve shared by random features and Nyström (layer 3).

One streamed pass over the data accumulates the feature statistics ΦᵀΦ, Φᵀy, Σφ, Σy, Σy²
(float64, :class:`~bigkernel.numerics.sums.SufficientStats`) and one D×D eigendecomposition
gives the coefficients, df(α), GCV and the evidence for every α
(:func:`~bigkernel.numerics.primal.solve_primal`). What differs between the paths is only the
feature map ``prepare`` draws: :class:`~bigkernel.solvers.random_features.RandomFeatureSolver`
(random Fourier / polynomial features) and :class:`~bigkernel.solvers.nystroem.NystroemSolver`
(landmarks). Both share :class:`OnePassPrimal` (pass, solve, saved state).

The device: every function here takes the estimator's resolved
:class:`~bigkernel.devices.Device` (None: the CPU) and hands that object on unchanged to the
pass and the eigendecomposition (each task re-resolves it with
:func:`~bigkernel.devices.task_device`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import dask.array as da
import numpy as np
from dask.delayed import Delayed

from bigkernel._sparse import has_sparse_chunks, scale_from_sums
from bigkernel.data.sources import Dataset
from bigkernel.devices import CPU
from bigkernel.errors import DataError
from bigkernel.graph.stream import column_sums_graph, stats_graph
from bigkernel.numerics.fourier_features import FeatureMap
from bigkernel.numerics.posterior import PrimalPosterior, primal_posterior
from bigkernel.numerics.precision import (
    Float32Check,
    Float32Rounding,
    feature_rounding,
    float32_check,
    product_rounding,
)
from bigkernel.numerics.primal import PathSpectrum, PrimalSolution, SystemDecomposition, solve_primal
from bigkernel.numerics.scaling import column_moments, safe_scale
from bigkernel.numerics.sums import FLOAT32_REDUCTION_ROWS, SufficientStats, sums_precision
from bigkernel.runtime import compute
from bigkernel.solvers.base import Solution

logger = logging.getLogger(__name__)

__all__ = [
    "FEATURE_BLOCK_BYTES",
    "STATS_FIELDS",
    "OnePassPrimal",
    "PrimalFit",
    "PrimalFixed",
    "feature_block_rows",
    "fit_scaler",
    "resolve_feature_dtype",
]

#: bytes of one feature sub-block (rows × D) per task; bounds the memory of the pass
FEATURE_BLOCK_BYTES = 64 * 2**20

#: names of the saved arrays of ``stats_`` (the range is saved as ``data_min``/``data_max``)
STATS_FIELDS = ("n", "sum_phi", "sum_y", "sum_yy", "gram", "phi_y")


def feature_block_rows(n_components: int, dtype: str, budget: int = FEATURE_BLOCK_BYTES) -> int:
    """Rows of a feature sub-block: a power of two in [256, 8192] within ``budget`` bytes.

    Depends only on (D, dtype), never on the chunking. Sub-blocks sit at global multiples of
    this size, so any chunking whose edges are multiples of 8192 rows gives bitwise-identical
    float32 products (float64 results agree to rounding for any chunking).
    """
    rows = budget // (n_components * np.dtype(dtype).itemsize)
    return int(2 ** np.clip(np.floor(np.log2(max(rows, 1))), 8, 13))


def resolve_feature_dtype(dtype: Any, fmap: Any) -> str:
    """The dtype a pass computes ``fmap``'s features in: ``"auto"`` is float32 for random
    Fourier features (then checked, :func:`~bigkernel.numerics.precision.float32_check`) and
    float64 for other maps (polynomial, Nyström: the check's feature bound is for |cos| ≤ 1)."""
    if isinstance(dtype, str) and dtype == "auto":
        return "float32" if isinstance(fmap, FeatureMap) else "float64"
    return str(np.dtype(dtype))


def _row_weight_values(weights: Any) -> np.ndarray | None:
    """The array of one-array row weights (``RowWeights``: a ``values`` ndarray), else None
    (no weights, or a row partition: the scaling is then over all rows)."""
    values = getattr(weights, "values", None)
    return values if isinstance(values, np.ndarray) else None


def fit_scaler(ds: Dataset, weights: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """The column means and standard deviations of X (``standardize=True``).

    A light pre-pass that reads X only (d columns, no features): the feature map needs the
    scaling before its first feature is computed. Weighted by one-array row weights
    (``sample_weight``); otherwise over all rows. Constant columns keep scale 1.

    Sparse X is scaled without centring (scikit-learn's ``with_mean=False``): the mean is
    0, so X stays sparse; for translation-invariant kernels the model is the same.

    Parameters
    ----------
    ds : Dataset
    weights : RowWeights, row partition or None

    Returns
    -------
    mean, scale : ndarray of shape (n_features,), float64
    """
    X, values = ds.X, _row_weight_values(weights)
    if has_sparse_chunks(X):
        (sums,) = compute(column_sums_graph(X, values), label="standardize")
        mean, std = np.zeros(X.shape[1]), scale_from_sums(sums)[1]
    else:
        w = None if values is None else da.from_array(values, chunks=(X.chunks[0],))
        mean, std = compute(*column_moments(X, w), label="standardize")
    std = safe_scale(std)
    return np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Fixed parts and the fit's result
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrimalFixed:
    """What a one-pass fit holds fixed: the feature map (scaling folded in), the scaling
    (``(mean, scale)`` or None) and the device (a resolved Device, or None for the CPU)."""

    fmap: Any
    scaler: tuple[np.ndarray, np.ndarray] | None = None
    device: Any = None


@dataclass(frozen=True)
class PrimalFit:
    """``Solution.details`` of the one-pass primal solvers.

    Attributes
    ----------
    primal : PrimalSolution or None
        The solve (None for a model read back from a store).
    stats : SufficientStats or None
        The one-pass sums the solve used (what ``partial_fit`` adds to).
    single : bool
        Whether y was 1-D.
    df, df_path, gcv : float, ndarray, ndarray
        df at the chosen α, along the path, GCV per α (and target).
    spectrum : PathSpectrum or None
    posterior : PrimalPosterior or None
    n_samples : int
    n_features_in : int
    dtype : {"float32", "float64"}
        The feature dtype of the pass the solution came from.
    dtype_check : dict or None
        With ``dtype="auto"``: the float32 check (:class:`~bigkernel.numerics.precision.Float32Check`
        as a dict, with ``"reason"``); None otherwise.
    """

    primal: PrimalSolution | None
    stats: SufficientStats | None
    single: bool
    df: float
    df_path: np.ndarray
    gcv: np.ndarray
    spectrum: PathSpectrum | None
    posterior: PrimalPosterior | None
    n_samples: int
    n_features_in: int
    dtype: str = "float64"
    dtype_check: dict | None = None


class OnePassPrimal:
    """The pass, the solve and the saved state shared by the one-pass primal solvers.

    Subclasses set ``name`` and ``spec`` (a frozen dataclass with at least ``alpha``,
    ``fit_intercept``, ``dtype`` and ``n_components``) and implement ``prepare``.
    """

    name: ClassVar[str]
    spec: Any
    device: Any = None

    # ----------------------------------------------------------------- the pass and the solve
    def pass_dtype(self, fmap: Any) -> str:
        """The feature dtype of a pass under ``fmap`` (:func:`resolve_feature_dtype`)."""
        return resolve_feature_dtype(self.spec.dtype, fmap[0] if isinstance(fmap, (list, tuple)) else fmap)

    def statistics_graph(self, fmap: Any, data: Dataset, weights: Any = None, dtype: str | None = None) -> Delayed:
        """The delayed one-pass statistics of ``data`` under ``fmap`` (a map, or a list of maps
        sharing the pass), optionally weighted or partitioned (for orchestrators), with features
        in ``dtype`` (default :meth:`pass_dtype`)."""
        Y = data.y if data.y.ndim == 2 else data.y[:, np.newaxis]
        dtype = self.pass_dtype(fmap) if dtype is None else str(np.dtype(dtype))
        return stats_graph(
            data.X,
            Y,
            fmap,
            weights=weights,
            dtype=dtype,
            block_rows=feature_block_rows(self.spec.n_components, dtype),
            device=self.device or CPU,
        )

    def fit(self, fixed: PrimalFixed, data: Dataset, weights: Any = None) -> Solution:
        """One pass over ``data`` (optionally weighted or partitioned), then the primal solve.

        Parameters
        ----------
        fixed : PrimalFixed
            From :meth:`prepare`.
        data : Dataset
        weights : row weights, row partition or None

        Returns
        -------
        Solution
            ``details`` is a :class:`PrimalFit`.

        Notes
        -----
        ``dtype="auto"`` with random Fourier features: the pass runs in float32, then
        :meth:`check_float32` estimates whether float32 rounding can move the model beyond
        :data:`~bigkernel.numerics.precision.FLOAT32_RTOL`; if so, the pass is redone in float64
        (logged as a warning; ``PrimalFit.dtype``/``dtype_check`` say which was used and why).
        """
        dtype, single = self.pass_dtype(fixed.fmap), data.y.ndim == 1
        (stats,) = compute(self.statistics_graph(fixed.fmap, data, weights, dtype), label="fit")
        solution = self.solve(fixed, stats, single=single, dtype=dtype)
        if not self._auto() or dtype != "float32":
            return solution
        values = _row_weight_values(weights)  # a block's sums grow with its rows' weights
        weight_max = float(np.max(values, initial=1.0)) if values is not None else 1.0
        solution, ok = self.checked(fixed, solution, weight_max)
        if ok:
            return solution
        check = self.check_float32(fixed, solution, weight_max)
        logger.warning(
            "float32 features could move this model beyond the tolerance (%s); redoing the pass in "
            "float64 (pass dtype='float64' to skip the float32 pass, or a larger alpha)",
            _describe(check),
        )
        (stats,) = compute(self.statistics_graph(fixed.fmap, data, weights, "float64"), label="fit (float64)")
        solution = self.solve(fixed, stats, single=single, dtype="float64")
        return _with_check(solution, check, "float32 beyond tolerance: refitted in float64")

    def checked(self, fixed: PrimalFixed, solution: Solution, weight_max: float = 1.0) -> tuple[Solution, bool]:
        """``solution`` with the float32 check recorded (``dtype="auto"``, float32 pass), and
        whether it passed; unchanged and True otherwise. Logs the check."""
        if not self._auto() or solution.details.dtype != "float32":
            return solution, True
        check = self.check_float32(fixed, solution, weight_max)
        if check.ok:
            logger.info("feature dtype float32 (auto): %s", _describe(check))
            return _with_check(solution, check, "float32 within tolerance"), True
        return _with_check(solution, check, "float32 beyond tolerance"), False

    def _auto(self) -> bool:
        return isinstance(self.spec.dtype, str) and self.spec.dtype == "auto"

    def check_float32(self, fixed: PrimalFixed, solution: Solution, weight_max: float = 1.0) -> Float32Check:
        """The float32 check of a solution fitted on float32 Fourier features: its
        eigendecomposition, β at the chosen α, the pass's sums, and the roundings measured for
        the map over the training range (:func:`~bigkernel.numerics.precision.feature_rounding`)
        and for the device's float32 products (:func:`~bigkernel.numerics.precision.product_rounding`;
        a GPU's: the bound of a sequential sum). ``weight_max``: the largest row weight (a block's
        sums grow with it)."""
        fit: PrimalFit = solution.details
        fmap, stats = fixed.fmap, fit.stats
        gpu = bool(getattr(fixed.device, "is_gpu", False))
        # rows one float32 product sums: the sub-block (a GPU's slices), or all rows when fewer
        rows = FLOAT32_REDUCTION_ROWS if gpu else feature_block_rows(self.spec.n_components, "float32")
        rows = min(rows, 2 ** int(np.ceil(np.log2(max(float(fit.primal.path.n), 1.0)))))
        # sparse X: probe with sparse rows of the data's mean stored entries (its own pass's path)
        nnz = None if stats.x_nnz is None else float(stats.x_nnz[0]) / max(float(stats.n[0]), 1.0)
        feature_sd = (
            np.inf if stats.x_min is None else feature_rounding(fmap, stats.x_min[0], stats.x_max[0], nnz_per_row=nnz)
        )
        width = int(fmap.n_components) + int(stats.phi_y.shape[-1]) + 1  # P = [φ | y | 1]
        rho = product_rounding(rows, width, sequential=gpu)
        rounding = Float32Rounding(feature_sd, rho, rows * max(weight_max, 1.0), float(fmap.scale))
        return float32_check(fit.primal.path, solution.coef, solution.alpha, solution.alphas, stats, rounding)

    def solve(
        self, fixed: PrimalFixed, stats: SufficientStats, *, single: bool, alpha: Any = None, dtype: str | None = None
    ) -> Solution:
        """The primal solve of one set of statistics (``alpha`` defaults to the spec's;
        ``dtype``, the features' of the pass, to :meth:`pass_dtype`)."""
        spec = self.spec
        alpha = spec.alpha if alpha is None else alpha
        dtype = self.pass_dtype(fixed.fmap) if dtype is None else dtype
        checked = self._auto() and dtype == "float32"  # the float32 check reads the eigendecomposition
        eps = sums_precision(dtype)
        sol = solve_primal(stats, alpha, spec.fit_intercept, eps, device=fixed.device or CPU, decompose=checked)
        return self.solution(fixed, sol, stats, single=single, dtype=dtype)

    def solution(
        self, fixed: PrimalFixed, sol: PrimalSolution, stats: SufficientStats, *, single: bool, dtype: str | None = None
    ) -> Solution:
        """The :class:`Solution` of a :class:`PrimalSolution` (df, posterior, counts); ``dtype``
        the features' of the pass (default :meth:`pass_dtype`)."""
        fmap = fixed.fmap
        dtype = self.pass_dtype(fmap) if dtype is None else dtype
        best = int(np.argmin(np.abs(sol.alphas - sol.alpha)))
        posterior = None
        if sol.path is not None:
            posterior = primal_posterior(sol.path, sol.alpha, fmap, dtype=dtype)
        fit = PrimalFit(
            primal=sol, stats=stats, single=single, df=float(sol.df[best]), df_path=sol.df, gcv=sol.gcv,
            spectrum=sol.spectrum, posterior=posterior, n_samples=int(round(float(stats.n[0]))),
            n_features_in=fmap.n_features_in, dtype=dtype,
        )  # fmt: skip
        diagnostics = {"n_samples": fit.n_samples, "n_components": int(fmap.n_components), "df": fit.df}
        return Solution(sol.coef, sol.intercept, float(sol.alpha), sol.alphas, diagnostics, fit)

    # ----------------------------------------------------------------- saved state
    def map_state(self, fmap: Any) -> dict[str, np.ndarray]:
        """The saved arrays of the feature map (subclasses: their map's layout)."""
        return fmap.arrays()

    def map_from_state(self, meta: dict, arrays: dict[str, np.ndarray]) -> Any:
        """Inverse of ``to_metadata()`` + :meth:`map_state`."""
        raise NotImplementedError

    def state(self, fixed: PrimalFixed, solution: Solution) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The saved attributes and arrays of the fit (format v1: the layout of the stores the
        estimators wrote before the solver layer). The estimator adds the evidence, the
        training range and ``stats_``."""
        fit: PrimalFit = solution.details
        fm = fixed.fmap
        attrs: dict[str, Any] = {
            "feature_map": fm.to_metadata(), "alpha_": solution.alpha, "df_": fit.df,
            "n_samples_fit_": fit.n_samples, "n_features_in_": fit.n_features_in, "single_output": fit.single,
            "feature_dtype": fit.dtype,
        }  # fmt: skip
        if fit.dtype_check is not None:
            attrs["dtype_check"] = fit.dtype_check
        arrays = {
            "coef": np.atleast_2d(solution.coef.T),  # (k, D), as saved
            "intercept": np.atleast_1d(np.asarray(solution.intercept, float)),
            "alphas": solution.alphas, "df_path": fit.df_path, "gcv": np.asarray(fit.gcv),
        }  # fmt: skip
        arrays.update(self.map_state(fm))
        _add_spectrum_state(fit.spectrum, attrs, arrays)
        _add_posterior_state(fit.posterior, attrs, arrays)
        return attrs, arrays

    def from_state(self, attrs: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[PrimalFixed, Solution]:
        """Inverse of :meth:`state` (``DataError`` when coef does not match the map). Stores
        written before the feature dtype was saved used the ``dtype`` parameter's."""
        fm = self.map_from_state(attrs["feature_map"], arrays)
        dtype = str(attrs.get("feature_dtype") or resolve_feature_dtype(self.spec.dtype, fm))
        coef, intercept = arrays["coef"], arrays["intercept"]
        if coef.shape[1] != fm.n_components or coef.shape[0] != intercept.shape[0]:
            raise DataError(f"coef has shape {coef.shape}, expected (n_targets, {fm.n_components})")
        fit = PrimalFit(
            primal=None, stats=None, single=bool(attrs["single_output"]), df=float(attrs["df_"]),
            df_path=arrays["df_path"], gcv=arrays["gcv"], spectrum=_read_spectrum_state(attrs, arrays),
            posterior=_read_posterior_state(fm, attrs, arrays, dtype),
            n_samples=int(attrs["n_samples_fit_"]), n_features_in=int(attrs["n_features_in_"]),
            dtype=dtype, dtype_check=attrs.get("dtype_check"),
        )  # fmt: skip
        solution = Solution(coef.T, intercept, float(attrs["alpha_"]), arrays["alphas"], {}, fit)
        return PrimalFixed(fm, None, self.device), solution


def _describe(check: Float32Check) -> str:
    return (
        f"estimated change of the predictions {check.mean_error:.2g}·sd(y) (tolerance {check.rtol:g}), "
        f"of the posterior std {check.std_error:.2g} (tolerance {check.std_rtol:g}), of df "
        f"{check.df_error:.2g}; α path resolved from {check.alpha_floor:.3g}"
    )


def _with_check(solution: Solution, check: Float32Check, reason: str) -> Solution:
    """``solution`` with the auto dtype's check recorded in its :class:`PrimalFit`."""
    fit = dataclasses.replace(solution.details, dtype_check={**check.as_dict(), "reason": reason})
    diagnostics = {**solution.diagnostics, "dtype": fit.dtype}
    return dataclasses.replace(solution, diagnostics=diagnostics, details=fit)


def stats_state(stats: SufficientStats | None) -> dict[str, np.ndarray]:
    """``stats_`` as saved arrays (``stats_<field>``; the range is ``data_min``/``data_max``;
    sparse X's stored entries ``stats_x_nnz``)."""
    if stats is None:
        return {}
    arrays = {f"stats_{f}": getattr(stats, f) for f in STATS_FIELDS}
    if stats.x_nnz is not None:
        arrays["stats_x_nnz"] = stats.x_nnz
    return arrays


def stats_from_state(arrays: dict[str, np.ndarray], n_components: int, lo: Any, hi: Any) -> SufficientStats | None:
    """``stats_`` from saved arrays; None for a store written without them (it loads and
    predicts, but cannot be updated). ``lo``/``hi``: the saved training range (or None)."""
    if "stats_gram" not in arrays:
        return None
    st = SufficientStats(*(np.asarray(arrays[f"stats_{f}"], dtype=np.float64) for f in STATS_FIELDS))
    D = n_components
    if st.gram.shape != (1, D, D) or st.phi_y.shape[:2] != (1, D):
        raise DataError(f"saved statistics have ΦᵀΦ of shape {st.gram.shape}, expected (1, {D}, {D})")
    if lo is not None:
        st.x_min, st.x_max = lo[np.newaxis].copy(), hi[np.newaxis].copy()
    if "stats_x_nnz" in arrays:  # stores of sparse fits written since it was saved
        st.x_nnz = np.asarray(arrays["stats_x_nnz"], dtype=np.float64).reshape(1)
    return st


def _add_spectrum_state(sp: PathSpectrum | None, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
    """The spectrum into the saved state (optional: older stores load without it)."""
    if sp is not None:
        attrs["spectrum"] = {"n": sp.n, "fit_intercept": sp.fit_intercept, "eps": sp.eps}
        arrays.update(spectrum_eigvals=sp.eigvals, spectrum_z=sp.z, spectrum_yy=sp.yy)


def _read_spectrum_state(attrs: dict, arrays: dict[str, np.ndarray]) -> PathSpectrum | None:
    meta = attrs.get("spectrum")
    if meta is None:
        return None
    decomposition = SystemDecomposition.known(arrays["spectrum_eigvals"], None, arrays["spectrum_z"])
    return PathSpectrum(
        decomposition, arrays["spectrum_yy"], float(meta["n"]), bool(meta["fit_intercept"]), float(meta["eps"])
    )


def _add_posterior_state(post: PrimalPosterior | None, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
    """The posterior's kept directions (optional: older stores load without them, and then
    refuse ``return_std`` with a clear error)."""
    if post is not None:
        attrs["posterior"] = {"alpha": post.alpha, "n": post.n, "fit_intercept": post.fit_intercept,
                              "rtol": post.rtol, "block_rows": post.block_rows}  # fmt: skip
        arrays.update(posterior_vecs=post.vecs, posterior_weights=post.weights, posterior_mean_phi=post.mean_phi)


def _read_posterior_state(fm: Any, attrs: dict, arrays: dict[str, np.ndarray], dtype: str) -> PrimalPosterior | None:
    meta = attrs.get("posterior")
    return None if meta is None else PrimalPosterior(
        fm, arrays["posterior_mean_phi"], arrays["posterior_vecs"], arrays["posterior_weights"],
        float(meta["alpha"]), float(meta["n"]), bool(meta["fit_intercept"]), float(meta["rtol"]),
        dtype, int(meta["block_rows"]))  # fmt: skip
