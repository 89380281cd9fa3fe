"""The LAPACK thread rule of bigkernel.numerics.threads (issue 19's slow spots) and the per-γ
progress lines of the two CV estimators it serves."""

import logging

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from bigkernel import ExactKernelRidgeCV, RandomFeatureRidgeCV
from bigkernel.numerics import threads
from bigkernel.numerics.cv import fold_solutions, subtract
from bigkernel.numerics.fourier_features import make_feature_map
from bigkernel.numerics.primal import eigen_path
from bigkernel.numerics.splits import FoldSplit
from bigkernel.numerics.sums import block_stats
from tests.conftest import friedman


def _cap() -> int:
    return threads._blas_threads()


@pytest.mark.parametrize(("others", "cores", "cap", "expected"), [
    (0.0, 2, 2, 2),  # idle: every BLAS thread
    (0.3, 2, 2, 2),  # 1.7 idle cores round to 2
    (0.6, 2, 2, 1),  # 1.4 round to 1
    (7.5, 2, 2, 1),  # oversubscribed: one thread, never 0
    (2.0, 16, 8, 8),  # capped by the BLAS setting
    (10.2, 16, 8, 6),
])  # fmt: skip
def test_lapack_threads_follow_the_idle_cores(monkeypatch, others, cores, cap, expected):
    monkeypatch.setattr(threads, "_last", {})
    monkeypatch.setattr(threads, "_pass_window", None)  # a real pass of an earlier test must not answer
    monkeypatch.setattr(threads, "others_busy_cores", lambda seconds=threads.SAMPLE_SECONDS: others)
    monkeypatch.setattr(threads, "_allowed_cpus", lambda: set(range(cores)))
    monkeypatch.setattr(threads, "_blas_threads", lambda: cap)
    assert threads.lapack_threads() == expected


def test_lapack_threads_respect_a_callers_limit_and_small_matrices_keep_the_setting():
    with threadpool_limits(limits=1, user_api="blas"):
        assert threads.lapack_threads() == 1
    with threads.lapack_limit(threads.LAPACK_SAMPLE_MIN_N - 1) as t:
        assert t is None
    with threads.lapack_limit(threads.LAPACK_SAMPLE_MIN_N) as t:
        assert 1 <= t <= max(1, _cap())
        assert _cap() == t  # the limit holds inside the block


def test_a_decision_is_reused_for_a_burst_of_calls_then_sampled_again(monkeypatch):
    samples = iter([0.0, 2.0])
    calls = []

    def others(seconds=threads.SAMPLE_SECONDS):
        calls.append(1)
        return next(samples)

    clock = {"t": 100.0}
    monkeypatch.setattr(threads, "_last", {})
    monkeypatch.setattr(threads, "_pass_window", None)
    monkeypatch.setattr(threads, "others_busy_cores", others)
    monkeypatch.setattr(threads, "_allowed_cpus", lambda: {0, 1})
    monkeypatch.setattr(threads, "_blas_threads", lambda: 2)
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock["t"])
    assert [threads.lapack_threads() for _ in range(5)] == [2] * 5 and len(calls) == 1
    clock["t"] += threads.REUSE_SECONDS + 0.1
    assert threads.lapack_threads() == 1 and len(calls) == 2


def test_others_busy_cores_subtracts_this_processs_own_cpu_time(monkeypatch):
    """Over a 1 s window the machine's 2 CPUs were busy 1.5 s, 1.2 s of it this process's own:
    others held 0.3 cores (a fit never counts itself)."""
    hz = threads.os.sysconf("SC_CLK_TCK")
    ticks = iter([(1000, 5000), (1000 + round(1.5 * hz), 5000 + 2 * hz)])
    clock = {"wall": 0.0, "cpu": 0.0}

    def sleep(s):
        clock["wall"] += 1.0
        clock["cpu"] += 1.2

    fake_time = type("T", (), {"sleep": staticmethod(sleep), "perf_counter": staticmethod(lambda: clock["wall"]),
                               "process_time": staticmethod(lambda: clock["cpu"])})  # fmt: skip
    monkeypatch.setattr(threads, "_busy_ticks", lambda cpus: next(ticks))
    monkeypatch.setattr(threads, "_allowed_cpus", lambda: {0, 1})
    monkeypatch.setattr(threads, "time", fake_time)
    assert threads.others_busy_cores() == pytest.approx(0.3, abs=1e-9)


def test_others_busy_cores_on_this_machine_is_within_its_cores():
    busy = threads.others_busy_cores(0.05)
    if busy is None:
        pytest.skip("no /proc/stat on this platform")
    assert 0.0 <= busy <= len(threads._allowed_cpus())


