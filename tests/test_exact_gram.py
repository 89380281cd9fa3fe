"""Blocked Gram operator: tiles, the budget plan, one compute per matvec, and a memory check
that the cache (and everything else the operator holds) stays within its byte budget."""

import tracemalloc

import dask
import numpy as np
import pytest

from bigkernel.errors import ParameterError
from bigkernel.graph.gram_matvec import balanced_groups
from bigkernel.kernels import RBF, Laplacian, Matern, Polynomial, make_kernel
from bigkernel.numerics.device_gram import DeviceGram
from bigkernel.numerics.gram_tiles import (
    GramTiler,
    KernelExpansion,
    LocalGram,
    plan_gram,
    tile_bytes,
    tile_edges,
    tile_matvec,
    upper_tiles,
)
from bigkernel.numerics.namespace import namespace, to_host
from bigkernel.solvers import gram_operator
from bigkernel.solvers.base import GramOperator
from bigkernel.solvers.gram_operator import DistributedGram
from tests._tolerance import assert_within, product_bound

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set

MiB = 2**20
KERNELS = [
    RBF(gamma=0.3),
    RBF(length_scale=(0.5, 1.0, 2.0, 1.5)),
    RBF(precision=np.diag([1.0, 2.0, 0.5, 1.0]) + 0.1),
    2.5 * RBF(gamma=0.7),
    Laplacian(gamma=0.4),
    Matern(length_scale=1.3, nu=2.5),
    Polynomial(degree=2, gamma=0.2, coef0=1.0),
    RBF(gamma=0.2) + Matern(length_scale=2.0, nu=0.5),
]


def _assemble(tiler, n, size, dtype=np.float64):
    e = tile_edges(n, size)
    K = np.zeros((n, n))
    for i, j in upper_tiles(len(e) - 1):
        r, c = slice(e[i], e[i + 1]), slice(e[j], e[j + 1])
        T = tiler.tile(r, c, dtype)
        K[r, c], K[c, r] = T, T.T
    return K


def test_tile_edges_and_upper_tiles():
    for n, s in [(1, 1), (10, 3), (1000, 256), (4097, 2048)]:
        e = tile_edges(n, s)
        assert e[0] == 0 and e[-1] == n and np.all(np.diff(e) >= 1) and np.diff(e).max() <= s
    assert len(upper_tiles(5)) == 15 and all(i <= j for i, j in upper_tiles(5))


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_tiles_assemble_the_kernel_matrix_exactly_symmetric(kernel, rng):
    X, Z = rng.normal(size=(300, 4)), rng.normal(size=(17, 4))
    tiler = GramTiler(kernel, X)
    K = _assemble(tiler, 300, 128)
    ref = kernel(X)
    np.testing.assert_allclose(K, ref, rtol=1e-12, atol=1e-12)
    assert np.array_equal(K, K.T)
    np.testing.assert_allclose(tiler.cross(Z), kernel(Z, X), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tiler.columns([3, 250]), ref[:, [3, 250]], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tiler.diag(), np.diag(ref), rtol=1e-12)
    K32 = _assemble(tiler, 300, 128, np.float32)
    np.testing.assert_allclose(K32, ref, rtol=2e-6, atol=2e-7)


def test_rbf_fast_path_is_used_and_accurate_far_from_the_origin(rng):
    X = rng.normal(size=(200, 3)) + 1e3  # large norms: centring keeps the augmented GEMM accurate
    tiler = GramTiler(RBF(gamma=0.5), X)
    assert tiler.fast
    np.testing.assert_allclose(tiler.dense(), RBF(gamma=0.5)(X), rtol=1e-9, atol=1e-12)
    assert not GramTiler(Laplacian(gamma=1.0), X).fast


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tile_matvec_adds_both_triangles(dtype, rng):
    X = rng.normal(size=(250, 3))
    tiler = GramTiler(RBF(gamma=0.2), X)
    V = rng.normal(size=(250, 3))
    e = tile_edges(250, 64)
    out = np.zeros_like(V)
    for i, j in upper_tiles(len(e) - 1):
        r, c = slice(e[i], e[i + 1]), slice(e[j], e[j + 1])
        tile_matvec(tiler.tile(r, c, dtype), V, out, r, c)
    # each entry of a float32 tile is rounded (relative ε₃₂/2) and the products are summed in
    # another order: the error of each output is bounded by that times (|K||V|)ᵢ, not |KV|ᵢ
    K = RBF(gamma=0.2)(X)
    u = 1e-12 if dtype == np.float64 else float(np.finfo(np.float32).eps)
    assert_within(out, K @ V, product_bound(K, V, u))


