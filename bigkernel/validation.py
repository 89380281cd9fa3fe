"""Parameter constraints as data, and the one function that checks them.

Our own small version of scikit-learn's ``_parameter_constraints`` (its validator is private):
an estimator declares, beside its ``__init__``, a table ``{name: [constraint, ...]}``; a value is
valid when it satisfies at least one constraint of its list. :func:`validate_params` checks a
table and raises :class:`InvalidParameterError` (a :class:`~bigkernel.errors.ParameterError`)
naming the parameter, every allowed form, the value found and the fix. The job config reads the
same tables (``bigkernel/jobs/config/``), so each rule is written once.

Constraints
-----------
``Interval(Integral | Real, left, right, closed=...)``
    A number within bounds (``None``: unbounded). Booleans are never numbers, and a ``Real``
    interval holds finite numbers only (NaN and ±inf are refused).
``Options(type, options)``
    One of a few values of ``type`` (``Options(str, ("cos", "cossin"))``); text matches
    regardless of case and surrounding spaces (``"COS"``), as kernel names do.
``ListOf(interval)``
    A non-empty 1-D list, tuple or array whose every item is in ``interval``.
``None``
    ``None`` itself.
a type (``dict``, ``Kernel``)
    An instance of it.
``DTypes(names)``
    Anything numpy reads as one of the dtypes ``names`` (``np.float32``).
``"boolean"``, ``"array-like"``, ``"random_state"``
    ``True``/``False``; a non-scalar array-like; an integer seed ``>= 0``, a numpy
    ``RandomState`` or ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real
from typing import Any, Literal

import numpy as np
from sklearn.utils import check_random_state

from bigkernel._checks import did_you_mean
from bigkernel.errors import ParameterError

__all__ = [
    "Constraint",
    "DTypes",
    "Interval",
    "InvalidParameterError",
    "ListOf",
    "Options",
    "check_int",
    "canonical_params",
    "check_param",
    "describe",
    "is_integer",
    "join_or",
    "make_constraint",
    "validate_params",
]


class InvalidParameterError(ParameterError):
    """A parameter outside its constraints.

    Besides the message, ``param``, ``expected`` (every allowed form, in words) and ``hint`` (why
    the value is refused, e.g. ``"; NaN is not allowed"``, or "") let a caller such as the job
    config say the same in its own terms.
    """

    def __init__(self, message: str, *, param: str = "", expected: str = "", hint: str = "") -> None:
        super().__init__(message)
        self.param, self.expected, self.hint = param, expected, hint


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or numpy) and not a boolean."""
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))


def int_seed(random_state: Any) -> int:
    """``random_state`` if it is an integer, else a seed drawn from it (None, RandomState)."""
    if is_integer(random_state):
        return int(random_state)
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, (bool, np.bool_))


# --------------------------------------------------------------------------------------------
# Constraints
# --------------------------------------------------------------------------------------------
class Constraint:
    """One allowed form of a parameter value."""

    def is_satisfied_by(self, value: Any) -> bool:
        """Whether ``value`` has this form."""
        raise NotImplementedError

    def describe(self) -> str:
        """The form in words, e.g. ``"an integer > 0"``."""
        raise NotImplementedError

    def hint(self, value: Any) -> str:
        """Why a refused value that looks close to this form is refused (``"; ..."``), or ""."""
        return ""


