"""The one-pass primal solvers behind the random-feature and Nyström estimators (issue 20):
they implement the declared Solver interface, the estimators are shells over them (the same
numbers), their saved state round-trips, and solvers/ does not reach up into models/."""

import ast
import os

import numpy as np
import pytest

from bigkernel import NystroemRidge, RandomFeatureRidge, RandomFeatureRidgeCV
from bigkernel.data.sources import as_dataset
from bigkernel.solvers.base import ReplicatePlan, Solution, Solver
from bigkernel.solvers.nystroem import NystroemSolver
from bigkernel.solvers.primal import PrimalFit
from bigkernel.solvers.random_features import RandomFeatureSolver
from bigkernel.solvers.random_features_cv import RandomFeatureCVSolver, SearchResult

SOLVERS = os.path.join(os.path.dirname(__file__), os.pardir, "bigkernel", "solvers")


def _data(n=240, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize(
    "est, solver_cls",
    [
        (RandomFeatureRidge(n_components=40, random_state=0, alpha="gcv", standardize=True), RandomFeatureSolver),
        (NystroemRidge(n_components=30, random_state=1, alpha=0.1), NystroemSolver),
    ],
)
def test_the_solver_fits_what_the_estimator_fits(est, solver_cls):
    X, y = _data()
    ds = as_dataset(X, y)
    solver = solver_cls.from_params(est.get_params())
    assert isinstance(solver, Solver)
    fixed = solver.prepare(ds)
    sol = solver.fit(fixed, ds)
    assert isinstance(sol, Solution) and isinstance(sol.details, PrimalFit)
    est.fit(X, y)
    np.testing.assert_allclose(sol.coef[:, 0], est.coef_, rtol=1e-12, atol=1e-14)
    assert sol.alpha == est.alpha_ and sol.details.n_samples == est.n_samples_fit_
    # the saved state reads back to the same coefficients and map
    attrs, arrays = solver.state(fixed, sol)
    fixed2, sol2 = solver.from_state(attrs, arrays)
    np.testing.assert_array_equal(sol2.coef, sol.coef)
    np.testing.assert_array_equal(fixed2.fmap.transform(X[:5]), fixed.fmap.transform(X[:5]))


def test_the_search_solver_carries_its_table():
    X, y = _data()
    est = RandomFeatureRidgeCV(n_components=30, random_state=0, cv=3, gammas=[0.1, 1.0], alphas=[1e-3, 1e-1])
    solver = RandomFeatureCVSolver.from_params(est.get_params())
    ds = as_dataset(X, y)
    sol = solver.fit(solver.prepare(ds), ds)
    found = sol.details
    assert isinstance(found, SearchResult) and len(found.cv_results["params"]) == 4
    est.fit(X, y)
    assert found.gamma == est.gamma_ and sol.alpha == est.alpha_
    np.testing.assert_array_equal(found.cv_results["mean_test_score"], est.cv_results_["mean_test_score"])


def test_replicate_plan_is_public_and_refuses_an_unfitted_search():
    X, y = _data()
    ds = as_dataset(X, y)
    plan = RandomFeatureRidge(n_components=20, random_state=0).replicate_plan(ds, X[:4], seed_entropy=1)
    assert isinstance(plan, ReplicatePlan) and plan.n_coef == 21 and plan.fingerprint["fitted"] is False
    with pytest.raises(Exception, match="needs a fitted RandomFeatureRidgeCV"):
        RandomFeatureRidgeCV().replicate_plan(ds, X[:4], seed_entropy=1)


def test_solvers_do_not_import_the_layers_above():
    for name in sorted(os.listdir(SOLVERS)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(SOLVERS, name)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            for mod in mods:
                assert not mod.startswith(("bigkernel.models", "bigkernel.bands", "bigkernel.jobs")), (name, mod)
