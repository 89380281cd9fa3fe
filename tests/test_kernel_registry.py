"""The kernel registry is the one source of kernel names, parameters and paths.

Every reader — make_kernel, the random-feature maps, the estimators, the job config, the error
messages and the README's table — must agree with bigkernel/kernels/registry.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

from bigkernel import (
    ExactKernelRidge,
    ExactKernelRidgeCV,
    KernelRidge,
    NystroemRidge,
    RandomFeatureRidge,
    RandomFeatureRidgeCV,
)
from bigkernel.errors import ParameterError
from bigkernel.jobs.config import JOB_KERNELS, Solver, load_config
from bigkernel.kernels import KERNEL_NAMES, Matern, kernel_table_markdown, make_kernel
from bigkernel.kernels.factory import kernel_class
from bigkernel.kernels.registry import (
    KERNELS,
    PATH_ESTIMATORS,
    PATHS,
    check_kernel_name,
    gamma_from_length_scale,
    kernel_names,
    kernel_spec,
    kernels_searching,
    kernels_serving,
    length_scale_from_gamma,
)
from bigkernel.numerics.fourier_features import make_feature_map
from bigkernel.numerics.polynomial_features import make_polynomial_map
from tests._yaml import error_of, with_model

ROOT = Path(__file__).resolve().parents[1]


def _kernel_params(name: str, gamma: float, nu: float | None = None) -> dict:
    """gamma (and nu for kernels that take one) as keyword arguments."""
    params = {"gamma": gamma} if "gamma" in kernel_spec(name).param_names() else {}
    if nu is not None and "nu" in kernel_spec(name).param_names():
        params["nu"] = nu
    return params


def test_registry_holds_the_rules_that_were_spread_over_the_code():
    """The table says what the separate lists said before it (behaviour unchanged)."""
    # issue 13 added polynomial features on the streamed path and scikit-learn's cosine, chi2
    # and additive_chi2 (every name of sklearn.metrics.pairwise.PAIRWISE_KERNEL_FUNCTIONS)
    assert kernels_serving("random_features") == ("rbf", "laplacian", "matern", "fourier", "polynomial")
    pairwise = ("cosine", "chi2", "additive_chi2")
    assert (
        KERNEL_NAMES
        == kernels_serving("exact")
        == kernels_serving("nystroem")
        == ("rbf", "laplacian", "matern", "polynomial", "linear", "sigmoid", *pairwise, "periodic", "constant")
    )
    assert JOB_KERNELS == (
        "rbf", "laplacian", "matern", "fourier", "polynomial", "linear", "sigmoid", *pairwise, "periodic",
    )  # fmt: skip
    assert kernels_searching("exact", "gamma") == ("rbf", "laplacian", "matern", "polynomial", "sigmoid", "chi2")
    assert kernels_searching("exact", "length_scale") == ("rbf", "laplacian", "matern")
    assert kernels_searching("random_features", "gamma") == ("rbf", "laplacian", "matern", "polynomial")
    assert kernel_spec("matern").param("nu").choices == (0.5, 1.5, 2.5)
    assert [s.name for s in KERNELS if s.default_gamma] == ["rbf", "laplacian", "matern", "polynomial", "sigmoid"]
    assert {a: s.name for s in KERNELS for a in s.aliases} == {
        "gaussian": "rbf",
        "poly": "polynomial",
        "exp_sine_squared": "periodic",
    }
    assert [s.name for s in KERNELS if "orthogonal" in s.samplers] == ["rbf"]


# --- the exact path: every name constructs, the classes declare the registry's parameters ----


@pytest.mark.parametrize("name", kernels_serving("exact"))
def test_every_exact_kernel_of_the_registry_constructs_under_each_of_its_names(name):
    X = np.random.default_rng(0).uniform(size=(6, 2))  # non-negative: chi2 and additive_chi2 need it
    with pytest.warns(UserWarning) if name == "sigmoid" else contextlib.nullcontext():
        k = make_kernel(name, n_features=2)
        aliases = [make_kernel(n, n_features=2) for n in (name.upper(), *kernel_spec(name).aliases)]
    assert type(k) is kernel_class(name) and k.name == name and k.to_dict()["name"] == name
    assert all(a == k for a in aliases)
    K = k(X)
    assert K.shape == (6, 6) and np.all(np.isfinite(K))
    np.testing.assert_allclose(np.diag(K), k.diag(X), rtol=1e-12)


@pytest.mark.parametrize("spec", [s for s in KERNELS if "exact" in s.paths], ids=lambda s: s.name)
def test_classes_declare_exactly_the_registry_parameters_and_defaults(spec):
    cls = kernel_class(spec.name)
    stored = {f.name: f for f in dataclasses.fields(cls) if f.init}
    # every class field is a registry parameter; every registry parameter is a field or the
    # other spelling of a bandwidth the registry converts
    assert set(stored) <= set(spec.param_names("exact"))
    for p in spec.param_names("exact"):
        assert p in stored or (p in ("gamma", "length_scale") and spec.bandwidth_rule is not None), p
    for p in spec.params:
        if p.name in stored and isinstance(p.default, (int, float)):
            assert stored[p.name].default == p.default, (spec.name, p.name)


def test_estimator_defaults_are_the_registry_defaults():
    owners = {"degree": "polynomial", "coef0": "polynomial", "nu": "matern"}
    assert kernel_spec("sigmoid").param("coef0").default == kernel_spec("polynomial").param("coef0").default
    checked = 0
    for est in (
        ExactKernelRidge,
        ExactKernelRidgeCV,
        NystroemRidge,
        KernelRidge,
        RandomFeatureRidge,
        RandomFeatureRidgeCV,
    ):
        signature = inspect.signature(est.__init__).parameters
        for param, kernel in owners.items():
            if param in signature:
                assert signature[param].default == kernel_spec(kernel).param(param).default, (est, param)
                checked += 1
    assert checked >= 10


def test_matern_nu_values_are_the_registry_choices_on_every_path():
    choices = kernel_spec("matern").param("nu").choices
    for nu in choices:
        assert Matern(1.0, nu).nu == nu
        assert make_feature_map("matern", 2, 8, 0, nu=nu).params["nu"] == nu
    for bad in (2.0, True, "1.5"):
        with pytest.raises(ParameterError, match=r"nu must be one of \(0.5, 1.5, 2.5\)"):
            Matern(1.0, bad)
        with pytest.raises(ParameterError, match="nu must be one of"):
            make_feature_map("matern", 2, 8, 0, nu=bad)
        with pytest.raises(ParameterError, match="nu must be one of"):
            RandomFeatureRidge("matern", nu=bad, n_components=8).fit(np.ones((4, 2)), np.ones(4))


# --- the random-feature path: every served kernel has a sampler ------------------------------


@pytest.mark.parametrize("name", kernels_serving("random_features"))
def test_every_random_feature_kernel_has_a_sampler_matching_its_exact_kernel(name):
    if "exact" not in kernel_spec(name).paths:  # the fixed Fourier basis: a 1-D map, no k(x, y)
        fmap = make_feature_map(name, 1, 8, seed=0)
        assert fmap.kernel == name and fmap.transform(np.zeros((3, 1))).shape == (3, 8)
        return
    X = np.random.default_rng(1).uniform(size=(50, 3))
    if name == "polynomial":  # no spectral sampler: the monomial map, or TensorSketch when it does not fit
        K = make_kernel(name, gamma=0.5)(X)
        assert make_polynomial_map(3, 4096, 0, gamma=0.5).method == "explicit"
        errors = []
        for seed in range(3):
            phi = make_polynomial_map(3, 4096, seed, gamma=0.5, method="tensorsketch").transform(X)
            errors.append(np.abs(phi @ phi.T - K).mean() / np.abs(K).mean())
        assert np.mean(errors) < 0.03, errors
        return
    for nu in kernel_spec(name).param("nu").choices if "nu" in kernel_spec(name).param_names() else (None,):
        params = _kernel_params(name, 0.5, nu)
        K = make_kernel(name, **params)(X)  # the same gamma means the same kernel on both paths
        errors = []
        for seed in range(3):
            phi = make_feature_map(name, 3, 4096, seed, **params).transform(X)
            errors.append(np.abs(phi @ phi.T - K).mean())
        assert np.mean(errors) < 0.03, (name, nu, errors)


@pytest.mark.parametrize(
    "name", [n for n in kernel_names() if "random_features" in kernel_spec(n).paths and kernel_spec(n).bandwidth_rule]
)
def test_gamma_and_length_scale_are_one_bandwidth_on_both_paths(name):
    ell = 1.7
    gamma = gamma_from_length_scale(name, ell)
    assert length_scale_from_gamma(name, gamma) == pytest.approx(ell, rel=1e-15)
    X = np.random.default_rng(2).normal(size=(5, 2))
    np.testing.assert_allclose(make_kernel(name, length_scale=ell)(X), make_kernel(name, gamma=gamma)(X), rtol=1e-13)
    a = make_feature_map(name, 2, 16, 0, length_scale=ell).transform(X)
    np.testing.assert_allclose(a, make_feature_map(name, 2, 16, 0, gamma=gamma).transform(X), rtol=1e-13)


# --- errors name the kernel, the path, and the paths that can serve it ------------------------


@pytest.mark.parametrize(("name", "path"), [(s.name, p) for s in KERNELS for p in PATHS if p not in s.paths])
def test_the_error_for_a_path_that_cannot_serve_a_kernel_names_the_paths_that_can(name, path):
    with pytest.raises(ParameterError) as err:
        check_kernel_name(name, path)
    message = str(err.value)
    assert f"kernel {name!r}" in message and f"the {path} path" in message
    for other in kernel_spec(name).paths:
        assert f"the {other} path ({PATH_ESTIMATORS[other]})" in message
    assert ", ".join(kernels_serving(path)) in message


def test_the_public_entry_points_raise_the_registry_error():
    X, y = np.random.default_rng(3).normal(size=(20, 2)), np.ones(20)
    cases = [
        (lambda: make_kernel("fourier"), "the random_features path"),
        (lambda: make_feature_map("cosine", 2, 8, 0), "the nystroem path (NystroemRidge) or the exact path"),
        (lambda: RandomFeatureRidge("sigmoid", n_components=8).fit(X, y), "the nystroem path"),
        (lambda: KernelRidge("periodic", solver="random_features").fit(X, y), "the exact path"),
        (lambda: ExactKernelRidge("fourier").fit(X, y), "the random_features path"),
    ]
    for call, words in cases:
        with pytest.raises(ParameterError, match="cannot serve it") as err:
            call()
        assert words in str(err.value)


def test_unknown_names_get_a_did_you_mean_on_every_path():
    for path in PATHS:
        with pytest.raises(ParameterError, match="did you mean 'laplacian'"):
            check_kernel_name("laplacien", path)
    with pytest.raises(ParameterError, match="did you mean 'gaussian'"):
        make_kernel("gausian", gamma=1.0)
    with pytest.raises(ParameterError, match="kernel name"):
        check_kernel_name(Matern(), "random_features")


# --- aliases resolve on every path ------------------------------------------------------------


def test_aliases_and_case_mean_the_same_kernel_on_every_path():
    X = np.random.default_rng(4).normal(size=(60, 2))
    y = np.sin(X[:, 0]) + 0.1 * X[:, 1]
    a = RandomFeatureRidge("Gaussian", gamma=0.5, n_components=32, random_state=0).fit(X, y)
    b = RandomFeatureRidge("rbf", gamma=0.5, n_components=32, random_state=0).fit(X, y)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    assert a.feature_map_.kernel == "rbf"
    # the gamma search of ExactKernelRidgeCV knows "poly" is polynomial
    p = ExactKernelRidgeCV("poly", degree=2, criterion="gcv").fit(X, y)
    q = ExactKernelRidgeCV("polynomial", degree=2, criterion="gcv").fit(X, y)
    np.testing.assert_array_equal(p.cv_results_["param_gamma"], q.cv_results_["param_gamma"])
    assert np.all(np.isfinite(p.cv_results_["param_gamma"]))


# --- the searching estimators read which bandwidths can be searched ---------------------------


@pytest.mark.parametrize("name", kernel_names(standalone_only=True))
def test_exact_cv_searches_gamma_exactly_for_the_registry_kernels(name):
    X = np.random.default_rng(5).uniform(size=(30, 1))
    y = np.cos(3 * X[:, 0])
    if "exact" not in kernel_spec(name).paths:
        return
    search = ExactKernelRidgeCV(name, gammas=[0.5, 2.0], criterion="gcv")
    if name in kernels_searching("exact", "gamma"):
        with pytest.warns(UserWarning) if name == "sigmoid" else contextlib.nullcontext():
            search.fit(X, y)
        assert sorted(set(search.cv_results_["param_gamma"])) == [0.5, 2.0]
    else:
        with pytest.raises(ParameterError, match="no gamma to search") as err:
            search.fit(X, y)
        assert ", ".join(kernels_searching("exact", "gamma")) in str(err.value)


def test_random_feature_cv_refuses_kernels_without_a_bandwidth():
    X, y = np.random.default_rng(6).uniform(size=(20, 1)), np.ones(20)
    for name in kernels_serving("random_features"):
        if kernels_searching("random_features", "gamma").count(name):
            continue
        with pytest.raises(ParameterError, match="no bandwidth to search"):
            RandomFeatureRidgeCV(name, n_components=8).fit(X, y)


# --- the job config accepts exactly the registry's names per solver ---------------------------


def _expected_job_kernels(solver: str) -> set[str]:
    paths = {"auto": ("exact", "nystroem"), "cg": ("nystroem",)}.get(solver, (solver,))  # cg: Nyström centres
    return set.intersection(*(set(kernels_serving(p, standalone_only=True)) for p in paths))


@pytest.mark.parametrize("solver", get_args(Solver))
def test_config_accepts_exactly_the_registry_kernels_of_each_solver(solver, tmp_path):
    served = _expected_job_kernels(solver)
    assert served  # every solver serves some kernel
    for name in kernel_names():
        alpha = "alpha: [1.0]\n" if solver == "cg" else ""  # cg scores a list (its default 'gcv' is refused)
        path = with_model(tmp_path, f"solver: {solver}\nkernel: {name}\n{alpha}")
        if name in served:
            assert load_config(path).model.params["kernel"] == name
            continue
        message = error_of(path)
        assert "model.kernel" in message and repr(name) in message
        if kernel_spec(name).standalone:  # the error names the solvers that serve it
            for other in get_args(Solver):
                if name in _expected_job_kernels(other):
                    assert other in message
    assert "model.kernel" in error_of(with_model(tmp_path, "kernel: gaussian\n"))  # YAML: names only


def test_config_sampler_rule_is_the_registry_sampler_rule(tmp_path):
    for name in JOB_KERNELS:
        solver = "random_features" if "random_features" in kernel_spec(name).paths else "exact"
        path = with_model(tmp_path, f"solver: {solver}\nkernel: {name}\nsampler: orthogonal\n")
        if "orthogonal" in kernel_spec(name).samplers:
            # solver exact takes no sampler: accepted (the registry allows it) and unused
            assert load_config(path).model.params.get("sampler", "orthogonal") == "orthogonal"
        else:
            assert "model.sampler" in error_of(path)
    assert "model.nu: expected one of 0.5, 1.5, 2.5" in error_of(with_model(tmp_path, "nu: 2.0\n"))


# --- the README's table is the registry's ------------------------------------------------------


def test_readme_kernel_table_is_generated_from_the_registry():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- kernel-table:begin[^>]*-->\n(.*?)<!-- kernel-table:end -->", text, re.S)
    assert found, "README.md lost its kernel-table markers"
    assert found.group(1) == kernel_table_markdown(), (
        "README.md's kernel table differs from the registry; paste the output of "
        "python -c 'from bigkernel.kernels import kernel_table_markdown as t; print(t(), end=\"\")'"
    )
    for spec in KERNELS:
        assert f"`{spec.name}`" in found.group(1)
