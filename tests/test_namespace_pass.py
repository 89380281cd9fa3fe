"""The streamed pass in any array namespace: feature maps and block sums on numpy and on
array-api-strict give the same statistics, so a numpy-only call fails here (in CI) and not
first on a GPU.

array-api-strict inputs are put on its test device ``device1``, which refuses any conversion
to numpy: a stray ``np.`` call on them raises instead of silently computing on the host.
"""

import importlib.util

import numpy as np
import pytest

from bigkernel.errors import DeviceError, NonFiniteError
from bigkernel.numerics.fourier_features import make_feature_map
from bigkernel.numerics.resample import BootstrapWeights
from bigkernel.numerics.splits import FoldSplit
from bigkernel.numerics.sums import block_stats, device_block_rows

xs = pytest.importorskip("array_api_strict")
pytestmark = pytest.mark.numerics

DEV = xs.Device("device1")
FIELDS = ("n", "sum_phi", "sum_y", "sum_yy", "gram", "phi_y", "x_min", "x_max")


def _strict(a):
    return xs.asarray(np.array(a), device=DEV)


def _data(n=700, d=3, k=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, d)), rng.standard_normal((n, k))


MAPS = [
    dict(kernel="rbf", gamma=0.7),
    dict(kernel="rbf", gamma=0.7, form="cossin"),
    dict(kernel="rbf", gamma=0.7, sampler="orthogonal"),
    dict(kernel="laplacian", gamma=0.5),
    dict(kernel="matern", gamma=0.5, nu=2.5),
]


@pytest.mark.parametrize("spec", MAPS, ids=lambda s: "-".join(str(v) for v in s.values()))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_feature_maps_agree_on_numpy_and_strict(spec, dtype):
    X, _ = _data(50)
    fmap = make_feature_map(n_features_in=3, n_components=16, seed=3, **spec)
    ref = fmap.transform(X, dtype)
    got = fmap.transform(_strict(X), dtype)
    assert isinstance(got, xs._array_object.Array) and got.device == DEV
    assert got.dtype == getattr(xs, dtype)
    host = np.asarray(got.to_device(xs.Device("CPU_DEVICE")))
    # the same operations on the same numbers: equal to rounding of the dtype
    np.testing.assert_allclose(host, ref, rtol=0, atol=4 * np.finfo(dtype).eps * 30)
    # and both are the map's definition, computed here in float64
    arg = X @ fmap.weights + (0.0 if fmap.offsets is None else fmap.offsets)
    direct = fmap.scale * (np.cos(arg) if fmap.form == "cos" else np.hstack([np.cos(arg), np.sin(arg)]))
    np.testing.assert_allclose(ref, direct, atol=1e-5 if dtype == "float32" else 1e-12)


def test_fourier_basis_on_strict():
    X = np.linspace(0, 1, 40)[:, None]
    fmap = make_feature_map("fourier", 1, 8, seed=0)
    got = fmap.transform(_strict(X))
    host = np.asarray(got.to_device(xs.Device("CPU_DEVICE")))
    np.testing.assert_allclose(host, fmap.transform(X), atol=1e-14)


def _reference(fmap, X, Y, w=None):
    """Weighted statistics of one set, straight from the definition in float64."""
    phi = fmap.transform(X, "float64")
    w = np.ones(len(X)) if w is None else w
    rows = w > 0
    return {
        "n": w.sum(),
        "sum_phi": w @ phi,
        "sum_y": w @ Y,
        "sum_yy": w @ (Y * Y),
        "gram": phi.T @ (w[:, None] * phi),
        "phi_y": phi.T @ (w[:, None] * Y),
        "x_min": X[rows].min(axis=0),
        "x_max": X[rows].max(axis=0),
    }


def _close(stats, i, ref, dtype):
    tol = 2e-5 if dtype == "float32" else 1e-11
    for name in FIELDS:
        arr = getattr(stats, name)
        assert isinstance(arr, np.ndarray) and arr.dtype == np.float64, name
        got, want = arr[i], ref[name]
        scale = max(np.abs(want).max(), 1.0)
        np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale, err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_block_stats_strict_equals_numpy_and_reference(dtype):
    X, Y = _data()
    fmap = make_feature_map("rbf", 3, 24, seed=1, gamma=0.8)
    # start off a sub-block edge: the first and last sub-blocks are partial
    a = block_stats(fmap, X, Y, 300, dtype=dtype, block_rows=256)
    b = block_stats(fmap, _strict(X), _strict(Y), 300, dtype=dtype, block_rows=256)
    _close(a, 0, _reference(fmap, X, Y), dtype)
    for name in FIELDS:
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-12 if dtype == "float64" else 1e-5)


