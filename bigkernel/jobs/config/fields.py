"""Field checks of the job configuration: one function per kind of value (numbers, choices,
sizes, addresses, paths), and the :class:`_Section` reader that collects every problem with
its ``file:line``."""

from __future__ import annotations

import difflib
import numbers
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from bigkernel.devices import parse_device
from bigkernel.errors import ConfigError, ParameterError
from bigkernel.kernels.registry import (
    kernel_spec,
)
from bigkernel.validation import (
    Interval,
    InvalidParameterError,
    ListOf,
    Options,
    check_param,
    join_or,
    make_constraint,
)

# --------------------------------------------------------------------------------------------
# Value checks: each takes a raw value and returns the typed value or raises _Invalid
# --------------------------------------------------------------------------------------------


class _Invalid(Exception):
    """A value failed its check; the message is reported against the key."""


Check = Callable[[Any], Any]

_NUMBER_TEXT = re.compile(r"[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d+)?")
_NUMBER_PARTS = re.compile(r"([-+]?)(\d*)\.?(\d*)(?:[eE]([-+]?)(\d+))?")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_BYTES = re.compile(r"\d+(?:\.\d+)?\s*(?:[kmgtp]i?b|[kmgtp]|b)?", re.IGNORECASE)
DASK_SCHEMES = ("tcp", "tls", "ucx", "inproc", "ws", "wss")


def _show(value: Any) -> str:
    """Describe a found value with its YAML type, e.g. ``'1e-3' (string)``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (boolean)"
    kinds = (
        (str, "string"),
        (numbers.Integral, "integer"),
        (numbers.Real, "number"),
        (Mapping, "mapping"),
        (list, "list"),
    )
    kind = next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)
    return f"{value!r} ({kind})"


def _fail(expected: str, value: Any, hint: str = "") -> NoReturn:
    """Raise the standard "expected ..., found ..." problem."""
    raise _Invalid(f"expected {expected}, found {_show(value)}{hint}")


def _yaml_number_spelling(text: str, integer: bool) -> str:
    """Return how to write a number YAML 1.1 read as text (``1e-3`` -> ``1.0e-3``)."""
    if integer:
        number = float(text.replace("_", ""))
        return str(int(number)) if number.is_integer() else ""
    match = _NUMBER_PARTS.fullmatch(text.replace("_", ""))
    if match is None:  # pragma: no cover - only called after _NUMBER_TEXT matched
        return ""
    sign, whole, frac, exp_sign, exp = match.groups()
    spelled = f"{sign}{whole or '0'}.{frac or '0'}"
    return spelled + (f"e{exp_sign or '+'}{exp}" if exp is not None else "")


def _reject_number_text(value: Any, expected: str, integer: bool) -> None:
    """Raise if ``value`` is a number YAML 1.1 read as text, saying how to write it."""
    if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value.strip()):
        spelled = _yaml_number_spelling(value.strip(), integer)
        fix = f"; write {spelled}" if spelled else ""
        raise _Invalid(
            f"expected {expected}, found {_show(value)}: YAML 1.1 reads {value.strip()} as text, "
            f"not a number (a float needs a decimal point and a signed exponent, and quotes "
            f"always make text){fix}"
        )


_BOOLEAN = make_constraint("boolean")


def _describe(form: Any) -> str:
    """A constraint in the config's words (YAML writes true and false in lower case)."""
    return "true or false" if form is _BOOLEAN else form.describe()


def _satisfying(forms: Sequence[Any], expected: str | None = None) -> Check:
    """Check a value by constraints of :mod:`bigkernel.validation` (the estimators' own rules).

    A refused value is the parameter error said in the config's terms: ``expected ..., found
    <the YAML value><why>``, reported against the key and its line. Numbers YAML 1.1 reads as
    text are explained first. Returns the value, as int or float where a number is expected.
    """
    forms = [make_constraint(form) for form in forms]
    expected = expected or join_or([_describe(form) for form in forms])
    numeric = any(isinstance(f, Interval) or isinstance(f, Options) and f.type is not str for f in forms)
    integer = any(isinstance(f, Interval) and f.type is numbers.Integral for f in forms)

    def check(value: Any) -> Any:
        if numeric:
            _reject_number_text(value, expected, integer)
        try:
            value = check_param("value", value, forms)  # text options in the table's spelling
        except InvalidParameterError as exc:
            _fail(expected, value, exc.hint)
        kind = next(f for f in forms if f.is_satisfied_by(value))
        if isinstance(kind, Interval) and kind.type is numbers.Integral:
            return int(value)
        if isinstance(kind, Interval) or isinstance(kind, Options) and kind.type is not str:
            return float(value)
        return value

    return check


