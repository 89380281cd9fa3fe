"""K-fold CV from sums equals fitting each fold's complement directly."""

import numpy as np
import pytest

from bigkernel.numerics.cv import cv_path, subtract
from bigkernel.numerics.fourier_features import make_feature_map
from bigkernel.numerics.primal import solve_primal
from bigkernel.numerics.splits import FoldSplit, HoldoutSplit
from bigkernel.numerics.sums import block_stats
from tests._tolerance import assert_forward_close, primal_cond
from tests.conftest import friedman

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set


def test_fold_assignment_is_chunk_invariant_and_balanced():
    f = FoldSplit(seed=3, n_groups=5)
    whole = f.groups(0, 100_000)
    parts = np.concatenate([f.groups(a, min(a + 7919, 100_000)) for a in range(0, 100_000, 7919)])
    np.testing.assert_array_equal(whole, parts)
    np.testing.assert_allclose(np.bincount(whole) / 1e5, 0.2, atol=0.01)
    # independent of the holdout hash with the same seed
    hold = HoldoutSplit(3, 0.2).groups(0, 100_000)
    assert abs(np.mean(whole[hold == 1] == 0) - 0.2) < 0.02


def test_partition_stats_equal_stats_of_selected_rows():
    X, y = friedman(5000, seed=1)
    fmap = make_feature_map("rbf", 10, 32, seed=0, gamma=0.5)
    split = FoldSplit(seed=0, n_groups=4)
    folds = block_stats(fmap, X, y[:, None], 0, weights=split, block_rows=1024)
    g = split.groups(0, 5000)
    for k in range(4):
        direct = block_stats(fmap, X[g == k], y[g == k, None], 0)
        for f in ("n", "sum_phi", "sum_y", "sum_yy", "gram", "phi_y"):
            np.testing.assert_allclose(getattr(folds.select(k), f), getattr(direct, f), rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_cv_from_sums_equals_direct_refits(fit_intercept):
    X, y = friedman(3000, seed=2)
    fmap = make_feature_map("rbf", 10, 64, seed=1, gamma=0.5)
    split = FoldSplit(seed=5, n_groups=5)
    folds = block_stats(fmap, X, y[:, None], 0, weights=split, block_rows=512)
    alphas = np.array([1e-2, 1.0, 100.0])
    path = cv_path(folds, alphas, fit_intercept)
    g = split.groups(0, 3000)
    for k in range(5):
        tr, va = g != k, g == k
        # the fold's training system from sums equals fitting the complement directly
        direct_stats = block_stats(fmap, X[tr], y[tr, None], 0)
        np.testing.assert_allclose(
            subtract(folds.total(), folds.select(k)).gram, direct_stats.gram, rtol=1e-9, atol=1e-8
        )
        for a_i, a in enumerate(alphas):
            sol = solve_primal(direct_stats, a, fit_intercept)
            pred = fmap.transform(X[va]) @ sol.coef[:, 0] + sol.intercept[0]
            sse = np.sum((y[va] - pred) ** 2)
            assert path.sse[k, a_i, 0] == pytest.approx(sse, rel=1e-6)
    assert path.mse().shape == (5, 3) and np.all(path.r2() < 1)


from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import bigkernel  # noqa: E402
from bigkernel import RandomFeatureRidge, RandomFeatureRidgeCV  # noqa: E402


@parametrize_with_checks([RandomFeatureRidgeCV(n_components=32, cv=3), RandomFeatureRidgeCV(cv="gcv", n_components=16)])
def test_cv_estimator_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.mark.parametrize("cv", [5, "gcv"])
def test_chosen_point_within_2_percent_of_brute_force(cv):
    X, y = friedman(6000, seed=11)
    Xt, yt = friedman(3000, seed=12)
    gammas, alphas = [0.02, 0.1, 0.5, 2.0], [1e-4, 1e-2, 1.0, 100.0]
    m = RandomFeatureRidgeCV(gammas=gammas, alphas=alphas, cv=cv, n_components=200, random_state=0).fit(X, y)
    rmse = lambda est: np.sqrt(np.mean((est.predict(Xt) - yt) ** 2))
    brute = min(rmse(RandomFeatureRidge(gamma=g, alpha=a, n_components=200, random_state=0).fit(X, y))
                for g in gammas for a in alphas)  # fmt: skip
    assert rmse(m) <= 1.02 * brute
    assert len(m.cv_results_["params"]) == 16 and m.cv_results_["rank_test_score"].min() == 1
    # the refit from total sums equals a plain fit at the chosen point: both solve
    # (ΦᵀΦ + αI)β = Φᵀy, from sums added in another order (fold by fold), so they agree to
    # cond·ε (cond = 6.6e5 at the chosen α = 1e-4), and the predictions to that times
    # ‖Φₜ‖‖β‖/‖Φₜβ‖ (an rtol=1e-8 on each prediction measured 0.016-0.028 of itself)
    ref = RandomFeatureRidge(gamma=m.gamma_, alpha=m.alpha_, n_components=200, random_state=0).fit(X, y)
    cond = primal_cond(ref, X)
    assert_forward_close(m.coef_, ref.coef_, cond)
    Pt, pred = ref.feature_map_.transform(Xt), ref.predict(Xt)
    gain = np.linalg.norm(Pt, 2) * np.linalg.norm(ref.coef_) / np.linalg.norm(pred - ref.intercept_)
    assert_forward_close(m.predict(Xt) - ref.intercept_, pred - ref.intercept_, cond * gain)


def test_cv_scores_equal_direct_fold_refits():
    X, y = friedman(2000, seed=13)
    m = RandomFeatureRidgeCV(gammas=[0.1, 0.5], alphas=[0.01, 1.0], cv=4, n_components=64, random_state=3).fit(X, y)
    g = FoldSplit(3, 4).groups(0, 2000)
    for i, p in enumerate(m.cv_results_["params"]):
        mses = []
        for k in range(4):
            est = RandomFeatureRidge(
                gamma=p["gamma"], alpha=p["alpha"], n_components=64, random_state=3, dtype="float64"
            )
            est.fit(X[g != k], y[g != k])
            mses.append(np.mean((est.predict(X[g == k]) - y[g == k]) ** 2))
        assert m.cv_results_["mean_test_score"][i] == pytest.approx(-np.mean(mses), rel=1e-6)


def test_cv_model_round_trip(tmp_path):
    X, y = friedman(1000, seed=14)
    m = RandomFeatureRidgeCV(gammas=[0.1, 0.5], cv=3, n_components=32, random_state=0).fit(X, y)
    back = bigkernel.load(m.save(tmp_path / "cv.zarr"))
    assert type(back) is RandomFeatureRidgeCV
    np.testing.assert_array_equal(back.predict(X[:20]), m.predict(X[:20]))


def test_gamma_list_and_alpha_cv_through_the_job(tmp_path):
    from bigkernel.cli import main

    job = tmp_path / "job.yaml"
    job.write_text(
        "name: cv\noutput: out\ndata:\n  make: {kind: friedman1, n_samples: 20000, path: d.zarr}\n"
        "model:\n  gamma: [0.1, 0.5]\n  alpha: cv\n  cv: 3\n  n_components: 64\n"
        "cluster:\n  local: {n_workers: 1, threads_per_worker: 1}\nplots: false\n"
    )
    assert main(["-q", "run", str(job)]) == 0
    import json

    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["search"]["cv"] == 3 and m["search"]["n_candidates"] == 2 * 20
    assert m["search"]["best_params"]["gamma"] in (0.1, 0.5)


def test_scores_below_their_rounding_error_are_never_chosen():
    """float32 sums, near-collinear features (small γ) and tiny α: the validation error from sums
    is a difference of huge terms. Those points must be flagged (-inf), and every point not
    flagged must agree with a direct refit — found at n=1M, D=1024, where the unflagged search
    picked α=1e-6 with a holdout RMSE of 30.8 (noise sd 1)."""
    X, y = friedman(20_000, seed=21)
    alphas = list(np.logspace(-9, 1, 6))
    m = RandomFeatureRidgeCV(gammas=[0.02], alphas=alphas, cv=3, n_components=128, dtype="float32", random_state=0).fit(
        X, y
    )
    scores = m.cv_results_["mean_test_score"]
    assert np.isinf(scores).any() and np.isfinite(scores).any()
    g = FoldSplit(0, 3).groups(0, len(y))
    for a, score in zip(alphas, scores):
        if not np.isfinite(score):
            continue
        mses = []
        for k in range(3):
            est = RandomFeatureRidge(gamma=0.02, alpha=a, n_components=128, random_state=0).fit(X[g != k], y[g != k])
            mses.append(np.mean((est.predict(X[g == k]) - y[g == k]) ** 2))
        # a score is kept when it exceeds 10× its rounding-error estimate, so it is promised to
        # ~10 %, not 5 %: at α = 1e-3 the float32 sums, rounded by OpenBLAS's sgemm, gave 1.6 %
        # with SkylakeX kernels and 0.09 % with Haswell's (points below the floor are flagged -inf)
        assert -score == pytest.approx(np.mean(mses), rel=0.1)
    assert m.alpha_ in [a for a, s in zip(alphas, scores) if np.isfinite(s)]


def test_gcv_unreliable_points_are_inf():
    from bigkernel.numerics.primal import eigen_path
    from bigkernel.numerics.sums import sums_precision

    X, y = friedman(20_000, seed=22)
    fmap = make_feature_map("rbf", 10, 128, seed=0, gamma=0.02)
    st = block_stats(fmap, X, y[:, None], 0, dtype="float32")
    path = eigen_path(st, True, sums_precision("float32"))
    gcv = path.gcv(np.array([1e-12, 1.0]))[:, 0]
    assert np.isinf(gcv[0]) and np.isfinite(gcv[1])
