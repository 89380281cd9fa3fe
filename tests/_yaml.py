"""YAML-writing helpers shared by the config-loader tests (test_config.py, test_bad_inputs.py)."""

import textwrap
from pathlib import Path

import pytest

from bigkernel.errors import ConfigError
from bigkernel.jobs.config import load_config

MINIMAL = """\
output: runs/job
data:
  train:
    path: data/train.zarr
"""


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    """Write a dedented YAML config into ``tmp_path`` and return its path."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def with_model(tmp_path: Path, model_lines: str) -> Path:
    """A minimal valid job with ``model_lines`` (already indented by two spaces) under model."""
    model = textwrap.indent(textwrap.dedent(model_lines), "  ")
    return write(tmp_path, MINIMAL + "model:\n" + model)


def with_bootstrap(tmp_path: Path, bootstrap_lines: str, head: str = MINIMAL) -> Path:
    """A job (``head``, default :data:`MINIMAL`) with ``bootstrap_lines`` (not indented) under
    bootstrap."""
    section = textwrap.indent(textwrap.dedent(bootstrap_lines), "  ")
    return write(tmp_path, head + "bootstrap:\n" + section)


def error_of(path: Path) -> str:
    """Load ``path`` expecting a ConfigError; return its message."""
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)
