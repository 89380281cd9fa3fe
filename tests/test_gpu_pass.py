"""The streamed pass on a CUDA GPU (CuPy): the same statistics as the CPU pass, partial sums
brought back once per task, the GPU memory budget respected, the eigendecomposition of a
large system on the GPU.

Skipped where ``resolve_device("cuda")`` raises (no CuPy or no GPU: CI); run on a GPU machine
by ``scripts/gpu_check.sh``.
"""

import numpy as np
import pytest

from bigkernel.devices import resolve_device
from bigkernel.errors import DeviceError
from bigkernel.numerics import sums
from bigkernel.numerics.fourier_features import make_feature_map
from bigkernel.numerics.resample import BootstrapWeights
from bigkernel.numerics.splits import FoldSplit

try:
    GPU = resolve_device("cuda")
except DeviceError as exc:
    pytest.skip(f"no usable CUDA GPU here ({exc})", allow_module_level=True)

cp = pytest.importorskip("cupy")
pytestmark = [pytest.mark.numerics, pytest.mark.gpu]

FIELDS = ("n", "sum_phi", "sum_y", "sum_yy", "gram", "phi_y", "x_min", "x_max")


def _data(n=5000, d=4, k=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, d)), rng.standard_normal((n, k))


def _agree(gpu, cpu, dtype):
    for name in FIELDS:
        a, b = getattr(gpu, name), getattr(cpu, name)
        assert isinstance(a, np.ndarray) and a.dtype == np.float64, name
        if dtype == "float64":
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * np.abs(b).max(), err_msg=name)
        else:  # float32 features: the products round differently (other sub-blocks, cuBLAS)
            np.testing.assert_allclose(a, b, rtol=0, atol=2e-6 * max(np.abs(b).max(), 1.0) * 10, err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("form", ["cos", "cossin"])
def test_gpu_block_stats_equal_cpu(dtype, form):
    X, Y = _data()
    fmap = make_feature_map("rbf", 4, 64, seed=1, gamma=0.8, form=form)
    cpu = sums.block_stats(fmap, X, Y, 1000, dtype=dtype, block_rows=512)
    gpu = sums.block_stats(fmap, X, Y, 1000, dtype=dtype, block_rows=512, device=GPU)
    _agree(gpu, cpu, dtype)


def test_gpu_folds_several_maps_and_bootstrap_weights():
    X, Y = _data(4000)
    fmaps = [make_feature_map("rbf", 4, 32, seed=2, gamma=g) for g in (0.3, 1.5)]
    split = FoldSplit(seed=4, n_groups=3)
    for a, b in zip(
        sums.block_stats(fmaps, X, Y, 0, weights=split, block_rows=512, device=GPU),
        sums.block_stats(fmaps, X, Y, 0, weights=split, block_rows=512),
    ):
        _agree(a, b, "float64")
    w = BootstrapWeights(seed_entropy=3, replicates=(0, 1, 2, 3), n=4000)
    a = sums.block_stats(fmaps[0], X, Y, 0, weights=w, block_rows=512, device=GPU)
    b = sums.block_stats(fmaps[0], X, Y, 0, weights=w, block_rows=512)
    _agree(a, b, "float64")


def test_gpu_sums_come_back_once_per_task(monkeypatch):
    X, Y = _data(6000)
    fmap = make_feature_map("rbf", 4, 32, seed=0)
    copies = []
    real = sums.to_host
    monkeypatch.setattr(sums, "to_host", lambda a: copies.append(type(a).__module__) or real(a))
    monkeypatch.setattr(sums, "DEVICE_MAX_ROWS", 256)  # 24 sub-blocks of 256 rows
    sums.block_stats(fmap, X, Y, 0, block_rows=256, device=GPU)
    # one copy per statistic of the task, all from the device, not one per sub-block
    assert len(copies) == len(FIELDS) and all(m.startswith("cupy") for m in copies)


def test_gpu_memory_budget_is_respected(monkeypatch):
    X, Y = _data(200_000, d=10, k=1)
    fmap = make_feature_map("rbf", 10, 1024, seed=0)
    budget = 256 * 2**20  # pretend the GPU has 256 MiB free
    monkeypatch.setattr(type(GPU), "free_memory", lambda self: budget)
    pool = cp.get_default_memory_pool()
    cp.cuda.Device(GPU.index).synchronize()
    pool.free_all_blocks()
    stats = sums.block_stats(fmap, X, Y, 0, dtype="float32", block_rows=8192, device=GPU)
    rows = sums.device_block_rows(8192, 1024 + 2, "float32", 1, budget)
    # the pool grew to the sub-blocks' share of the budget, the input block and the map's
    # parameters, not to the n × D features of the block
    inputs = X.nbytes + Y.nbytes + 2 * fmap.weights.nbytes
    assert pool.total_bytes() <= sums.DEVICE_MEMORY_FRACTION * budget + inputs + 16 * 2**20
    assert rows < X.shape[0] and stats.n[0] == X.shape[0]


def test_gpu_stats_graph_equals_cpu():
    import dask
    import dask.array as da

    from bigkernel.graph.stream import stats_graph
    from bigkernel.runtime import compute

    X, Y = _data(9000)
    Xd, Yd = da.from_array(X, chunks=(2048, 4)), da.from_array(Y, chunks=(2048, 2))
    fmap = make_feature_map("rbf", 4, 64, seed=1)
    with dask.config.set(scheduler="threads", num_workers=2):
        (gpu,) = compute(stats_graph(Xd, Yd, fmap, block_rows=512, device=GPU))
        (cpu,) = compute(stats_graph(Xd, Yd, fmap, block_rows=512))
    _agree(gpu, cpu, "float64")


def test_gpu_eigh_of_a_large_system_equals_the_host():
    from bigkernel.numerics.primal import EIGH_DEVICE_MIN_FEATURES, symmetric_eigh

    D = EIGH_DEVICE_MIN_FEATURES + 64
    A = np.random.default_rng(0).standard_normal((D, D // 4))
    G = A @ A.T + np.eye(D)
    s, V = symmetric_eigh(G, GPU)
    np.testing.assert_allclose(s, np.linalg.eigvalsh(G), rtol=1e-9, atol=1e-9 * s.max())
    np.testing.assert_allclose((V * s) @ V.T, G, atol=1e-8 * s.max())
