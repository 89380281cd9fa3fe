"""Exact kernels against naive reference formulas and scikit-learn; PSD rules; persistence."""

from __future__ import annotations

import json
import math
import tracemalloc

import numpy as np
import pytest
from sklearn.gaussian_process import kernels as gpk
from sklearn.metrics import pairwise

from bigkernel.errors import DataError, ParameterError
from bigkernel.kernels import (
    KERNEL_NAMES,
    RBF,
    Constant,
    Kernel,
    Laplacian,
    Linear,
    Matern,
    Periodic,
    Polynomial,
    Product,
    Scaled,
    Sigmoid,
    Sum,
    check_psd,
    kernel_from_dict,
    make_kernel,
)

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set

RTOL = 1e-10


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    # offset from the origin: exercises the cancellation guard of the distance formula
    X = rng.normal(size=(40, 3)) + 3.0
    Z = rng.normal(size=(25, 3)) + 3.0
    return X, Z


def naive(f, X, Z):
    """Reference Gram block by explicit loops."""
    return np.array([[f(x, z) for z in Z] for x in X])


# --- every kernel against a naive formula ---------------------------------------------------

A_PREC = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 0.5]])
REFERENCES = [
    (RBF(gamma=0.3), lambda x, z: math.exp(-0.3 * np.sum((x - z) ** 2))),
    (RBF(length_scale=1.7), lambda x, z: math.exp(-np.sum((x - z) ** 2) / (2 * 1.7**2))),
    (
        RBF(length_scale=[0.5, 1.0, 2.0]),
        lambda x, z: math.exp(-0.5 * np.sum(((x - z) / [0.5, 1.0, 2.0]) ** 2)),
    ),
    (RBF(precision=A_PREC), lambda x, z: math.exp(-0.5 * (x - z) @ A_PREC @ (x - z))),
    (Laplacian(gamma=0.4), lambda x, z: math.exp(-0.4 * np.sum(np.abs(x - z)))),
    (Matern(length_scale=1.3, nu=0.5), lambda x, z: math.exp(-np.linalg.norm(x - z) / 1.3)),
    (
        Matern(length_scale=1.3, nu=1.5),
        lambda x, z: (
            (1 + math.sqrt(3) * np.linalg.norm(x - z) / 1.3) * math.exp(-math.sqrt(3) * np.linalg.norm(x - z) / 1.3)
        ),
    ),
    (
        Matern(length_scale=1.3, nu=2.5),
        lambda x, z: (
            (1 + math.sqrt(5) * (r := np.linalg.norm(x - z) / 1.3) + 5 * r**2 / 3) * math.exp(-math.sqrt(5) * r)
        ),
    ),
    (Polynomial(degree=3, gamma=0.2, coef0=0.0), lambda x, z: (0.2 * x @ z) ** 3),
    (Polynomial(degree=2, gamma=0.2, coef0=1.5), lambda x, z: (0.2 * x @ z + 1.5) ** 2),
    (Linear(), lambda x, z: x @ z),
    (
        Periodic(length_scale=0.8, periodicity=2.5),
        lambda x, z: math.exp(-2 * math.sin(math.pi * np.linalg.norm(x - z) / 2.5) ** 2 / 0.8**2),
    ),
    (Constant(2.5), lambda x, z: 2.5),
]


@pytest.mark.parametrize("kernel,ref", REFERENCES, ids=lambda v: repr(v)[:40] if isinstance(v, Kernel) else "")
def test_kernel_matches_naive_formula(kernel, ref, data):
    X, Z = data
    expected = naive(ref, X, Z)
    np.testing.assert_allclose(kernel(X, Z), expected, rtol=RTOL, atol=1e-12 * np.abs(expected).max())
    np.testing.assert_allclose(kernel(X), naive(ref, X, X), rtol=RTOL, atol=1e-12 * np.abs(expected).max())
    np.testing.assert_allclose(kernel.diag(X), [ref(x, x) for x in X], rtol=RTOL)


def test_sigmoid_matches_naive_formula(data):
    X, Z = data
    with pytest.warns(UserWarning, match="not positive semi-definite"):
        k = Sigmoid(gamma=0.05, coef0=-0.3)
    np.testing.assert_allclose(k(X, Z), naive(lambda x, z: math.tanh(0.05 * x @ z - 0.3), X, Z), rtol=RTOL)
    np.testing.assert_allclose(k.diag(X), np.tanh(0.05 * np.sum(X * X, 1) - 0.3), rtol=RTOL)


