"""Figures are non-empty PNGs of the expected size and report.md links files that exist."""

import json
import os
import re

import numpy as np
import pytest

from bigkernel.cli import main

pytest.importorskip("matplotlib")  # a test extra; the library itself does not need it


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


@pytest.mark.parametrize("model", ["gamma: [0.1, 0.5]\n  alpha: cv\n  cv: 3", "gamma: 0.5\n  alpha: gcv"])
def test_job_writes_figures_and_report(tmp_path, model):
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: r\noutput: out\nplots: true\ndata:\n  make: {kind: friedman1, n_samples: 20000, path: d.zarr}\n"
        f"model:\n  {model}\n  n_components: 64\ncluster:\n  local: {{n_workers: 1, threads_per_worker: 1}}\n"
    )
    assert main(["-q", "run", str(job)]) == 0
    out = tmp_path / "out"
    for name in ("alpha_path.png", "predicted_vs_observed.png"):
        assert _png_size(out / name) == (700, 450)
        assert os.path.getsize(out / name) > 10_000  # drawn, not blank
    report = (out / "report.md").read_text()
    links = re.findall(r"\]\(([^)]+\.png)\)", report)
    assert sorted(links) == ["alpha_path.png", "predicted_vs_observed.png"]
    assert all((out / link).exists() for link in links)
    metrics = json.loads((out / "metrics.json").read_text())
    assert "report" in metrics["timings_s"] and metrics["outputs"]["report"].endswith("report.md")
    # regenerate from the folder alone
    for name in ("alpha_path.png", "report.md"):
        os.remove(out / name)
    assert main(["report", str(out)]) == 0
    assert _png_size(out / "alpha_path.png") == (700, 450) and (out / "report.md").exists()


def test_holdout_sample_matches_the_model(tmp_path):
    import bigkernel

    job = tmp_path / "job.yaml"
    job.write_text("name: r\noutput: out\nplots: false\ndata:\n  make: {kind: sine, n_samples: 5000, noise: 0.3, path: d.zarr}\n"
                   "model: {gamma: 20.0, n_components: 64}\ncluster:\n  local: {n_workers: 1, threads_per_worker: 1}\n")
    assert main(["-q", "run", str(job)]) == 0
    z = np.load(tmp_path / "out" / "holdout_sample.npz")
    assert 500 < z["y"].size < 1500  # ~20 % of 5000 rows
    assert not (tmp_path / "out" / "alpha_path.png").exists()
    assert np.sqrt(np.mean((z["y"] - z["pred"]) ** 2)) < 0.4  # noise sd 0.3
    assert bigkernel.load(tmp_path / "out" / "model.zarr").n_features_in_ == 1


def test_report_of_unfinished_folder_is_an_error(tmp_path):
    assert main(["report", str(tmp_path)]) == 2
