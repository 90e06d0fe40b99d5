"""The `dse` commands on the YAML files themselves: ``validate`` checks them, ``schema`` writes the
JSON schemas editors complete them with."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dse.cli.common import fail
from dse.exceptions import SpecError


def validate(files: Annotated[list[Path], typer.Argument(help="YAML files to check.")]) -> None:
    """Check search-space, hardware-profile and experiment files; print `ok` or one line a problem."""
    from dse.api import validate_files

    problems = validate_files(files)
    if problems:
        raise fail(SpecError(problems))
    print("ok")


def schema(out: Annotated[Path, typer.Option(help="Folder for the JSON schemas.")] = Path(
        "schemas")) -> None:
    """Write the JSON schemas of the three YAML kinds (for editor completion)."""
    from dse.spec import write_schemas

    for path in write_schemas(out):
        print(path)
