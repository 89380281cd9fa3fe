"""``predict(X, return_std=True | return_cov=True)`` and the Bayesian attributes every regressor
shares: the signal variance ``sigma2_`` and the evidence (``log_marginal_likelihood_``, its path),
from :mod:`bigkernel.numerics.evidence` and :mod:`bigkernel.numerics.posterior`."""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from bigkernel._sparse import check_real
from bigkernel.data.frames import validate_data
from bigkernel.diagnostics import log_predict
from bigkernel.errors import DataError, ParameterError
from bigkernel.graph.stream import predict_graph
from bigkernel.models._base import SPARSE_OK, ArrayOut
from bigkernel.numerics.evidence import EvidencePath
from bigkernel.numerics.posterior import MeanStdModel, check_cov_rows
from bigkernel.runtime import compute, map_rows

#: what ``predict`` returns: the mean, or (mean, std) / (mean, cov) with return_std / return_cov
Prediction = ArrayOut | tuple[ArrayOut, ArrayOut]

#: a store without the signal variance (saved by an older bigkernel, or from an exact fit at
#: n > 2000 by a version that did not estimate it there) says so when asked for a posterior
_SAVED_WITHOUT_POSTERIOR = (
    "{name} was loaded from a store saved without what the posterior needs (the signal variance "
    "sigma2_, and for the primal models the eigenvectors of the fit): it was written by an older "
    "bigkernel (or, for an exact fit at n > 2000, by one that did not estimate sigma2_ there); "
    "refit it to use return_std / return_cov"
)


def _no_posterior_message(est, s2: np.ndarray) -> str:
    """Why ``est`` has no posterior: loaded from an older store, or fitted with a σ² that is not
    finite (the quadratic form below its rounding error)."""
    name = type(est).__name__
    if getattr(est, "_saved_without_posterior", False):
        return _SAVED_WITHOUT_POSTERIOR.format(name=name)
    if not np.all(np.isfinite(s2)) and getattr(est, "evidence_", None) is None:
        return f"{name} was fitted without an estimate of the signal variance (sigma2_ is NaN): no posterior"
    if not np.all(np.isfinite(s2)):
        return (
            f"{name} was fitted, but its signal variance sigma2_ = {s2.tolist()} is not finite: the quadratic "
            f"form y'(K + alpha·I)^-1 y is below its rounding error at alpha_={getattr(est, 'alpha_', np.nan):.3g} "
            "(y is interpolated); refit with a larger alpha to use return_std / return_cov"
        )
    return (
        f"{name} was fitted, but the posterior's directions are not available in this object (sigma2_ is); "
        "refit it to use return_std / return_cov"
    )


def set_evidence(est, ev: EvidencePath | None, best: int, single: bool) -> None:
    """``sigma2_``, ``log_marginal_likelihood_`` and ``log_marginal_likelihood_path_`` from an
    evidence path and the chosen index (NaN when unknown: σ² needs only the quadratic forms, the
    evidence value also the log-determinants; the path is None when none is known)."""
    est.evidence_ = ev
    est._saved_without_posterior = False
    if ev is None:
        est.sigma2_ = est.log_marginal_likelihood_ = np.nan
        est.log_marginal_likelihood_path_ = None
        return
    lml = ev.log_likelihood()  # (A, k) profile over σ²
    s2 = ev.sigma2()[best]
    total = lml.sum(axis=1)
    est.log_marginal_likelihood_path_ = total if np.isfinite(ev.log_det).any() else None
    est.log_marginal_likelihood_ = float(total[best])
    est.sigma2_ = float(s2[0]) if single else np.asarray(s2, dtype=np.float64)


def evidence_state(est) -> tuple[dict, dict[str, np.ndarray]]:
    """The saved form of the Bayesian attributes (attrs, arrays); empty when unknown."""
    s2 = getattr(est, "sigma2_", None)
    if s2 is None or np.all(np.isnan(np.atleast_1d(s2))):
        return {}, {}
    arrays = {"sigma2": np.atleast_1d(np.asarray(s2, dtype=np.float64))}
    attrs: dict[str, Any] = {"log_marginal_likelihood_": float(est.log_marginal_likelihood_)}
    if getattr(est, "log_marginal_likelihood_path_", None) is not None:
        arrays["lml_path"] = np.asarray(est.log_marginal_likelihood_path_, dtype=np.float64)
    ev = getattr(est, "evidence_", None)
    if ev is not None:
        attrs["evidence"] = {"n": ev.n, "fit_intercept": ev.fit_intercept}
        arrays.update(evidence_alphas=ev.alphas, evidence_quad=ev.quad, evidence_log_det=ev.log_det)
    return attrs, arrays


