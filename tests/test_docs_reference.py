"""The documentation site's generated references lack nothing the code has.

The configuration, command and Python API pages are generated from the code at every build
(``scripts/docs/reference.py``, added to the site by ``scripts/docs/hooks.py``). These tests
walk the code another way (the configuration model's JSON schema, the command line's own
parameters, the package's ``__all__``) and fail for any key, command, option or name the
generated pages lack, and for a configuration key nobody has said the meaning of.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    path = ROOT / "scripts" / "docs" / "reference.py"
    spec = importlib.util.spec_from_file_location("docs_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_reference"] = module
    spec.loader.exec_module(module)
    return module


def schema_keys() -> set[tuple[str, str]]:
    """(section, key) of every key a job configuration accepts, from the JSON schema."""
    from kappaplus.config import JobConfig

    schema = JobConfig.model_json_schema(by_alias=True)
    defs = schema["$defs"]
    keys: set[tuple[str, str]] = set()

    def ref_of(node: dict[str, Any]) -> dict[str, Any] | None:
        if "$ref" in node:
            return defs[node["$ref"].rsplit("/", 1)[1]]
        for option in node.get("anyOf", []):
            found = ref_of(option)
            if found is not None:
                return found
        return None

    def walk(model: dict[str, Any], section: str) -> None:
        for name, node in model.get("properties", {}).items():
            keys.add((section, name))
            here = f"{section}.{name}".lstrip(".")
            nested = ref_of(node)
            if nested is not None and "properties" in nested:
                walk(nested, here)
            values = node.get("additionalProperties")
            if isinstance(values, dict) and ref_of(values) is not None:
                placeholder = "<mode>" if "propertyNames" in node else "<name>"
                walk(ref_of(values), f"{here}.{placeholder}")  # type: ignore[arg-type]
            items = node.get("items")
            if isinstance(items, dict) and ref_of(items) is not None:
                walk(ref_of(items), here)  # type: ignore[arg-type]

    walk(schema, "")
    return keys


def page_keys(page: str) -> set[tuple[str, str]]:
    """(section, key) of every key heading of the generated configuration page."""
    keys: set[tuple[str, str]] = set()
    section = None
    for line in page.splitlines():
        if line.startswith("## "):
            found = re.match(r"## (?:Top level|`\[\[?([^\]]+)\]\]?`)", line)
            assert found, line
            section = found.group(1) or ""
        elif line.startswith("### "):
            key = re.match(r"### `([^`]+)`", line)
            assert key and section is not None, line
            keys.add((section, key.group(1)))
    return keys


def test_the_configuration_reference_has_every_key(reference: ModuleType) -> None:
    expected = schema_keys()
    assert ("inputs.<name>.hive", "maxEventTimePerTrigger") in expected  # the walk reaches far
    assert ("mode.<mode>.inputs.<name>.hive", "targetRowsPerTrigger") in expected
    listed = page_keys(reference.configuration_page())
    assert sorted(expected - listed) == []


def test_every_configuration_key_says_what_it_does(reference: ModuleType) -> None:
    undescribed = sorted(
        {key.owner for section in reference.config_sections() for key in section.keys}
        - {key.owner for s in reference.config_sections() for key in s.keys if key.described}
    )
    assert undescribed == [], (
        f"configuration keys without a description: {undescribed}; say what each does in a "
        "docstring under the field or in scripts/docs/config_keys.toml"
    )
    page = reference.configuration_page()
    assert reference.NOT_DESCRIBED not in page
    assert page.count("```toml") == len(page_keys(page))  # an example for every key


def test_the_descriptions_name_only_keys_that_exist(reference: ModuleType) -> None:
    owners = {key.owner for s in reference.config_sections() for key in s.keys}
    stale = sorted(set(reference._descriptions()) - owners)
    assert stale == [], f"scripts/docs/config_keys.toml describes keys the model lacks: {stale}"


def test_the_command_reference_has_every_command_and_option(reference: ModuleType) -> None:
    page = reference.cli_page()
    sections = {
        m.group(1): body
        for m, body in zip(
            re.finditer(r"^## `([^`]+)`$", page, re.M),
            re.split(r"^## `[^`]+`$", page, flags=re.M)[1:],
            strict=True,
        )
    }
    commands = reference.cli_commands()
    assert len(commands) > 20  # groups and their commands, not only the top
    missing = []
    for path, command in commands:
        title = " ".join(path)
        body = sections.get(title)
        if body is None:
            missing.append(title)
            continue
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            if param.param_type_name == "option":
                missing += [f"{title} {name}" for name in param.opts if name not in body]
            elif f"`{param.name.lower()}" not in body.lower():  # an argument: its name
                missing.append(f"{title} {param.name}")
    assert missing == []


def test_the_api_reference_has_every_export(reference: ModuleType) -> None:
    import kappaplus

    page = reference.api_page()
    exported = [name for name in kappaplus.__all__ if not name.startswith("__")]
    assert "Job" in exported and "run_job" in exported
    missing = [name for name in exported if f"## `{name}`" not in page]
    assert missing == []
    for name, module in reference.api_names():
        assert f"::: {module}.{name}\n" in page