class Interval(Constraint):
    """A number of ``type`` (``Integral`` or ``Real``) between ``left`` and ``right``.

    Parameters
    ----------
    type : {numbers.Integral, numbers.Real}
    left, right : float or None
        Bounds; None leaves that side unbounded.
    closed : {"left", "right", "both", "neither"}
        Which bounds belong to the interval.
    """

    def __init__(
        self,
        type: type,
        left: float | None,
        right: float | None,
        *,
        closed: Literal["left", "right", "both", "neither"],
    ) -> None:
        if type not in (Integral, Real):
            raise TypeError(f"Interval type must be numbers.Integral or numbers.Real, not {type!r}")
        if closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"closed must be 'left', 'right', 'both' or 'neither', not {closed!r}")
        if left is not None and right is not None and right < left:
            raise ValueError(f"Interval bounds are reversed: [{left}, {right}]")
        self.type, self.left, self.right, self.closed = type, left, right, closed

    def __repr__(self) -> str:
        return f"Interval({self.type.__name__}, {self.left}, {self.right}, closed={self.closed!r})"

    def _kind_ok(self, value: Any) -> bool:
        if self.type is Integral:
            return is_integer(value)
        return _is_number(value) and math.isfinite(value)

    def _within(self, value: Any) -> bool:
        left_closed, right_closed = self.closed in ("left", "both"), self.closed in ("right", "both")
        if self.left is not None and not (value >= self.left if left_closed else value > self.left):
            return False
        return self.right is None or (value <= self.right if right_closed else value < self.right)

    def is_satisfied_by(self, value: Any) -> bool:
        return self._kind_ok(value) and self._within(value)

    def bounds(self) -> str:
        """The bounds in words, e.g. ``"> 0 and < 1"`` ("" when unbounded)."""
        show = (lambda b: str(int(b))) if self.type is Integral else (lambda b: f"{b:g}")
        parts = []
        if self.left is not None:
            parts.append(f"{'>=' if self.closed in ('left', 'both') else '>'} {show(self.left)}")
        if self.right is not None:
            parts.append(f"{'<=' if self.closed in ('right', 'both') else '<'} {show(self.right)}")
        return " and ".join(parts)

    def describe(self, plural: bool = False) -> str:
        noun = (
            ("integers" if plural else "an integer") if self.type is Integral else ("numbers" if plural else "a number")
        )
        return f"{noun} {self.bounds()}".strip()

    def hint(self, value: Any) -> str:
        if isinstance(value, (bool, np.bool_)):
            return "; booleans are not numbers"
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                return ""
            return "; that is text: pass the number itself, unquoted"
        if not _is_number(value):
            return ""
        if math.isnan(value):
            return "; NaN is not allowed"
        if math.isinf(value):
            return "; the value must be finite"
        if self.type is Integral and not is_integer(value) and float(value).is_integer():
            return "; write it without a decimal point"
        return ""


class Options(Constraint):
    """One of ``options``, each of ``type`` (a boolean is never one of several numbers)."""

    def __init__(self, type: type, options: Iterable[Any]) -> None:
        # keep a sequence's order (it is the order of the message); sort a set for a stable one
        values = tuple(options) if isinstance(options, Sequence) else tuple(sorted(options, key=repr))
        if not values or not all(isinstance(v, type) for v in values):
            raise TypeError(f"Options needs a non-empty collection of {type.__name__}, got {options!r}")
        self.type, self.options = type, values

    def __repr__(self) -> str:
        return f"Options({self.type.__name__}, {self.options!r})"

    def is_satisfied_by(self, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)) and self.type is not bool:
            return False
        return isinstance(value, self.type) and (value in self.options or self.canonical(value) is not None)

    def canonical(self, value: Any) -> Any:
        """The option ``value`` names when text options are matched regardless of case (as
        kernel names are: ``"GCV"`` names ``"gcv"``); None when it names none."""
        if self.type is not str or not isinstance(value, str):
            return None
        key = value.strip().casefold()
        return next((o for o in self.options if o.casefold() == key), None)

    def describe(self) -> str:
        shown = [repr(v) if isinstance(v, str) else str(v) for v in self.options]
        return shown[0] if len(shown) == 1 else "one of " + ", ".join(shown)

    def hint(self, value: Any) -> str:
        if isinstance(value, str) and self.type is str:
            return did_you_mean(value, self.options)
        return ""


