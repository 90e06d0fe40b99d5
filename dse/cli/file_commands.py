"""The `dse` commands on the YAML files themselves: ``validate`` checks them, ``schema`` writes the
JSON schemas editors complete them with."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dse.cli.common import fail, plain_console
from dse.core import SpecError


def validate(files: Annotated[list[Path], typer.Argument(help="YAML files to check.")],
             recheck_models: Annotated[bool, typer.Option(
                 help="Build each factory's or ONNX file's model again, even where a pass is kept "
                      "for the same spec, sources and library versions.")] = False) -> None:
    """Check search-space, hardware-profile and experiment files; print `ok` or one line a problem.

    Every problem is reported in one pass (exit code 2). For a valid experiment, a line is also
    printed for each backend, precision or combination of its space that a device is not offered,
    with the reason (what `dse run` leaves out), before `ok`."""
    from dse.app import validate_files

    notices: list[str] = []
    problems = validate_files(files, on_notice=notices.append, recheck_models=recheck_models)
    error = fail(SpecError(problems)) if problems else None  # the problems first, on stderr
    console = plain_console()
    for notice in notices:
        console.print(notice, markup=False, soft_wrap=True)
    if error is not None:
        raise error
    print("ok")


def schema(out: Annotated[Path, typer.Option(help="Folder for the JSON schemas.")] = Path(
        "schemas")) -> None:
    """Write the JSON schemas of the three YAML kinds (for editor completion)."""
    from dse.spec import write_schemas

    for path in write_schemas(out):
        print(path)
