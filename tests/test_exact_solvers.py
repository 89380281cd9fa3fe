"""Nyström features, the approximate solvers against the exact one, solver choice
(KernelRidge / solver: auto) and YAML jobs running every solver through the CLI."""

import json
import logging
import textwrap

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone

import bigkernel
from bigkernel import ExactKernelRidge, ExactKernelRidgeCV, KernelRidge, NystroemRidge, RandomFeatureRidge
from bigkernel.cli import main
from bigkernel.data.synthetic import SyntheticSpec, make_data
from bigkernel.errors import ParameterError
from bigkernel.kernels import RBF, Polynomial
from bigkernel.models.kernel_ridge import NYSTROEM_MAX_N
from bigkernel.numerics.nystroem_features import NystroemMap, select_landmarks
from bigkernel.solvers.base import Solver
from bigkernel.solvers.budget import solver_rule as choose_solver
from bigkernel.solvers.exact import ExactSolver, ExactSpec
from bigkernel.solvers.exact_cv import ExactCVSolver, ExactCVSpec
from tests.conftest import friedman

GB = 10**9


def _rel(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b**2)))


@pytest.fixture(scope="module")
def smooth_problem():
    """n = 2000 Friedman #1 rows, a smooth rbf fit (γ = 0.1, α = 1) and its exact predictions."""
    X, y = friedman(2000, seed=1)
    Xt, _ = friedman(1000, seed=2)
    exact = ExactKernelRidge(gamma=0.1, alpha=1.0, tol=1e-10, random_state=0).fit(X, y)
    return X, y, Xt, exact.predict(Xt)


@pytest.mark.numerics
def test_nystroem_map_reproduces_the_kernel_on_its_landmarks(rng):
    Z = rng.normal(size=(50, 3))
    fmap = NystroemMap.from_landmarks(RBF(gamma=0.3), Z)
    phi = fmap.transform_unscaled(Z)
    np.testing.assert_allclose(phi @ phi.T, RBF(gamma=0.3)(Z), atol=1e-8)
    X = rng.normal(size=(20, 3))
    assert fmap.transform_unscaled(X, np.float32).dtype == np.float32


@pytest.mark.numerics
def test_rpcholesky_landmarks_beat_uniform_at_the_same_m(rng):
    """Clustered data: pivots follow the residual, so small clusters get landmarks."""
    centres = rng.normal(scale=6.0, size=(12, 2))
    sizes = [1500] + [30] * 11
    X = np.vstack([c + rng.normal(scale=0.3, size=(s, 2)) for c, s in zip(centres, sizes)])
    k = RBF(gamma=1.0)
    K = k(X)
    errs = {}
    for method in ("uniform", "rpcholesky"):
        e = []
        for seed in range(3):
            pool = X[np.random.default_rng(seed).permutation(len(X))]
            Z = select_landmarks(k, pool, 24, method, random_state=seed)
            phi = NystroemMap.from_landmarks(k, Z).transform_unscaled(X)
            e.append(np.trace(K - phi @ phi.T))
        errs[method] = np.mean(e)
    assert errs["rpcholesky"] < 0.5 * errs["uniform"]


@pytest.mark.numerics
def test_random_features_and_nystroem_approach_the_exact_solution(smooth_problem):
    X, y, Xt, exact = smooth_problem
    rff = [_rel(RandomFeatureRidge(gamma=0.1, alpha=1.0, n_components=D, form="cossin", random_state=0)
                .fit(X, y).predict(Xt), exact) for D in (64, 256, 1024)]  # fmt: skip
    nys = [_rel(NystroemRidge(gamma=0.1, alpha=1.0, n_components=m, random_state=0).fit(X, y).predict(Xt), exact)
           for m in (16, 64, 256)]  # fmt: skip
    assert rff == sorted(rff, reverse=True) and rff[-1] <= 0.02
    assert nys == sorted(nys, reverse=True) and nys[-1] <= 0.02