def _interval(
    kind: type, gt: float | None, ge: float | None, lt: float | None = None, le: float | None = None
) -> Interval:
    """The :class:`~bigkernel.validation.Interval` of bounds such as ``gt=0, lt=1``."""
    closed = {(True, True): "both", (True, False): "left", (False, True): "right", (False, False): "neither"}
    return Interval(
        kind, ge if ge is not None else gt, le if le is not None else lt, closed=closed[ge is not None, le is not None]
    )


def _integer(*, gt: int | None = None, ge: int | None = None) -> Check:
    """Check for an integer (not a boolean, not a float) within bounds."""
    return _satisfying([_interval(numbers.Integral, gt, ge)])


def _number(
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    expected: str | None = None,
) -> Check:
    """Check for a finite real number (not a boolean) within bounds; returns a float."""
    return _satisfying([_interval(numbers.Real, gt, ge, lt, le)], expected)


def _param(owner: type, name: str, *, words: Sequence[str] | None = None, null_word: str | None = None) -> Check:
    """Check a ``model`` key by the parameter table of the estimator that takes it.

    One rule, read by both: ``owner._parameter_constraints[name]``. A YAML value takes the forms
    of that entry that YAML can write (numbers, lists, text options, booleans; not Python types);
    whether null is allowed is the key's business (``nullable``). ``words`` replace the entry's
    text options by the config's own keywords, matched case-insensitively (alpha 'cv', 'loo');
    ``null_word`` is the text that stands for the entry's None (preconditioner 'none'). A list
    is checked item by item, naming the index.
    """
    entry = [make_constraint(form) for form in owner._parameter_constraints[name]]
    allows_none = any(form.is_satisfied_by(None) for form in entry)
    texts = [o for f in entry if isinstance(f, Options) and f.type is str for o in f.options]
    forms = [
        f
        for f in entry
        if isinstance(f, (Interval, ListOf)) or f is _BOOLEAN or isinstance(f, Options) and f.type is not str
    ]
    strict = (texts if words is None else []) + ([null_word] if null_word and allows_none else [])
    shown = [*(words or ()), *strict]
    if forms:
        expected = join_or([_describe(f) for f in forms] + [repr(w) for w in shown])
    else:
        expected = Options(str, shown).describe()
    scalar = _satisfying(forms + ([Options(str, strict)] if strict else []), expected)
    items = next((f.item for f in forms if isinstance(f, ListOf)), None)
    item = _satisfying([items], expected) if items is not None else None

    def check(value: Any) -> Any:
        if words and isinstance(value, str) and value.strip().lower() in words:
            return value.strip().lower()
        if item is not None and isinstance(value, (list, tuple)):
            if not value:
                _fail(expected, value, "; the list is empty")
            return tuple(_list_item(item, index, v) for index, v in enumerate(value))
        return scalar(value)

    return check


def _estimator_param(owner: type, name: str) -> Check:
    """Check a value by ``owner._parameter_constraints[name]``, whatever forms the entry has.

    The forms YAML writes (numbers, lists, text options, booleans) are checked as
    :func:`_param` does, with its messages; a value only another form takes (a ``dict``, any
    text for a ``str`` entry, a seed, a device) is checked by
    :func:`~bigkernel.validation.check_param`. The value comes back as plain data: mappings as
    dicts and lists as tuples (so a parsed config compares equal to itself read back).
    """
    entry = owner._parameter_constraints[name]
    forms = [make_constraint(form) for form in entry]
    yaml_forms = any(isinstance(f, (Interval, ListOf, Options)) or f is _BOOLEAN for f in forms)
    strict = _param(owner, name) if yaml_forms else None

    def check(value: Any) -> Any:
        try:
            check_param(name, value, entry)
            refused = None
        except InvalidParameterError as exc:
            refused = exc
        if strict is not None:
            try:
                return strict(value)
            except _Invalid:
                if refused is not None:
                    raise
        elif refused is not None:
            _fail(refused.expected, value, refused.hint)
        return plain_value(value)

    return check


