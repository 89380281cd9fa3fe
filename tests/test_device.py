"""``device=`` without a GPU: the parameter on every estimator, on ``bootstrap()`` and in YAML;
``"cuda"`` is one clear DeviceError (API and ``bigkernel run``), ``"auto"`` falls back to the CPU
and says so; fitted models do not depend on the device; CPU work never imports GPU packages.
What needs a GPU is in tests/test_gpu.py."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import bigkernel
from bigkernel import (
    ExactKernelRidge,
    ExactKernelRidgeCV,
    KernelRidge,
    NystroemRidge,
    RandomFeatureRidge,
    RandomFeatureRidgeCV,
)
from bigkernel.devices import Device, resolve_device
from bigkernel.errors import ConfigError, DeviceError, ParameterError
from bigkernel.models.random_features import stream_device

ESTIMATORS = [
    lambda **kw: RandomFeatureRidge(n_components=32, random_state=0, **kw),
    lambda **kw: RandomFeatureRidgeCV(gammas=[0.5], alphas=[0.1], n_components=32, random_state=0, **kw),
    lambda **kw: NystroemRidge(n_components=20, random_state=0, **kw),
    lambda **kw: ExactKernelRidge(alpha=0.1, random_state=0, **kw),
    lambda **kw: ExactKernelRidgeCV(gammas=[0.5], alphas=[0.1], **kw),
    lambda **kw: KernelRidge(alpha=0.1, random_state=0, **kw),
]


def _gpu_usable() -> bool:
    try:
        resolve_device("cuda")
    except DeviceError:
        return False
    return True


pytestmark = pytest.mark.skipif(_gpu_usable(), reason="these tests check the behaviour without a usable GPU")


def _data(n: int = 200):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize("make", ESTIMATORS)
def test_device_parameter_checked_and_cuda_refused_at_fit_start(make):
    X, y = _data()
    assert make().get_params()["device"] == "cpu"
    with pytest.raises(ParameterError, match="device"):
        make(device="gpu").fit(X, y)
    with pytest.raises(DeviceError, match=r"bigkernel\[gpu\]"):
        make(device="cuda").fit(X, y)
    with pytest.raises(DeviceError, match="cuda:1"):
        make(device="cuda:1").fit(X, y)


@pytest.mark.parametrize("make", ESTIMATORS)
def test_auto_falls_back_to_the_cpu_logs_it_and_fits_the_same(make, caplog):
    X, y = _data()
    ref = make().fit(X, y)
    with caplog.at_level(logging.INFO, logger="bigkernel.devices"):
        auto = make(device="auto").fit(X, y)
    assert "device='auto': using the CPU" in caplog.text
    np.testing.assert_allclose(auto.predict(X[:20]), ref.predict(X[:20]), rtol=1e-12)


def test_device_is_a_parameter_saved_and_a_model_predicts_anywhere(tmp_path):
    """A model whose ``device`` says cuda (as one fitted on a GPU would) loads and predicts on
    this machine without a GPU: fitted arrays are host arrays, prediction needs no device."""
    X, y = _data()
    for est in (ExactKernelRidge(alpha=0.1, random_state=0), RandomFeatureRidge(n_components=32, random_state=0)):
        est.fit(X, y)
        est.set_params(device="cuda")
        path = est.save(str(tmp_path / f"{type(est).__name__}.zarr"))
        loaded = bigkernel.load(path)
        assert loaded.get_params()["device"] == "cuda"
        np.testing.assert_array_equal(loaded.predict(X[:30]), est.predict(X[:30]))
        with pytest.raises(DeviceError):  # refitting it would need the GPU: said, not silent
            loaded.fit(X, y)


def test_bootstrap_device_refused_before_any_store_and_estimator_untouched(tmp_path):
    X, y = _data()
    est = ExactKernelRidge(alpha=0.1, random_state=0)
    store = tmp_path / "band.zarr"
    with pytest.raises(DeviceError, match="cuda"):
        bigkernel.bootstrap(est, X, y, X[:5], n_bootstraps=2, random_state=0, store=str(store), device="cuda")
    assert not store.exists()
    assert est.get_params()["device"] == "cpu"
    with pytest.raises(ParameterError, match="device"):
        bigkernel.bootstrap(est, X, y, X[:5], n_bootstraps=2, random_state=0, device="tpu")


def test_bootstrap_store_serves_any_device(tmp_path):
    """``device`` is not in the store's identity: a run with device='auto' (the CPU here) resumes
    a store made with device='cpu' and computes nothing new, with the same band."""
    X, y = _data(120)
    est = ExactKernelRidge(alpha=0.1, random_state=0)
    store = str(tmp_path / "band.zarr")
    a = bigkernel.bootstrap(est, X, y, X[:5], n_bootstraps=3, random_state=1, store=store)
    b = bigkernel.bootstrap(est, X, y, X[:5], n_bootstraps=3, random_state=1, store=store, device="auto")
    np.testing.assert_array_equal(a.lower, b.lower)
    np.testing.assert_array_equal(a.upper, b.upper)


def test_stream_device_passes_a_gpu_to_the_pass_or_refuses_it():
    """The streamed pass gets ``device`` as text (resolved where each task runs), never a
    silent CPU pass: a pass without the argument refuses the GPU."""
    import inspect

    from bigkernel.graph.stream import stats_graph

    assert stream_device(None) == {} and stream_device(Device("cpu")) == {}
    if "device" in inspect.signature(stats_graph).parameters:
        assert stream_device(Device("cuda", 0)) == {"device": "cuda:0"}
    else:
        with pytest.raises(DeviceError, match="CPU only"):
            stream_device(Device("cuda", 0))


# ------------------------------------------------------------------------------- YAML, CLI
def test_yaml_model_device_and_cluster_gpus(tmp_path):
    from bigkernel.jobs.config import load_config
    from tests._yaml import error_of, with_model, write

    cfg = load_config(with_model(tmp_path, "device: cuda:1\nsolver: exact\n"))
    assert cfg.model.params["device"] == "cuda:1"
    assert load_config(with_model(tmp_path, "solver: exact\n")).model.params["device"] == "cpu"
    assert "device" in error_of(with_model(tmp_path, "device: gpu\n"))
    head = "output: runs/job\ndata:\n  train:\n    path: data/train.zarr\n"
    cfg = load_config(write(tmp_path, head + "cluster:\n  local:\n    gpus: all\n"))
    assert cfg.cluster.local.gpus == "all"
    cfg = load_config(write(tmp_path, head + "cluster:\n  local:\n    gpus: [0, 2]\n"))
    assert cfg.cluster.local.gpus == (0, 2)
    for bad in ("[0, 0]", "[]", "-1", "some"):
        with pytest.raises(ConfigError, match="gpus"):
            load_config(write(tmp_path, head + f"cluster:\n  local:\n    gpus: {bad}\n"))


def test_cluster_gpus_without_dask_cuda_is_one_clear_error():
    pytest.importorskip("distributed")
    if _importable("dask_cuda"):
        pytest.skip("dask-cuda is installed here: the missing-package error cannot be shown")
    from bigkernel.jobs.cluster import client_from_config
    from bigkernel.jobs.config.schema import ClusterConfig, LocalClusterConfig

    with pytest.raises(DeviceError, match=r"dask-cuda.*bigkernel\[gpu\]"):
        with client_from_config(ClusterConfig(local=LocalClusterConfig(gpus="all"))):
            pass


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_bigkernel_run_with_cuda_prints_the_error_and_writes_no_complete_outputs(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "X.npy", rng.normal(size=(300, 2)))
    np.save(tmp_path / "y.npy", rng.normal(size=300))
    job = tmp_path / "job.yaml"
    job.write_text(
        textwrap.dedent(f"""\
        output: {tmp_path / "out"}
        data:
          train: {{path: {tmp_path / "X.npy"}, y_path: {tmp_path / "y.npy"}}}
        model: {{solver: exact, alpha: 0.1, device: cuda}}
        cluster:
          local: {{n_workers: 1, threads_per_worker: 1}}
        progress: false
        """)
    )
    proc = subprocess.run(
        [sys.executable, "-m", "bigkernel.cli", "run", str(job)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != 0
    assert "device='cuda' needs CuPy and a CUDA GPU" in proc.stderr
    assert "bigkernel[gpu]" in proc.stderr
    out = tmp_path / "out"
    assert not (out / "model.zarr").exists() and not (out / "metrics.json").exists()
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == "failed" and status["error"]["type"] == "DeviceError"


def test_cpu_work_never_imports_gpu_packages():
    code = textwrap.dedent("""\
        import sys
        import numpy as np
        import bigkernel
        rng = np.random.default_rng(0)
        X = rng.normal(size=(200, 2)); y = X[:, 0]
        bigkernel.ExactKernelRidge(alpha=0.1).fit(X, y).predict(X)
        bigkernel.RandomFeatureRidge(n_components=16).fit(X, y).predict(X)
        bigkernel.bootstrap(bigkernel.RandomFeatureRidge(n_components=16, random_state=0), X, y, X[:3],
                            n_bootstraps=2, random_state=0)
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("cupy", "cupyx", "dask_cuda", "pykeops", "rmm"))
        print("GPU-MODULES", bad)
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "GPU-MODULES []" in proc.stdout


