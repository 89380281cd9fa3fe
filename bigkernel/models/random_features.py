"""RandomFeatureRidge: kernel ridge regression in the primal on random features, streamed."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar, Self

import dask.array as da
import numpy as np
from dask.delayed import Delayed
from numpy.typing import ArrayLike, DTypeLike
from sklearn.utils.validation import check_is_fitted

from bigkernel._sparse import is_sparse, scale_from_sums
from bigkernel.data.sources import Dataset
from bigkernel.devices import CPU
from bigkernel.errors import DataError, ParameterError
from bigkernel.graph.stream import column_sums_graph, stats_graph
from bigkernel.io.model_store import register_model
from bigkernel.kernels.registry import check_kernel_name, sampler_problem
from bigkernel.models._base import (
    ALPHA,
    COEF0,
    COUNT,
    DEGREE,
    DEVICE,
    GAMMA,
    LENGTH_SCALE,
    NU,
    ArrayIn,
    DeviceLike,
    Floats,
    RandomStateLike,
    RowWeights,
    Weights,
    _EstimatorBase,
    int_seed,
    single_target,
)
from bigkernel.models._posterior import Prediction, evidence_state, predict_output, read_evidence_state, set_evidence
from bigkernel.models._streamed import STATS_FIELDS, FeaturesOutMixin, PartialFitMixin
from bigkernel.numerics.fourier_features import FORMS, SAMPLERS, FeatureMap, make_feature_map
from bigkernel.numerics.nystroem_features import NystroemMap
from bigkernel.numerics.polynomial_features import PolynomialFeatureMap, make_polynomial_map
from bigkernel.numerics.posterior import PrimalPosterior, primal_posterior
from bigkernel.numerics.primal import PathSpectrum, PrimalExpansion, solve_primal
from bigkernel.numerics.scaling import column_moments, safe_scale
from bigkernel.numerics.sums import SufficientStats, sums_precision
from bigkernel.runtime import compute
from bigkernel.validation import DTypes, Options

logger = logging.getLogger(__name__)

#: bytes of one feature sub-block (rows × D) per task; bounds the memory of the pass
FEATURE_BLOCK_BYTES = 64 * 2**20


def feature_block_rows(n_components: int, dtype: str, budget: int = FEATURE_BLOCK_BYTES) -> int:
    """Rows of a feature sub-block: a power of two in [256, 8192] within ``budget`` bytes.

    Depends only on (D, dtype), never on the chunking. Sub-blocks sit at global multiples of
    this size, so any chunking whose edges are multiples of 8192 rows gives bitwise-identical
    float32 products (float64 results agree to rounding for any chunking).
    """
    rows = budget // (n_components * np.dtype(dtype).itemsize)
    return int(2 ** np.clip(np.floor(np.log2(max(rows, 1))), 8, 13))


#: feature dtypes: by name, or as a numpy dtype
FEATURE_DTYPE = [Options(str, ("float32", "float64")), DTypes(("float32", "float64"))]


def feature_map_arrays(fm: FeatureMap | PolynomialFeatureMap) -> dict[str, np.ndarray]:
    """The saved arrays of a random-feature map (frequencies, or the polynomial map's own)."""
    if isinstance(fm, PolynomialFeatureMap):
        return fm.arrays()
    arrays = {"fmap_weights": fm.weights}
    if fm.offsets is not None:
        arrays["fmap_offsets"] = fm.offsets
    return arrays


def feature_map_from_state(meta: dict, arrays: dict[str, np.ndarray]) -> FeatureMap | PolynomialFeatureMap:
    """Inverse of ``to_metadata()`` + :func:`feature_map_arrays`."""
    if meta.get("kind") == "polynomial":
        return PolynomialFeatureMap.from_arrays(meta, arrays)
    return FeatureMap.from_arrays(meta, arrays["fmap_weights"], arrays.get("fmap_offsets"))


class _RandomFeatureBase(FeaturesOutMixin, _EstimatorBase):
    """Shared machinery of the random-feature estimators: checks, data, pass, predict, state,
    and ``transform`` (the features of the fitted map)."""

    #: whether a fit keeps its sufficient statistics as ``stats_`` (the estimators with
    #: ``partial_fit``; their ``PartialFitMixin`` sets it)
    _keeps_stats: ClassVar[bool] = False

    #: the table entries of both random-feature estimators
    _common_constraints: ClassVar[dict[str, list]] = {
        "kernel": [str],  # a name the registry knows for this path: _check_rules
        "nu": NU,
        "degree": DEGREE,
        "coef0": COEF0,
        "n_components": [COUNT],
        "sampler": [Options(str, SAMPLERS)],
        "form": [Options(str, FORMS)],
        "fit_intercept": ["boolean"],
        "random_state": ["random_state"],
        "dtype": FEATURE_DTYPE,
        "chunk_rows": [COUNT, None],
        "standardize": ["boolean"],
        "device": DEVICE,
    }

    def _check_rules(self) -> None:
        self._check_kernel()

    def _check_kernel(self) -> None:
        """A kernel the random-feature path serves, with a smoothness its sampler has."""
        spec = check_kernel_name(self.kernel, "random_features")
        if "nu" in spec.param_names():
            spec.check_choice("nu", self.nu)

    def _seed(self) -> int:
        """The feature-map seed: ``random_state`` if an int, else drawn from it."""
        return int_seed(self.random_state)

    def _feature_map(self, n_features: int, seed: int, gamma=None, length_scale=None) -> FeatureMap:
        if check_kernel_name(self.kernel, "random_features").name == "polynomial":
            fmap = self._polynomial_map(n_features, seed, gamma, length_scale)
        else:
            fmap = make_feature_map(
                self.kernel, n_features, self.n_components, seed, gamma=gamma,
                length_scale=length_scale, nu=self.nu, sampler=self.sampler, form=self.form,
            )  # fmt: skip
        scaler = getattr(self, "_scaler", None)
        return fmap if scaler is None else fmap.standardized(*scaler)

    def _polynomial_map(self, n_features: int, seed: int, gamma, length_scale) -> PolynomialFeatureMap:
        """The explicit monomial map when its ``C(d + degree, degree)`` features fit
        ``n_components`` (the kernel exactly), else a TensorSketch; ``feature_map_.method``
        says which (and it is logged). ``sampler`` and ``form`` do not apply."""
        if length_scale is not None:
            raise ParameterError("the polynomial kernel has no length_scale; give gamma (default 1/n_features)")
        problem = sampler_problem("polynomial", self.sampler)
        if problem:
            raise ParameterError(problem)
        fmap = make_polynomial_map(
            n_features, self.n_components, seed, degree=self.degree, gamma=gamma,
            coef0=self.coef0,
        )  # fmt: skip
        logger.info("%s: polynomial feature map %s with %d components", type(self).__name__, fmap.method,
                    fmap.n_components)  # fmt: skip
        return fmap

    def _fit_scaler(self, ds: Dataset, weights=None) -> None:
        """With ``standardize=True``, the column means and standard deviations of X.

        A light pre-pass that reads X only (d columns, no features): the feature map needs the
        scaling before its first feature is computed. Weighted by ``sample_weight`` (row
        weights of one array); otherwise over all rows. Constant columns keep scale 1.

        Sparse X is scaled without centring (scikit-learn's ``with_mean=False``): the mean is
        0, so X stays sparse; for translation-invariant kernels the model is the same.
        """
        self._scaler = None
        if not getattr(self, "standardize", False):
            return
        X = ds.X
        if is_sparse(X._meta):
            (sums,) = compute(
                column_sums_graph(X, weights.values if isinstance(weights, RowWeights) else None), label="standardize"
            )
            mean, std = np.zeros(X.shape[1]), scale_from_sums(sums)[1]
        else:
            w = da.from_array(weights.values, chunks=(X.chunks[0],)) if isinstance(weights, RowWeights) else None
            mean, std = compute(*column_moments(X, w), label="standardize")
        std = safe_scale(std)
        self._scaler = (np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64))
        self.scaler_mean_, self.scaler_scale_ = self._scaler

    def _set_fitted(self, sol, fmap: FeatureMap, y_ndim: int, stats: SufficientStats):
        """Fitted attributes from a :class:`~bigkernel.numerics.primal.PrimalSolution`."""
        single = y_ndim == 1
        self.feature_map_ = fmap
        self.coef_ = sol.coef[:, 0].copy() if single else sol.coef.T.copy()
        self.intercept_ = float(sol.intercept[0]) if single else sol.intercept.copy()
        self.alpha_ = sol.alpha
        self.alphas_ = sol.alphas
        self.df_path_ = sol.df
        best = int(np.argmin(np.abs(sol.alphas - sol.alpha)))
        self.df_ = float(sol.df[best])
        set_evidence(self, sol.evidence, best, single)
        self.posterior_ = None
        if sol.path is not None:
            self.posterior_ = primal_posterior(sol.path, sol.alpha, fmap, dtype=str(np.dtype(self.dtype)))
        self.gcv_ = single_target(sol.gcv, single)
        self.spectrum_ = sol.spectrum
        self.n_samples_fit_ = int(round(float(stats.n[0])))
        self.n_features_in_ = fmap.n_features_in
        if self._keeps_stats:
            self.stats_ = stats  # what partial_fit adds new rows to
        # the range came with the pass (rows of weight > 0 only: training rows of a split)
        self._set_range(*((None, None) if stats.x_min is None else (stats.x_min[0], stats.x_max[0])))
        logger.info(
            "fitted %s: n=%s D=%d alpha=%.3g df=%.1f",
            type(self).__name__,
            f"{self.n_samples_fit_:,}",
            fmap.n_components,
            self.alpha_,
            self.df_,
        )
        return self

    def stats_graph(
        self,
        ds: Dataset,
        fmap: FeatureMap | NystroemMap | Sequence[FeatureMap],
        weights: Weights | Delayed | None = None,
    ) -> Delayed:
        """The delayed one-pass statistics of ``ds`` under ``fmap`` (a map, or a list of maps
        sharing the pass), optionally weighted or partitioned (for orchestrators)."""
        Y = ds.y if ds.y.ndim == 2 else ds.y[:, np.newaxis]
        return stats_graph(
            ds.X,
            Y,
            fmap,
            weights=weights,
            dtype=str(np.dtype(self.dtype)),
            block_rows=feature_block_rows(self.n_components, self.dtype),
            device=getattr(self, "_device", CPU),  # the fit's Device (CPU before any fit)
        )

    # ----------------------------------------------------------------- predict
    def _coef_2d(self) -> tuple[np.ndarray, np.ndarray]:
        coef = self.coef_[:, np.newaxis] if self.coef_.ndim == 1 else self.coef_.T
        return coef, np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))

    def predict(self, X: ArrayIn, return_std: bool = False, return_cov: bool = False) -> Prediction:
        """Predict; numpy in gives numpy out, dask in gives a lazy dask array out.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the posterior standard deviation of the latent f(x) (the Gaussian-process
            reading: prior ``GP(0, σ²k)``, noise ``σ²α``; ``σ² = sigma2_``), from the fit's
            eigendecomposition — no pass over the training data (see
            :mod:`bigkernel.numerics.posterior` for the formula, the intercept's share and the
            truncation bound). Dask in → a lazy dask ``(mean, std)``.
        return_cov : bool, default=False
            Also return the posterior covariance of f at the points (at most
            :data:`~bigkernel.numerics.posterior.COV_MAX_ROWS` of them).

        Returns
        -------
        y_mean : ndarray or dask array of shape (n_samples,) or (n_samples, n_targets)
        y_std : ndarray or dask array of the same shape, only with ``return_std``
        y_cov : ndarray of shape (n_samples, n_samples) or (n_samples, n_samples, n_targets),
            only with ``return_cov``
        """
        check_is_fitted(self, "coef_")
        coef, intercept = self._coef_2d()
        dtype = str(np.dtype(self.dtype))
        fmap, rows = self.feature_map_, feature_block_rows(self.feature_map_.n_components, dtype)
        model = PrimalExpansion(fmap, coef, intercept, dtype=dtype, block_rows=rows)
        return predict_output(
            self, X, mean_model=model, single=self.coef_.ndim == 1, return_std=return_std,
            return_cov=return_cov, posterior=lambda: getattr(self, "posterior_", None), coef=coef,
            intercept=intercept,
        )  # fmt: skip

    # ----------------------------------------------------------------- persistence
    def _get_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        check_is_fitted(self, "coef_")
        fm = self.feature_map_
        attrs = {
            "feature_map": fm.to_metadata(),
            "alpha_": self.alpha_, "df_": self.df_, "n_samples_fit_": self.n_samples_fit_,
            "n_features_in_": self.n_features_in_, "single_output": self.coef_.ndim == 1,
        }  # fmt: skip
        arrays = {
            "coef": np.atleast_2d(self.coef_), "intercept": np.atleast_1d(np.asarray(self.intercept_, float)),
            "alphas": self.alphas_, "df_path": self.df_path_, "gcv": np.asarray(self.gcv_),
            **self._range_arrays(),
        }  # fmt: skip
        arrays.update(feature_map_arrays(fm))
        self._add_spectrum_state(attrs, arrays)
        self._add_posterior_state(attrs, arrays)
        self._add_stats_state(arrays)
        return attrs, arrays

    def _add_stats_state(self, arrays: dict[str, np.ndarray]) -> None:
        """``stats_`` into the saved arrays (``stats_<field>``; the range is ``data_min``/``max``)."""
        st = getattr(self, "stats_", None) if self._keeps_stats else None
        if st is not None:
            arrays.update({f"stats_{f}": getattr(st, f) for f in STATS_FIELDS})

    def _read_stats_state(self, arrays: dict[str, np.ndarray]) -> None:
        """``stats_`` from saved arrays; None for a store written without them (loads and
        predicts, but cannot be updated)."""
        if not self._keeps_stats:
            return
        if "stats_gram" not in arrays:
            self.stats_ = None
            return
        st = SufficientStats(*(np.asarray(arrays[f"stats_{f}"], dtype=np.float64) for f in STATS_FIELDS))
        D = self.feature_map_.n_components
        if st.gram.shape != (1, D, D) or st.phi_y.shape[:2] != (1, D):
            raise DataError(f"saved statistics have ΦᵀΦ of shape {st.gram.shape}, expected (1, {D}, {D})")
        if self.data_min_ is not None:
            st.x_min, st.x_max = self.data_min_[np.newaxis].copy(), self.data_max_[np.newaxis].copy()
        self.stats_ = st

    def _add_spectrum_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        """``spectrum_`` into the saved state (optional: older stores load without it)."""
        sp = getattr(self, "spectrum_", None)
        if sp is not None:
            attrs["spectrum"] = {"n": sp.n, "fit_intercept": sp.fit_intercept, "eps": sp.eps}
            arrays.update(spectrum_eigvals=sp.eigvals, spectrum_z=sp.z, spectrum_yy=sp.yy)

    def _add_posterior_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        """``sigma2_``, the evidence and the posterior's kept directions (optional: older stores
        load without them, and then refuse ``return_std`` with a clear error)."""
        ev_attrs, ev_arrays = evidence_state(self)
        attrs.update(ev_attrs)
        arrays.update(ev_arrays)
        post = getattr(self, "posterior_", None)
        if post is not None:
            attrs["posterior"] = {"alpha": post.alpha, "n": post.n, "fit_intercept": post.fit_intercept,
                                  "rtol": post.rtol, "block_rows": post.block_rows}  # fmt: skip
            arrays.update(posterior_vecs=post.vecs, posterior_weights=post.weights, posterior_mean_phi=post.mean_phi)

    def _read_posterior_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        read_evidence_state(self, attrs, arrays, single=self.coef_.ndim == 1)
        meta = attrs.get("posterior")
        self.posterior_ = None if meta is None else PrimalPosterior(
            self.feature_map_, arrays["posterior_mean_phi"], arrays["posterior_vecs"], arrays["posterior_weights"],
            float(meta["alpha"]), float(meta["n"]), bool(meta["fit_intercept"]), float(meta["rtol"]),
            str(np.dtype(self.dtype)), int(meta["block_rows"]))  # fmt: skip

    def _read_spectrum_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        meta = attrs.get("spectrum")
        self.spectrum_ = None if meta is None else PathSpectrum(
            arrays["spectrum_eigvals"], arrays["spectrum_z"], arrays["spectrum_yy"], float(meta["n"]),
            bool(meta["fit_intercept"]), float(meta["eps"]))  # fmt: skip

    def _set_state(self, attrs: dict, arrays: dict[str, np.ndarray]) -> None:
        fm = feature_map_from_state(attrs["feature_map"], arrays)
        coef, intercept = arrays["coef"], arrays["intercept"]
        if coef.shape[1] != fm.n_components or coef.shape[0] != intercept.shape[0]:
            raise DataError(f"coef has shape {coef.shape}, expected (n_targets, {fm.n_components})")
        single = bool(attrs["single_output"])
        self.feature_map_ = fm
        self.coef_ = coef[0] if single else coef
        self.intercept_ = float(intercept[0]) if single else intercept
        self.alpha_, self.df_ = float(attrs["alpha_"]), float(attrs["df_"])
        self.alphas_, self.df_path_, self.gcv_ = arrays["alphas"], arrays["df_path"], arrays["gcv"]
        self.n_samples_fit_, self.n_features_in_ = int(attrs["n_samples_fit_"]), int(attrs["n_features_in_"])
        self._read_spectrum_state(attrs, arrays)
        self._read_posterior_state(attrs, arrays)
        self._read_range(arrays)
        self._read_stats_state(arrays)