@pytest.mark.slow  # the default suite: the same 2 % at D = 1024 and M = 256 (the test above)
def test_random_features_and_nystroem_within_two_percent_at_d_4096(smooth_problem):
    """The issue's criterion (~9 s here: two 4096-feature eigendecompositions)."""
    X, y, Xt, exact = smooth_problem
    rff = RandomFeatureRidge(gamma=0.1, alpha=1.0, n_components=4096, form="cossin", random_state=0).fit(X, y)
    nys = NystroemRidge(gamma=0.1, alpha=1.0, n_components=4096, random_state=0).fit(X, y)
    assert _rel(rff.predict(Xt), exact) <= 0.02
    assert _rel(nys.predict(Xt), exact) <= 0.02


@pytest.mark.numerics
def test_nystroem_numpy_dask_and_persistence(tmp_path):
    X, y = friedman(3000, seed=3)
    kw = dict(kernel=Polynomial(degree=2, gamma=0.1), n_components=80, alpha="gcv", random_state=5)
    a = NystroemRidge(**kw).fit(X, y)
    b = NystroemRidge(**kw).fit(da.from_array(X, chunks=(1000, 10)), da.from_array(y, chunks=1000))
    np.testing.assert_array_equal(a.feature_map_.landmarks, b.feature_map_.landmarks)
    assert a.alpha_ == pytest.approx(b.alpha_, rel=1e-9)  # the "gcv" grid scales with the sums
    # same model up to the rounding of sums over different chunkings
    np.testing.assert_allclose(a.predict(X[:100]), b.predict(X[:100]), rtol=1e-7)
    back = bigkernel.load(a.save(tmp_path / "n.zarr"))
    assert isinstance(back, NystroemRidge)
    np.testing.assert_array_equal(back.predict(X[:100]), a.predict(X[:100]))
    lazy = back.predict(da.from_array(X[:100], chunks=(40, 10)))
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), a.predict(X[:100]), rtol=1e-12)


# ------------------------------------------------------------------ solver choice
def test_choose_solver_rules():
    solver, why = choose_solver(5000, 10, "rbf", 8 * GB)
    assert solver == "exact" and "cached" in why
    solver, why = choose_solver(200_000, 10, "rbf", 2 * GB)
    assert solver == "nystroem" and "does not fit" in why
    solver, why = choose_solver(NYSTROEM_MAX_N + 1, 10, "rbf", 2 * GB)
    assert solver == "random_features" and "one streamed pass" in why
    solver, why = choose_solver(NYSTROEM_MAX_N + 1, 10, "sigmoid", 2 * GB)
    assert solver == "nystroem" and "no random-feature sampler" in why
    # float32 tiles when only those fit; below that, the approximate path
    assert choose_solver(20_000, 10, "rbf", 1.5 * GB)[0] == "exact"
    assert choose_solver(20_000, 10, "rbf", 0.5 * GB)[0] == "nystroem"


@pytest.mark.parametrize(
    "budget,solver",
    [("2GB", "exact"), ("4MB", "nystroem")],
)
def test_kernel_ridge_picks_logs_and_exposes_the_solver(budget, solver, caplog):
    X, y = friedman(1500, seed=4)
    with caplog.at_level(logging.INFO, logger="bigkernel"):
        m = KernelRidge(gamma=0.5, alpha=0.1, memory_budget=budget, n_components=128, random_state=0).fit(X, y)
    assert m.solver_ == solver and isinstance(m.estimator_, (ExactKernelRidge, NystroemRidge))
    assert f"solver {solver}" in caplog.text and m.solver_reason_ in caplog.text
    np.testing.assert_array_equal(m.predict(X[:10]), m.estimator_.predict(X[:10]))