class ListOf(Constraint):
    """A non-empty 1-D list, tuple or array whose items all satisfy ``item``."""

    def __init__(self, item: Interval) -> None:
        self.item = item

    def __repr__(self) -> str:
        return f"ListOf({self.item!r})"

    @staticmethod
    def is_list(value: Any) -> bool:
        """Whether ``value`` is a 1-D list, tuple or array (text and mappings are not)."""
        if isinstance(value, np.ndarray):
            return value.ndim == 1
        return isinstance(value, Sequence) and not isinstance(value, (str, bytes))

    def is_satisfied_by(self, value: Any) -> bool:
        return self.is_list(value) and len(value) > 0 and all(self.item.is_satisfied_by(v) for v in value)

    def describe(self) -> str:
        return f"a non-empty list of {self.item.describe(plural=True)}"

    def hint(self, value: Any) -> str:
        if not self.is_list(value):
            return ""
        if len(value) == 0:
            return "; the list is empty"
        for i, v in enumerate(value):
            if not self.item.is_satisfied_by(v):
                return f"; item {i} ({_short(v)}) is not {self.item.describe()}{self.item.hint(v)}"
        return ""


class DTypes(Constraint):
    """Anything numpy reads as one of the dtypes ``names`` (``np.float32``, ``np.dtype("f4")``,
    ``"single"``); pair it with ``Options(str, names)`` for the plain names."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def __repr__(self) -> str:
        return f"DTypes({self.names!r})"

    def is_satisfied_by(self, value: Any) -> bool:
        try:
            return np.dtype(value).name in self.names
        except (TypeError, ValueError):
            return False

    def describe(self) -> str:
        return f"a numpy dtype ({', '.join(self.names)})"


class _InstanceOf(Constraint):
    def __init__(self, type: type) -> None:
        self.type = type

    def __repr__(self) -> str:
        return self.type.__name__

    def is_satisfied_by(self, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)) and self.type in (int, float, Integral, Real):
            return False
        return isinstance(value, self.type)

    def describe(self) -> str:
        name = self.type.__name__
        return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


class _NoneConstraint(Constraint):
    def __repr__(self) -> str:
        return "None"

    def is_satisfied_by(self, value: Any) -> bool:
        return value is None

    def describe(self) -> str:
        return "None"


class _Boolean(Constraint):
    def __repr__(self) -> str:
        return "'boolean'"

    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, (bool, np.bool_))

    def describe(self) -> str:
        return "True or False"


class _ArrayLike(Constraint):
    def __repr__(self) -> str:
        return "'array-like'"

    def is_satisfied_by(self, value: Any) -> bool:
        if isinstance(value, (str, bytes, Mapping)):
            return False
        return isinstance(value, Sequence) or hasattr(value, "__array__") and np.ndim(value) > 0

    def describe(self) -> str:
        return "an array-like"


class _RandomState(Constraint):
    _SEED = Interval(Integral, 0, None, closed="left")

    def __repr__(self) -> str:
        return "'random_state'"

    def is_satisfied_by(self, value: Any) -> bool:
        return value is None or isinstance(value, np.random.RandomState) or self._SEED.is_satisfied_by(value)

    def describe(self) -> str:
        return "an integer >= 0, a numpy RandomState or None"

    def hint(self, value: Any) -> str:
        if isinstance(value, np.random.Generator):
            return "; a numpy Generator cannot seed this: pass an integer seed"
        return self._SEED.hint(value)


_NAMED = {"boolean": _Boolean(), "array-like": _ArrayLike(), "random_state": _RandomState()}


def make_constraint(constraint: Any) -> Constraint:
    """The :class:`Constraint` of a table entry: a Constraint, ``None``, a type, ``"boolean"``,
    ``"array-like"`` or ``"random_state"``."""
    if isinstance(constraint, Constraint):
        return constraint
    if constraint is None:
        return _NoneConstraint()
    if isinstance(constraint, type):
        return _InstanceOf(constraint)
    if isinstance(constraint, str) and constraint in _NAMED:
        return _NAMED[constraint]
    raise TypeError(f"unknown parameter constraint {constraint!r}")


def describe(constraints: Iterable[Any]) -> str:
    """Every allowed form in words: ``"a number > 0, a non-empty list of numbers > 0 or 'gcv'"``."""
    return join_or([make_constraint(c).describe() for c in constraints])


def join_or(parts: Sequence[str]) -> str:
    """``"a, b or c"``."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _found(value: Any) -> str:
    return f"{_short(value)} ({type(value).__name__})"


