"""Nothing lost to an interrupt (issue 19, item 6), on real stores on disk.

A bootstrap checkpoints each replicate as its task ends; batches land one after the other (not
all at the end), so a rerun after a failure or Ctrl-C computes only the missing replicates and
equals an uninterrupted run bitwise — with local threads, a LocalCluster and through the CLI.
Raising ``n_bootstraps`` reuses the store; ``overwrite: true`` keeps the previous results until
the new ones are complete.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

from bigkernel import RandomFeatureRidge
from bigkernel.bands.bootstrap import bootstrap, load_bootstrap
from bigkernel.cli import main
from bigkernel.data.synthetic import SyntheticSpec, generate_rows
from bigkernel.io import band_store
from bigkernel.io.band_store import open_store

X_EVAL = np.linspace(0.05, 0.95, 15)[:, None]


def sine(n, seed=0):
    a = generate_rows(SyntheticSpec("sine", n, 1, 0.3, seed), 0, n)
    return a[:, :1], a[:, 1]


def rff():
    return RandomFeatureRidge(length_scale=0.1, n_components=32, alpha=1.0, random_state=5, chunk_rows=80)


def _same(a, b):
    for name in ("mean", "lower", "upper"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert np.array_equal(a.predictions.compute(), b.predictions.compute())


class _Writes:
    """Counts the replicates written (the fits that ran); raises at replicate ``fail_at``."""

    def __init__(self, monkeypatch, fail_at=None):
        self.written: list[int] = []
        original = band_store.BootstrapStore.write_replicate

        def write(store, r, predictions, coef=None):
            if r == fail_at:
                raise RuntimeError(f"replicate {r} fails (simulated interrupt)")
            original(store, r, predictions, coef)
            self.written.append(r)

        monkeypatch.setattr(band_store.BootstrapStore, "write_replicate", write)


def _client(kind):
    if kind == "threads":
        return None, None
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None)
    return cluster, Client(cluster)


@pytest.mark.parametrize("scheduler", ["threads", "local_cluster"])
def test_rerun_after_a_failed_batch_computes_only_the_missing(tmp_path, monkeypatch, scheduler):
    """The fourth of five batches fails: the first three are in the store (they landed before it
    started); the rerun computes only the rest and equals an uninterrupted run bitwise."""
    X, y = sine(240)  # 3 chunks: one batch at a time keeps both threads busy
    B, path = 10, tmp_path / "bs.zarr"
    cluster, client = _client(scheduler)
    try:
        _Writes(monkeypatch, fail_at=6)  # first replicate of the fourth batch
        with pytest.raises(RuntimeError, match="simulated interrupt"):
            bootstrap(rff(), X, y, X_EVAL, n_bootstraps=B, random_state=3, store=path, batch_size=2, client=client)
        kept = open_store(path).completed()
        assert set(range(6)) <= set(kept) and 6 not in kept, kept  # checkpointed as they landed
        monkeypatch.undo()
        rerun = _Writes(monkeypatch)
        resumed = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=B, random_state=3, store=path, client=client)
        assert sorted(rerun.written) == sorted(set(range(B)) - set(kept))  # only the missing ones
        assert resumed.n_computed == B - len(kept) and resumed.n_reused == len(kept)
        clean = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=B, random_state=3, store=tmp_path / "clean.zarr")
        _same(resumed, clean)
    finally:
        if client is not None:
            client.close()
            cluster.close()


def test_more_replicates_reuse_the_store_fewer_use_its_first(tmp_path, monkeypatch, caplog):
    """n_bootstraps 20 -> 24 computes 4 and equals a fresh B = 24 run; 24 -> 16 computes none
    and equals a fresh B = 16 run; another job's store is still refused."""
    import logging

    from bigkernel.errors import StoreMismatchError

    X, y = sine(200)
    path = tmp_path / "bs.zarr"
    bootstrap(rff(), X, y, X_EVAL, n_bootstraps=20, random_state=4, store=path)
    writes = _Writes(monkeypatch)
    with caplog.at_level(logging.INFO, logger="bigkernel"):
        grown = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=24, random_state=4, store=path)
    assert sorted(writes.written) == [20, 21, 22, 23] and (grown.n_computed, grown.n_reused) == (4, 20)
    assert "bootstrap: 20/24 replicates already in the store, computing 4" in caplog.text
    assert open_store(path).n_replicates == 24  # recorded once all 24 are complete
    _same(grown, bootstrap(rff(), X, y, X_EVAL, n_bootstraps=24, random_state=4, store=tmp_path / "f24.zarr"))
    before = len(writes.written)
    fewer = bootstrap(rff(), X, y, X_EVAL, n_bootstraps=16, random_state=4, store=path)
    assert (fewer.n_computed, fewer.n_bootstraps) == (0, 16) and len(writes.written) == before
    _same(fewer, bootstrap(rff(), X, y, X_EVAL, n_bootstraps=16, random_state=4, store=tmp_path / "f16.zarr"))
    assert load_bootstrap(path).n_bootstraps == 24  # the store keeps all 24
    with pytest.raises(StoreMismatchError, match=r"(?s)fingerprint\.seed: expected 5.*n_bootstraps alone may differ"):
        bootstrap(rff(), X, y, X_EVAL, n_bootstraps=24, random_state=5, store=path)


