"""Random features approach their exact kernels like O(1/sqrt(D)), for every kernel family."""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import Matern
from sklearn.metrics.pairwise import laplacian_kernel, rbf_kernel

from bigkernel.errors import DataError, ParameterError
from bigkernel.numerics.fourier_features import make_feature_map

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set


def _exact(kernel, X, gamma, nu):
    if kernel == "rbf":
        return rbf_kernel(X, gamma=gamma)
    if kernel == "laplacian":
        return laplacian_kernel(X, gamma=gamma)
    return Matern(length_scale=1 / np.sqrt(2 * gamma), nu=nu)(X)


CASES = [
    ("rbf", "iid", "cos", None), ("rbf", "iid", "cossin", None), ("rbf", "orthogonal", "cos", None),
    ("laplacian", "iid", "cos", None), ("matern", "iid", "cos", 0.5), ("matern", "iid", "cossin", 1.5),
    ("matern", "iid", "cos", 2.5),
]  # fmt: skip


@pytest.mark.parametrize("kernel,sampler,form,nu", CASES)
def test_kernel_error_shrinks_like_inverse_sqrt_D(kernel, sampler, form, nu):
    X = np.random.default_rng(0).uniform(size=(80, 3))
    gamma = 0.5
    K = _exact(kernel, X, gamma, nu or 1.5)
    errs = {}
    for D in (256, 4096):
        # average over seeds: the O(1/sqrt(D)) law is about the typical error
        e = [np.abs(f.transform(X) @ f.transform(X).T - K).max()
             for f in (make_feature_map(kernel, 3, D, s, gamma=gamma, nu=nu or 1.5, sampler=sampler, form=form)
                       for s in range(4))]  # fmt: skip
        errs[D] = np.mean(e)
    ratio = errs[256] / errs[4096]  # sqrt(4096/256) = 4 expected
    assert 2.5 < ratio < 6.5, (errs, ratio)
    assert errs[4096] < 0.1


def test_orthogonal_features_have_lower_error_than_iid():
    X = np.random.default_rng(1).normal(size=(60, 8))
    K = rbf_kernel(X, gamma=0.05)
    err = {s: np.mean([np.abs((f := make_feature_map("rbf", 8, 512, seed, gamma=0.05, sampler=s)).transform(X)
                             @ f.transform(X).T - K).mean() for seed in range(6)])
           for s in ("iid", "orthogonal")}  # fmt: skip
    assert err["orthogonal"] < err["iid"]


def test_ard_length_scales_equal_rescaled_inputs():
    X = np.random.default_rng(2).normal(size=(20, 3))
    ell = np.array([0.5, 2.0, 1.0])
    a = make_feature_map("rbf", 3, 64, seed=7, length_scale=ell)
    b = make_feature_map("rbf", 3, 64, seed=7, length_scale=1.0)
    np.testing.assert_allclose(a.transform(X), b.transform(X / ell), atol=1e-12)


def test_gamma_and_length_scale_are_the_same_bandwidth():
    X = np.random.default_rng(3).normal(size=(10, 2))
    a = make_feature_map("rbf", 2, 32, seed=0, gamma=0.125)
    b = make_feature_map("rbf", 2, 32, seed=0, length_scale=2.0)  # 1/(2*2^2)
    np.testing.assert_allclose(a.transform(X), b.transform(X))


def test_map_depends_on_seed_not_on_rows():
    X = np.random.default_rng(4).normal(size=(100, 4))
    f = make_feature_map("laplacian", 4, 50, seed=3, gamma=1.0)
    np.testing.assert_array_equal(f.transform(X)[37:61], f.transform(X[37:61]))
    g = make_feature_map("laplacian", 4, 50, seed=3, gamma=1.0)
    np.testing.assert_array_equal(f.weights, g.weights)
    assert not np.array_equal(f.weights, make_feature_map("laplacian", 4, 50, seed=4, gamma=1.0).weights)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tiled_transform_into_a_strided_buffer_equals_the_formula(dtype):
    """The numpy transform works in row tiles (TILE_BYTES) and may write into a view of a wider
    buffer (the pass's product input): every tile, the partial last one too, is cos(Xω + b)."""
    from bigkernel.numerics import fourier_features as ff

    D, d = 2048, 5
    tile = ff.TILE_BYTES // (D * np.dtype(dtype).itemsize)
    X = np.random.default_rng(5).normal(size=(2 * tile + tile // 3, d))
    f = make_feature_map("rbf", d, D, seed=2, gamma=0.3)
    buf = np.full((X.shape[0], D + 3), 7.0, dtype=dtype)
    got = f.transform_unscaled(X, dtype, out=buf[:, :D])
    assert np.shares_memory(got, buf)
    want = np.cos(X @ f.weights + f.offsets)
    np.testing.assert_allclose(buf[:, :D], want, atol=2e-5 if dtype == "float32" else 1e-12)
    assert (buf[:, D:] == 7.0).all()  # the columns beside the features are untouched
    np.testing.assert_array_equal(buf[:, :D], f.transform_unscaled(X, dtype))


def test_fourier_basis_matches_lecture_formula():
    x = np.linspace(0, 1, 7)[:, np.newaxis]
    f = make_feature_map("fourier", 1, 6, seed=0)
    j = np.arange(1, 4)
    expected = np.hstack([np.cos(2 * np.pi * j * x), np.sin(2 * np.pi * j * x)]) / np.sqrt(6)
    np.testing.assert_allclose(f.transform(x), expected, atol=1e-14)
    with pytest.raises(DataError, match="1 feature"):
        make_feature_map("fourier", 2, 6, seed=0)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"kernel": "rbff"}, "did you mean 'rbf'"),
        ({"n_components": 0}, "n_components"),
        ({"gamma": -1.0}, "gamma"),
        ({"gamma": 1.0, "length_scale": 1.0}, "not both"),
        ({"length_scale": [1.0, 2.0]}, "one entry per feature"),
        ({"kernel": "matern", "nu": 0.7}, "nu"),
        ({"form": "cossin", "n_components": 7}, "even"),
        ({"kernel": "laplacian", "sampler": "orthogonal"}, "orthogonal"),
    ],
)
def test_bad_parameters(kwargs, match):
    args = {"kernel": "rbf", "n_components": 8, **kwargs}
    with pytest.raises(ParameterError, match=match):
        make_feature_map(args.pop("kernel"), 3, args.pop("n_components"), 0, **args)
