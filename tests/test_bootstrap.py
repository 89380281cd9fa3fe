"""bootstrap(): reference refits, resume after SIGKILL, refusal of foreign stores, band width,
a real LocalCluster, load_bootstrap, eval_grid and the band plot. Real zarr stores on disk."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import dask.array as da
import numpy as np
import pytest
import zarr

from bigkernel import RandomFeatureRidge
from bigkernel.bands.bootstrap import (
    BootstrapResult,
    bootstrap,
    default_batch_size,
    eval_grid,
    load_bootstrap,
)
from bigkernel.data.synthetic import SyntheticSpec, generate_rows, true_function
from bigkernel.errors import IncompleteStoreError, ParameterError, StoreMismatchError
from bigkernel.io.band_store import open_store
from bigkernel.numerics.resample import bootstrap_counts, percentile_band


def sine(n, noise=0.3, seed=0):
    a = generate_rows(SyntheticSpec("sine", n, 1, noise, seed), 0, n)
    return a[:, :1], a[:, 1]


def rff(**kw):
    params = {"length_scale": 0.1, "n_components": 48, "alpha": 1.0, "random_state": 5, "chunk_rows": 96, **kw}
    return RandomFeatureRidge(**params)


# inside the training range of every sine(n >= 100) sample here: no ExtrapolationWarning
X_EVAL = np.linspace(0.02, 0.97, 25)[:, None]


def _assert_same_result(a: BootstrapResult, b: BootstrapResult) -> None:
    for name in ("mean", "lower", "upper"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert np.array_equal(a.predictions.compute(), b.predictions.compute())


# --------------------------------------------------------------------------------------------
def test_replicates_equal_refits_on_repeated_rows(tmp_path):
    """Replicate r == RandomFeatureRidge with the same feature map fitted on np.repeat(rows)."""
    n, d, B, seed = 300, 3, 5, 11
    a = generate_rows(SyntheticSpec("friedman1", n, 5, 0.5, 1), 0, n)
    X, y = a[:, :d], np.column_stack([a[:, 5], np.sin(a[:, 0])])  # two targets
    E = 0.9 * X[:20] + 0.05  # inside the training range
    est = RandomFeatureRidge(gamma=0.5, n_components=32, alpha=0.3, random_state=3, chunk_rows=64, dtype="float64")
    res = bootstrap(est, X, y, E, n_bootstraps=B, random_state=seed, store=tmp_path / "bs.zarr", batch_size=2)
    assert res.n_computed == B and res.n_reused == 0 and res.random_state == seed
    preds = res.predictions.compute()
    assert preds.shape == (B, 20, 2) and res.mean.shape == (20, 2)
    coef = open_store(res.store).coef_dask().compute()
    for r in range(B):
        counts = bootstrap_counts(seed, r, n, 0, n).astype(int)
        assert counts.sum() == n
        ref = RandomFeatureRidge(gamma=0.5, n_components=32, alpha=0.3, random_state=3, dtype="float64").fit(
            np.repeat(X, counts, axis=0), np.repeat(y, counts, axis=0)
        )
        np.testing.assert_allclose(preds[r], ref.predict(E), rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(coef[r, :32].T, ref.coef_, rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(coef[r, 32], ref.intercept_, rtol=1e-8, atol=1e-8)
    band = percentile_band(preds, 0.9)
    assert np.array_equal(res.lower, band.lower) and np.array_equal(res.upper, band.upper)
    assert np.array_equal(res.X_eval, E)


def test_one_dimensional_y_dask_input_and_batch_independence(tmp_path, monkeypatch):
    X, y = sine(250)
    est = rff(alpha=0.5)
    base = bootstrap(est, X, y, X_EVAL, n_bootstraps=6, random_state=2, store=tmp_path / "np.zarr", batch_size=6)
    assert base.mean.shape == (25,) and base.predictions.shape == (6, 25)
    # the batch a replicate runs in does not change its bytes
    other = bootstrap(est, X, y, X_EVAL, n_bootstraps=6, random_state=2, store=tmp_path / "np1.zarr", batch_size=1)
    _assert_same_result(base, other)
    # dask input with the same row chunks, shared by the batches or re-read by each: same bytes
    Xd, yd = da.from_array(X, chunks=(96, 1)), da.from_array(y, chunks=96)
    lazy = bootstrap(est, Xd, yd, X_EVAL, n_bootstraps=6, random_state=2, store=tmp_path / "dask.zarr", batch_size=4)
    _assert_same_result(base, lazy)
    monkeypatch.setattr("bigkernel.bands.bootstrap.SHARED_DATA_BYTES", 0)
    reread = bootstrap(
        est, Xd, yd, X_EVAL, n_bootstraps=6, random_state=2, store=tmp_path / "dask-reread.zarr", batch_size=4
    )
    _assert_same_result(base, reread)
    from bigkernel.bands.bootstrap import _batch_dataset
    from bigkernel.data.sources import as_dataset

    ds = as_dataset(Xd, yd)
    a, b = _batch_dataset(ds, 0, True), _batch_dataset(ds, 1, True)
    keys = [set(dict(x.X.__dask_graph__())) for x in (ds, a, b)]
    assert not (keys[0] & keys[1]) and not (keys[1] & keys[2])  # each batch reads on its own


def test_batches_are_chained_to_bound_memory(tmp_path, monkeypatch):
    """Batch b's data pass waits for batch b - window: window = ceil(worker threads / chunks),
    so batches land one after the other (checkpointed) and few are in memory at once."""
    import dask

    import bigkernel.bands.bootstrap as bmod

    graphs = []

    def capture(*tasks, **kwargs):
        graphs.append(tasks)
        return bmod_compute(*tasks, **kwargs)

    bmod_compute = bmod.compute
    monkeypatch.setattr(bmod, "compute", capture)
    from bigkernel.bands.checkpoint import batches_in_flight
    from bigkernel.runtime import local_threads

    assert [batches_in_flight(4, c) for c in (1, 2, 3, 4, 8)] == [4, 2, 2, 1, 1]
    X, y = sine(200)  # 3 chunks of <= 96 rows
    window = batches_in_flight(local_threads(), 3)
    bootstrap(rff(), X, y, X_EVAL, n_bootstraps=8, random_state=1, store=tmp_path / "c.zarr", batch_size=2)
    (tasks,) = graphs
    dsk = {}
    for t in tasks:
        dsk.update(dict(t.__dask_graph__()))
    deps = {k: dask.core.get_dependencies(dsk, k) for k in dsk}

    def ancestors(key):
        seen, todo = set(), [key]
        while todo:
            for d in deps[todo.pop()]:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return seen

    replicate = {t.key: int(t.key.split("-")[2]) for t in tasks}  # bootstrap-replicate-<r>-...
    for key, r in replicate.items():
        earlier = {replicate[a] for a in ancestors(key) if a in replicate}
        batch = r // 2  # waits for batch - window, which waits for batch - 2 window, ...
        expected = {q for q in range(8) if q // 2 < batch and (batch - q // 2) % window == 0}
        assert earlier == expected, (r, earlier)
    assert any(replicate[a] for k in replicate for a in ancestors(k) if a in replicate)


# --------------------------------------------------------------------------------------------
_CHILD = textwrap.dedent("""
    import sys, time
    import dask
    from bigkernel.io import band_store as bootstrap_store
    from bigkernel.bands.bootstrap import bootstrap
    sys.path.insert(0, {tests!r})
    from test_bootstrap import X_EVAL, rff, sine

    original = bootstrap_store.BootstrapStore.write_replicate

    def slow_write(self, r, predictions, coef=None):
        time.sleep(0.15)  # widen the window in which the parent kills us
        original(self, r, predictions, coef)

    bootstrap_store.BootstrapStore.write_replicate = slow_write
    X, y = sine(240)
    with dask.config.set(scheduler="sync"):
        bootstrap(rff(), X, y, X_EVAL, n_bootstraps={B}, random_state=7, store={store!r},
                  batch_size=3)
    print("finished")