def test_kernel_ridge_forced_solvers_and_round_trip(tmp_path):
    X, y = friedman(1200, seed=5)
    preds = {}
    for solver in ("exact", "nystroem", "random_features"):
        m = KernelRidge(gamma=0.3, alpha=0.5, solver=solver, n_components=512, random_state=0).fit(X, y)
        assert m.solver_ == solver
        back = bigkernel.load(m.save(tmp_path / f"{solver}.zarr"))
        assert isinstance(back, KernelRidge) and back.solver_ == solver
        np.testing.assert_array_equal(back.predict(X[:50]), m.predict(X[:50]))
        preds[solver] = m.predict(X[:300])
    assert _rel(preds["nystroem"], preds["exact"]) < 0.01
    assert _rel(preds["random_features"], preds["exact"]) < 0.05
    with pytest.raises(ParameterError, match="no random-feature sampler"):
        KernelRidge("sigmoid", solver="random_features").fit(X, y)


# ------------------------------------------------------------------ jobs
JOB = """\
name: {solver}
output: out_{solver}
data:
  train: {{path: {data}}}
  holdout_fraction: 0.25
  chunk_rows: 1024
model:
  solver: {solver}
  kernel: {kernel}
  gamma: 0.5
  alpha: {alpha}
  n_components: 128
  memory_budget: {budget}
predict: {{path: {data}, output: pred.zarr}}
cluster:
  local: {{n_workers: 1, threads_per_worker: 2}}
progress: false
plots: false
"""


@pytest.fixture(scope="module")
def job_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("exact_jobs")
    make_data(SyntheticSpec("friedman1", 4000, 10, 1.0, 0), d / "train.zarr", chunk_rows=1024)
    return d


@pytest.mark.parametrize(
    "solver,kernel,alpha,budget,expect",
    [("exact", "rbf", "1.0e-2", "null", "exact"), ("nystroem", "polynomial", "gcv", "null", "nystroem"),
     ("random_features", "rbf", "[0.01, 0.1]", "null", "random_features"),
     ("auto", "rbf", "1.0e-2", "4GB", "exact"), ("auto", "rbf", "1.0e-2", "8MB", "nystroem")],
)  # fmt: skip
def test_yaml_jobs_run_every_solver_through_the_cli(solver, kernel, alpha, budget, expect, job_data, tmp_path):
    cfg = tmp_path / "job.yaml"
    cfg.write_text(textwrap.dedent(JOB.format(solver=solver, kernel=kernel, alpha=alpha, budget=budget,
                                              data=job_data / "train.zarr")))  # fmt: skip
    assert main(["-q", "run", str(cfg)]) == 0
    out = tmp_path / f"out_{solver}"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"]["solver"] == expect
    assert 0.6 < metrics["scores"]["holdout"]["r2"] < 1.0
    model = bigkernel.load(out / "model.zarr")
    assert getattr(model, "solver_", expect) == expect
    if expect == "exact":
        assert metrics["model"]["n_iter"] and metrics["model"]["solver_info"]["gram"]["cached_fraction"] == 1.0
    if solver == "auto":
        assert "memory budget" in metrics["model"]["solver_reason"]
    assert "model:" in (out / "summary.txt").read_text()


MINIMAL_JOB = "output: runs/job\ndata:\n  train: {path: data/train.zarr}\nmodel:\n"


@pytest.mark.parametrize(
    "model,key,words",
    [("{solver: random_features, kernel: sigmoid}", "model.kernel", "no random-feature sampler"),
     ("{solver: exact, kernel: fourier}", "model.kernel", "use solver random_features"),
     ("{solver: nystroem, alpha: cv}", "model.solver", "random_features and exact only"),
     ("{solver: exact, memory_budget: lots}", "model.memory_budget", "a size such as '8GB'"),
     ("{solver: exact, tol: 2.0}", "model.tol", "< 1"),
     ("{solver: exact, preconditioner: ilu}", "model.preconditioner", "'rpcholesky'"),
     ("{solver: nystroem, landmarks: kmeans}", "model.landmarks", "'uniform'")],
)  # fmt: skip
def test_config_rejects_what_a_solver_lacks(model, key, words, tmp_path):
    from bigkernel.errors import ConfigError
    from bigkernel.jobs.config import load_config

    p = tmp_path / "job.yaml"
    p.write_text(MINIMAL_JOB.replace("model:\n", f"model: {model}\n"))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert key in str(err.value) and words in str(err.value)