# --------------------------------------------------------------------------------------------
# Checking
# --------------------------------------------------------------------------------------------
def validate_params(
    constraints: Mapping[str, Sequence[Any]],
    params: Mapping[str, Any],
    caller: str,
    *,
    defaults: Mapping[str, Any] | None = None,
) -> None:
    """Check each of ``params`` against its entry of ``constraints``.

    Parameters
    ----------
    constraints : mapping of str to list
        The table: for each parameter, the forms it may take (see the module docstring).
    params : mapping of str to object
        The values, e.g. ``estimator.get_params(deep=False)``. A parameter without an entry is
        not checked here (the tests hold every public estimator's table complete).
    caller : str
        Who takes the parameters (an estimator's or a function's name), for the message.
    defaults : mapping of str to object, optional
        Default values, offered as the fix.

    Raises
    ------
    InvalidParameterError
        For the first parameter that satisfies none of its constraints, e.g. ``"RandomFeatureRidge:
        n_components must be an integer > 0; found 0 (int). Use e.g. n_components=100 (the
        default)."``
    """
    for name, value in params.items():
        if name in constraints:
            _check(name, value, constraints[name], caller, (defaults or {}).get(name, _MISSING))


def canonical_params(constraints: Mapping[str, Sequence[Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """The text options of ``params`` spelled otherwise than their table spells them
    (``{"alpha": "gcv"}`` for ``alpha="GCV"``): what a fit sets back, so that the code reading
    them compares one spelling. Values that are no text option are left out."""
    out = {}
    for name, value in params.items():
        if name not in constraints or not isinstance(value, str):
            continue
        for c in map(make_constraint, constraints[name]):
            if isinstance(c, Options) and value not in c.options and c.canonical(value) is not None:
                out[name] = c.canonical(value)
                break
    return out


_MISSING = object()


def _check(name: str, value: Any, constraints: Sequence[Any], caller: str | None, default: Any) -> None:
    forms = [make_constraint(c) for c in constraints]
    if any(c.is_satisfied_by(value) for c in forms):
        return
    expected = join_or([c.describe() for c in forms])
    hint = next((h for h in (c.hint(value) for c in forms) if h), "")
    message = f"{caller + ': ' if caller else ''}{name} must be {expected}; found {_found(value)}{hint}"
    message += "" if message.endswith("?") else "."
    if default is not _MISSING and any(c.is_satisfied_by(default) for c in forms):
        message += f" Use e.g. {name}={default!r} (the default)."
    raise InvalidParameterError(message, param=name, expected=expected, hint=hint)


def check_param(
    name: str, value: Any, constraints: Sequence[Any], *, caller: str | None = None, default: Any = _MISSING
) -> Any:
    """Return ``value`` if it satisfies one of ``constraints``; raise
    :class:`InvalidParameterError` otherwise (see :func:`validate_params`)."""
    _check(name, value, constraints, caller, default)
    return canonical_params({name: constraints}, {name: value}).get(name, value)


def check_int(
    name: str, value: Any, minimum: int | None = None, *, caller: str | None = None, default: Any = _MISSING
) -> int:
    """``value`` as an ``int``, refusing booleans, non-integers and values below ``minimum``.

    For functions (not estimators) whose integer parameters have no table, e.g.
    ``bootstrap(n_bootstraps=...)``.
    """
    if is_integer(value) and (minimum is None or value >= minimum):  # the common case, cheaply
        return int(value)
    return int(
        check_param(name, value, [Interval(Integral, minimum, None, closed="left")], caller=caller, default=default)
    )
