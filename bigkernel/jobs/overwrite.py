"""``overwrite: true`` that never loses the previous results (layer 4).

A job that overwrites a *finished* job (its output folder holds ``metrics.json``) writes
everything into a hidden sibling folder, ``.overwrite-<output>``, and predictions that go
outside the folder into a hidden sibling of their path, ``.overwrite-<name>``. Only once the new
job has written its ``metrics.json`` are they swapped in (:func:`commit`): the old
``metrics.json`` is removed first, each new output replaces the old one of the same name
(renames), outputs of the old job the new one did not make are removed, and the new
``metrics.json`` is moved in last. Until then the previous model, band, predictions, report and
metrics stay where they were: Ctrl-C, an error or a killed process leaves them untouched (the
interrupted run's ``job.log`` and ``status.json`` are in the hidden folder). Outputs at URLs are
written in place.

The bootstrap store is a cache of replicates, not a result, and the rule for it is the same
with or without ``overwrite`` (:func:`bigkernel.jobs.bootstrap_job.run_bootstrap_section`): a store of *this* job (same data,
seed, model, resampling, evaluation points; any ``n_bootstraps``) is always reused, since its
replicates are bitwise those the job would compute — so a rerun after Ctrl-C computes only what
is missing, overwrite or not. A store of *another* job is refused without ``overwrite``; with
it, the new replicates go to a hidden sibling store (``.overwrite-<store>``, itself resumed by a
rerun) that replaces the old one when the job completes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from typing import Any

from bigkernel.io.atomic import replace_path
from bigkernel.jobs.config import JobConfig

__all__ = ["Staging", "commit", "final_paths", "stage", "staged_sibling"]

logger = logging.getLogger(__name__)

#: Marks a finished job; moved in last.
DONE = "metrics.json"


def staged_sibling(path: str) -> str:
    """Hidden sibling of ``path`` where its replacement is written (keeps the suffix)."""
    parent, name = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".overwrite-{name}")


@dataclasses.dataclass(frozen=True)
class Staging:
    """Where a job writes and what :func:`commit` moves into place at its end.

    Attributes
    ----------
    cfg : JobConfig
        The config the job runs with (output paths in the staging area when staged).
    moves : tuple of (str, str)
        ``(staged, final)`` paths swapped in by :func:`commit`, folder contents excepted.
    folder : tuple of (str, str) or None
        ``(staging folder, output folder)`` when a finished job is being overwritten.
    """

    cfg: JobConfig
    moves: tuple[tuple[str, str], ...] = ()
    folder: tuple[str, str] | None = None

    def with_move(self, staged: str, final: str) -> Staging:
        """This staging with one more ``(staged, final)`` swap."""
        return dataclasses.replace(self, moves=(*self.moves, (staged, final)))


def stage(cfg: JobConfig) -> Staging:
    """The staging of a job: a hidden sibling folder when it overwrites a finished job.

    Parameters
    ----------
    cfg : JobConfig

    Returns
    -------
    Staging
        ``cfg`` itself and nothing to move, unless ``cfg.overwrite`` and the output folder holds
        a finished job.
    """
    if not (cfg.overwrite and os.path.exists(os.path.join(cfg.output, DONE))):
        return Staging(cfg)
    folder = staged_sibling(cfg.output)
    predict, moves = cfg.predict, []
    if predict is not None and "://" not in predict.output:
        final = os.path.abspath(predict.output)
        inside = final.startswith(os.path.abspath(cfg.output).rstrip(os.sep) + os.sep)
        staged = os.path.join(folder, os.path.relpath(final, cfg.output)) if inside else staged_sibling(final)
        if not inside:
            moves.append((staged, final))
            _remove(staged)  # a half-written one of an interrupted run
        predict = dataclasses.replace(predict, output=staged)
    logger.info(
        "overwrite: the finished job in %s stays in place until this run completes; writing to %s",
        cfg.output,
        folder,
    )
    return Staging(dataclasses.replace(cfg, output=folder, predict=predict), tuple(moves), (folder, cfg.output))


def final_paths(value: Any, staging: Staging) -> Any:
    """``value`` (metrics: dicts, lists, strings) with staged paths replaced by their final ones."""
    pairs = list(staging.moves) + ([staging.folder] if staging.folder else [])
    if isinstance(value, dict):
        return {k: final_paths(v, staging) for k, v in value.items()}
    if isinstance(value, list):
        return [final_paths(v, staging) for v in value]
    if isinstance(value, str):
        for staged, final in pairs:
            if value == staged or value.startswith(staged.rstrip(os.sep) + os.sep):
                return final + value[len(staged) :]
    return value


def commit(staging: Staging, stale: tuple[str, ...]) -> None:
    """Swap the staged results in; the new ``metrics.json`` last.

    Parameters
    ----------
    staging : Staging
    stale : tuple of str
        Names of job outputs in the folder: removed when the new job did not make them.
    """
    for staged, final in staging.moves:
        if os.path.lexists(staged):
            replace_path(staged, final)
    if staging.folder is None:
        return
    folder, output = staging.folder
    _remove(os.path.join(output, DONE))  # unfinished from here until the new metrics.json
    names = set(os.listdir(folder))
    for name in sorted(names - {DONE}):
        replace_path(os.path.join(folder, name), os.path.join(output, name))
    for name in sorted(set(stale) - names):
        _remove(os.path.join(output, name))
    os.replace(os.path.join(folder, DONE), os.path.join(output, DONE))
    shutil.rmtree(folder, ignore_errors=True)
    logger.info("overwrite: the new results replaced the previous ones in %s", output)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)
