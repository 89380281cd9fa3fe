"""Bootstrap counts: exactness, chunking independence, seeds, distribution; percentile band."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from bigkernel.errors import ParameterError
from bigkernel.numerics.resample import (
    BLOCK_ROWS,
    Band,
    BootstrapWeights,
    bootstrap_counts,
    bootstrap_counts_batch,
    percentile_band,
    replicate_seed,
    replicate_seeds,
)

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set


def _by_ranges(seed, r, n, edges, method="multinomial", block_rows=BLOCK_ROWS):
    return np.concatenate(
        [bootstrap_counts(seed, r, n, a, b, method, block_rows=block_rows) for a, b in zip(edges[:-1], edges[1:])]
    )


def _random_edges(rng, n, n_cuts):
    cuts = np.sort(rng.choice(np.arange(1, n), size=n_cuts, replace=False))
    return [0, *cuts.tolist(), n]


@pytest.mark.parametrize("n", [1, 7, 100, 1000, 1037])
@pytest.mark.parametrize("block_rows", [1, 64, 100, BLOCK_ROWS])
def test_counts_sum_to_n_and_are_integers(n, block_rows):
    for r in range(3):
        c = bootstrap_counts(11, r, n, 0, n, block_rows=block_rows)
        assert c.dtype == np.float64 and c.shape == (n,)
        assert c.sum() == n
        assert np.all(c >= 0) and np.all(c == np.round(c))


@pytest.mark.parametrize("method", ["multinomial", "poisson"])
def test_counts_identical_under_any_split(method):
    # Small virtual blocks so ranges start/stop inside blocks and span several of them.
    n, block_rows = 1037, 100
    rng = np.random.default_rng(0)
    full = bootstrap_counts(5, 2, n, 0, n, method, block_rows=block_rows)
    for n_cuts in (1, 9, 40):
        split = _by_ranges(5, 2, n, _random_edges(rng, n, n_cuts), method, block_rows)
        assert split.tobytes() == full.tobytes()
    # Uneven "dask chunks" at the default block size.
    n = 3 * BLOCK_ROWS + 123
    full = bootstrap_counts(5, 0, n, 0, n, method)
    edges = [0, 1000, BLOCK_ROWS - 1, BLOCK_ROWS + 5, 2 * BLOCK_ROWS + 77, n - 1, n]
    assert _by_ranges(5, 0, n, edges, method).tobytes() == full.tobytes()
    assert bootstrap_counts(5, 0, n, 10, 10, method).shape == (0,)


def test_replicate_seed_does_not_depend_on_B():
    few, many = replicate_seeds(3, 4), replicate_seeds(3, 10)
    spawned = np.random.SeedSequence(3).spawn(10)
    for r in range(4):
        assert few[r].generate_state(4).tolist() == many[r].generate_state(4).tolist()
        assert few[r].generate_state(4).tolist() == spawned[r].generate_state(4).tolist()
    assert replicate_seed(3, 7).spawn_key == (7,)
    # A SeedSequence root with a spawn key keeps it as prefix, and ints equal SeedSequence(int).
    assert replicate_seed(np.random.SeedSequence(3, spawn_key=(1,)), 2).spawn_key == (1, 2)
    n = 500
    a = bootstrap_counts(np.random.SeedSequence(3), 1, n, 0, n, block_rows=64)
    assert a.tobytes() == bootstrap_counts(3, 1, n, 0, n, block_rows=64).tobytes()


def test_batch_and_weights_provider_match_single_replicates():
    n = 300
    small = BootstrapWeights(seed_entropy=9, replicates=(0, 1, 2), n=n, block_rows=64)
    large = BootstrapWeights(seed_entropy=9, replicates=tuple(range(8)), n=n, block_rows=64)
    w_small, w_large = small(17, 250), large(17, 250)
    assert w_small.shape == (3, 233) and w_large.shape == (8, 233)
    assert w_small.tobytes() == w_large[:3].tobytes()  # extending B keeps replicates identical
    one = BootstrapWeights(seed_entropy=9, replicates=(6,), n=n, block_rows=64)
    assert one(17, 250)[0].tobytes() == w_large[6].tobytes()
    batch = bootstrap_counts_batch(9, [5, 1], n, 0, n, block_rows=64)
    assert batch[0].tobytes() == bootstrap_counts(9, 5, n, 0, n, block_rows=64).tobytes()
    assert batch[1].tobytes() == bootstrap_counts(9, 1, n, 0, n, block_rows=64).tobytes()
    # Picklable and usable after a round trip, as a dask task argument must be.
    again = pickle.loads(pickle.dumps(large))
    assert again == large and again(0, n).tobytes() == large(0, n).tobytes()
    assert not np.array_equal(w_large[0], w_large[1])


@pytest.mark.parametrize("block_rows", [BLOCK_ROWS, 1000])
def test_counts_distribution(block_rows):
    # Multinomial(n, 1/n): row counts ~ Binomial(n, 1/n) ≈ Poisson(1); P(0) ≈ e^-1, var ≈ 1.
    n = 200_000
    c = bootstrap_counts(123, 0, n, 0, n, block_rows=block_rows)
    zero_se = np.sqrt(np.exp(-1) * (1 - np.exp(-1)) / n)  # ≈ 0.0011
    assert abs(np.mean(c == 0) - np.exp(-1)) < 5 * zero_se
    assert abs(np.mean(c == 1) - np.exp(-1)) < 5 * zero_se
    assert abs(c.var() - (1 - 1 / n)) < 0.03
    # Counts of two replicates are (nearly) uncorrelated.
    c2 = bootstrap_counts(123, 1, n, 0, n, block_rows=block_rows)
    assert abs(np.corrcoef(c, c2)[0, 1]) < 0.02
    if block_rows == 1000:
        # Block totals: Multinomial(n, block/n) → variance ≈ block_rows (1 - block_rows/n).
        totals = c.reshape(-1, block_rows).sum(axis=1)
        assert totals.sum() == n
        expected_var = block_rows * (1 - block_rows / n)
        assert 0.6 * expected_var < totals.var() < 1.5 * expected_var


def test_poisson_is_an_approximation():
    n = 100_000
    w = bootstrap_counts(4, 0, n, 0, n, "poisson")
    assert w.sum() != n  # not exact: the total only concentrates around n
    assert abs(w.sum() - n) < 6 * np.sqrt(n)
    assert abs(w.var() - 1.0) < 0.03 and abs(np.mean(w == 0) - np.exp(-1)) < 0.006
    assert not np.array_equal(w, bootstrap_counts(4, 0, n, 0, n, "multinomial"))


def test_parameter_errors():
    with pytest.raises(ParameterError, match="stop"):
        bootstrap_counts(0, 0, 10, 5, 11)
    with pytest.raises(ParameterError, match="method"):
        bootstrap_counts(0, 0, 10, 0, 10, "bayesian")
    with pytest.raises(ParameterError, match="random_state=None"):
        bootstrap_counts(None, 0, 10, 0, 10)
    with pytest.raises(ParameterError, match="replicate"):
        bootstrap_counts(0, -1, 10, 0, 10)
    with pytest.raises(ParameterError, match="n must be"):
        BootstrapWeights(seed_entropy=0, replicates=(0,), n=0)


def test_percentile_band_matches_numpy():
    rng = np.random.default_rng(1)
    p = rng.normal(size=(201, 13, 2))
    band = percentile_band(p, 0.9)
    assert isinstance(band, Band)
    assert band.lower.tobytes() == np.percentile(p, 5, axis=0).tobytes()
    assert band.upper.tobytes() == np.percentile(p, 95, axis=0).tobytes()
    assert band.mean.tobytes() == p.mean(axis=0).tobytes()
    band95 = percentile_band(p, 0.95)
    assert np.array_equal(band95.lower, np.percentile(p, 2.5, axis=0, method="linear"))
    assert np.array_equal(band95.upper, np.percentile(p, 97.5, axis=0, method="linear"))
    # Linear interpolation between order statistics, by hand: B=11 → 5 % at rank 0.5.
    v = np.arange(11.0)[:, None] ** 2
    lo, hi = percentile_band(v, 0.9)[1:]
    assert lo[0] == 0.5 * (0 + 1) and hi[0] == 0.5 * (81 + 100)
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ParameterError, match="confidence_level"):
            percentile_band(p, bad)