# --------------------------------------------------------------------------------------------
# Jobs through the CLI
# --------------------------------------------------------------------------------------------
JOB = """\
name: resume
seed: 3
output: {output}
data:
  make: {{kind: sine, n_samples: {n}, n_features: 1, noise: 0.3, path: {data}, chunk_rows: {chunk}}}
  chunk_rows: {chunk}
model: {{gamma: 20.0, alpha: {alpha}, n_components: {D}, random_state: 1}}
bootstrap:
  n_bootstraps: {B}
  eval_grid: {{n_points: 15}}
plots: false
cluster: {cluster}
"""

#: the job's own LocalCluster (a user's run), else the address of a running one
OWN_CLUSTER = "{local: {n_workers: 1, threads_per_worker: 2}}"


@pytest.fixture(scope="module")
def scheduler():
    """One LocalCluster (a worker process, two threads) for the in-process jobs here."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as cluster:
        yield "{address: " + cluster.scheduler_address + "}"


def _job(tmp_path, name="out", *, n=2000, chunk=500, D=32, B=8, alpha=1.0, extra="", cluster=OWN_CLUSTER):
    text = JOB.format(
        output=name, n=n, data=tmp_path / "data.zarr", chunk=chunk, alpha=alpha, D=D, B=B, cluster=cluster
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(text + extra)
    return path


def _band(out):
    g = zarr.open_group(str(out / "bootstrap_band.zarr"), mode="r")
    return {name: g[name][:] for name in ("mean", "lower", "upper", "fitted")}


def _done(path) -> int:
    try:
        return int((zarr.open_array(str(path), path="done", mode="r")[:] == 1).sum())
    except Exception:
        return 0


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "rc"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_job_interrupted_by_sigint_resumes_only_the_missing(tmp_path, sig, rc):
    """A real `bigkernel run` subprocess gets SIGINT (Ctrl-C) or SIGTERM (a scheduler's stop)
    once the first batch is in the store; the rerun computes only the missing replicates
    (metrics and log say so) and its band equals an uninterrupted job's bitwise."""
    B, size = 24, {"n": 60_000, "chunk": 15_000, "D": 256}  # 4 chunks: one batch at a time
    job = _job(tmp_path, B=B, **size)
    store = tmp_path / "out" / "bootstrap.zarr"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen(
        [sys.executable, "-m", "bigkernel.cli", "run", str(job)], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while _done(store) == 0:
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "no replicate landed in time"
            time.sleep(0.05)
        child.send_signal(sig)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    time.sleep(1)  # the child's worker processes are gone with it; nothing lands after this
    kept = _done(store)
    assert child.returncode == rc, err
    status = json.loads((tmp_path / "out" / "status.json").read_text())  # the stop is on record
    assert status["status"] == "failed", status
    assert 0 < kept < B, kept  # landed during the run, not all at its end
    said = re.search(rf"bootstrap interrupted: (\d+) of {B} replicates are in the store", err)
    assert said and 0 < int(said[1]) <= kept, err  # (a task may finish while the cluster stops)
    assert not (tmp_path / "out" / "metrics.json").exists()

    assert main(["-q", "run", str(job)]) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())["bootstrap"]
    assert (metrics["n_reused"], metrics["n_computed"]) == (kept, B - kept)
    log = (tmp_path / "out" / "job.log").read_text()
    assert f"bootstrap: {kept}/{B} replicates already in the store, computing {B - kept}" in log
    assert "(1 at a time)" in log  # batches land one after the other
    assert main(["-q", "run", str(_job(tmp_path, "clean", B=B, **size))]) == 0
    clean, resumed = _band(tmp_path / "clean"), _band(tmp_path / "out")
    for name in clean:
        assert np.array_equal(clean[name], resumed[name]), name


def test_job_more_replicates_and_interrupted_overwrite_keep_the_old_results(tmp_path, monkeypatch, scheduler):
    """n_bootstraps 8 -> 12 with `overwrite: true` reuses the 8; a rerun with another alpha that
    is interrupted (after its new model and replicates) leaves the previous finished job — model,
    band, metrics, store — in place; the resumed run reuses its replicates."""
    from bigkernel.jobs import bootstrap_job

    out, preds = tmp_path / "out", tmp_path / "preds.csv"  # predictions outside the folder
    extra = f"overwrite: true\npredict: {{path: {tmp_path / 'data.zarr'}, output: {preds}}}\n"
    assert main(["-q", "run", str(_job(tmp_path, B=8, cluster=scheduler))]) == 0
    assert main(["-q", "run", str(_job(tmp_path, B=12, extra=extra, cluster=scheduler))]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["bootstrap"]["n_reused"], metrics["bootstrap"]["n_computed"]) == (8, 4)
    assert metrics["outputs"]["model"] == str(out / "model.zarr")  # the final paths, not the staging's
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # staging swapped in and gone
    finished = {name: (out / name).read_bytes() for name in ("metrics.json", "summary.txt", "bootstrap_band.csv")}
    predicted = preds.read_bytes()
    model = (out / "model.zarr" / "zarr.json").read_bytes()
    band = _band(out)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bootstrap_job, "write_band", interrupted)  # after the fit, save and bootstrap
    changed = _job(tmp_path, B=12, alpha=2.0, extra=extra, cluster=scheduler)
    assert main(["-q", "run", str(changed)]) == 130
    for name, content in finished.items():
        assert (out / name).read_bytes() == content, name
    assert (out / "model.zarr" / "zarr.json").read_bytes() == model and preds.read_bytes() == predicted
    for name, values in _band(out).items():
        assert np.array_equal(values, band[name]), name
    assert load_bootstrap(out / "bootstrap.zarr").n_bootstraps == 12  # the old store, intact
    assert (tmp_path / ".overwrite-out" / "status.json").exists()  # the failed run's record
    staged = open_store(out / ".overwrite-bootstrap.zarr")
    assert staged.missing() == []  # the interrupted run's replicates are checkpointed

    monkeypatch.undo()
    assert main(["-q", "run", str(changed)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["bootstrap"]["n_reused"], metrics["bootstrap"]["n_computed"]) == (12, 0)
    assert metrics["model"]["alpha"] == 2.0 and metrics["outputs"]["bootstrap_store"] == str(out / "bootstrap.zarr")
    assert open_store(out / "bootstrap.zarr").fingerprint["estimator"]["params"]["alpha"] == 2.0
    assert not (out / ".overwrite-bootstrap.zarr").exists() and not (tmp_path / ".overwrite-out").exists()
    assert preds.read_bytes() != predicted and not (tmp_path / ".overwrite-preds.csv").exists()