SKLEARN = [
    (RBF(gamma=0.3), lambda X, Z: pairwise.rbf_kernel(X, Z, gamma=0.3)),
    (RBF(length_scale=[0.5, 1.0, 2.0]), gpk.RBF([0.5, 1.0, 2.0])),
    (Laplacian(gamma=0.4), lambda X, Z: pairwise.laplacian_kernel(X, Z, gamma=0.4)),
    (Matern(length_scale=1.3, nu=0.5), gpk.Matern(1.3, nu=0.5)),
    (Matern(length_scale=[1.0, 2.0, 0.7], nu=1.5), gpk.Matern([1.0, 2.0, 0.7], nu=1.5)),
    (Matern(length_scale=1.3, nu=2.5), gpk.Matern(1.3, nu=2.5)),
    (
        Polynomial(degree=3, gamma=0.2, coef0=1.0),
        lambda X, Z: pairwise.polynomial_kernel(X, Z, 3, 0.2, 1.0),
    ),
    (Linear(), pairwise.linear_kernel),
    (Periodic(length_scale=0.8, periodicity=2.5), gpk.ExpSineSquared(0.8, 2.5)),
    (
        2.0 * RBF(gamma=0.3) + Laplacian(gamma=0.4),
        lambda X, Z: 2 * pairwise.rbf_kernel(X, Z, gamma=0.3) + pairwise.laplacian_kernel(X, Z, gamma=0.4),
    ),
]


@pytest.mark.parametrize("kernel,ref", SKLEARN, ids=lambda v: repr(v)[:40] if isinstance(v, Kernel) else "")
def test_kernel_matches_sklearn(kernel, ref, data):
    X, Z = data
    np.testing.assert_allclose(kernel(X, Z), ref(X, Z), rtol=1e-9, atol=1e-13)


def test_float32_output(data):
    X, Z = data
    for k in (RBF(gamma=0.3), Matern(1.0, 2.5), Polynomial(2, 0.1, 1.0), RBF(gamma=0.3) * Linear()):
        out = k(X, Z, dtype=np.float32)
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, k(X, Z), rtol=1e-6, atol=1e-7)


def test_rbf_gamma_and_length_scale_agree(data):
    X, Z = data
    ell = 1.7
    np.testing.assert_allclose(RBF(length_scale=ell)(X, Z), RBF(gamma=1 / (2 * ell**2))(X, Z), rtol=1e-12)
    np.testing.assert_allclose(RBF(precision=np.eye(3) / ell**2)(X, Z), RBF(length_scale=ell)(X, Z), rtol=1e-12)


def test_symmetric_block_has_exact_unit_diagonal():
    X = np.random.default_rng(1).normal(size=(30, 5)) * 1e4 + 1e6  # far from the origin, wide
    for k in (RBF(gamma=1e-8), Matern(1e4, 0.5), Periodic(1.0, 3.0), Laplacian(1e-5)):
        K = k(X)
        assert np.all(np.diag(K) == 1.0)
        np.testing.assert_array_equal(K, K.T)


def test_distances_never_negative():
    # duplicated points: round-off would make ‖x−z‖² slightly negative without the clip
    X = np.repeat(np.random.default_rng(2).normal(size=(10, 4)) * 100, 3, axis=0)
    K = Matern(1.0, 0.5)(X, X.copy())
    assert np.all(np.isfinite(K)) and K.max() <= 1.0


# --- PSD: construction rules and check_psd --------------------------------------------------

COMBOS = [
    RBF(gamma=0.5) + Laplacian(gamma=0.2),
    RBF(gamma=0.5) * Polynomial(degree=2, gamma=0.1, coef0=1.0),
    3.0 * Matern(1.0, 1.5),
    RBF(length_scale=[1.0, 2.0, 3.0]) + 0.5 * Linear(),
    (RBF(gamma=1.0) + Matern(0.7, 0.5)) * Polynomial(degree=3, gamma=0.2, coef0=0.0) + Constant(1.0),
]


@pytest.mark.parametrize("kernel", COMBOS, ids=lambda k: k.to_dict()["name"])
def test_sums_products_scalings_are_psd(kernel):
    X = np.random.default_rng(3).normal(size=(120, 3))
    w = np.linalg.eigvalsh(kernel(X))
    assert w[0] >= -1e-10 * w[-1]
    assert kernel.psd
    result = check_psd(kernel, X, n_sample=80, random_state=0)
    assert result.is_psd and result.n_sample == 80