def test_kernel_expansion_matches_dense(rng):
    X, Z = rng.normal(size=(500, 3)), rng.normal(size=(130, 3))
    k = Matern(length_scale=1.0, nu=1.5)
    coef, b = rng.normal(size=(500, 2)), np.array([1.0, -2.0])
    f = KernelExpansion(GramTiler(k, X), coef, b, block=64)
    # blocks of 64 columns sum in another order than one GEMM: an rtol on k(Z, X) @ coef, whose
    # entries cancel, measured 0.4-0.6 of 1e-12 depending on OpenBLAS's kernels; bound each
    # entry by the scale of its terms instead
    Kz = k(Z, X)
    tol = product_bound(Kz, coef, 1e-12) + 1e-12 * np.abs(b)
    assert_within(f(Z), Kz @ coef + b, tol)


def test_balanced_groups_cover_in_order():
    costs = [5, 1, 1, 1, 1, 1, 10, 2]
    groups = balanced_groups(costs, 3)
    assert [i for g in groups for i in g] == list(range(8))
    assert len(groups) <= 3 and all(g for g in groups)
    assert balanced_groups([1.0], 8) == [[0]]


# ------------------------------------------------------------------ budget plan
@pytest.mark.parametrize("budget_mib", [8, 32, 64, 256, 4096])
@pytest.mark.parametrize("dtype", ["auto", "float64", "float32"])
def test_plan_never_exceeds_the_budget(budget_mib, dtype):
    n, d, budget = 6000, 10, budget_mib * MiB
    try:
        p = plan_gram(n, d, budget, dtype=dtype, n_rhs=3, threads=2, reserve_bytes=MiB)
    except ParameterError as exc:
        assert "at least" in str(exc)
        return
    item = np.dtype(p.cache_dtype).itemsize
    assert p.cache_bytes == tile_bytes(p.edges, p.tiles[: p.n_cached], item) <= p.cache_budget
    assert p.cache_bytes + p.work_bytes + MiB <= budget
    if p.n_cached < len(p.tiles):  # maximal: the next tile would not fit
        assert tile_bytes(p.edges, p.tiles[: p.n_cached + 1], item) > p.cache_budget
    if dtype == "auto":
        full64 = tile_bytes(p.edges, p.tiles, 8)
        assert p.cache_dtype == ("float64" if full64 <= p.cache_budget else "float32")


def test_plan_caches_more_with_more_budget_and_says_what_is_missing():
    cached = [plan_gram(6000, 10, b * MiB, threads=2).cached_fraction for b in (16, 48, 96, 512)]
    assert cached == sorted(cached) and cached[0] < 1.0 and cached[-1] == 1.0
    with pytest.raises(ParameterError, match="at least .* bytes are needed"):
        plan_gram(100_000, 10, 2 * MiB, threads=2)


# ------------------------------------------------------------------ operator
@pytest.mark.parametrize(
    "budget,dtype",
    [(512 * MiB, "auto"), (12 * MiB, "float64"), (8 * MiB, "float32"), (5 * MiB, "auto")],
    ids=["all-cached", "partial-f64", "partial-f32", "mostly-recomputed"],
)
def test_operator_matvec_equals_dense(budget, dtype, rng):
    X = rng.uniform(size=(1500, 5))
    k = RBF(gamma=0.5)
    op = DistributedGram(k, X, memory_budget=budget, dtype=dtype, n_rhs=2)
    V = rng.normal(size=(1500, 2))
    tol = 1e-12 if op.plan.cache_dtype == "float64" else 1e-6
    K = k(X)
    np.testing.assert_allclose(op.matvec(V), K @ V, rtol=tol, atol=tol * np.abs(K @ V).max())
    np.testing.assert_allclose(op.matvec(V[:, 0]), K @ V[:, 0], rtol=tol, atol=tol * 100)
    assert op.n_matvec == 2 and op.info()["n_matvec"] == 2


def test_operator_runs_one_compute_per_matvec(monkeypatch, rng):
    calls = []
    real = gram_operator.compute
    monkeypatch.setattr(gram_operator, "compute", lambda *g, **kw: calls.append(kw.get("label")) or real(*g, **kw))
    op = DistributedGram(
        make_kernel("laplacian", gamma=1.0), rng.normal(size=(700, 3)), memory_budget=3 * MiB, dtype="float64"
    )
    assert 0 < op.plan.n_cached < len(op.plan.tiles)
    for _ in range(3):
        op.matvec(rng.normal(size=(700, 1)))
    assert calls == ["gram-matvec"] * 3