""")


def _done_count(path) -> int:
    try:
        return int((zarr.open_array(str(path), path="done", mode="r")[:] == 1).sum())
    except Exception:
        return -1


def test_resume_after_sigkill_is_bitwise_equal(tmp_path):
    B, path = 18, tmp_path / "killed.zarr"
    code = _CHILD.format(tests=os.path.dirname(__file__), B=B, store=str(path))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while _done_count(path) < 5:
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the child did not write replicates in time"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        out, _ = child.communicate()
    assert child.returncode == -signal.SIGKILL and b"finished" not in out
    done_at_kill = _done_count(path)
    assert 5 <= done_at_kill < B

    X, y = sine(240)
    resumed = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=B, random_state=7, store=path)
    assert resumed.n_reused == done_at_kill and resumed.n_computed == B - done_at_kill
    clean = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=B, random_state=7, store=tmp_path / "clean.zarr", batch_size=4)
    assert clean.n_computed == B
    _assert_same_result(resumed, clean)
    # a third run finds everything and computes nothing
    again = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=B, random_state=None, store=path)
    assert again.n_computed == 0 and again.n_reused == B and again.random_state == 7
    _assert_same_result(again, clean)


# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"random_state": 8}, "fingerprint.seed"),
        ({"data_seed": 1}, "fingerprint.data.digest"),
        ({"estimator": rff(alpha=2.0)}, "fingerprint.estimator.params.alpha"),
        ({"estimator": rff(random_state=6)}, "fingerprint.estimator.feature_map"),
        ({"estimator": rff(chunk_rows=64)}, "fingerprint.data.row_chunks.digest"),
        ({"X_eval": X_EVAL + 0.01}, "fingerprint.eval.digest"),
        ({"method": "poisson"}, "fingerprint.resampling.method"),
    ],
)
def test_store_of_another_job_is_refused(tmp_path, change, field):
    path = tmp_path / "bs.zarr"
    X, y = sine(200)
    first = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=4, random_state=7, store=path)
    before = open_store(path).done_mask().copy()
    change = dict(change)
    if "data_seed" in change:
        X, y = sine(200, seed=change.pop("data_seed"))
    kwargs = {"n_bootstraps": 4, "random_state": 7, "store": path, "X_eval": X_EVAL, "estimator": rff(), **change}
    with pytest.raises(StoreMismatchError, match=field.replace(".", r"\.")):
        bootstrap(kwargs.pop("estimator"), X, y, kwargs.pop("X_eval"), **kwargs)
    assert np.array_equal(open_store(path).done_mask(), before)
    assert np.array_equal(load_bootstrap(path).upper, first.upper)


# --------------------------------------------------------------------------------------------
def test_band_width_matches_fresh_samples(tmp_path):
    """Bootstrap band width vs the band of R refits on fresh data sets (small-size check)."""
    import dask
    from threadpoolctl import threadpool_limits

    n, B, R = 200, 100, 100
    est = rff(n_components=100, chunk_rows=None)
    X, y = sine(n, seed=0)
    # one BLAS thread per task: hundreds of tiny multi-threaded BLAS calls crawl (10x) on a
    # busy 2-core machine
    with dask.config.set(scheduler="threads", num_workers=2), threadpool_limits(1):
        res = bootstrap(est, X, y, X_EVAL, n_bootstraps=B, random_state=1, store=tmp_path / "bs.zarr")
        fresh = np.stack(
            [rff(n_components=100, chunk_rows=None).fit(*sine(n, seed=1000 + i)).predict(X_EVAL) for i in range(R)]
        )
    ref = percentile_band(fresh, 0.9)
    ratio = np.mean(res.upper - res.lower) / np.mean(ref.upper - ref.lower)
    assert 0.8 <= ratio <= 1.25, ratio  # the target; 0.91 here
    # and both bands are about the truth, not degenerate
    f = true_function("sine", X_EVAL)
    assert np.mean((res.lower <= f) & (f <= res.upper)) > 0.5
    assert 0.02 < np.mean(res.upper - res.lower) < 0.5


# --------------------------------------------------------------------------------------------
def test_local_cluster_gives_the_local_band(tmp_path):
    distributed = pytest.importorskip("distributed")
    X, y = sine(300)
    Xd, yd = da.from_array(X, chunks=(100, 1)), da.from_array(y, chunks=100)
    # interval="prediction": the original fit and its residual pass run on the cluster too
    local = bootstrap(
        rff(),
        Xd,
        yd,
        X_EVAL,
        n_bootstraps=8,
        random_state=3,
        store=tmp_path / "local.zarr",
        batch_size=2,
        interval="prediction",
    )
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        remote = bootstrap(
            rff(),
            Xd,
            yd,
            X_EVAL,
            n_bootstraps=8,
            random_state=3,
            store=tmp_path / "cluster.zarr",
            batch_size=2,
            client=client,
            interval="prediction",
        )
    assert remote.n_computed == 8
    np.testing.assert_array_equal(remote.data_min, X.min(axis=0))
    for name in ("mean", "lower", "upper", "confidence_lower", "confidence_upper"):
        np.testing.assert_allclose(getattr(remote, name), getattr(local, name), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------------
def test_load_bootstrap_and_incomplete_store(tmp_path):
    X, y = sine(200)
    res = bootstrap(
        rff(), X, y, X_EVAL, n_bootstraps=5, random_state=4, store=tmp_path / "a.zarr", confidence_level=0.8
    )
    back = load_bootstrap(res.store, confidence_level=0.8)
    assert back.n_computed == 0 and back.n_reused == 5 and back.random_state == 4
    _assert_same_result(res, back)
    assert np.array_equal(back.X_eval, X_EVAL) and back.method == "multinomial"
    wide = load_bootstrap(res.store, confidence_level=0.99)
    assert np.all(wide.upper - wide.lower >= back.upper - back.lower)
    zarr.open_array(res.store, path="done", mode="r+")[2] = 0  # as if replicate 2 was lost
    with pytest.raises(IncompleteStoreError, match="replicates 2"):
        load_bootstrap(res.store)
    # the temporary store default lives under the system temp dir
    tmp = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=2, random_state=4)
    folder = os.path.dirname(tmp.store)
    try:
        assert os.path.dirname(folder) == tempfile.gettempdir()
        assert os.path.basename(folder).startswith("bigkernel-bootstrap-")
        assert load_bootstrap(tmp.store).n_bootstraps == 2
    finally:
        shutil.rmtree(folder)


def test_parameters_and_unsupported_estimator(tmp_path):
    from sklearn.linear_model import Ridge

    X, y = sine(100)
    with pytest.raises(NotImplementedError, match="does not support Ridge"):
        bootstrap(Ridge(), X, y, X_EVAL, n_bootstraps=2, store=tmp_path / "r.zarr")
    for kwargs, match in [
        ({"n_bootstraps": 0}, "n_bootstraps"),
        ({"confidence_level": 1.0}, "confidence_level"),
        ({"method": "bayes"}, "method"),
        ({"batch_size": 0}, "batch_size"),
    ]:
        with pytest.raises(ParameterError, match=match):
            bootstrap(rff(), X, y, X_EVAL, **kwargs)
    with pytest.raises(ValueError, match=r"X_eval must have shape \(n_eval >= 1, 1\)"):
        bootstrap(rff(), X, y, np.zeros((3, 2)), n_bootstraps=2)
    assert not (tmp_path / "r.zarr").exists()
    assert default_batch_size(200, 2) == 8
    assert default_batch_size(6, 2) == 3
    assert default_batch_size(200, 2, max_batch_size=2) == 2


def test_poisson_weights_run_and_differ(tmp_path):
    X, y = sine(200)
    a = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=4, random_state=1, method="poisson", store=tmp_path / "p.zarr")
    b = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=4, random_state=1, store=tmp_path / "m.zarr")
    assert a.method == "poisson" and not np.array_equal(a.mean, b.mean)


# --------------------------------------------------------------------------------------------
def test_eval_grid_numpy_and_dask():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 3))
    g = eval_grid(X, feature=1, n_points=7)
    assert g.shape == (7, 3)
    assert np.allclose(g[:, 1], np.linspace(X[:, 1].min(), X[:, 1].max(), 7))
    assert np.allclose(g[:, [0, 2]], np.median(X[:, [0, 2]], axis=0))
    assert np.array_equal(eval_grid(da.from_array(X, chunks=(300, 3)), 1, 7), g)
    ref = eval_grid(X, 2, 4, reference=[1.0, 2.0, 3.0])
    assert np.allclose(ref[:, :2], [1.0, 2.0])
    with pytest.raises(ParameterError, match="feature must be < n_features = 3"):
        eval_grid(X, 3, 4)


@pytest.mark.parametrize("d", [1, 3])
def test_plot_band_writes_png(tmp_path, d):
    mpl_image = pytest.importorskip("matplotlib.image")
    from bigkernel.jobs.plots import plot_band

    if d == 1:
        X, y = sine(150)
        E = X_EVAL
    else:
        a = generate_rows(SyntheticSpec("friedman1", 150, 5, 0.5, 0), 0, 150)
        X, y = a[:, :d], a[:, 5]
        E = eval_grid(X, feature=1, n_points=30)
    est = rff(length_scale=0.3)
    res = bootstrap(est, X, y, E, n_bootstraps=6, random_state=1, store=tmp_path / "bs.zarr")
    fitted = rff(length_scale=0.3).fit(X, y).predict(E)
    path = plot_band(
        res,
        X,
        y,
        E,
        fitted_mean=fitted,
        n_curves=3,
        feature=0 if d == 1 else 1,
        path=tmp_path / "band.png",
        figsize=(6.0, 4.0),
        dpi=50,
    )
    assert os.path.getsize(path) > 1000
    assert mpl_image.imread(path).shape[:2] == (200, 300)


def _band_result(E, interval, outside, B=200, level=0.9, seed=0):
    """A BootstrapResult with known band values (the figure is checked against them)."""
    rng = np.random.default_rng(seed)
    f = np.sin(2 * np.pi * E[:, 0])
    half = 0.1 + 0.05 * np.arange(E.shape[0])
    extra = 0.5 if interval == "prediction" else 0.0
    preds = da.from_array(f + 0.05 * rng.normal(size=(B, E.shape[0])))
    return BootstrapResult(
        mean=f, lower=f - half - extra, upper=f + half + extra, predictions=preds, n_computed=B,
        n_reused=0, store="s.zarr", confidence_level=level, n_bootstraps=B, random_state=0,
        method="multinomial", X_eval=E, interval=interval, confidence_lower=f - half,
        confidence_upper=f + half, out_of_range=np.asarray(outside, dtype=bool),
    )  # fmt: skip


def _bars(container):
    """(x, low, high) of each bar of an ErrorbarContainer."""
    (segments,) = [c.get_segments() for c in container.lines[2]]
    return np.array([(s[0][0], s[0][1], s[1][1]) for s in segments])


@pytest.mark.parametrize("interval", ["confidence", "prediction"])
@pytest.mark.parametrize("d", [1, 3])
def test_band_figure_at_chosen_points_draws_one_bar_per_point(d, interval):
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PolyCollection
    from matplotlib.container import ErrorbarContainer

    from bigkernel.jobs.plots import band_figure

    X, y = sine(120)
    E = np.column_stack([[0.1, 0.4, 0.8, 1.3, -0.2]] + [np.full(5, 0.5)] * (d - 1))
    outside = [False, False, False, True, True]
    res = _band_result(E, interval, outside)
    fitted = res.mean + 0.01
    fig = band_figure(res, np.tile(X, (1, d)), y, E, fitted_mean=fitted)  # default: points
    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    # in range and out of range drawn apart; a prediction interval also shows the band of f-hat
    assert len(bars) == (4 if interval == "prediction" else 2)
    x = E[:, 0] if d == 1 else np.arange(5.0)
    got = np.concatenate([_bars(c) for c in bars[:2]])  # the requested interval, in then out
    np.testing.assert_allclose(got, np.column_stack([x, res.lower, res.upper]))
    if interval == "prediction":
        conf = np.concatenate([_bars(c) for c in bars[2:]])
        np.testing.assert_allclose(conf[:, 1:], np.column_stack([res.confidence_lower, res.confidence_upper]))
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]  # no shaded band
    colours = {tuple(np.round(c.lines[2][0].get_color()[0][:3], 3)) for c in bars[:2]}
    assert len(colours) == 2  # points outside the training range in another colour
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    what = (
        "90 % prediction interval for a new $y$"
        if interval == "prediction"
        else "90 % confidence band for $\\hat f(x)$"
    )
    assert what in legend and "outside the training data's range (extrapolated)" in legend
    assert ax.get_title().startswith(f"{what} (bootstrap, B=200)")
    assert ("data" in legend) == (d == 1)  # the data only where the axis is the feature
    if d > 1:  # points labelled by index and coordinates
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels[3] == "3\n(1.3, 0.5, 0.5)"


@pytest.mark.parametrize("interval", ["confidence", "prediction"])
def test_band_figure_on_a_grid_shades_the_band(interval):
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PolyCollection

    from bigkernel.jobs.plots import band_figure

    X, y = sine(120)
    E = eval_grid(X, 0, 30)
    outside = np.zeros(30, dtype=bool)
    res = _band_result(E, interval, outside)
    fig = band_figure(res, X, y, E, fitted_mean=res.mean, n_curves=3)  # default: a grid
    ax = fig.axes[0]
    assert not ax.containers  # no interval bars
    shaded = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(shaded) == (2 if interval == "prediction" else 1)
    top = shaded[0].get_paths()[0].vertices  # the requested interval: lower and upper edges
    assert np.isclose(top[:, 1].min(), res.lower.min()) and np.isclose(top[:, 1].max(), res.upper.max())
    assert len(ax.lines) == 3 + 1  # replicate curves and the fitted curve
    assert "band along" not in ax.get_title() and "(bootstrap, B=200)" in ax.get_title()
    fig = band_figure(res, X, y, E, fitted_mean=res.mean, points=True)  # asked for bars
    assert len(fig.axes[0].containers) == (2 if interval == "prediction" else 1)


def test_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    from bigkernel.jobs.plots import plot_band

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    X, y = sine(100)  # its range holds X_EVAL
    res = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=2, random_state=1, store=tmp_path / "b.zarr")
    with pytest.raises(ImportError, match=r"pip install matplotlib"):
        plot_band(res, X, y, X_EVAL, path=tmp_path / "x.png")


# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("search", [False, True])
def test_job_section_band_zarr_plot_and_resume(tmp_path, search):
    """The job's bootstrap section on the fitted model (plain or (γ, α) search), no cluster."""
    pytest.importorskip("matplotlib")
    from bigkernel.data.synthetic import make_data
    from bigkernel.jobs.bootstrap_job import bootstrap_estimator, run_bootstrap_section
    from bigkernel.jobs.config import config_from_dict
    from bigkernel.jobs.inputs import open_training_data
    from bigkernel.jobs.runner import build_estimator

    data = make_data(SyntheticSpec("friedman1", 400, 5, 0.5, 0), str(tmp_path / "fr.zarr"), chunk_rows=128)
    model = {"gamma": [0.1, 0.3], "alpha": "cv", "cv": 3} if search else {"gamma": 0.2, "alpha": "gcv"}
    cfg = config_from_dict(
        {
            "name": "t",
            "output": str(tmp_path / "out"),
            "data": {"train": {"path": data}},
            "model": {"n_components": 32, "random_state": 3, **model},
            "bootstrap": {"n_bootstraps": 6, "eval_grid": {"n_points": 20, "feature": 3}, "plot": True},
        }
    )
    ds = open_training_data(cfg)
    est = build_estimator(cfg).fit_dataset(ds)
    boot_est = bootstrap_estimator(est)
    if search:  # its plan bootstraps the chosen (gamma_, alpha_) with the fitted map
        assert boot_est is est
    else:  # a copy with the chosen alpha fixed, the fitted map reused
        assert boot_est.alpha == est.alpha_ and boot_est.feature_map_ is est.feature_map_
        assert est.alpha == "gcv"  # the job's model is not modified
    os.makedirs(cfg.output)
    first = run_bootstrap_section(cfg, est, ds)
    assert first["metrics"]["n_computed"] == 6 and first["metrics"]["mean_band_width"] > 0
    band = zarr.open_group(first["outputs"]["bootstrap_band"], mode="r")
    assert band["lower"].shape == (20,) and band["X_eval"].shape == (20, 5)
    assert np.all(band["lower"][:] <= band["upper"][:])
    assert os.path.getsize(first["outputs"]["bootstrap_plot"]) > 1000
    again = run_bootstrap_section(cfg, est, ds)  # the rerun resumes the kept store
    assert again["metrics"]["n_reused"] == 6 and again["metrics"]["n_computed"] == 0
    assert again["metrics"]["mean_band_width"] == first["metrics"]["mean_band_width"]


