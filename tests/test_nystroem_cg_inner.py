"""The exact preconditioner's inner matrix formed in the moments pass (NystroemRidge(solver="cg")
when every training row is sampled), and the row chunks of in-memory inputs.

References: dense numpy (``T⁻ᵀ K̃ᵀWK̃ T⁻¹ / n_w`` by triangular solves), and the client's
sketch-panel build of the same preconditioner.
"""

import dask.array as da
import numpy as np
import pytest
from scipy.linalg import solve_triangular

import bigkernel.solvers.nystroem_cg as cg_module
from bigkernel import NystroemRidge
from bigkernel.kernels.factory import make_kernel
from bigkernel.numerics.falkon import FalkonPreconditioner, factor_kmm
from bigkernel.numerics.nystroem_block import centred_inner, kernel_block_products, sketch_panels
from bigkernel.numerics.nystroem_features import NystroemMap
from bigkernel.numerics.splits import HoldoutSplit
from bigkernel.runtime import ROW_ALIGN
from bigkernel.solvers.nystroem_cg import SPLIT_PARTS, split_rows

pytestmark = pytest.mark.numerics


def _data(n, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=n)
    return X, y


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_moments_pass_inner_equals_the_dense_centred_formula(dtype):
    """Two blocks summed (weights with zeros, held-out rows): g as without ``factor``, and the
    centred inner matrix as dense triangular solves of the pass's own kernel values."""
    X, y = _data(700)
    Y = np.column_stack([y, 2 * y + 1])
    rng = np.random.default_rng(1)
    kernel = make_kernel("rbf", gamma=0.3)
    C = X[rng.choice(700, 40, replace=False)]
    fmap = NystroemMap.raw(kernel, C)
    w = rng.uniform(0, 2, size=700)
    w[::7] = 0.0
    split = HoldoutSplit(3, 0.2)
    T, _ = factor_kmm(kernel(C, C))

    def block(lo, hi, **kw):
        return kernel_block_products(
            fmap, None, split, lambda a, b: w[None, a:b], X[lo:hi], Y[lo:hi], lo, dtype=dtype, **kw
        )

    out = block(0, 300, factor=T, panel_rows=64) + block(300, 700, factor=T, panel_rows=64)
    plain = block(0, 300) + block(300, 700)
    np.testing.assert_allclose(out.g, plain.g, rtol=1e-12, atol=1e-12 * np.abs(plain.g).max())
    np.testing.assert_array_equal(out.sums, plain.sums)
    assert plain.inner is None and out.inner.shape == (40, 40)

    K = np.asarray(fmap.transform_unscaled(X, dtype), dtype=np.float64)  # the passes' kernel values
    wt = np.where(split.groups(0, 700) == 1, 0.0, w)
    n_w = wt.sum()
    Kc = K - wt @ K / n_w
    Yref = solve_triangular(T, (np.sqrt(wt)[:, None] * Kc).T, trans="T", lower=False)
    ref = Yref @ Yref.T / n_w
    P = centred_inner(T, out.inner, out.g[:, 0], n_w)
    np.testing.assert_allclose(P, ref, rtol=0, atol=1e-10 * np.abs(ref).max())
    np.testing.assert_array_equal(P, P.T)

    # the preconditioner of this inner matrix is the sketch build's over the same (all) rows
    keep = wt > 0
    panels = sketch_panels(fmap, X[keep], wt[keep], wt @ K / n_w, panel_rows=128, dtype=dtype)
    alphas = np.array([1e-3, 1.0])
    a = FalkonPreconditioner.from_inner(T, P, alphas, n_w, 0.0)
    b = FalkonPreconditioner.build(kernel(C, C), alphas, n_w, jitter=factor_kmm(kernel(C, C))[1], sketch=panels)
    for c in range(2):
        np.testing.assert_allclose(a.factor(c), b.factor(c), rtol=1e-8, atol=1e-10)


def test_the_inner_matrix_in_the_pass_gives_the_client_builds_model(monkeypatch):
    """The exact route formed in the moments pass or on the client from the sampled rows: the
    same preconditioner, so the same iterations and (to CG's tolerance) the same model."""
    X, y = _data(6000)
    w = np.random.default_rng(2).uniform(0.5, 2.0, size=len(X))
    kw = dict(gamma=0.3, n_components=200, landmarks="uniform", random_state=0, solver="cg", tol=1e-10,
              max_iter=200, alpha=[1e-3, 1e-1, 10.0])  # fmt: skip
    in_pass = NystroemRidge(**kw).fit(X, y, sample_weight=w)
    monkeypatch.setattr(cg_module, "INNER_IN_PASS_BYTES", 0)
    client = NystroemRidge(**kw).fit(X, y, sample_weight=w)
    assert in_pass.solver_info_["inner_in_pass"] and not client.solver_info_["inner_in_pass"]
    info_a, info_b = in_pass.solver_info_, client.solver_info_
    assert info_a["preconditioner_rows"] == info_b["preconditioner_rows"] == in_pass.n_samples_fit_
    assert abs(in_pass.n_iter_ - client.n_iter_) <= 1 and in_pass.n_iter_ <= 3  # exact: 1–2 iterations
    assert info_a["passes"] == in_pass.n_iter_ + 1  # the moments pass built it: no extra pass
    Z, _ = _data(500, seed=9)
    a, b = in_pass.predict(Z), client.predict(Z)
    assert np.abs(a - b).max() / np.abs(b).max() < 1e-8
    assert in_pass.alpha_ == client.alpha_
    np.testing.assert_allclose(in_pass.validation_scores_, client.validation_scores_, rtol=1e-8)


def test_inputs_of_few_chunks_are_split_whatever_the_scheduler():
    n = 5 * ROW_ALIGN
    X = da.from_array(np.zeros((n, 3)), chunks=(n, 3))
    Y = da.from_array(np.zeros((n, 1)), chunks=(n, 1))
    Xs, Ys = split_rows(X, Y)
    assert Xs.numblocks[0] == SPLIT_PARTS and Xs.chunks[0] == Ys.chunks[0]
    assert min(Xs.chunks[0][:-1]) >= ROW_ALIGN
    np.testing.assert_array_equal(Xs.compute(), X.compute())
    small = da.from_array(np.zeros((ROW_ALIGN, 3)), chunks=(ROW_ALIGN, 3))
    assert split_rows(small, small)[0].numblocks[0] == 1  # chunks of at least ROW_ALIGN rows
    many = X.rechunk({0: ROW_ALIGN})
    assert split_rows(many, many)[0].chunks == many.chunks  # already enough chunks