def test_threaded_scheduler_gives_the_same_matvec(rng):
    X, V = rng.uniform(size=(2000, 4)), rng.normal(size=(2000, 3))
    # float64 tiles: the plans differ (the per-thread workspace), so float32 caches would too
    ref = DistributedGram(RBF(gamma=1.0), X, memory_budget=12 * MiB, dtype="float64").matvec(V)
    with dask.config.set(scheduler="threads", num_workers=2):
        op = DistributedGram(RBF(gamma=1.0), X, memory_budget=12 * MiB, dtype="float64")
        out = op.matvec(V)
    assert 0 < op.plan.n_cached < len(op.plan.tiles)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("budget_mib", [24, 64])
def test_gram_cache_and_operator_stay_within_the_byte_budget(budget_mib, rng):
    """tracemalloc sees every numpy allocation: the peak while building the cache and running
    matvecs (cached and recomputed tiles) must not exceed the budget the plan was given."""
    n, budget = 4000, budget_mib * MiB  # the whole Gram matrix is 61 MiB in float64 tiles
    X, V = rng.uniform(size=(n, 10)), rng.normal(size=(n, 2))
    # warm up: first-use imports allocate Python objects that tracemalloc would count
    DistributedGram(RBF(gamma=0.5), X[:300], memory_budget=4 * MiB, n_rhs=2).matvec(V[:300])
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        op = DistributedGram(RBF(gamma=0.5), X, memory_budget=budget, n_rhs=2)
        for _ in range(2):
            op.matvec(V)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    p = op.plan
    assert p.cache_bytes <= p.cache_budget
    assert 0 < p.n_cached <= len(p.tiles)
    if budget_mib == 24:
        assert p.n_cached < len(p.tiles)  # this budget must force recomputation
    assert peak <= budget, f"peak {peak / MiB:.1f} MiB > budget {budget_mib} MiB ({op.info()})"


def test_the_three_gram_operators_implement_the_protocol_with_one_matvec(rng):
    r"""DistributedGram, LocalGram and DeviceGram (here on the numpy namespace) are
    :class:`GramOperator`\ s and give the same K V, columns and diagonal."""
    X = rng.normal(size=(300, 3))
    V = rng.normal(size=(300, 2))
    kernel = RBF(gamma=0.5)
    K = GramTiler(kernel, X).dense()
    ops = [
        DistributedGram(kernel, X, memory_budget=8 * MiB, dtype="float64", n_rhs=2),
        LocalGram(kernel, X, 8 * MiB),
        DeviceGram(kernel, X, xp=namespace(X), memory_budget=8 * MiB, dtype="float64", n_rhs=2),
    ]
    idx = np.array([0, 17, 299])
    for op in ops:
        assert isinstance(op, GramOperator), type(op).__name__
        assert op.n == 300
        np.testing.assert_allclose(to_host(op.matvec(V)), K @ V, rtol=1e-12, atol=1e-11)
        np.testing.assert_allclose(to_host(op.columns(idx)), K[:, idx], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(to_host(op.diag()), np.diag(K), rtol=1e-12)
        assert isinstance(op.info(), dict)
        op.close()


def test_the_gram_operator_choice_is_one_function(rng):
    """solvers.budget.gram_operator: in a task the in-process LocalGram, for a host fit the
    DistributedGram, on a device namespace the DeviceGram (what ExactKernelRidge and the exact
    replicate plan both call)."""
    from bigkernel.devices import CPU
    from bigkernel.solvers.budget import gram_operator as choose

    X = rng.normal(size=(120, 3))
    kw = dict(device=CPU, memory_budget=8 * MiB, dtype="float64", n_rhs=1, reserve=0)
    assert isinstance(choose(RBF(gamma=0.5), X, in_task=True, **kw), LocalGram)
    assert isinstance(choose(RBF(gamma=0.5), X, **kw), DistributedGram)


def test_the_exact_solver_gives_the_estimator_fit(rng):
    """ExactSolver.prepare → fit is ExactKernelRidge's fit (the estimator is a shell over it)."""
    from bigkernel import ExactKernelRidge
    from bigkernel.data.sources import as_dataset
    from bigkernel.solvers.base import Solution
    from bigkernel.solvers.exact import ExactDetails, ExactSolver

    X, y = rng.normal(size=(150, 3)), rng.normal(size=150)
    est = ExactKernelRidge(alpha=0.1, gamma=0.5, random_state=0, standardize=True).fit(X, y)
    solver = ExactSolver.from_params(est.get_params())
    sol = solver.fit(solver.prepare(as_dataset(X, y)))
    assert isinstance(sol, Solution) and isinstance(sol.details, ExactDetails)
    np.testing.assert_array_equal(sol.coef[:, 0], est.dual_coef_)
    assert sol.alpha == est.alpha_
