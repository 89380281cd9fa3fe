"""ExactKernelRidgeCV and the closed-form LOO/GCV of bigkernel.numerics.loo: brute-force leave-one-out
refits, ExactKernelRidge's GCV and predictions, the size refusals, persistence, scikit-learn's
contract and a YAML job through the CLI."""

import json

import dask.array as da
import numpy as np
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import bigkernel
from bigkernel import ExactKernelRidge, ExactKernelRidgeCV
from bigkernel.data.sources import as_dataset
from bigkernel.errors import DataError, ParameterError
from bigkernel.kernels import RBF, Laplacian
from bigkernel.numerics.loo import closed_form_scores, spectral_path
from bigkernel.numerics.splits import HoldoutSplit
from tests._tolerance import assert_forward_close
from tests.conftest import friedman

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set


def _brute_loo(K, Y, alpha, fit_intercept):
    """LOO residuals by n refits on n − 1 points: dense centred ridge solves."""
    n = K.shape[0]
    E = np.empty_like(Y)
    for i in range(n):
        m = np.arange(n) != i
        Km, Ym = K[np.ix_(m, m)], Y[m]
        H = np.eye(n - 1) - (1.0 / (n - 1) if fit_intercept else 0.0)
        ybar = Ym.mean(axis=0) if fit_intercept else 0.0
        a = np.linalg.solve(H @ Km @ H + alpha * np.eye(n - 1), H @ (Ym - ybar))
        b = ybar - (Km @ a).mean(axis=0) if fit_intercept else 0.0
        E[i] = Y[i] - (K[i, m] @ a + b)
    return E


def _targets(X):
    return np.column_stack([np.sin(2 * X[:, 0]) + X[:, 1], X[:, 2] ** 2 + 3.0])


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_closed_form_loo_equals_n_refits(fit_intercept, rng):
    X = rng.standard_normal((45, 3))
    Y = _targets(X) + 0.1 * rng.standard_normal((45, 2))  # two targets
    K = RBF(gamma=0.3)(X)
    alphas = np.array([1e-3, 0.1, 3.0])
    path = spectral_path(K, Y, fit_intercept=fit_intercept)
    scores = closed_form_scores(path, alphas, block_bytes=8 * 44 * 7)  # several row blocks
    for j, a in enumerate(alphas):
        E = _brute_loo(K, Y, a, fit_intercept)
        # hat diagonal and df from the dense hat matrix
        Hn = np.eye(45) - (1.0 / 45 if fit_intercept else 0.0)
        Kc = Hn @ K @ Hn
        S = Kc @ np.linalg.inv(Kc + a * np.eye(45)) + (1.0 / 45 if fit_intercept else 0.0)
        np.testing.assert_allclose(path.one_minus_leverage(a), 1 - np.diag(S), rtol=1e-8)
        # e = r / (1 − S_ii): both routes carry cond(K̄ + αI)·ε, and the division by the
        # smallest 1 − S_ii amplifies it (an element-wise rtol=1e-7 measured 0.07-0.12 of itself
        # at α = 1e-3 across OpenBLAS kernels: 15-19 cond·ε normwise, cond = 1.7e4)
        cond = (np.linalg.eigvalsh(Kc)[-1] + a) / a
        assert_forward_close(path.loo_residuals(a), E, cond / np.min(1 - np.diag(S)))
        np.testing.assert_allclose(scores.loo_mse[j], (E**2).mean(axis=0), rtol=1e-7)
        # the standard deviation a LeaveOneOut grid search reports (over the n one-point splits)
        assert scores.loo_std[j] == pytest.approx(np.std((E**2).mean(axis=1)), rel=1e-6)
        assert scores.df[j] == pytest.approx(np.trace(S), rel=1e-9)
    assert np.all(scores.reliable)


