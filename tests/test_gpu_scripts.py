"""The GPU machinery that CI cannot run must still work when a GPU is lent: the benchmark script
runs end to end on the CPU (``--cpu-only``), and ``scripts/gpu_check.sh`` runs every test module
that needs a GPU (a module skipped without one is otherwise never run anywhere)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_gpu_runs_every_case_on_the_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_gpu.py"), "--cpu-only", "--workdir", str(tmp_path), "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res["cases"]) == {"bare", "rf_gpu", "rf_cpu", "zarr", "exact", "bootstrap", "agree"}
    # the exact device path (numpy standing in for CuPy) agrees with the CPU fit
    assert res["cases"]["agree"]["exact"]["coef_rel_diff"] < 1e-8
    assert res["cases"]["agree"]["exact"]["same_alpha"]


def test_gpu_check_runs_every_gpu_test_module():
    script = (ROOT / "scripts" / "gpu_check.sh").read_text()
    needs_gpu = sorted(
        p.name for p in (ROOT / "tests").glob("test_*.py")
        if re.search(r"""resolve_device\(["']cuda["']\)|pytest\.mark\.gpu""", p.read_text())
    )  # fmt: skip
    assert needs_gpu, "no GPU test module found: the pattern is stale"
    missing = [name for name in needs_gpu if f"tests/{name}" not in script]
    assert not missing, f"scripts/gpu_check.sh does not run {missing}"
