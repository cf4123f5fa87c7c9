"""Loading a job configuration: TOML, ``${VAR}`` references, relative paths, and errors that
name the key path and the value (secrets masked)."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    ValidationError,
)

from kappaplus.config.fields import (
    is_secret_key,
)
from kappaplus.config.model import (
    JobConfig,
)
from kappaplus.core.errors import ConfigError
from kappaplus.core.modes import MODES
from kappaplus.core.secrets import redact as redact_secrets

# -- loading ----------------------------------------------------------------------------

_FORBIDDEN = (
    "overriding {key!r} per mode is not allowed (principle 2: only the watermark delay, "
    "window/slice-size params, trigger interval, per-trigger budgets and output targets may "
    "differ per mode)"
)


def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _lookup(data: Any, loc: tuple[int | str, ...]) -> Any:
    for part in loc:
        in_map = isinstance(data, Mapping) and part in data
        in_list = isinstance(data, list) and isinstance(part, int) and part < len(data)
        if in_map or in_list:
            data = data[part]
        else:
            return None
    return data


def _describe(error: Mapping[str, Any], raw: Mapping[str, Any]) -> ConfigError:
    loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and "[" in part))
    path = _path(loc)
    kind = error["type"]
    value = _lookup(raw, loc) if loc else raw
    if loc and isinstance(loc[-1], str) and is_secret_key(loc[-1]):
        value = "***"
    value = _redact_deep(value)
    if kind == "extra_forbidden":
        if loc and loc[0] == "mode":
            return ConfigError(path, value, _FORBIDDEN.format(key=loc[-1]))
        return ConfigError(path, value, "unknown key")
    if kind == "missing":
        return ConfigError(path, None, "required key is missing")
    if kind in ("literal_error", "enum") and len(loc) == 2 and loc[0] == "mode":
        return ConfigError(path, value, f"unknown mode; expected one of {', '.join(MODES)}")
    message = str(error["msg"])
    message = message.removeprefix("Value error, ")
    return ConfigError(path, value, message)


def _redact_deep(value: Any) -> Any:
    return redact_secrets(value)


def _errors(exc: ValidationError, raw: Mapping[str, Any]) -> ConfigError:
    errors = exc.errors()
    first = _describe(errors[0], raw)
    if len(errors) > 1:
        rest = "; ".join(str(_describe(e, raw)) for e in errors[1:4])
        more = f" (and {len(errors) - 1} more: {rest}{' ...' if len(errors) > 4 else ''})"
        err = ConfigError(first.option, first.value, first.problem + more)
        return err
    return first


def _check_references(config: JobConfig, base: Path | None) -> None:
    for mode, override in config.mode.items():
        for name, inp in override.inputs.items():
            if name not in config.inputs:
                raise ConfigError(
                    f"mode.{mode}.inputs.{name}", None, f"no input {name!r} is defined"
                )
            binding = config.inputs[name]
            if inp.kafka is not None and binding.kafka is None:
                raise ConfigError(
                    f"mode.{mode}.inputs.{name}.kafka", None, f"input {name!r} has no Kafka binding"
                )
            if inp.hive is not None and binding.hive is None:
                raise ConfigError(
                    f"mode.{mode}.inputs.{name}.hive", None, f"input {name!r} has no Hive binding"
                )
        for name, out in override.outputs.items():
            if name not in config.outputs:
                raise ConfigError(
                    f"mode.{mode}.outputs.{name}", None, f"no output {name!r} is defined"
                )
            binding_out = config.outputs[name]
            if out.kafka is not None and binding_out.kafka is None:
                raise ConfigError(
                    f"mode.{mode}.outputs.{name}.kafka",
                    None,
                    f"output {name!r} has no Kafka target",
                )
            if out.hive is not None and binding_out.hive is None:
                raise ConfigError(
                    f"mode.{mode}.outputs.{name}.hive", None, f"output {name!r} has no Hive target"
                )
    if base is None:
        return
    for name, binding in config.inputs.items():
        if binding.kafka is not None and binding.kafka.schema_file is not None:
            schema_file = binding.kafka.schema_file
            if not schema_file.is_file():
                raise ConfigError(
                    f"inputs.{name}.kafka.schema_file", str(schema_file), "file not found"
                )
    for section, bindings in (("inputs", config.inputs), ("outputs", config.outputs)):
        for name, bound in bindings.items():
            kafka = bound.kafka
            if kafka is not None and kafka.format == "protobuf":
                _check_message(f"{section}.{name}.kafka", kafka.schema_file, kafka.message)


def _check_message(key: str, schema_file: Path | None, message: str | None) -> None:
    """Compile a Protobuf binding's schema and find its message now, before Spark starts:
    a missing file or import, a file that does not compile or a message not in it is one
    line naming the key and the file."""
    from kappaplus.codecs.protobuf_schema import descriptor_set, message_descriptor, spark_schema

    assert schema_file is not None and message is not None
    try:
        path = str(schema_file)
        spark_schema(message_descriptor(descriptor_set(path), message, path), path)
    except ConfigError as exc:
        raise ConfigError(f"{key}.{exc.option}", exc.value, exc.problem) from None


def _absolutize(raw: dict[str, Any], base: Path) -> None:
    for section in ("inputs", "outputs"):
        entries = raw.get(section)
        if not isinstance(entries, dict):
            continue
        for entry in entries.values():
            kafka = entry.get("kafka") if isinstance(entry, dict) else None
            if isinstance(kafka, dict) and isinstance(kafka.get("schema_file"), str):
                kafka["schema_file"] = str((base / kafka["schema_file"]).resolve())
    if isinstance(raw.get("checkpoint_dir"), str):
        raw["checkpoint_dir"] = str((base / raw["checkpoint_dir"]).resolve())


_REFERENCE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: str, key: str, env: Mapping[str, str] | None = None) -> str:
    """``${VAR}`` and ``${VAR:-default}`` in a configuration string, from the environment
    (``$$`` is a literal ``$``). An unset variable without a default is an error naming the
    key and the variable.

    >>> expand_env("${HOST:-127.0.0.1}:${PORT}", "bootstrap_servers", {"PORT": "9093"})
    '127.0.0.1:9093'
    >>> expand_env("${PORT}", "bootstrap_servers", {})  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    kappaplus.core.errors.ConfigError: option 'bootstrap_servers' = '${PORT}': ...
    """
    import os

    environ = os.environ if env is None else env

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found is not None and (found != "" or default is None):
            return found
        if default is not None:
            return default
        raise ConfigError(
            key,
            value,
            f"environment variable {name!r} is not set (export it, e.g. the values `kappa up` "
            f"prints, or give a default: ${{{name}:-value}})",
        )

    return _REFERENCE.sub(substitute, value)


def _expand_deep(value: Any, path: tuple[str, ...] = ()) -> Any:
    if isinstance(value, Mapping):
        return {k: _expand_deep(v, (*path, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_deep(v, (*path, str(i))) for i, v in enumerate(value)]
    if isinstance(value, str) and "$" in value:
        return expand_env(value, ".".join(path))
    return value


def config_from_dict(raw: Mapping[str, Any], base: Path | None = None) -> JobConfig:
    """Validate a configuration mapping; relative file paths resolve against ``base``.

    String values may refer to environment variables: ``${VAR}`` or ``${VAR:-default}``
    (:func:`expand_env`), so one file follows e.g. the broker address ``kappa up`` prints.
    """
    data = _expand_deep(_deep_copy(raw))
    if base is not None:
        _absolutize(data, base)
    try:
        config = JobConfig.model_validate(data)
    except ValidationError as exc:
        raise _errors(exc, data) from None
    _check_references(config, base)
    return config


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _deep_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_deep_copy(item) for item in value]
    return value


def parse_config(text: str, base: Path | None = None) -> JobConfig:
    """Parse and validate TOML text."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("<toml>", None, f"not valid TOML: {exc}") from None
    return config_from_dict(raw, base)


def load_config(path: str | Path) -> JobConfig:
    """Load and validate a job configuration file.

    >>> load_config("/nonexistent/job.toml")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    kappaplus.core.errors.ConfigError: option 'config' = '/nonexistent/job.toml': file not found
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError("config", str(path), "file not found")
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("config", str(path), f"not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("config", str(path), f"not UTF-8 text: {exc}") from None
    return config_from_dict(raw, file.resolve().parent)
