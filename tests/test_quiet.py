"""The terminal of `bigkernel run` shows bigkernel's lines only: a failed task is one clear error
(not the workers' "Compute Failed" tracebacks), dask's "Sending large graph" warning and Ctrl-C's
nanny tracebacks stay off it; job.log keeps them all."""

import os
import signal
import subprocess
import sys
import time

import dask
import numpy as np
import pytest
import zarr

from bigkernel.cli import main
from bigkernel.data.synthetic import SyntheticSpec, make_data

JOB = """\
name: t
output: out
overwrite: true
data:
  train: {{path: {data}}}
  holdout_fraction: 0.25
  chunk_rows: {chunk_rows}
model: {{gamma: 0.5, n_components: {D}, alpha: 0.01}}
cluster:
  local: {{n_workers: {workers}, threads_per_worker: 1}}
"""


def _nan_data(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.random((6000, 4)), rng.random(6000)
    X[1349, 2] = np.nan
    g = zarr.open_group(tmp_path / "nan.zarr", mode="w")
    g.create_array("X", data=X, chunks=(2048, 4))
    g.create_array("y", data=y, chunks=(2048,))
    return tmp_path / "nan.zarr"


@pytest.mark.filterwarnings("always:Sending large graph:UserWarning")  # shown, as outside pytest
def test_a_failed_task_is_one_error_line_and_job_log_has_the_details(tmp_path, capfd):
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(data=_nan_data(tmp_path), chunk_rows=2048, D=32, workers=1))
    # every graph of the job is "large" to distributed: its UserWarning on each pass
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "1kB"}):
        assert main(["run", str(job)]) == 2
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    errors = [line for line in lines if not line.startswith("INFO bigkernel")]
    assert errors == [lines[-1]] and lines[-1].startswith("ERROR bigkernel: NonFiniteError: X contains NaN"), err
    assert "first at row 1349" in lines[-1]
    for noise in ("Compute Failed", "Traceback", "Sending large graph", "distributed."):
        assert noise not in err, err
    log = (tmp_path / "out" / "job.log").read_text()
    assert "ERROR distributed.worker: Compute Failed" in log and "Traceback: " in log
    assert "WARNING py.warnings: " in log and "Sending large graph" in log
    assert "ERROR bigkernel.jobs.runner: job t failed: NonFiniteError" in log


def test_a_quiet_failing_job_prints_the_error_only(tmp_path, capfd):
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(data=_nan_data(tmp_path), chunk_rows=2048, D=32, workers=1))
    assert main(["-q", "run", str(job)]) == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR bigkernel: NonFiniteError"), lines


@pytest.mark.slow
def test_ctrl_c_prints_a_line_not_the_nannies_tracebacks(tmp_path):
    """SIGINT to the process group (what Ctrl-C in a terminal sends) during the fit of a job on 2
    worker processes. Before the change: 15 to 78 lines on stderr (each worker's own
    KeyboardInterrupt traceback, asyncio's "Task exception was never retrieved", the nanny's
    "still alive after 4.0 seconds, killing"); after: bigkernel's 3 INFO lines and one error."""
    make_data(SyntheticSpec("friedman1", 400_000, 10, 1.0, 0), tmp_path / "big.zarr", chunk_rows=16384)
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(data=tmp_path / "big.zarr", chunk_rows=16384, D=2048, workers=2))
    p = subprocess.Popen(
        [sys.executable, "-m", "bigkernel.cli", "run", str(job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=tmp_path,
    )
    err = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # until the cluster is up and the fit has started
        line = p.stderr.readline()
        err.append(line)
        if "chunk plan" in line or not line:
            break
    time.sleep(3)
    os.killpg(p.pid, signal.SIGINT)
    rest, _ = p.communicate(timeout=120)[1], None
    err = "".join(err) + rest
    assert p.returncode == 130, err
    lines = err.strip().splitlines()
    assert [line for line in lines if not line.startswith("INFO bigkernel")] == [lines[-1]], err
    assert lines[-1].startswith("ERROR bigkernel: interrupted; job.log has what ran. Rerun"), err
    assert "KeyboardInterrupt" in (tmp_path / "out" / "job.log").read_text()
