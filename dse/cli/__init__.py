"""The `dse` command line: run | calibrate | validate | report | profile | export | verify |
schema | list | devices | worker | cluster.

Each group of commands is a module of this package; this one gathers them into one typer app (with
``dse --version``) and is the entry point (the ``dse`` script and ``python -m dse.cli``).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from dse.cli.bundle_commands import export, verify
from dse.cli.campaign_commands import calibrate, report_cmd, run
from dse.cli.common import EXIT_SPEC
from dse.cli.farm_commands import cluster_app, devices, worker
from dse.cli.file_commands import schema, validate
from dse.cli.list_command import list_cmd
from dse.cli.profile_command import profile
from dse.core import DseError, __version__

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def _print_version(value: bool) -> None:
    if value:
        print(f"dse {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print dse's version and exit.")] = False) -> None:
    """Hardware-aware design-space exploration: search architecture and deployment stack
    together, measured on real devices."""  # typer shows this as the app's help


# Registered in the order `dse --help` lists them.
app.command()(validate)
app.command()(schema)
app.command("list")(list_cmd)
app.command()(run)
app.command()(calibrate)
app.command("report")(report_cmd)
app.command()(profile)
app.command()(export)
app.command()(verify)
app.add_typer(cluster_app, name="cluster")
app.command()(worker)
app.command()(devices)


def main() -> None:
    try:
        app()
    except DseError as exc:  # any error that escaped a command still gets one clear line
        print(exc, file=sys.stderr)
        sys.exit(EXIT_SPEC)
