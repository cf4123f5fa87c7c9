"""The documentation site's generated reference pages, built from the code at every build.

- ``configuration_page()``: every key of every section of a job configuration, walked from
  the configuration model (``kappaplus.config.JobConfig``): its type, default, what it does
  and an example. What a key does comes from the field's own docstring or description in the
  model, else from ``config_keys.toml`` beside this file (keyed ``Model.field``): a key the
  model gains appears here at once, and ``tests/test_docs_reference.py`` fails until it is
  described.
- ``cli_page()``: every command and option of the ``kappa`` command line, walked from its
  typer application.
- ``api_page()``: the public package ``kappaplus`` (its ``__all__``), rendered by mkdocstrings.

``hooks.py`` adds the three pages to the site (mkdocs ``on_files``); nothing here is written
to ``docs/``.
"""

from __future__ import annotations

import ast
import enum
import functools
import inspect
import json
import textwrap
import tomllib
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

HERE = Path(__file__).resolve().parent
DESCRIPTIONS = HERE / "config_keys.toml"
NOT_DESCRIBED = "*Not described yet* (add it to `scripts/docs/config_keys.toml`)."

# the sample name of a table keyed by the user's names, per section
SAMPLE_NAMES = {"inputs": "rides", "outputs": "counts", "mode": "backfill"}

# the validators of kappaplus.config.fields, by function name -> (type as said, sample value)
VALIDATED_TYPES = {
    "_table": ("table name (`db.table`)", '"lake.rides"'),
    "_topic": ("topic name", '"rides"'),
    "_servers": ("`host:port[,host:port...]`", '"kafka1:9092,kafka2:9092"'),
    "_duration": ('duration (`"2 hours"`)', '"2 hours"'),
    "_trigger": ('duration or `"available-now"`', '"10 seconds"'),
    "moment_text": ('timestamp (ISO-8601) or `"none"`', '"2024-03-01T00:00:00Z"'),
    "optional_duration": ('duration or `"none"`', '"1 day"'),
    "_kafka_client_settings": (
        "table of `kafka.*` client settings",
        '{ "kafka.security.protocol" = "SASL_SSL" }',
    ),
}


# -- the configuration reference --------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One key of one section of a job configuration."""

    section: str  # "" for the top level, else e.g. "inputs.<name>.kafka"
    name: str  # as written in TOML (the alias where the model has one)
    other_name: str | None  # the snake_case spelling accepted too
    type_text: str
    default_text: str  # "required" when there is none
    what: str
    example: str  # TOML lines, section header included
    owner: str  # Model.field the description is keyed by
    described: bool


@dataclass(frozen=True)
class Section:
    path: str  # "" for the top level
    is_array: bool
    model: type[BaseModel]
    keys: tuple[Key, ...]


def _descriptions() -> dict[str, dict[str, str]]:
    raw = tomllib.loads(DESCRIPTIONS.read_text(encoding="utf-8"))
    out: dict[str, dict[str, str]] = {}
    for model, fields in raw.items():
        for field, entry in fields.items():
            out[f"{model}.{field}"] = entry if isinstance(entry, dict) else {"what": entry}
    return out


@functools.cache
def _attribute_docstrings(model: type) -> dict[str, str]:
    """``field: type = ...`` followed by a string literal, in the class's own source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(model)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _owner(model: type[BaseModel], field: str) -> type:
    """The class of ``model``'s MRO that declares ``field``."""
    for klass in model.__mro__:
        if field in getattr(klass, "__annotations__", {}):
            return klass
    return model


def _rst_to_markdown(text: str) -> str:
    """Docstring markup (``code``, :class:`X`) as Markdown."""
    import re

    text = re.sub(r":(?:class|mod|func|meth|data|attr):`~?([^`]+)`", r"`\1`", text)
    text = re.sub(r"::$", ":", text, flags=re.M)  # a literal block's marker
    return text.replace("``", "`")


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _model_of(annotation: Any) -> type[BaseModel] | None:
    inner = _strip_optional(annotation)
    if inspect.isclass(inner) and issubclass(inner, BaseModel):
        return inner
    return None


