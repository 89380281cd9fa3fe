"""Reading a job file: :func:`load_config` (YAML, with line numbers for every value) and
:func:`config_from_dict` (an already-parsed mapping)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

import yaml
from yaml.nodes import MappingNode, ScalarNode

from bigkernel.errors import ConfigError, DataNotFoundError
from bigkernel.jobs.config.fields import _Context, _show
from bigkernel.jobs.config.rules import _parse_job
from bigkernel.jobs.config.schema import EXAMPLE_CONFIG, SECTION_KEYS, JobConfig, section_keys

# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def load_config(path: str | os.PathLike[str]) -> JobConfig:
    """Read and validate a job config file.

    Parameters
    ----------
    path : str or path-like
        The YAML file. Relative paths inside it are resolved against its directory.

    Returns
    -------
    JobConfig

    Raises
    ------
    DataNotFoundError
        If the file does not exist.
    ConfigError
        If the file is not valid YAML, uses Python tags or duplicate keys, is empty, or does
        not follow the schema; the message lists every problem as ``file:line: key: message``.
    """
    shown = os.fspath(path)
    raw = _parse_yaml(_read_text(shown), shown)
    return config_from_dict(raw, source=shown)


def config_from_dict(
    d: Mapping[str, Any], source: str | os.PathLike[str] = "<dict>", *, base_dir: str | None = None
) -> JobConfig:
    """Validate an already-parsed config mapping.

    Parameters
    ----------
    d : mapping
        The config, shaped like the YAML file (for example ``JobConfig.to_dict()``).
    source : str or path-like, default="<dict>"
        Where ``d`` came from; named in every error message. When it is a file path, the
        default ``name`` is its stem and relative paths are resolved against its directory.
    base_dir : str or None, default=None
        Directory to resolve relative paths against, overriding the one implied by ``source``
        (the current directory for "<dict>").

    Returns
    -------
    JobConfig

    Raises
    ------
    ConfigError
        Listing every problem found.
    """
    shown = os.fspath(source)
    is_file = not (shown.startswith("<") and shown.endswith(">"))
    if base_dir is None:
        base_dir = os.path.dirname(os.path.abspath(shown)) if is_file else os.getcwd()
    if not isinstance(d, Mapping):
        raise ConfigError(
            f"{shown}: the top level of a job config must be a mapping of keys "
            f"({', '.join(SECTION_KEYS[''])}), found {_show(d)}"
        )
    ctx = _Context(
        shown=shown,
        source=os.path.abspath(shown) if is_file else shown,
        stem=os.path.splitext(os.path.basename(shown))[0] if is_file else None,
        base_dir=os.path.abspath(os.path.expanduser(base_dir)),
        root=d,
        section_keys=section_keys(),
    )
    return _parse_job(ctx)


# --------------------------------------------------------------------------------------------
# YAML reading
# --------------------------------------------------------------------------------------------


class _LineDict(dict):  # type: ignore[type-arg]
    """A dict that remembers the (1-based) line of itself and of each of its keys."""

    line: int | None = None
    key_lines: dict[Any, int]

    def __init__(self) -> None:
        super().__init__()
        self.key_lines = {}


class _JobLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and any non-standard tag, and records lines."""

    def __init__(self, stream: str, shown: str) -> None:
        super().__init__(stream)
        self.shown = shown
        self.duplicates: list[str] = []

    def construct_undefined(self, node: yaml.Node) -> NoReturn:
        """Refuse tags SafeLoader has no constructor for (``!!python/...``, ``!local``)."""
        tag = node.tag.replace("tag:yaml.org,2002:", "!!", 1)
        raise ConfigError(
            f"{self.shown}:{node.start_mark.line + 1}: the tag {tag} is not allowed: "
            "tags that build Python objects (such as !!python/object) or custom tags are "
            "never executed in job configs; write plain values"
        )

    def construct_line_map(self, node: MappingNode) -> Iterator[_LineDict]:
        """Build a mapping as a :class:`_LineDict`, noting duplicate keys."""
        data = _LineDict()
        data.line = node.start_mark.line + 1
        yield data
        self._note_duplicates(node)
        data.update(self.construct_mapping(node))
        for key_node, _ in node.value:  # merged (<<) keys first, own keys last, as constructed
            if isinstance(key_node, ScalarNode):
                data.key_lines[self.construct_object(key_node)] = key_node.start_mark.line + 1

    def _note_duplicates(self, node: MappingNode) -> None:
        """Record keys written twice in one mapping (keys brought in by ``<<`` merges excepted)."""
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first:
                self.duplicates.append(
                    f"{self.shown}:{line}: duplicate key {key!r} (lines {first[key]} and {line}); "
                    "YAML would silently keep only the last value — remove one"
                )
            else:
                first[key] = line


_JobLoader.add_constructor("tag:yaml.org,2002:map", _JobLoader.construct_line_map)
_JobLoader.add_constructor(None, _JobLoader.construct_undefined)


def _read_text(shown: str) -> str:
    """Read the config file as UTF-8 text; a missing file is a DataNotFoundError."""
    try:
        with open(shown, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        looked = "" if os.path.isabs(shown) else f" (looked for {os.path.abspath(shown)})"
        raise DataNotFoundError(
            f"job config not found: {shown}{looked}; give the path of a YAML job file, "
            f"e.g. `bigkernel run {EXAMPLE_CONFIG}`"
        ) from None
    except IsADirectoryError:
        raise ConfigError(
            f"{shown}: is a directory; give the path of a YAML job file, e.g. `bigkernel run {EXAMPLE_CONFIG}`"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown}: not UTF-8 text ({exc.reason} at byte {exc.start}); a job config is YAML") from None


def _parse_yaml(text: str, shown: str) -> Any:
    """Parse one YAML document safely; every YAML problem becomes a ConfigError."""
    loader = _JobLoader(text, shown)
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_yaml_error_message(exc, shown)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{shown}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    if loader.duplicates:
        raise ConfigError("\n".join(loader.duplicates))
    if data is None:
        raise ConfigError(
            f"{shown}: the job config is empty; it needs at least `output:` and `data:` (see {EXAMPLE_CONFIG})"
        )
    return data


def _yaml_error_message(exc: yaml.MarkedYAMLError, shown: str) -> str:
    """Format a YAML scanner/parser/constructor error as ``file:line:column: problem``."""
    mark = exc.problem_mark or exc.context_mark
    where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
    is_syntax = not isinstance(exc, yaml.constructor.ConstructorError)
    kind = "YAML syntax error" if is_syntax else "YAML error"
    message = f"{where}: {kind}: {exc.problem or exc.context}"
    if exc.context and exc.problem and exc.context_mark:
        message += f" ({exc.context}, line {exc.context_mark.line + 1})"
    return message
