"""Path rules of a job: no output may equal, contain or lie inside an input."""

from __future__ import annotations

import os

from bigkernel.jobs.config.fields import _URL, _Context
from bigkernel.jobs.config.schema import JobConfig

# --------------------------------------------------------------------------------------------
# Outputs must not overwrite inputs
# --------------------------------------------------------------------------------------------


def _comparable(location: str) -> tuple[str, str, str]:
    """Return (kind, normalised location, separator) for comparing two locations."""
    if location.startswith("file://"):
        return "local", os.path.realpath(location[len("file://") :]), os.sep
    if _URL.match(location):
        return "url", location.rstrip("/"), "/"
    return "local", os.path.realpath(location), os.sep


def _relation(a: str, b: str) -> str | None:
    """Say how location ``a`` relates to ``b``: same, contains, inside, or None."""
    kind_a, norm_a, sep = _comparable(a)
    kind_b, norm_b, _ = _comparable(b)
    if kind_a != kind_b:
        return None
    if norm_a == norm_b:
        return "is the same path as"
    if norm_b.startswith(norm_a.rstrip(sep) + sep):
        return "contains"
    if norm_a.startswith(norm_b.rstrip(sep) + sep):
        return "is inside"
    return None


def path_relation(a: str, b: str) -> str | None:
    """Say how location ``a`` relates to location ``b``.

    Parameters
    ----------
    a, b : str
        Local paths (symlinks resolved) or URLs (compared as text).

    Returns
    -------
    {"is the same path as", "contains", "is inside"} or None
        None when neither holds the other (or one is a URL and the other a local path).
    """
    return _relation(a, b)


def _check_overlaps(job: JobConfig, ctx: _Context) -> None:
    """Report outputs that would overwrite an input, the output folder or each other."""
    inputs, outputs = job.inputs(), job.outputs()
    for out_key, out_path in outputs.items():
        for in_key, in_path in inputs.items():
            relation = _relation(out_path, in_path)
            if relation:
                ctx.report(
                    out_key,
                    f"this output would overwrite an input: {out_key} {out_path} "
                    f"{relation} {in_key} {in_path}; choose an output path apart from "
                    "the input data",
                )
    inner = [(key, path) for key, path in outputs.items() if key != "output"]
    for key, path in inner:
        if _relation(path, job.output) in ("is the same path as", "contains"):
            ctx.report(
                key,
                f"{key} {path} must be a path inside (or apart from) the output "
                f"folder {job.output}, not the folder itself or one containing it",
            )
    if len(inner) == 2 and _relation(inner[0][1], inner[1][1]):
        ctx.report(
            inner[1][0], f"{inner[1][0]} {inner[1][1]} overlaps {inner[0][0]} {inner[0][1]}; give them separate paths"
        )