def _flat(metadata: list[Any]) -> list[Any]:
    """Annotated metadata, with the constraints of a ``Field(...)`` inside it spread out."""
    out = []
    for item in metadata:
        out.append(item)
        if isinstance(item, FieldInfo):
            out.extend(item.metadata)
    return out


def _validator_names(metadata: list[Any]) -> list[str]:
    return [getattr(getattr(m, "func", None), "__name__", "") for m in metadata]


def _type_and_sample(annotation: Any, metadata: list[Any]) -> tuple[str, str | None]:
    """How a field's type reads, and a sample value in TOML (None: no good guess)."""
    metadata = _flat(metadata)
    for name in _validator_names(metadata):
        if name in VALIDATED_TYPES:
            return VALIDATED_TYPES[name]
    annotation = _strip_optional(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(annotation)
        return _type_and_sample(base, [*extra, *metadata])
    if origin is typing.Literal:
        values = typing.get_args(annotation)
        return " \\| ".join(f"`{json.dumps(v)}`" for v in values), json.dumps(values[0])
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        values = [m.value for m in annotation]
        return " \\| ".join(f"`{v}`" for v in values), json.dumps(values[0])
    if annotation is bool:
        return "boolean", "true"
    if annotation is int:
        positive = any(getattr(m, "gt", None) == 0 for m in metadata)
        return ("integer > 0" if positive else "integer"), "1000000"
    if annotation is str:
        return "string", None
    if annotation is Path:
        return "path", None
    if annotation is Any:
        return "any", None
    model = _model_of(annotation)
    if model is not None:
        return "table (section below)", None
    if origin is dict:
        key, value = typing.get_args(annotation)
        value_type, _ = _type_and_sample(value, [])
        if _model_of(value) is not None:
            return "tables by name (sections below)", None
        return f"table of {value_type}", None
    if origin is list:
        (item,) = typing.get_args(annotation)
        if _model_of(item) is not None:
            return "array of tables (section below)", None
        item_type, _ = _type_and_sample(item, [])
        return f"array of {item_type}", None
    return str(annotation).replace("typing.", ""), None


def _toml_value(value: Any) -> str | None:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(str(_toml_value(v)) for v in value) + "]"
    return None


def _default_text(field: FieldInfo) -> tuple[str, Any]:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "its section's defaults", None
        return f"`{_toml_value(value)}`", value
    if field.default is PydanticUndefined:
        return "required", None
    if field.default is None:
        return "none", None
    shown = _toml_value(field.default)
    return (f"`{shown}`" if shown is not None else str(field.default)), field.default


def _sample_section(path: str, is_array: bool) -> str:
    parts = path.split(".")
    for i, part in enumerate(parts):
        if part.startswith("<"):
            parts[i] = SAMPLE_NAMES.get(parts[i - 1], "name") if i else "name"
    name = ".".join(parts)
    return f"[[{name}]]" if is_array else f"[{name}]"


def _key(
    model: type[BaseModel],
    field_name: str,
    field: FieldInfo,
    section: str,
    is_array: bool,
    described: dict[str, dict[str, str]],
) -> Key:
    owner = _owner(model, field_name)
    owner_key = f"{owner.__name__}.{field_name}"
    name = field.alias or field_name
    entry = described.get(owner_key, {})
    what = _attribute_docstrings(owner).get(field_name) or entry.get("what") or field.description
    type_text, sample = _type_and_sample(field.annotation, list(field.metadata))
    default_text, default = _default_text(field)
    header = _sample_section(section, is_array) + "\n" if section else ""
    example = entry.get("example")
    child = _children(field.annotation)
    if example is None and child is not None:  # a section of its own: its header
        suffix, _, sub_array = child
        header = ""
        example = _sample_section(f"{section}.{name}{suffix}".lstrip("."), sub_array)
        example += "\n# ... its keys (below)"
    elif example is None:
        value = _toml_value(default) if default not in (None, {}, []) else sample
        example = f"{name} = {value if value is not None else '...'}"
    return Key(
        section=section,
        name=name,
        other_name=field_name if field.alias and field.alias != field_name else None,
        type_text=type_text,
        default_text=default_text,
        what=_rst_to_markdown(what) if what else NOT_DESCRIBED,
        example=header + example,
        owner=owner_key,
        described=bool(what),
    )


def _children(annotation: Any) -> tuple[str, type[BaseModel], bool] | None:
    """(path suffix, model, is_array) when a field opens sections of its own."""
    model = _model_of(annotation)
    if model is not None:
        return "", model, False
    inner = _strip_optional(annotation)
    origin = typing.get_origin(inner)
    if origin is dict:
        key, value = typing.get_args(inner)
        if _model_of(value) is not None:
            is_mode = inspect.isclass(key) and issubclass(key, enum.Enum)
            return (".<mode>" if is_mode else ".<name>"), _model_of(value), False  # type: ignore[return-value]
    if origin is list:
        (item,) = typing.get_args(inner)
        if _model_of(item) is not None:
            return "", _model_of(item), True  # type: ignore[return-value]
    return None


def config_sections(root: type[BaseModel] | None = None) -> list[Section]:
    """Every section of a job configuration, depth first, from the model."""
    if root is None:
        from kappaplus.config import JobConfig

        root = JobConfig
    described = _descriptions()
    sections: list[Section] = []

    def walk(model: type[BaseModel], path: str, is_array: bool) -> None:
        keys = []
        below: list[tuple[str, type[BaseModel], bool]] = []
        for field_name, field in model.model_fields.items():
            keys.append(_key(model, field_name, field, path, is_array, described))
            child = _children(field.annotation)
            if child is not None:
                suffix, sub, sub_array = child
                name = field.alias or field_name
                below.append((f"{path}.{name}{suffix}".lstrip("."), sub, sub_array))
        sections.append(Section(path, is_array, model, tuple(keys)))
        for sub_path, sub, sub_array in below:
            walk(sub, sub_path, sub_array)

    walk(root, "", False)
    return sections


def section_title(section: Section) -> str:
    if not section.path:
        return "Top level"
    return f"`[[{section.path}]]`" if section.is_array else f"`[{section.path}]`"


def _model_summary(model: type[BaseModel]) -> str:
    doc = inspect.getdoc(model) or ""
    if model.__doc__ is None or doc == inspect.getdoc(BaseModel):
        return ""
    return _rst_to_markdown(doc.split("\n\n", 1)[0])


def configuration_page() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Every key of a job configuration (the TOML file `kappa run` reads, found next to the",
        "job's module or named with `--config`), section by section. This page is generated",
        "from the configuration model (`kappaplus.config`) at every build of the site, so it",
        "lists exactly the keys the code accepts. `<name>` is one of the job's inputs or",
        "outputs, `<mode>` one of `stream`, `backfill`, `bootstrap`. Keys with a camelCase",
        "name (Spark's spelling) accept the snake_case one too. Unknown keys are refused,",
        "naming the key; string values may use `${VAR}` / `${VAR:-default}`",
        "([Writing a job](../concepts/jobs.md)).",
        "",
    ]
    for section in config_sections():
        lines += [f"## {section_title(section)} {{: #{section_anchor(section)} }}", ""]
        summary = _model_summary(section.model)
        if summary:
            lines += [summary, ""]
        for key in section.keys:
            lines += [f"### `{key.name}` {{: #{_anchor(section, key)} }}", ""]
            facts = f"**Type** {key.type_text} · **default** {key.default_text}"
            if key.other_name:
                facts += f" · also spelled `{key.other_name}`"
            lines += [facts, "", key.what, "", "```toml", key.example, "```", ""]
    return "\n".join(lines)


def _slug(path: str) -> str:
    return path.replace("<", "").replace(">", "").replace(".", "-").replace("_", "-").lower()


def section_anchor(section: Section) -> str:
    """``inputs.<name>.kafka`` -> ``inputs-name-kafka`` (the top level: ``top-level``)."""
    return _slug(section.path) if section.path else "top-level"


def _anchor(section: Section, key: Key) -> str:
    return _slug(f"{section.path}.{key.name}" if section.path else key.name)


# -- the command reference ---------------------------------------------------------------


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, [*path, name])


