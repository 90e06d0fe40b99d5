"""What every `dse` command shares: a console that prints text as it is, one line per problem
with exit code 2, SIGTERM and SIGHUP stopping a command as Ctrl-C does, and the farm-address
option."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from dse.core import DseError, SpecError, Terminated

if TYPE_CHECKING:
    from rich.console import Console

EXIT_SPEC = 2
AddressOption = Annotated[str | None, typer.Option(
    help="Ray head of a device farm (HOST:PORT, from `dse cluster up`); run on a machine of the farm.")]


#: The width of a console whose output goes to a pipe or a file: wider than any line dse prints,
#: so a script, a log or ``less -S`` reads every line and table cell whole (rich would otherwise
#: wrap at 80 columns and cut table cells with "…").
PIPED_WIDTH = 100_000


def plain_console(stderr: bool = False) -> Console:
    """A console that prints text as it is: parameter values, reasons and paths may hold
    brackets (``[/x]``, a folder ``[draft] v2``) that rich markup would eat or choke on. In a
    terminal long lines wrap at its width; piped or redirected, nothing is wrapped or cut."""
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False, markup=False)
    if not console.is_terminal:
        console.width = PIPED_WIDTH
    return console


def stop_signals_like_ctrl_c() -> None:
    """SIGTERM (service managers, containers, batch schedulers) and SIGHUP (a closed terminal) stop
    a command the way Ctrl-C does; the search loop keeps them so once Ray has started."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise Terminated(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)


def stopped_by(exc: KeyboardInterrupt) -> str:
    import signal

    if isinstance(exc, Terminated):
        return f"stopped by {signal.Signals(exc.signum).name}"
    return "interrupted"


def fail(exc: DseError) -> typer.Exit:
    problems = exc.problems if isinstance(exc, SpecError) else [str(exc)]
    console = plain_console(stderr=True)
    for line in problems:
        console.print(line, markup=False, soft_wrap=True)
    return typer.Exit(EXIT_SPEC)