def test_nystroem_refuses_a_gpu_at_fit_start_and_auto_stays_on_the_cpu(monkeypatch, caplog):
    """As if CuPy saw a GPU: NystroemRidge (host features) refuses "cuda" before any pass and
    keeps "auto" on the CPU, saying so."""
    import bigkernel.models._base as base

    monkeypatch.setattr(base, "resolve_device", lambda spec: Device("cpu") if spec == "cpu" else Device("cuda", 0))
    X, y = _data()
    with pytest.raises(DeviceError, match="Nyström features are computed on the CPU"):
        NystroemRidge(n_components=20, device="cuda").fit(X, y)
    with caplog.at_level(logging.INFO, logger="bigkernel.models.nystroem"):
        auto = NystroemRidge(n_components=20, random_state=0, device="auto").fit(X, y)
    assert "run on the CPU" in caplog.text
    ref = NystroemRidge(n_components=20, random_state=0).fit(X, y)
    np.testing.assert_allclose(auto.predict(X[:10]), ref.predict(X[:10]), rtol=1e-12)


def test_cluster_gpus_maps_to_a_local_cuda_cluster(monkeypatch):
    """``cluster.local.gpus`` → dask-cuda's LocalCUDACluster with CUDA_VISIBLE_DEVICES and the
    local keys (a stand-in module records the call and starts a small LocalCluster)."""
    import types

    from distributed import LocalCluster

    from bigkernel.jobs.cluster import client_from_config
    from bigkernel.jobs.config.schema import ClusterConfig, LocalClusterConfig

    calls = []

    def fake_cluster(**kwargs):
        calls.append(kwargs)
        rest = {k: v for k, v in kwargs.items() if k != "CUDA_VISIBLE_DEVICES"}
        return LocalCluster(n_workers=1, processes=False, protocol="tcp", **rest)

    monkeypatch.setitem(sys.modules, "dask_cuda", types.SimpleNamespace(LocalCUDACluster=fake_cluster))
    local = LocalClusterConfig(gpus=(0, 2), threads_per_worker=1, memory_limit="1GiB")
    with client_from_config(ClusterConfig(local=local)) as client:
        assert len(client.scheduler_info()["workers"]) == 1
    (kw,) = calls
    assert kw["CUDA_VISIBLE_DEVICES"] == "0,2"
    assert kw["threads_per_worker"] == 1 and kw["memory_limit"] == "1GiB" and kw["host"] == "127.0.0.1"
    calls.clear()
    with client_from_config(ClusterConfig(local=LocalClusterConfig(gpus="all", threads_per_worker=1))):
        pass
    assert "CUDA_VISIBLE_DEVICES" not in calls[0]  # every GPU: dask-cuda's default
