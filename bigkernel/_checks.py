"""Small parameter checks shared by every layer."""

from __future__ import annotations

import difflib

from bigkernel.errors import ParameterError


def did_you_mean(value: object, choices) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_choice(name: str, value: object, choices) -> None:
    """Raise :class:`ParameterError` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ParameterError(f"{name} must be one of {list(choices)}, got {value!r}{did_you_mean(value, choices)}")
