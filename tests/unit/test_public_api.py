"""The public API: what ``import kappaplus`` offers (after httpx's exported-members test).

Everything a user needs to define and run a job is one import away, every name of
``__all__`` resolves to a documented object defined inside kappaplus, and importing the
package starts no Spark (the names load on first use).
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import kappaplus


def test_every_exported_name_resolves_to_a_documented_kappaplus_object() -> None:
    for name in kappaplus.__all__:
        value = getattr(kappaplus, name)
        if name == "__version__":
            assert isinstance(value, str)
            continue
        assert value.__module__.startswith("kappaplus."), (name, value.__module__)
        assert inspect.getdoc(value), f"kappaplus.{name} has no docstring"


def test_the_exports_are_the_ones_star_import_gives() -> None:
    namespace: dict[str, object] = {}
    exec("from kappaplus import *", namespace)
    assert set(kappaplus.__all__) <= set(namespace)
    assert len(kappaplus.__all__) == len(set(kappaplus.__all__))


def test_a_job_can_be_defined_and_run_from_the_package_alone() -> None:
    wanted = {"Job", "InputSpec", "OutputSpec", "load_config", "RunOptions", "run_job"}
    assert wanted | {"create_session", "stop_session", "KappaError"} <= set(kappaplus.__all__)


def test_every_error_is_a_kappa_error() -> None:
    errors = [getattr(kappaplus, n) for n in kappaplus.__all__ if n.endswith("Error")]
    assert len(errors) >= 7
    assert all(issubclass(e, kappaplus.KappaError) for e in errors)


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        kappaplus.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("kappaplus.NoSuchThing resolved")


def test_importing_the_package_loads_no_spark() -> None:
    code = "import sys, kappaplus; print('pyspark' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_the_examples_use_only_the_public_package() -> None:
    # a job author needs nothing but ``kappaplus`` (and the example's own data module)
    examples = Path(kappaplus.__file__).parent / "examples"
    private = []
    for path in sorted(examples.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            private += [
                f"{path.name}: {m}"
                for m in modules
                if m.startswith("kappaplus.") and not m.startswith("kappaplus.examples")
            ]
    assert private == []


def test_a_program_embedding_a_run_or_reading_a_lake_needs_only_the_package() -> None:
    wanted = {"Params", "read_hive_stream", "read_iceberg_stream", "read_delta_stream"}
    assert wanted | {"read_lake_stream", "read_kafka_stream"} <= set(kappaplus.__all__)