def cli_commands() -> list[tuple[list[str], Any]]:
    """Every (non-hidden) command of ``kappa``, groups first, as (words, click command)."""
    import typer.main

    from kappaplus.cli import app

    return list(_commands(typer.main.get_command(app), ["kappa"]))


def _context(command: Any, path: list[str]) -> Any:
    import typer._click as click  # typer's own copy of click

    return click.Context(command, info_name=" ".join(path))


def cli_page() -> str:
    lines = [
        "# Command reference",
        "",
        "Every command and option of `kappa` (also `python -m kappaplus`), generated from the",
        "command line's own definitions at every build of the site; `kappa COMMAND --help`",
        "says the same in the terminal. Exit status: 0 done, 1 failed, 2 a bad command line,",
        "option or config (the message names it), more for `kappa run` (see",
        "[Modes](../concepts/modes.md#exit-status)).",
        "",
    ]
    for path, command in cli_commands():
        ctx = _context(command, path)
        title = " ".join(path)
        lines += [f"## `{title}`", ""]
        usage = command.get_usage(ctx).removeprefix("Usage: ")
        lines += ["```text", usage, "```", ""]
        if command.help:
            lines += [_cli_text(command.help), ""]
        subcommands = [n for n, c in getattr(command, "commands", {}).items() if not c.hidden]
        if subcommands:
            listed = ", ".join(f"[`{n}`](#{_cli_anchor([*path, n])})" for n in subcommands)
            lines += [f"Commands: {listed}.", ""]
        rows = []
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            record = param.get_help_record(ctx)
            if record is None:  # an argument
                shown = param.name.upper()
                text = getattr(param, "help", None) or ""
                if not param.required:
                    shown = f"[{shown}]"
            else:
                shown, text = record
            rows.append(f"| `{shown}` | {_cell(text)} |")
        if rows:
            lines += ["| argument or option | what it does |", "|---|---|", *rows, ""]
    return "\n".join(lines)