@pytest.mark.parametrize("inline", [True, False])
def test_eval_points_with_other_features_fail_before_the_fit(tmp_path, inline):
    from bigkernel.errors import DataError
    from bigkernel.jobs.config import config_from_dict
    from bigkernel.jobs.inputs import check_inputs

    rng = np.random.default_rng(0)
    np.save(tmp_path / "X.npy", rng.normal(size=(50, 3)))
    np.save(tmp_path / "y.npy", rng.normal(size=50))
    for d in (2, 3):
        np.save(tmp_path / f"E{d}.npy", rng.normal(size=(4, d)))

    def cfg(d):
        points = [[0.1, 0.2, 0.3][:d]] * 2 if inline else {"path": str(tmp_path / f"E{d}.npy")}
        return config_from_dict({
            "output": str(tmp_path / "out"), "bootstrap": {"eval": points},
            "data": {"train": {"path": str(tmp_path / "X.npy"),
                               "y_path": str(tmp_path / "y.npy")}},
        })  # fmt: skip

    fragment = (
        "bootstrap.eval: expected points of 3 features like the training data .*X.npy"
        if inline
        else "bootstrap.eval.path .*E2.npy has 2 features, but the training data .*X.npy has 3"
    )
    with pytest.raises(DataError, match=fragment):
        check_inputs(cfg(2))
    check_inputs(cfg(3))  # three values per point fit


def test_too_few_replicates_for_the_level_are_logged(caplog):
    """B = 1 gave a 0-width "90 % band" silently; below one replicate beyond each end (B < 20 at
    90 %) the band's ends are interpolated, and the log says so and what B to use."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (200, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(200)
    est = RandomFeatureRidge(n_components=16, alpha=0.1, random_state=0)
    E = np.linspace(-1, 1, 5)[:, None]
    with caplog.at_level("WARNING", logger="bigkernel.bands.bootstrap"):
        one = bootstrap(est, X, y, E, n_bootstraps=1, random_state=0)
    assert "n_bootstraps=1 is too few for a 90 % band" in caplog.text and "n_bootstraps >= 200" in caplog.text
    np.testing.assert_array_equal(one.lower, one.upper)  # what the warning is about
    caplog.clear()
    with caplog.at_level("WARNING", logger="bigkernel.bands.bootstrap"):
        bootstrap(est, X, y, E, n_bootstraps=20, random_state=0)  # one replicate beyond each end
    assert "too few" not in caplog.text