def test_config_reads_the_exact_solver_keys_and_takes_bootstrap_with_them(tmp_path):
    from bigkernel.jobs.config import load_config
    from bigkernel.jobs.runner import build_estimator

    p = tmp_path / "job.yaml"
    p.write_text(
        MINIMAL_JOB.replace(
            "model:\n",
            "model: {solver: exact, kernel: polynomial, degree: 2, coef0: 0.5, "
            "tol: 1.0e-8, max_iter: 50, preconditioner: none, rank: 64, "
            "memory_budget: 2GB, gram_dtype: float32, n_probes: 4}\n",
        )
    )
    est = build_estimator(load_config(p))
    assert isinstance(est, ExactKernelRidge)
    assert (
        est.degree,
        est.coef0,
        est.tol,
        est.max_iter,
        est.preconditioner,
        est.rank,
        est.memory_budget,
        est.dtype,
        est.n_probes,
    ) == (2, 0.5, 1e-8, 50, None, 64, "2GB", "float32", 4)
    boot = "bootstrap: {n_bootstraps: 10, eval_grid: {feature: 0, n_points: 10}}\n"
    p.write_text(MINIMAL_JOB.replace("model:\n", "model: {solver: exact}\n") + boot)
    cfg = load_config(p)  # every solver has a bootstrap plan (tests/test_bootstrap_solvers.py)
    assert cfg.model.solver == "exact" and cfg.bootstrap.n_bootstraps == 10


# ---------------------------------------------------------------- the exact solvers' saved state
def _same_state(a, b):
    """Two saved states are the same: JSON attributes (key order included) and arrays (values,
    dtypes, shapes, order)."""
    assert json.dumps(a[0]) == json.dumps(b[0])
    assert list(a[1]) == list(b[1])
    for k in a[1]:
        assert a[1][k].dtype == b[1][k].dtype and a[1][k].shape == b[1][k].shape, k
        np.testing.assert_array_equal(a[1][k], b[1][k], err_msg=k)


def test_exact_solvers_satisfy_the_solver_protocol():
    assert isinstance(ExactSolver(ExactSpec()), Solver)
    assert isinstance(ExactCVSolver(ExactCVSpec()), Solver)


@pytest.mark.parametrize("case", ["weighted_evidence", "multi_standardized", "precomputed", "cv", "cv_precomputed"])
def test_exact_solver_state_round_trips_to_identical_predictions(case, rng):
    """``from_state`` then ``state`` gives back the estimator's saved state, and an estimator
    set from it predicts bitwise as the fitted one."""
    X = rng.normal(size=(80, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=80)
    K = RBF(gamma=0.3)(X)
    est, fit_args, Z = {
        "weighted_evidence": (ExactKernelRidge(gamma=0.3, alpha="evidence", random_state=0),
                              (X, y, rng.uniform(0.5, 2.0, size=80)), X[:10]),
        "multi_standardized": (ExactKernelRidge(gamma=0.3, alpha=[0.1, 1.0], standardize=True, random_state=0),
                               (3 * X + 1, np.c_[y, X[:, 1]]), X[:10]),
        "precomputed": (ExactKernelRidge("precomputed", random_state=0), (K, y), K[:10]),
        "cv": (ExactKernelRidgeCV(gammas=[0.1, 0.3], standardize=True, criterion="evidence"), (X, y), X[:10]),
        "cv_precomputed": (ExactKernelRidgeCV("precomputed", criterion="gcv"), (K, y), K[:10]),
    }[case]  # fmt: skip
    est.fit(*fit_args)
    saved = est.get_model_state()
    solver = (ExactCVSolver if isinstance(est, ExactKernelRidgeCV) else ExactSolver).from_params(est.get_params())
    fixed, solution = solver.from_state(*saved)
    again = solver.state(fixed, solution)
    _same_state(saved, again)
    loaded = clone(est)
    loaded.set_model_state(*again)
    np.testing.assert_array_equal(loaded.predict(Z), est.predict(Z))
    _same_state(loaded.get_model_state(), saved)