def test_dual_solution_from_the_eigendecomposition_is_the_dense_one(rng):
    X, Y = rng.standard_normal((50, 2)), rng.standard_normal((50, 2))
    K, n, a = Laplacian(gamma=0.7)(X), 50, 0.05
    H = np.eye(n) - 1.0 / n
    coef = np.linalg.solve(H @ K @ H + a * np.eye(n), H @ (Y - Y.mean(axis=0)))
    path = spectral_path(K.copy(), Y, fit_intercept=True, overwrite=True)
    np.testing.assert_allclose(path.coef(a), coef, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(path.intercept(a), Y.mean(axis=0) - (K @ coef).mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(path.fitted(a), K @ coef + path.intercept(a), rtol=1e-9)


def test_scores_below_the_rounding_floor_are_inf_and_never_chosen(rng):
    X = rng.standard_normal((60, 2))
    y = X[:, 0] + 0.1 * rng.standard_normal(60)
    scores = closed_form_scores(spectral_path(RBF(gamma=5.0)(X), y), [1e-15, 1e-1])
    assert np.isinf(scores.loo_mse[0, 0]) and not scores.reliable[0] and np.isfinite(scores.loo_mse[1, 0])
    m = ExactKernelRidgeCV(gammas=[5.0], alphas=[1e-15, 1e-1]).fit(X, y)
    assert m.alpha_ == 1e-1 and m.cv_results_["rank_test_score"].tolist() == [2, 1]


@pytest.mark.parametrize("criterion", ["loo", "gcv"])
def test_chosen_point_is_the_brute_force_argmin(criterion):
    X, y = friedman(60, d=5, seed=3)
    gammas, alphas = [0.05, 0.3, 1.5], [1e-3, 1e-1, 3.0]
    m = ExactKernelRidgeCV(gammas=gammas, alphas=alphas, criterion=criterion).fit(X, y)
    brute = {}
    for g in gammas:
        K = RBF(gamma=g)(X)
        for a in alphas:
            if criterion == "loo":
                brute[g, a] = float(np.mean(_brute_loo(K, y[:, None], a, True) ** 2))
            else:
                H = np.eye(60) - 1 / 60
                S = H @ K @ H @ np.linalg.inv(H @ K @ H + a * np.eye(60)) + 1 / 60
                rss = float(np.sum((y - S @ y) ** 2))
                brute[g, a] = 60 * rss / (60 - np.trace(S)) ** 2
    best = min(brute, key=brute.get)
    assert (m.gamma_, m.alpha_) == best and m.best_params_ == {"gamma": best[0], "alpha": best[1]}
    assert m.best_score_ == pytest.approx(-brute[best], rel=1e-7)
    got = {(p["gamma"], p["alpha"]): -s for p, s in zip(m.cv_results_["params"], m.cv_results_["mean_test_score"])}
    for key, value in brute.items():
        assert got[key] == pytest.approx(value, rel=1e-7)
    assert m.cv_results_["rank_test_score"][m.best_index_] == 1


def test_gcv_equals_exact_kernel_ridge_gcv():
    X, y = friedman(300, seed=5)
    alphas = [1e-3, 1e-2, 1e-1, 1.0]
    m = ExactKernelRidgeCV(gammas=[0.2], alphas=alphas, criterion="gcv").fit(X, y)
    ref = ExactKernelRidge(gamma=0.2, alpha=alphas, tol=1e-12, random_state=0).fit(X, y)
    assert ref.solver_info_["df_method"] == "exact"
    np.testing.assert_allclose(m.gcv_, ref.gcv_, rtol=1e-6)
    np.testing.assert_allclose(m.df_path_, ref.df_path_, rtol=1e-9)
    np.testing.assert_allclose(m.cv_results_["mean_test_gcv"], ref.gcv_, rtol=1e-6)
    assert m.alpha_ == ref.alpha_


@pytest.mark.parametrize("fit_intercept,standardize", [(True, False), (False, True)])
def test_predictions_equal_exact_kernel_ridge_at_the_chosen_point(fit_intercept, standardize):
    X, y = friedman(300, seed=6)
    Y = np.column_stack([y, np.cos(y)])
    Xt, _ = friedman(100, seed=7)
    m = ExactKernelRidgeCV(
        "matern", nu=2.5, gammas=[0.05, 0.5], alphas=[1e-2, 1.0], fit_intercept=fit_intercept, standardize=standardize
    ).fit(X, Y)
    ref = ExactKernelRidge(
        "matern",
        nu=2.5,
        gamma=m.gamma_,
        alpha=m.alpha_,
        fit_intercept=fit_intercept,
        standardize=standardize,
        tol=1e-12,
        random_state=0,
    ).fit(X, Y)
    np.testing.assert_allclose(m.predict(Xt), ref.predict(Xt), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(m.intercept_, ref.intercept_, rtol=1e-8, atol=1e-10)
    assert m.df_ == pytest.approx(ref.df_, rel=1e-8)
    # dask in → lazy dask out, same values
    out = m.predict(da.from_array(Xt, chunks=40))
    assert isinstance(out, da.Array)
    np.testing.assert_allclose(out.compute(), m.predict(Xt), rtol=1e-12)


def test_alpha_only_search_for_kernels_without_gamma():
    X, y = friedman(120, seed=8)
    m = ExactKernelRidgeCV("linear", criterion="gcv").fit(X, y)
    assert m.gamma_ is None and set(m.best_params_) == {"alpha"} and len(m.cv_results_["params"]) == 20
    assert np.all(np.isnan(m.cv_results_["param_gamma"]))
    with pytest.raises(ParameterError, match="no gamma to search"):
        ExactKernelRidgeCV("linear", gammas=[0.1]).fit(X, y)
    with pytest.raises(ParameterError, match="criterion"):
        ExactKernelRidgeCV(criterion="kfold").fit(X, y)
    with pytest.raises(ParameterError, match="alphas"):
        ExactKernelRidgeCV(alphas=[0.1, -1.0]).fit(X, y)


def test_refuses_n_above_max_n_before_loading_the_data():
    X, y = friedman(300, seed=9)

    def explode(block):
        raise AssertionError("the data must not be read when n is refused")

    Xd = da.from_array(X, chunks=100).map_blocks(explode, dtype=np.float64)
    with pytest.raises(DataError, match="max_n=200") as err:
        ExactKernelRidgeCV(max_n=200).fit(Xd, da.from_array(y, chunks=100))
    assert "RandomFeatureRidgeCV" in str(err.value) and "NystroemRidge" in str(err.value)
    with pytest.raises(DataError, match="memory_budget"):
        ExactKernelRidgeCV(memory_budget="1MB").fit(X, y)
    # a holdout split keeps fewer rows than max_n: those are counted, then fitted
    split = HoldoutSplit(0, 0.5)
    kept = int((split.groups(0, 300) == 0).sum())
    m = ExactKernelRidgeCV(gammas=[0.1], alphas=[0.1], max_n=kept).fit_dataset(as_dataset(X, y), weights=split)
    assert m.n_samples_fit_ == kept < 300
    with pytest.raises(DataError, match=f"max_n={kept - 1}"):
        ExactKernelRidgeCV(max_n=kept - 1).fit_dataset(as_dataset(X, y), weights=split)


def test_round_trip_and_pipeline(tmp_path):
    X, y = friedman(200, seed=10)
    m = ExactKernelRidgeCV(gammas=[0.1, 0.4], standardize=True).fit(X, y)
    back = bigkernel.load(m.save(tmp_path / "m.zarr"))
    assert type(back) is ExactKernelRidgeCV and back.best_params_ == m.best_params_
    np.testing.assert_array_equal(back.predict(X[:30]), m.predict(X[:30]))
    np.testing.assert_array_equal(back.cv_results_["mean_test_score"], m.cv_results_["mean_test_score"])
    assert back.cv_results_["params"] == m.cv_results_["params"] and back.gamma_ == m.gamma_
    pipe = make_pipeline(StandardScaler(), ExactKernelRidgeCV(gammas=[0.1, 0.4])).fit(X, y)
    assert pipe.score(X, y) > 0.8


@parametrize_with_checks([
    ExactKernelRidgeCV(),
    ExactKernelRidgeCV(kernel="laplacian", criterion="gcv", alphas=[0.1, 1.0], fit_intercept=False),
])  # fmt: skip
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_yaml_exact_search_through_the_cli(tmp_path):
    from bigkernel.cli import main

    job = tmp_path / "job.yaml"
    job.write_text(
        "name: exact-cv\noutput: out\ndata:\n  make: {kind: friedman1, n_samples: 1200, path: d.zarr}\n"
        "  holdout_fraction: 0.25\nmodel:\n  solver: exact\n  gamma: [0.05, 0.2, 0.8]\n  alpha: loo\n"
        "cluster:\n  local: {n_workers: 1, threads_per_worker: 1}\nprogress: false\nplots: false\n"
    )
    assert main(["-q", "run", str(job)]) == 0
    out = tmp_path / "out"
    metrics = json.loads((out / "metrics.json").read_text())
    search = metrics["search"]
    assert search["cv"] == "loo" and search["n_candidates"] == 3 * 20
    assert search["best_params"]["gamma"] in (0.05, 0.2, 0.8)
    assert metrics["model"]["solver"] == "exact" and 800 < metrics["model"]["n_samples_fit"] < 1000
    assert 0.6 < metrics["scores"]["holdout"]["r2"] < 1.0
    results = json.loads((out / "search_results.json").read_text())
    assert len(results["mean_test_score"]) == 60 and min(results["rank_test_score"]) == 1
    model = bigkernel.load(out / "model.zarr")
    assert type(model) is ExactKernelRidgeCV and model.best_params_ == search["best_params"]
    assert "leave-one-out" in (out / "summary.txt").read_text()


@pytest.mark.parametrize(
    "model,key,words",
    [("{solver: random_features, alpha: loo}", "model.alpha", "solver exact only"),
     ("{solver: exact, gamma: [0.1, 1.0], alpha: cv, cv: 5}", "model.cv", "no K-fold"),
     ("{solver: exact, kernel: linear, gamma: cv}", "model.gamma", "no gamma to search"),
     ("{solver: nystroem, gamma: [0.1, 1.0]}", "model.solver", "random_features and exact")],
)  # fmt: skip
def test_config_rejects_searches_that_do_not_exist(model, key, words, tmp_path):
    from bigkernel.errors import ConfigError
    from bigkernel.jobs.config import load_config

    p = tmp_path / "job.yaml"
    p.write_text(f"output: runs/job\ndata:\n  train: {{path: data/train.zarr}}\nmodel: {model}\n")
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert key in str(err.value) and words in str(err.value)


@pytest.mark.parametrize(
    "model,expect",
    [("{solver: exact, alpha: cv}", ("loo", None, None)),
     ("{solver: exact, gamma: [0.1, 1.0], alpha: gcv}", ("gcv", [0.1, 1.0], None)),
     ("{solver: exact, gamma: [0.1, 1.0], alpha: 0.5}", ("gcv", [0.1, 1.0], [0.5])),
     ("{solver: exact, gamma: 0.3, alpha: loo}", ("loo", [0.3], None)),
     ("{solver: exact, gamma: cv, alpha: [0.1, 1.0]}", ("loo", None, [0.1, 1.0]))],
)  # fmt: skip
def test_yaml_spelling_maps_to_the_exact_search(model, expect, tmp_path):
    from bigkernel.jobs.config import load_config
    from bigkernel.jobs.runner import build_estimator

    p = tmp_path / "job.yaml"
    p.write_text(f"output: runs/job\ndata:\n  train: {{path: data/train.zarr}}\nmodel: {model}\n")
    est = build_estimator(load_config(p))
    assert isinstance(est, ExactKernelRidgeCV)
    assert (est.criterion, est.gammas, est.alphas) == expect