@register_model
class RandomFeatureRidge(PartialFitMixin, _RandomFeatureBase):
    """Kernel ridge regression with random Fourier features, fitted in one streamed pass.

    The data are read once, chunk by chunk; each chunk contributes its feature statistics
    ΦᵀΦ, Φᵀy, Σφ, Σy, Σy² (float64) to a tree reduction, and a D×D eigendecomposition gives the
    coefficients, degrees of freedom and GCV for every α. Memory is O(D²), not O(n).

    Parameters
    ----------
    kernel : {"rbf", "laplacian", "matern", "polynomial", "fourier"}, default="rbf"
        Kernel approximated by the features (``"poly"`` is ``"polynomial"``); ``"fourier"`` is
        the fixed 1-D Fourier basis.
    gamma : float, default=None
        Bandwidth: rbf exp(-γ‖x-x'‖²), laplacian exp(-γ‖x-x'‖₁), matern ℓ = 1/√(2γ),
        polynomial (γ xᵀx' + coef0)^degree.
        Default 1/n_features when ``length_scale`` is not given either.
    length_scale : float or array-like of shape (n_features,), default=None
        Alternative to ``gamma`` (rbf: γ = 1/(2ℓ²)); an array gives per-feature scales (ARD).
    nu : {0.5, 1.5, 2.5}, default=1.5
        Matérn smoothness.
    degree : int, default=3
        Polynomial degree k of ``(γ xᵀx' + coef0)^k`` (scikit-learn's names and defaults).
    coef0 : float, default=1
        Polynomial offset (>= 0 on this path).
    n_components : int, default=100
        Number of features D. For ``kernel="polynomial"``: the explicit monomial map (the
        kernel exactly, ``C(d + degree, degree)`` features) when that many fit in D, else a
        TensorSketch of D features; ``feature_map_.method`` says which.
    sampler : {"iid", "orthogonal"}, default="iid"
        Orthogonal random features (rbf only) have lower variance.
    form : {"cos", "cossin"}, default="cos"
        √(2/D)·cos(ωᵀx + b), or paired √(2/D)·[cos ωᵀx, sin ωᵀx] with D/2 frequencies.
    alpha : float, list of float, "gcv" or "evidence", default=1.0
        Ridge penalty (scikit-learn's scaling: Σ squared errors + α‖β‖²). A list is searched by
        generalized cross-validation; ``"gcv"`` searches a default grid; ``"evidence"`` the
        same grid by the largest evidence (marginal likelihood of the Gaussian-process reading,
        :mod:`bigkernel.numerics.evidence`). All from one pass.
    fit_intercept : bool, default=True
        Fit an unpenalized intercept by centring in feature space.
    random_state : int, RandomState instance or None, default=None
        Seeds the feature map; the map depends on this seed, d, D and the kernel only.
    dtype : {"float64", "float32"}, default="float64"
        Precision of the features; every sum and solve is float64 regardless.
    chunk_rows : int, default=None
        Rows per dask chunk for numpy input (dask input keeps its chunks).
    standardize : bool, default=False
        Standardize each feature to mean 0, standard deviation 1 first (estimated in a light
        pre-pass over X; stored in the model's feature map). Sparse X is scaled without
        centring (mean 0), so it stays sparse.

    device : {"cpu", "cuda", "cuda:N", "auto"}, default="cpu"
        Where the fit computes: ``"cuda"`` / ``"cuda:N"`` runs the streamed pass on that GPU
        (``"auto"``: a GPU when CuPy sees one, logged). An unusable GPU raises DeviceError
        at fit start; fitted arrays are host numpy arrays (``docs/guide/gpu.rst``).

    verbose : int, default=0
        Progress of this estimator's passes over the data (fit, predict and the searches'
        passes): 0 none; 1 or more, a progress bar per pass on a terminal, else a log line
        every 10 s (logger ``bigkernel.runtime``, INFO). See :func:`bigkernel.progress_bars`.

    Attributes
    ----------
    coef_ : ndarray of shape (n_components,) or (n_targets, n_components)
    intercept_ : float or ndarray of shape (n_targets,)
    alpha_ : float
        The penalty used (the GCV choice when several were given).
    alphas_ : ndarray of shape (n_alphas,)
    df_ : float
        Effective degrees of freedom at ``alpha_`` (trace of the hat matrix, intercept included).
    df_path_ : ndarray of shape (n_alphas,)
    gcv_ : ndarray of shape (n_alphas,) or (n_alphas, n_targets)
        Generalized cross-validation score per α.
    spectrum_ : PathSpectrum or None
        Eigenvalues of the centred feature system and the projections of y on its
        eigenvectors: ``spectrum_.gcv(alphas)`` and ``spectrum_.df(alphas)`` for any α, with no
        pass over the data (the job report draws them around a fixed α). None for models saved
        before it was kept.
    sigma2_ : float or ndarray of shape (n_targets,)
        Signal variance σ² of the Gaussian-process reading (prior GP(0, σ²k), noise σ²α) at
        ``alpha_``: its maximum-evidence value ``yᵀ(K + αI)⁻¹y / N`` (``N = n − 1`` with an
        intercept). Scales ``predict(X, return_std=True)``; NaN for models saved before it.
    log_marginal_likelihood_ : float
        Log evidence at ``alpha_`` and ``sigma2_`` (summed over targets; with an intercept, that
        of a flat prior on it — see :mod:`bigkernel.numerics.evidence`).
    log_marginal_likelihood_path_ : ndarray of shape (n_alphas,)
        The same along ``alphas_`` (each α at its own σ̂²).
    evidence_ : EvidencePath
        ``evidence_.log_likelihood(sigma2)`` gives the evidence along ``alphas_`` at any fixed σ².
    posterior_ : PrimalPosterior
        The eigenvectors kept for ``return_std`` (those with ``s/(s + α) >= 1e-3``; the variance
        is then over-estimated by at most 0.1 %) and the feature mean; saved with the model.
    feature_map_ : FeatureMap or PolynomialFeatureMap
    n_features_in_ : int
    n_samples_fit_ : int
    data_min_, data_max_ : ndarray of shape (n_features,) or None
        Per-feature minimum and maximum of the training rows (rows of weight > 0), accumulated
        in the fit's one pass; None for a model saved before they were recorded.
    stats_ : SufficientStats or None
        The one-pass sums of the rows seen (n, Σφ, Σy, Σy², ΦᵀΦ, Φᵀy, range), saved with the
        model: :meth:`partial_fit` (and ``bigkernel update``) add new rows to them. None for a
        model saved before they were kept (it predicts, but cannot be updated).

    Notes
    -----
    :meth:`transform` gives the features of the fitted map (scaled), for any other model;
    :meth:`partial_fit` adds batches of rows — after any split into batches the model equals
    one ``fit`` on all rows, to rounding.
    """

    def __init__(
        self,
        kernel: str = "rbf",
        *,
        gamma: float | None = None,
        length_scale: float | ArrayLike | None = None,
        nu: float | None = 1.5,
        degree: int = 3,
        coef0: float = 1,
        n_components: int = 100,
        sampler: str = "iid",
        form: str = "cos",
        alpha: float | Floats | str = 1.0,
        fit_intercept: bool = True,
        random_state: RandomStateLike = None,
        dtype: DTypeLike = "float64",
        chunk_rows: int | None = None,
        standardize: bool = False,
        device: DeviceLike = "cpu",
        verbose: int = 0,
    ) -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.length_scale = length_scale
        self.nu = nu
        self.degree = degree
        self.coef0 = coef0
        self.n_components = n_components
        self.sampler = sampler
        self.form = form
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.random_state = random_state
        self.dtype = dtype
        self.chunk_rows = chunk_rows
        self.standardize = standardize
        self.device = device
        self.verbose = verbose

    # ----------------------------------------------------------------- parameters
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **_RandomFeatureBase._common_constraints,
        "gamma": GAMMA,
        "length_scale": LENGTH_SCALE,
        "alpha": ALPHA,
    }

    def _make_feature_map(self, n_features: int) -> FeatureMap:
        return self._feature_map(n_features, self._seed(), self.gamma, self.length_scale)

    def _new_map(self, ds: Dataset, weights: Weights | None = None) -> FeatureMap:
        """The map a fit on ``ds`` draws (``partial_fit``'s first batch, the transformers)."""
        return self._make_feature_map(ds.X.shape[1])

    def fit_dataset(self, ds: Dataset, weights: Weights | None = None) -> Self:
        """Fit from a validated :class:`~bigkernel.data.sources.Dataset` (for orchestrators).

        ``weights(start, stop) -> (1, rows)`` optionally weights rows (a training mask, or
        ``sample_weight``); a row partition keeps its groups.
        """
        self._check_params()
        self._fit_scaler(ds, weights)
        fmap = self._make_feature_map(ds.X.shape[1])
        (stats,) = compute(self.stats_graph(ds, fmap, weights), label="fit")
        return self._fit_from_stats(stats, fmap, y_ndim=ds.y.ndim)

    def _fit_from_stats(self, stats: SufficientStats, fmap: FeatureMap, y_ndim: int):
        """Set the fitted attributes from one set of statistics."""
        sol = solve_primal(stats, self.alpha, self.fit_intercept, sums_precision(self.dtype),
                           device=getattr(self, "_device", CPU))  # fmt: skip
        return self._set_fitted(sol, fmap, y_ndim, stats)