def test_block_stats_strict_folds_and_several_maps():
    X, Y = _data()
    fmaps = [make_feature_map("rbf", 3, 12, seed=2, gamma=g) for g in (0.3, 1.5)]
    split = FoldSplit(seed=4, n_groups=3)
    a = block_stats(fmaps, X, Y, 128, weights=split, block_rows=256)
    b = block_stats(fmaps, _strict(X), _strict(Y), 128, weights=split, block_rows=256)
    g = split.groups(128, 128 + len(X))
    for fmap, sa, sb in zip(fmaps, a, b):
        for k in range(3):
            _close(sa, k, _reference(fmap, X[g == k], Y[g == k]), "float64")
            _close(sb, k, _reference(fmap, X[g == k], Y[g == k]), "float64")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_block_stats_strict_bootstrap_weights(dtype):
    X, Y = _data(600)
    fmap = make_feature_map("rbf", 3, 16, seed=5, gamma=0.6)
    weights = BootstrapWeights(seed_entropy=9, replicates=(0, 1, 2), n=600)
    a = block_stats(fmap, X, Y, 0, weights=weights, dtype=dtype, block_rows=256)
    b = block_stats(fmap, _strict(X), _strict(Y), 0, weights=weights, dtype=dtype, block_rows=256)
    W = weights(0, 600)
    assert a.n.shape == (3,) and not np.all(W == 1)
    for j in range(3):
        _close(a, j, _reference(fmap, X, Y, W[j]), dtype)
        _close(b, j, _reference(fmap, X, Y, W[j]), dtype)


def test_unit_weights_take_the_unweighted_route_exactly():
    # all-ones weights skip the W^½ scaling: the same float32 products as no weights at all
    X, Y = _data(300)
    fmap = make_feature_map("rbf", 3, 8, seed=6)
    a = block_stats(fmap, X, Y, 0, dtype="float32", block_rows=128)
    b = block_stats(fmap, X, Y, 0, weights=lambda lo, hi: np.ones((1, hi - lo)), dtype="float32", block_rows=128)
    for name in ("n", "gram", "phi_y", "sum_phi", "x_min", "x_max"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    for name in ("sum_y", "sum_yy"):  # a sum vs a dot product: float64 rounding apart
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-13)


def test_check_finite_on_strict_names_the_row():
    X, Y = _data(200)
    X[57, 1] = np.nan
    fmap = make_feature_map("rbf", 3, 8, seed=0)
    with pytest.raises(NonFiniteError, match=r"first at row 1057"):
        block_stats(fmap, _strict(X), _strict(Y), 1000)


def test_device_block_rows_fit_the_budget():
    width, item = 2048 + 2, 4
    for free in (2**29, 2**30, 2**33, 80 * 2**30):
        rows = device_block_rows(8192, width, "float32", 1, free)
        used = 2 * width * width * 8 + width * width * item + 3 * rows * width * item
        assert used <= 0.25 * free
        # a power-of-two multiple or fraction of the CPU sub-block: edges stay aligned
        assert rows & (rows - 1) == 0 and rows >= 256
        # and the most that fits (or the cap)
        if rows < 2**18:
            assert used + 3 * rows * width * item > 0.25 * free
    with pytest.raises(DeviceError, match="GiB free"):
        device_block_rows(8192, width, "float32", 40, 2**28)


def test_cuda_without_a_gpu_is_a_clear_error():
    from bigkernel.devices import Device, resolve_device

    try:
        resolve_device("cuda")
    except DeviceError:
        pass
    else:
        pytest.skip("a GPU is present: tests/test_gpu_pass.py covers device='cuda'")
    X, Y = _data(50)
    fmap = make_feature_map("rbf", 3, 8, seed=0)
    with pytest.raises(TypeError, match="Device"):  # the parameter's text is resolved above, never here
        block_stats(fmap, X, Y, 0, device="cuda")
    if importlib.util.find_spec("cupy") is None:  # a Device made by hand: CuPy's absence is said too
        with pytest.raises(DeviceError, match="bigkernel\\[gpu\\]"):
            block_stats(fmap, X, Y, 0, device=Device("cuda", 0))


def test_nystroem_features_refuse_a_device_array():
    from bigkernel.kernels.factory import kernel_from_dict
    from bigkernel.numerics.nystroem_features import NystroemMap

    X, _ = _data(40)
    fmap = NystroemMap.from_landmarks(kernel_from_dict({"name": "rbf", "gamma": 0.5}), X[:10])
    np.testing.assert_allclose(
        fmap.transform_unscaled(X[:10]) @ fmap.transform_unscaled(X[:10]).T,
        np.exp(-0.5 * ((X[:10, None] - X[None, :10]) ** 2).sum(-1)),
        atol=1e-8,
    )
    with pytest.raises(DeviceError, match="host \\(numpy\\) only"):
        fmap.transform_unscaled(_strict(X))


def test_a_map_without_out_goes_through_the_buffer_by_copy():
    from bigkernel.numerics.polynomial_features import make_polynomial_map

    X, Y = _data(500)
    fmap = make_polynomial_map(3, 10, seed=0, degree=2)
    stats = block_stats(fmap, X, Y, 0, block_rows=128)
    _close(stats, 0, _reference(fmap, X, Y), "float64")
