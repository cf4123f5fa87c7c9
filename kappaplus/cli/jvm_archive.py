"""``kappa jvm-archive``: build the driver JVM's class archive
(:mod:`kappaplus.core.class_archive`, built by :mod:`kappaplus.local.class_archive`)."""

from __future__ import annotations

import typer
from rich.console import Console

from kappaplus.cli.errors import error_exit
from kappaplus.core.errors import KappaError

_console = Console(stderr=True)


def jvm_archive_command(
    force: bool = typer.Option(False, "--force", help="Build it again even if it exists."),
    show: bool = typer.Option(
        False, "--show", help="Only say where the archive is and whether it exists."
    ),
) -> None:
    """Build the class archive local runs start their driver JVM from (Java's class data
    sharing): Spark's, Hive's and the state store's classes parsed and verified once, so a
    local `kappa run` reaches its first micro-batch sooner (docs/benchmarks.md). One
    training run on a temporary catalog, checked before it is put in place; kept in
    $XDG_CACHE_HOME/kappaplus (~/.cache/kappaplus), one file per Java and Spark
    installation. `make setup` runs it; does nothing when the archive exists.

    KAPPA_JVM_ARCHIVE=off turns archives off; a path there uses that file. Exit status 1 when
    the build failed (nothing installed), 2 when archives are off.
    """
    from kappaplus.core.class_archive import ARCHIVE_ENV, archive_path

    path = archive_path()
    if show:
        if path is None:
            print(f"class archives are off ({ARCHIVE_ENV}=off)")
        else:
            print(f"{path} ({'built' if path.is_file() else 'not built: kappa jvm-archive'})")
        return
    if path is not None and path.is_file() and not force:
        print(f"{path} (built already; --force builds it again)")
        return
    from kappaplus.local.class_archive import build_archive

    try:
        with _console.status("training run for the driver JVM's class archive (about a minute)"):
            built = build_archive(force=force)
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    print(f"{built} ({built.stat().st_size / 2**20:.0f} MB)")


def register(app: typer.Typer) -> None:
    """Mount ``kappa jvm-archive`` on the top-level app."""
    app.command("jvm-archive")(jvm_archive_command)