def plain_value(value: Any) -> Any:
    """``value`` as plain, comparable data: mappings as dicts, lists as tuples (recursively).

    Parameters
    ----------
    value : Any
        A value read from YAML or given in a mapping.

    Returns
    -------
    Any
    """
    if isinstance(value, Mapping):
        return {key: plain_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return tuple(plain_value(item) for item in value)
    return value


def _positive_or_list(expected: str, *, word: str | tuple[str, ...] | None = None) -> Check:
    """Check for a number > 0, a non-empty list of them, or (if given) a keyword in ``word``."""
    scalar = _number(gt=0, expected=expected)
    words = (word,) if isinstance(word, str) else tuple(word or ())

    def check(value: Any) -> float | tuple[float, ...] | str:
        if words and isinstance(value, str) and value.strip().lower() in words:
            return value.strip().lower()
        if isinstance(value, (list, tuple)):
            if not value:
                _fail(expected, value, "; the list is empty")
            return tuple(_list_item(scalar, index, item) for index, item in enumerate(value))
        return scalar(value)

    return check


def _list_item(check: Check, index: int, item: Any) -> Any:
    """Check one list item, naming its index in the problem."""
    try:
        return check(item)
    except _Invalid as exc:
        raise _Invalid(f"item {index}: {exc}") from None


def _text_or_list(value: Any) -> str | tuple[str, ...]:
    """Check for non-empty text or a non-empty list of it (table columns)."""
    if isinstance(value, (list, tuple)):
        if not value:
            _fail("a name or a non-empty list of column names", value, "; the list is empty")
        return tuple(_list_item(_text, index, item) for index, item in enumerate(value))
    return _text(value)


def _bool_or_auto(value: Any) -> bool | str:
    """Check for true, false or "auto"."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if not isinstance(value, bool):
        _fail('true, false or "auto"', value)
    return value


def _device(value: Any) -> str:
    """Check a ``device`` (the estimators' rule, :func:`bigkernel.devices.parse_device`)."""
    try:
        parse_device(value)
    except ParameterError:
        _fail("'cpu', 'cuda', 'cuda:N' (a GPU ordinal) or 'auto'", value)
    return value


def _gpus(value: Any) -> str | tuple[int, ...]:
    """Check ``cluster.local.gpus``: "all" or a non-empty list of distinct GPU ordinals >= 0."""
    expected = "'all' or a non-empty list of distinct GPU ordinals (integers >= 0)"
    if isinstance(value, str) and value.strip().lower() == "all":
        return "all"
    if not isinstance(value, (list, tuple)) or not value:
        _fail(expected, value)
    ordinals = tuple(_list_item(_integer(ge=0), i, v) for i, v in enumerate(value))
    if len(set(ordinals)) != len(ordinals):
        _fail(expected, value, "; an ordinal is repeated")
    return ordinals


def _boolean(value: Any) -> bool:
    """Check for true/false."""
    if not isinstance(value, bool):
        _fail("true or false", value)
    return value


def _text(value: Any) -> str:
    """Check for non-empty text."""
    if not isinstance(value, str) or not value.strip():
        hint = "; quote it to make it text" if isinstance(value, (numbers.Real, bool)) else ""
        _fail("non-empty text", value, hint)
    return value


def _choice(options: Sequence[str], *, upper: bool = False) -> Check:
    """Check for one of ``options``, regardless of case (as kernel names), spelt as listed."""
    expected = "one of " + ", ".join(repr(option) for option in options)
    by_key = {o.casefold(): o for o in options}

    def check(value: Any) -> str:
        if not isinstance(value, str):
            _fail(expected, value)
        word = by_key.get(value.strip().casefold(), value.upper() if upper else value)
        if word not in options:
            close = difflib.get_close_matches(word.casefold(), list(by_key), n=1)  # case aside, as matched
            _fail(expected, value, f"; did you mean {by_key[close[0]]!r}?" if close else "")
        return word

    return check


def _nu(value: Any) -> float:
    """Check for a Matérn smoothness of the registry (the closed forms)."""
    choices = kernel_spec("matern").param("nu").choices or ()
    expected = "one of " + ", ".join(str(nu) for nu in choices)
    number = _number(expected=expected)(value)
    if number not in choices:
        _fail(expected, value)
    return number


def _chunk_rows(value: Any) -> int | str:
    """Check for "auto" or a number of rows > 0."""
    if value == "auto":
        return "auto"
    if isinstance(value, str) and not _NUMBER_TEXT.fullmatch(value.strip()):
        _fail("'auto' or an integer > 0", value)
    return _integer(gt=0)(value)


def _memory_limit(value: Any) -> int | str:
    """Check for "auto", a number of bytes > 0 or a size such as "4GiB"."""
    expected = "'auto', a number of bytes > 0, or a size such as '4GiB'"
    if isinstance(value, str) and (value == "auto" or _BYTES.fullmatch(value.strip())):
        return value
    if isinstance(value, str):
        _fail(expected, value)
    return _integer(gt=0)(value)


def _address(value: Any) -> str:
    """Check for a Dask scheduler address such as ``tcp://10.0.0.5:8786``."""
    expected = "a scheduler address such as 'tcp://10.0.0.5:8786'"
    text = _text(value)
    scheme, sep, rest = text.partition("://")
    if any(char.isspace() for char in text) or (sep and (scheme not in DASK_SCHEMES or not rest)):
        _fail(expected, value, f"; known schemes: {', '.join(DASK_SCHEMES)}")
    return text


def _location(base: str) -> Check:
    """Check for a path or URL; resolve relative local paths against ``base``."""

    def check(value: Any) -> str:
        return _resolve(_text(value), base)

    return check


def _resolve(location: str, base: str) -> str:
    """Resolve a local path against ``base`` (``~`` expanded); keep URLs as written."""
    if _URL.match(location):
        return location
    return os.path.normpath(os.path.join(base, os.path.expanduser(location)))


# --------------------------------------------------------------------------------------------
# Sections: a mapping, its dotted prefix, and the problems found in it
# --------------------------------------------------------------------------------------------


@dataclass
class _Context:
    """State shared while one config is parsed."""

    shown: str
    source: str
    stem: str | None
    base_dir: str
    root: Mapping[Any, Any]
    #: the valid keys of each section, by dotted prefix (:data:`.schema.SECTION_KEYS`)
    section_keys: Mapping[str, Sequence[str]] = field(default_factory=dict)
    problems: list[tuple[int, str]] = field(default_factory=list)
    seed: int = 0
    output: str = ""

    def report(self, key: str, message: str, line: int | None = None) -> None:
        """Record a problem with ``key``; the line is looked up when not given."""
        line = line if line is not None else self.line_of(key)
        where = f"{self.shown}:{line}" if line else self.shown
        self.problems.append((line or 0, f"{where}: {key or '(top level)'}: {message}"))

    def line_of(self, dotted: str) -> int | None:
        """Return the line of the deepest existing key along ``dotted``, if known."""
        node: Any = self.root
        line = getattr(node, "line", None)
        for part in dotted.split(".") if dotted else ():
            if not isinstance(node, Mapping) or part not in node:
                break
            line = getattr(node, "key_lines", {}).get(part, line)
            node = node[part]
        return line

    def raise_if_any(self) -> None:
        """Raise one ConfigError listing every recorded problem, in file order."""
        problems = [text for _, text in sorted(self.problems, key=lambda item: item[0])]
        if len(problems) == 1:
            raise ConfigError(problems[0])
        if problems:
            listed = "\n".join(f"  {problem}" for problem in problems)
            raise ConfigError(f"{len(problems)} problems in job config {self.shown}:\n{listed}")


class _Section:
    """One mapping of the config; reads typed values and reports problems by dotted key."""

    def __init__(self, ctx: _Context, raw: Mapping[Any, Any], prefix: str, keys: Sequence[str] | None = None) -> None:
        self.ctx = ctx
        self.raw = raw
        self.prefix = prefix
        self.lines: dict[Any, int] = getattr(raw, "key_lines", {})
        self.line: int | None = getattr(raw, "line", None)
        self.reported = 0
        self.keys = tuple(ctx.section_keys[prefix] if keys is None else keys)
        self._check_keys(self.keys)

    def dotted(self, key: str) -> str:
        """Return the full dotted name of ``key``."""
        return f"{self.prefix}.{key}" if self.prefix else key

    def report(self, key: str | None, message: str) -> None:
        """Record a problem with ``key`` (or with the section itself)."""
        self.reported += 1
        line = self.lines.get(key, self.line) if key is not None else self.line
        self.ctx.report(self.dotted(key) if key is not None else self.prefix, message, line)

    @property
    def clean(self) -> bool:
        """bool : Whether no problem was reported in this section (so cross-checks are fair)."""
        return self.reported == 0

    def is_set(self, key: str) -> bool:
        """Whether ``key`` is present with a non-null value."""
        return self.raw.get(key) is not None

    def value(self, key: str, check: Check, default: Any, *, nullable: bool = False) -> Any:
        """Return the checked value of ``key``.

        ``default`` when the key is absent or its value invalid; None when it is null and
        ``nullable``.
        """
        if key not in self.raw:
            return default
        if nullable and self.raw[key] is None:
            return None
        try:
            return check(self.raw[key])
        except _Invalid as exc:
            self.report(key, str(exc))
            return default

    def required(self, key: str, check: Check, what: str) -> Any:
        """Return the checked value of a required ``key``; "" if missing or invalid."""
        if not self.is_set(key):
            self.report(key, f"missing: give {what}")
            return ""
        return self.value(key, check, "")

    def section(self, key: str, keys: Sequence[str] | None = None) -> _Section | None:
        """Return the sub-mapping ``key`` as a section; None if absent, null or not a mapping.

        ``keys``: its valid keys when they are not a fixed section's (an estimator's parameters).
        """
        if not self.is_set(key):
            return None
        sub = self.raw[key]
        if not isinstance(sub, Mapping):
            keys = self.ctx.section_keys.get(self.dotted(key), ())
            is_path = isinstance(sub, str) and "path" in keys
            hint = f"; write `{key}: {{path: {sub}}}`" if is_path else ""
            self.report(key, f"expected a mapping with keys {', '.join(keys)}; found {_show(sub)}{hint}")
            return None
        return _Section(self.ctx, sub, self.dotted(key), keys)

    def optional_section(self, key: str) -> _Section:
        """Return the sub-mapping ``key``, an empty section when absent (all defaults)."""
        found = self.section(key)
        return found if found is not None else _Section(self.ctx, {}, self.dotted(key))

    def _check_keys(self, allowed: Sequence[str]) -> None:
        """Report keys that are not text or not in ``allowed``, with close matches."""
        for key in self.raw:
            if not isinstance(key, str):
                self.report(
                    key,
                    f"the key {_show(key)} in {self.prefix or 'the top level'} is "
                    "not text (YAML 1.1 reads yes/no/on/off as booleans); quote it",
                )
            elif key not in allowed:
                self.report(key, _unknown_key_message(key, self.prefix, allowed, self.ctx.section_keys))


def _unknown_key_message(key: str, prefix: str, allowed: Sequence[str], sections: Mapping[str, Sequence[str]]) -> str:
    """Describe an unknown key with close matches here, or the section it belongs to."""
    close = difflib.get_close_matches(key, allowed, n=3)
    if not close:
        close = [f"{other}.{key}" for other, keys in sections.items() if other and other != prefix and key in keys][:3]
    hint = f"did you mean {' or '.join(repr(name) for name in close)}? " if close else ""
    return f"unknown key {key!r}; {hint}valid keys in {prefix or 'the top level'}: {', '.join(allowed)}"