def test_combinations_match_their_terms(data):
    X, Z = data
    k1, k2 = RBF(gamma=0.5), Laplacian(gamma=0.2)
    np.testing.assert_allclose((k1 + k2)(X, Z), k1(X, Z) + k2(X, Z))
    np.testing.assert_allclose((k1 * k2)(X, Z), k1(X, Z) * k2(X, Z))
    np.testing.assert_allclose((2.5 * k1)(X, Z), 2.5 * k1(X, Z))
    np.testing.assert_allclose((k1 * 2.5).diag(X), 2.5 * np.ones(len(X)))
    assert isinstance(k1 + k2, Sum) and isinstance(k1 * k2, Product)
    assert isinstance(np.float64(2.0) * k1, Scaled)
    assert (2.0 * (3.0 * k1)).scale == 6.0
    assert len((k1 + k2 + k1).kernels) == 3  # flattened


@pytest.mark.parametrize("c", [0.0, -1.0, float("nan"), float("inf")])
def test_nonpositive_scaling_rejected(c):
    with pytest.raises(ParameterError, match="> 0"):
        c * RBF(gamma=1.0)


def test_sigmoid_warns_and_check_psd_finds_negative_eigenvalue():
    with pytest.warns(UserWarning, match="not positive semi-definite"):
        k = make_kernel("sigmoid", gamma=1.0, coef0=1.0)
    assert not k.psd
    X = np.random.default_rng(4).normal(size=(300, 3))
    result = check_psd(k, X, n_sample=200, random_state=0)
    assert result.min_eigenvalue < -1e-3 * result.max_eigenvalue
    assert not result.is_psd
    with pytest.warns(UserWarning):
        assert not (RBF(gamma=1.0) + Sigmoid()).psd


def test_periodic_is_psd_in_1d_only():
    rng = np.random.default_rng(6)
    k = Periodic(length_scale=1.0, periodicity=2.0) * RBF(gamma=0.1)
    assert check_psd(k, rng.uniform(0, 10, size=(200, 1)), random_state=0).is_psd
    # the Euclidean-distance form (scikit-learn's) is not PSD with several features
    assert not check_psd(Periodic(1.0, 2.0), rng.uniform(0, 10, size=(200, 3)), random_state=0).is_psd


def test_polynomial_negative_coef0_warns():
    with pytest.warns(UserWarning, match="coef0"):
        assert not Polynomial(degree=2, gamma=1.0, coef0=-1.0).psd


# --- factory, validation, persistence -------------------------------------------------------


def test_make_kernel_names_and_defaults():
    assert make_kernel("RBF", gamma=0.5) == RBF(gamma=0.5)
    assert make_kernel("poly", degree=2, gamma=1.0, coef0=0.0) == Polynomial(2, 1.0, 0.0)
    assert make_kernel("rbf", n_features=4) == RBF(gamma=0.25)  # scikit-learn's gamma = 1/d
    assert make_kernel("linear") == Linear()
    # KernelRidge passes gamma/degree/coef0 to every kernel: ignored when not strict
    assert make_kernel("rbf", gamma=0.5, degree=3, coef0=1, strict=False) == RBF(gamma=0.5)
    k = Matern(1.0, 0.5)
    assert make_kernel(k) is k
    # gamma or length_scale for laplacian and matern, as the random-feature maps accept
    assert make_kernel("laplacian", length_scale=4.0) == Laplacian(gamma=0.25)
    assert make_kernel("matern", gamma=0.125, nu=0.5) == Matern(length_scale=2.0, nu=0.5)
    assert make_kernel("matern", n_features=2) == Matern(length_scale=1.0, nu=1.5)
    for name in KERNEL_NAMES:
        assert name in (
            "rbf",
            "laplacian",
            "matern",
            "polynomial",
            "linear",
            "sigmoid",
            "cosine",
            "chi2",
            "additive_chi2",
            "periodic",
            "constant",
        )


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("rbff", {}, "did you mean 'rbf'"),
        ("laplacien", {"gamma": 1.0}, "valid kernels are rbf, laplacian"),
        ("rbf", {"gama": 1.0}, "did you mean 'gamma'"),
        ("rbf", {}, "n_features"),
        ("rbf", {"gamma": 0.0}, "gamma must be"),
        ("rbf", {"gamma": -1.0}, "gamma must be"),
        ("rbf", {"gamma": 1.0, "length_scale": 1.0}, "exactly one"),
        ("rbf", {"length_scale": [1.0, -2.0]}, "length_scale"),
        ("rbf", {"precision": [[1.0, 2.0], [2.0, 1.0]]}, "positive semi-definite"),
        ("rbf", {"precision": [[1.0, 0.5], [0.0, 1.0]]}, "symmetric"),
        ("matern", {"length_scale": 0.0}, "length_scale"),
        ("matern", {"gamma": 1.0, "length_scale": 1.0}, "not both"),
        ("matern", {"nu": 1.5}, "n_features"),
        ("matern", {"nu": 2.0, "length_scale": 1.0}, "nu must be one of"),
        ("polynomial", {"degree": 0, "gamma": 1.0}, "positive integer"),
        ("polynomial", {"degree": 2.5, "gamma": 1.0}, "positive integer"),
        ("polynomial", {"degree": True, "gamma": 1.0}, "positive integer"),
        ("periodic", {"periodicity": -1.0}, "periodicity"),
        ("laplacian", {"gamma": "1"}, "gamma"),
    ],
)
def test_make_kernel_bad_input(name, params, match):
    with pytest.raises(ParameterError, match=match):
        make_kernel(name, **params)