def read_evidence_state(est, attrs: dict, arrays: dict[str, np.ndarray], single: bool) -> None:
    """Restore what :func:`evidence_state` saved (older stores: NaN, no posterior)."""
    meta = attrs.get("evidence")
    est.evidence_ = None if meta is None else EvidencePath(
        arrays["evidence_alphas"], arrays["evidence_quad"], arrays["evidence_log_det"], float(meta["n"]),
        bool(meta["fit_intercept"]))  # fmt: skip
    est._saved_without_posterior = "sigma2" not in arrays
    if "sigma2" not in arrays:
        est.sigma2_ = est.log_marginal_likelihood_ = np.nan
        est.log_marginal_likelihood_path_ = None
        return
    s2 = np.asarray(arrays["sigma2"], dtype=np.float64)
    est.sigma2_ = float(s2[0]) if single else s2
    est.log_marginal_likelihood_ = float(attrs["log_marginal_likelihood_"])
    est.log_marginal_likelihood_path_ = arrays.get("lml_path")


def check_has_posterior(est, posterior) -> np.ndarray:
    """The per-target σ² (k,), or a clear error when the model has no posterior."""
    s2 = np.atleast_1d(np.asarray(getattr(est, "sigma2_", np.nan), dtype=np.float64))
    if posterior is None or not np.all(np.isfinite(s2)):
        raise DataError(_no_posterior_message(est, s2))
    return s2


def predict_output(
    est,
    X,
    *,
    mean_model,
    single: bool,
    return_std: bool,
    return_cov: bool,
    posterior=None,
    coef: np.ndarray | None = None,
    intercept: np.ndarray | None = None,
    transform=None,
) -> Prediction:
    """What ``predict`` returns: the mean, or ``(mean, std)`` / ``(mean, cov)``.

    ``posterior`` is a callable returning the unit-variance object (built only when asked for:
    the exact path factors ``K + αI`` then); ``coef``/``intercept`` are the mean's coefficients
    in the posterior's terms (primal β or dual a); ``transform`` maps raw inputs (scaling).
    Numpy in → numpy out; dask in → lazy dask ``(mean, std)`` (one feature block per chunk
    serves both). ``return_cov`` takes at most :data:`~bigkernel.numerics.posterior.COV_MAX_ROWS`
    points; a dask X is then loaded.
    """
    if return_std and return_cov:
        raise ParameterError("at most one of return_std and return_cov can be requested")
    if not (return_std or return_cov):
        return est._predict_with(X, mean_model, single)
    sigma2 = check_has_posterior(est, posterior)  # before building it (the exact path factors K + αI)
    post = posterior()
    if post is None:
        raise DataError(_no_posterior_message(est, sigma2))
    k = sigma2.size
    model = MeanStdModel(post, coef, intercept, sigma2, transform)
    if isinstance(X, da.Array):
        ds, _ = est._as_dataset(X, reset=False)
        if return_std:
            both = predict_graph(ds.X, model, 2 * k)
            mean, std = both[:, :k], both[:, k:]
            return (mean[:, 0], std[:, 0]) if single else (mean, std)
        check_cov_rows(ds.X.shape[0])
        (X,) = compute(ds.X, label="points of return_cov")
    check_real(X, "X")
    X = validate_data(est, X, reset=False, dtype=[np.float64, np.float32], **SPARSE_OK)
    log_predict(est, X)
    if return_std:
        both = map_rows(model, X, model.n_outputs)
        mean, std = both[:, :k], both[:, k:]
        return (mean[:, 0], std[:, 0]) if single else (mean, std)
    check_cov_rows(X.shape[0])
    mean = mean_model(X)
    C = post.unit_cov(transform(X) if transform is not None else X)
    if single:
        return mean[:, 0], C * sigma2[0]
    return mean, C[:, :, None] * sigma2[None, None, :]
