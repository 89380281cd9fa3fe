"""Write a folder so it appears complete or not at all."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator

from bigkernel.errors import OutputExistsError


@contextlib.contextmanager
def atomic_folder(path: str, *, overwrite: bool = False, what: str = "output") -> Iterator[str]:
    """Yield where to write ``path`` (a folder or a single file): a hidden sibling renamed into
    place on success.

    Local paths only get the rename (URLs are written in place; their writers put a completion
    attribute last). On an exception the partial output is removed and ``path`` is untouched.
    """
    path = str(path)
    if "://" in path:
        yield path
        return
    if os.path.exists(path) and not overwrite:
        raise OutputExistsError(f"{what} {path!r} exists; pass overwrite=True to replace it")
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(path)}.partial-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
    except BaseException:
        _remove(tmp, ignore_errors=True)
        raise
    try:
        replace_path(tmp, path)
    except BaseException:
        _remove(tmp, ignore_errors=True)
        raise


def replace_path(src: str, dst: str) -> None:
    """Move the complete output ``src`` (a file or a folder) to ``dst``, replacing what is there.

    The old output is moved aside first, so that at every instant either the old or the new
    complete output is at ``dst`` or beside it (never a half-written one at ``dst``).
    """
    if not os.path.lexists(dst):
        os.replace(src, dst)
        return
    old = os.path.join(os.path.dirname(dst), f".{os.path.basename(dst)}.old-{uuid.uuid4().hex[:8]}")
    os.replace(dst, old)
    try:
        os.replace(src, dst)
    except BaseException:
        os.replace(old, dst)
        raise
    _remove(old, ignore_errors=True)


def _remove(path: str, ignore_errors: bool = False) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=ignore_errors)
    elif os.path.lexists(path):
        os.remove(path)