def test_exact_cv_logs_each_gamma_before_and_after_its_eigendecomposition(caplog):
    X, y = friedman(60, seed=0)
    with caplog.at_level(logging.INFO, logger="bigkernel.solvers.exact_cv"):
        est = ExactKernelRidgeCV(gammas=[0.05, 0.2]).fit(X, y)
    text = caplog.text
    assert "gamma 1/2: eigendecomposition of the 60 × 60 Gram matrix" in text
    assert "gamma 2/2: eigendecomposition" in text and "(the last took" in text
    assert "gamma 1/2 done" in text and "s left" in text and "gamma 2/2 done" in text
    assert len(est.cv_results_["params"]) == 40


def test_random_feature_cv_logs_each_gamma(caplog):
    X, y = friedman(300, seed=1)
    with caplog.at_level(logging.INFO, logger="bigkernel.solvers.random_features_cv"):
        RandomFeatureRidgeCV(n_components=40, gammas=[0.05, 0.2, 1.0], cv=3, random_state=0).fit(X, y)
    for i in (1, 2, 3):
        assert f"gamma {i}/3" in caplog.text
    assert "4 eigendecomposition(s) of 40 × 40" in caplog.text


def test_fold_coefficients_as_one_gemm_equal_the_stacked_products():
    X, y = friedman(400, seed=2)
    fmap = make_feature_map("rbf", X.shape[1], 30, 0, gamma=0.1)
    folds = block_stats(fmap, X, np.c_[y, 2 * y], 0, weights=FoldSplit(0, 4))
    alphas = np.logspace(-3, 1, 5)
    total = folds.total()
    for k, (_, coef, intercept) in enumerate(fold_solutions(folds, alphas)):
        path = eigen_path(subtract(total, folds.select(k)))
        for a_i, a in enumerate(alphas):
            np.testing.assert_allclose(coef[a_i], path.coef(a), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(intercept[a_i], path.intercept(path.coef(a)), rtol=1e-10, atol=1e-12)


def test_a_local_pass_measures_the_load_for_the_lapack_call_after_it(monkeypatch):
    """After a threaded pass of ≥ 1 s, the eigh's thread count comes from the load measured over
    the pass (no 0.1 s sample); a short pass, or a call long after, samples as before."""
    import dask
    import dask.array as da

    from bigkernel.runtime import compute

    samples = []
    monkeypatch.setattr(threads, "_last", {})
    monkeypatch.setattr(threads, "_pass_window", None)
    monkeypatch.setattr(threads, "others_busy_cores", lambda seconds=0.1: samples.append(1) or 0.0)
    monkeypatch.setattr(threads, "_allowed_cpus", lambda: {0, 1})
    monkeypatch.setattr(threads, "_blas_threads", lambda: 2)
    monkeypatch.setattr(threads, "PASS_WINDOW_MIN_SECONDS", 0.0)
    # 1.5 s of this process's busy time is seen over the pass: 0.3 others (of 2 cores) → 2 threads
    ticks = iter([(1000, 5000), (1000 + round(1.5 * threads.os.sysconf("SC_CLK_TCK")), 5200)])
    clock = iter([0.0, 1.0])
    cpu = iter([0.0, 1.2])
    real_time = threads.time
    fake = type("T", (), {"perf_counter": staticmethod(lambda: next(clock)), "process_time": staticmethod(lambda: next(cpu)),
                          "monotonic": staticmethod(real_time.monotonic), "sleep": staticmethod(real_time.sleep)})  # fmt: skip
    monkeypatch.setattr(threads, "_busy_ticks", lambda cpus: next(ticks))
    monkeypatch.setattr(threads, "time", fake)
    with dask.config.set(scheduler="threads"):
        compute(da.ones(10).sum())
    assert threads._pass_window is not None and threads._pass_window[1] == pytest.approx(0.3, abs=1e-9)
    assert threads.lapack_threads() == 2 and samples == []  # the pass's figure, no sample
    monkeypatch.setattr(threads, "_last", {})
    monkeypatch.setattr(threads, "_pass_window", (real_time.monotonic() - threads.REUSE_SECONDS - 1, 0.0))
    assert threads.lapack_threads() == 2 and samples == [1]  # too old: sampled again


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="needs a CPU affinity mask (Linux)")
def test_the_local_threads_follow_the_cpus_this_process_may_use():
    """Under ``taskset`` (a container's or a batch job's CPU allocation) the local scheduler's
    threads and the BLAS threads per dask thread count the allowed CPUs, as dask's own pool
    does, not every CPU of the machine (which oversubscribed the allowed ones)."""
    import subprocess
    import sys

    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from bigkernel.runtime import blas_threads_for, local_threads; "
        "print(local_threads(), blas_threads_for(1), blas_threads_for(1, cores=4), os.cpu_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:3] == ["1", "1", "4"]