def _cli_anchor(path: list[str]) -> str:
    return "-".join(path).lower()


def _cli_text(text: str) -> str:
    """Help text as Markdown: ``\\b`` blocks (kept as written by click) become code."""
    out = []
    for paragraph in text.split("\n\n"):
        if paragraph.startswith("\b"):
            out.append("```text\n" + paragraph.lstrip("\b\n") + "\n```")
        else:
            out.append(paragraph)
    return "\n\n".join(out)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# -- the Python API ----------------------------------------------------------------------


def api_names() -> list[tuple[str, str]]:
    """(name, module that defines it) of everything ``kappaplus`` exports, without importing
    what it loads lazily (pyspark and the runtime): its ``_LAZY`` table says where those live."""
    import kappaplus

    lazy: dict[str, str] = getattr(kappaplus, "_LAZY", {})
    out = []
    for name in kappaplus.__all__:
        if name.startswith("__"):
            continue
        module = lazy.get(name) or getattr(getattr(kappaplus, name), "__module__", "kappaplus")
        out.append((name, module))
    return out


def api_page() -> str:
    import kappaplus

    lines = [
        "# Python API",
        "",
        "Everything the package `kappaplus` exports (its `__all__`), generated from the code at",
        "every build of the site. The rest of the package is how it works: importable, but",
        "not a promise. `import kappaplus` starts no Spark; names load on first use.",
        "",
        _rst_to_markdown(inspect.getdoc(kappaplus) or "").split("\n>>>", 1)[0],
        "",
    ]
    for name, module in api_names():
        lines += [f"## `{name}`", "", f"::: {module}.{name}", "    options:"]
        lines += ["      show_root_heading: false", "      heading_level: 3", ""]
    return "\n".join(lines)