def test_shape_errors(data):
    X, _ = data
    with pytest.raises(DataError, match="same number of features"):
        RBF(gamma=1.0)(X, X[:, :2])
    with pytest.raises(DataError, match="2-D"):
        RBF(gamma=1.0)(X[:, 0])
    with pytest.raises(DataError, match="ARD"):
        RBF(length_scale=[1.0, 2.0])(X)
    with pytest.raises(DataError, match="precision"):
        RBF(precision=np.eye(2))(X)
    with pytest.raises(ParameterError, match="dtype"):
        RBF(gamma=1.0)(X, dtype=np.int64)


ROUNDTRIP = [
    RBF(gamma=0.5),
    RBF(length_scale=[1.0, 2.0, 3.0]),
    RBF(precision=A_PREC),
    Laplacian(0.2),
    Matern([1.0, 2.0, 3.0], 2.5),
    Polynomial(4, 0.5, 0.0),
    Linear(),
    Periodic(1.0, 3.0),
    2.0 * RBF(gamma=0.5) + Matern(1.0, 0.5) * Linear(),
]


@pytest.mark.parametrize("kernel", ROUNDTRIP, ids=lambda k: k.to_dict()["name"])
def test_to_dict_roundtrip_through_json(kernel, data):
    X, Z = data
    spec = json.loads(json.dumps(kernel.to_dict()))
    rebuilt = kernel_from_dict(spec)
    assert rebuilt == kernel and hash(rebuilt) == hash(kernel)
    np.testing.assert_array_equal(rebuilt(X, Z), kernel(X, Z))


def test_kernels_are_frozen():
    k = RBF(gamma=0.5)
    with pytest.raises(AttributeError):
        k.gamma = 1.0


# --- memory: the declared workspace is a measured bound -------------------------------------


@pytest.mark.parametrize(
    "kernel",
    [
        RBF(gamma=0.5),
        Laplacian(0.5),
        Matern(1.0, 1.5),
        Matern(1.0, 2.5),
        Polynomial(2, 1.0, 1.0),
        RBF(gamma=0.5) + Matern(1.0, 2.5),
        2.0 * RBF(gamma=0.5) * Linear(),
    ],
    ids=lambda k: k.to_dict()["name"] + str(k.to_dict().get("nu", "")),
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_block_peak_memory_within_declared_bound(kernel, dtype):
    rng = np.random.default_rng(5)
    X, Z = rng.normal(size=(700, 4)), rng.normal(size=(600, 4))
    itemsize = np.dtype(dtype).itemsize
    # O((n + m) d) copies of the inputs (centred, scaled) and small Python objects
    vectors = 8 * (X.size + Z.size) * 3 + 192 * 1024
    for args, entries in (((X, Z), len(X) * len(Z)), ((X,), len(X) ** 2)):
        bound = entries * (itemsize + kernel.extra_bytes_per_entry(dtype))
        tracemalloc.start()
        try:
            out = kernel(*args, dtype=dtype)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert out.dtype == dtype
        assert peak <= bound + vectors, (peak, bound)
