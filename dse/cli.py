"""The `dse` command line: run | validate | report | schema."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dse.exceptions import DseError, SpecError

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

    from dse.search.loop import TrialOutcome

app = typer.Typer(
    help="Hardware-aware design-space exploration: search architecture and deployment stack "
         "together, measured on real devices.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)

EXIT_SPEC = 2


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _fail(exc: DseError) -> typer.Exit:
    problems = exc.problems if isinstance(exc, SpecError) else [str(exc)]
    console = _console(stderr=True)
    for line in problems:
        console.print(line, markup=False, soft_wrap=True)
    return typer.Exit(EXIT_SPEC)


@app.command()
def validate(files: Annotated[list[Path], typer.Argument(help="YAML files to check.")]) -> None:
    """Check search-space, hardware-profile and experiment files; print `ok` or one line a problem."""
    from dse.api import validate_files

    problems = validate_files(files)
    if problems:
        raise _fail(SpecError(problems))
    print("ok")


@app.command()
def schema(out: Annotated[Path, typer.Option(help="Folder for the JSON schemas.")] = Path(
        "schemas")) -> None:
    """Write the JSON schemas of the three YAML kinds (for editor completion)."""
    from dse.spec import write_schemas

    for path in write_schemas(out):
        print(path)


def _progress_printer(console: Console) -> tuple[object, object]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False)
    return progress, progress.add_task("completed trials", total=None)


def _describe(outcome: TrialOutcome) -> str:
    c = outcome.candidate
    head = f"#{outcome.number} {c.backend}/{c.precision} b{c.batch_size}"
    if outcome.status != "ok":
        return f"{head}: {outcome.status}: {outcome.reason[:80]}"
    reused = f" (reused #{outcome.reused_from})" if outcome.reused_from is not None else ""
    m = outcome.metrics
    return (f"{head}: acc {m.get('accuracy', float('nan')):.3f}, "
            f"p99 {m.get('latency_p99_ms', float('nan')):.3f} ms{reused}")


def _abbreviation(key: str) -> str:
    """``num_stages`` -> ``ns``: the terminal table is narrow; its caption spells them out."""
    return "".join(part[0] for part in key.split("_") if part)


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _front_table(front: pd.DataFrame, objectives: list[str]) -> object:
    """The front as a table that fits a terminal: one compact cell per part of the configuration."""
    import pandas as pd
    from rich.table import Table

    from dse.metrics import metric

    legend: dict[str, str] = {}

    def joined(row: pd.Series, prefix: str) -> str:
        cells = []
        for column in row.index:
            if column.startswith(prefix) and not pd.isna(row[column]):
                key = column.removeprefix(prefix)
                legend[_abbreviation(key)] = key
                cells.append(f"{_abbreviation(key)}={row[column]}")
        return " ".join(cells)

    table = Table(title=f"Pareto front ({len(front)} points)")
    table.add_column("trial", justify="right")
    table.add_column("runtime")
    table.add_column("batch", justify="right")
    table.add_column("arch", overflow="fold")
    table.add_column("knobs", overflow="fold")
    for name in objectives:
        spec = metric(name)
        table.add_column(f"{spec.name} [{spec.unit}]", justify="right", overflow="fold")
    for _, row in front.iterrows():
        table.add_row(str(row["trial"]), f"{row['param.backend']}/{row['param.precision']}",
                      str(row["param.batch_size"]), joined(row, "param.arch."),
                      joined(row, "param.knob."),
                      *[_number(row[metric(n).column]) for n in objectives])
    table.caption = ", ".join(f"{short}={full}" for short, full in sorted(legend.items()))
    return table


@app.command()
def run(experiment: Annotated[Path, typer.Argument(help="Campaign YAML (experiments/X.yaml).")],
        report: Annotated[bool, typer.Option(help="Write results and dashboard at the end.")] = True,
        ) -> None:
    """Run a campaign (or resume it) until its budget of completed trials is met."""
    from dse.api import load_experiment, run_campaign

    console = _console()
    try:
        loaded = load_experiment(experiment)
        progress, task = _progress_printer(console)

        def on_trial(outcome: TrialOutcome) -> None:
            progress.update(task, completed=outcome.completed,  # type: ignore[attr-defined]
                            total=outcome.budget)
            console.print(_describe(outcome), markup=False)

        console.print(f"campaign {loaded.name}: {loaded.spec.budget.trials} trials on "
                      f"{', '.join(d.name for d in loaded.devices)}; run folder {loaded.run_dir}")
        with progress:  # type: ignore[attr-defined]
            result = run_campaign(loaded, on_trial=on_trial, report=report)
    except DseError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt:
        console.print("interrupted: the study is consistent; run the same command again to resume")
        raise typer.Exit(130) from None
    if report:
        front = result.pareto()
        console.print(_front_table(front, result.objectives))
        console.print(f"trials:    {result.run_dir / 'trials.parquet'}")
        console.print(f"front:     {result.run_dir / 'pareto.csv'}")
        console.print(f"dashboard: {result.dashboard}")


@app.command("report")
def report_cmd(experiment: Annotated[Path, typer.Argument(help="Campaign YAML.")]) -> None:
    """Write trials.parquet, pareto.csv and the HTML dashboard of a campaign's run."""
    from dse.api import load_experiment, write_report

    try:
        paths = write_report(load_experiment(experiment))
    except DseError as exc:
        raise _fail(exc) from None
    for path in paths:
        print(path)


def main() -> None:
    try:
        app()
    except DseError as exc:  # any error that escaped a command still gets one clear line
        print(exc, file=sys.stderr)
        sys.exit(EXIT_SPEC)


if __name__ == "__main__":
    main()
