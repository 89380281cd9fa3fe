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


def _as_if_a_gpu(monkeypatch, index: int = 3) -> Device:
    """As if CuPy saw GPUs: the estimators resolve ``"cuda"`` to ``cuda:index`` and a task in
    a dask worker finds its own GPU (one seen)."""
    import bigkernel.devices as devices
    import bigkernel.models._base as base

    gpu = Device("cuda", index)
    monkeypatch.setattr(base, "resolve_device", lambda spec: Device("cpu") if spec == "cpu" else gpu)
    monkeypatch.setattr(devices, "_gpu_count", lambda: (1, ""))
    return gpu


#: what the spies saw, and the functions they stand in for (module level: a distributed client
#: pickles the graph, and this module's functions travel by reference, so a task on an
#: in-process worker appends here and not to a copy)
_SEEN: list = []
_REAL: dict = {}


def _spy_block_stats(*args, device, **kwargs):
    from bigkernel.devices import CPU, task_device

    _SEEN.append(("block_stats", device, task_device(device)))
    return _REAL["block_stats"](*args, device=CPU, **kwargs)


def _spy_eigh(G, device, **kwargs):
    from bigkernel.devices import CPU, task_device

    _SEEN.append(("eigh", device, task_device(device)))
    return _REAL["eigh"](G, CPU, **kwargs)


def _spy_on_the_tasks(monkeypatch) -> list:
    """Record the ``device`` each statistics task and each eigendecomposition receives (and
    the device the task takes), computing them on the CPU (no GPU here)."""
    import bigkernel.graph.stream as stream
    import bigkernel.numerics.primal as primal

    _SEEN.clear()
    _REAL.update(block_stats=stream.block_stats, eigh=primal.symmetric_eigh)
    monkeypatch.setattr(stream, "block_stats", _spy_block_stats)
    monkeypatch.setattr(primal, "symmetric_eigh", _spy_eigh)
    return _SEEN


def test_the_device_a_fit_resolves_is_the_object_every_task_receives(monkeypatch):
    """One Device from the estimator to the task: ``fit`` resolves ``device`` once
    (``_device``), the graph builder and the eigendecomposition get that very object, and each
    task takes it unchanged outside a dask worker (ordinal kept)."""
    import dask
    import dask.array as da

    gpu = _as_if_a_gpu(monkeypatch)
    seen = _spy_on_the_tasks(monkeypatch)
    X, y = _data(3000)
    Xd, yd = da.from_array(X, chunks=(1000, 3)), da.from_array(y, chunks=1000)
    with dask.config.set(scheduler="threads", num_workers=2):
        est = RandomFeatureRidge(n_components=32, random_state=0, device="cuda", dtype="float64").fit(Xd, yd)
    assert est._device is gpu
    assert [name for name, _, _ in seen] == ["block_stats"] * 3  # 3 chunks; one α: a Cholesky solve
    est.spectrum_.eigvals  # noqa: B018 - the eigendecomposition deferred to first read gets the device too
    assert [name for name, _, _ in seen] == ["block_stats"] * 3 + ["eigh"]
    for _, received, in_task in seen:
        assert received is gpu and in_task is gpu
    ref = RandomFeatureRidge(n_components=32, random_state=0, dtype="float64").fit(
        X, y
    )  # float32 sums differ by namespace
    np.testing.assert_allclose(est.predict(X[:20]), ref.predict(X[:20]), rtol=1e-12)


def test_a_task_on_a_dask_worker_takes_the_workers_own_gpu(monkeypatch):
    """Under a distributed client the fit's Device travels to the worker by value and
    ``task_device`` re-resolves its ordinal there: a dask-cuda worker sees its GPU as cuda:0."""
    import dask.array as da
    from distributed import Client, LocalCluster

    from bigkernel.devices import CPU, task_device

    gpu = _as_if_a_gpu(monkeypatch)
    seen = _spy_on_the_tasks(monkeypatch)
    X, y = _data(1000)
    X, y = da.from_array(X, chunks=(500, 3)), da.from_array(y, chunks=500)
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        est = RandomFeatureRidge(n_components=16, random_state=0, device="cuda").fit(X, y)
        assert client.submit(task_device, gpu, pure=False).result() == Device("cuda", 0)
        assert client.submit(task_device, CPU, pure=False).result() == CPU
    tasks = [(received, in_task) for name, received, in_task in seen if name == "block_stats"]
    assert len(tasks) == 2 and all(received == gpu and in_task == Device("cuda", 0) for received, in_task in tasks)
    # the eigendecomposition of the fit runs in the client process: the fit's own device
    assert [in_task for name, _, in_task in seen if name == "eigh"] == [est._device]
    assert task_device(gpu) is gpu and task_device(CPU) is CPU
    with pytest.raises(TypeError, match="Device"):
        task_device("cuda")


def test_a_device_is_a_frozen_value_that_pickles_and_tokenizes():
    import pickle

    import cloudpickle
    import dask
    import dask.array as da

    from bigkernel.devices import CPU
    from bigkernel.graph.stream import stats_graph
    from bigkernel.numerics.fourier_features import make_feature_map

    for device in (CPU, Device("cuda", 0), Device("cuda", 2)):
        for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
            back = loads(dumps(device))
            assert back == device and hash(back) == hash(device) and back.is_gpu == device.is_gpu
        assert dask.base.tokenize(Device(device.kind, device.index)) == dask.base.tokenize(device)
    assert dask.base.tokenize(Device("cuda", 0)) != dask.base.tokenize(Device("cuda", 1))
    with pytest.raises(AttributeError):
        CPU.kind = "cuda"
    for bad in (("cuda", None), ("cpu", 0), ("gpu", 0), ("cuda", -1)):
        with pytest.raises(ValueError, match="Device"):
            Device(*bad)
    # the graph of the pass: keyed by the device's value, picklable as a whole
    X, Y = _data(500)
    Xd, Yd = da.from_array(X, chunks=(250, 3)), da.from_array(Y[:, None], chunks=(250, 1))
    fmap = make_feature_map("rbf", 3, 8, seed=0)
    keys = {i: stats_graph(Xd, Yd, fmap, device=Device("cuda", i)).key for i in (0, 0, 1)}
    assert stats_graph(Xd, Yd, fmap, device=Device("cuda", 0)).key == keys[0] != keys[1]
    graph = stats_graph(Xd, Yd, fmap, device=Device("cuda", 1))
    assert cloudpickle.loads(cloudpickle.dumps(graph)).key == graph.key
    with pytest.raises(TypeError, match="Device"):
        stats_graph(Xd, Yd, fmap, device="cuda:1")


#: the modules that may turn a ``device`` parameter into a Device (``resolve_device``) or check
#: its form (``parse_device``): the estimators' base (fit and predict start), the job config and
#: runner, and ``bootstrap(device=...)`` (``on_device``); everything below takes the Device
DEVICE_RESOLVERS = {
    "bigkernel/devices.py",
    "bigkernel/models/_base.py",
    "bigkernel/jobs/config/fields.py",
    "bigkernel/jobs/runner.py",
    "bigkernel/bands/plans.py",
}


def test_only_the_estimator_base_and_the_job_config_resolve_a_device():
    import ast
    import pathlib

    root = pathlib.Path(bigkernel.__file__).parent
    callers = set()
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", None))
                if name in ("resolve_device", "parse_device"):
                    callers.add(path.relative_to(root.parent).as_posix())
    assert callers <= DEVICE_RESOLVERS, sorted(callers - DEVICE_RESOLVERS)


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
