"""Record the complete table that benchmarks/search_efficiency.py replays.

Runs the ``grid`` campaign of ``benchmarks/search_table/record.yaml`` — every valid candidate of
``search_table/space.yaml`` measured once, for real, on this machine's CPU — and writes its
distinct candidates (parameters, metrics, status) to ``tests/fixtures/search/cnn-digits-grid.csv``
and the recording's provenance (machine, versions, timings) to ``.../cnn-digits-grid.json``.

Run: ``timeout 900 .venv/bin/python benchmarks/record_search_table.py`` (about 10 minutes on 2
cores; nothing else should run meanwhile, or the latencies are worthless). The run folder goes
to a temporary directory unless ``--run-dir`` names one. Ends with ``BENCH record_candidates``
(distinct candidates in the table), ``BENCH record_ok`` (of them measured ok) and ``BENCH
record_seconds`` (the campaign's wall time).

``--quick`` records QUICK_SPACE (one architecture trained one epoch, ONNX Runtime fp32 at two
batch sizes) into a temporary table, never the fixture: it checks that recording still works.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import tempfile
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import pandas as pd
from tiny_space import tiny_space

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = REPO / "benchmarks" / "search_table" / "record.yaml"
TABLE = REPO / "tests" / "fixtures" / "search" / "cnn-digits-grid.csv"

# The columns worth replaying: what the space searches, its objectives, and why a row failed.
_KEPT_METRICS = ("accuracy", "latency_p50_ms", "latency_p99_ms", "throughput_sps",
                 "process_rss_peak_mb")
BENCH_NAMES = ("record_candidates", "record_ok", "record_seconds")
QUICK_SPACE = tiny_space("record-quick", [1, 8])
QUICK_EXPERIMENT = f"""\
name: record-quick
search_space: space.yaml
devices: [{REPO / "hw_profiles" / "local-cpu.yaml"}]
sampler: {{name: grid}}
budget: {{trials: 2, max_failed: 2}}
measurement: {{warmup_max_seconds: 0.2, min_iters: 20, min_seconds: 0.2, max_seconds: 0.5,
               second_looks: 0}}
"""


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform reports."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("dse", "optuna", "torch", "onnxruntime", "onnx", "numpy", "pandas"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "absent"
    return found


def distinct_rows(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per candidate measured (reuses dropped), parameters without their ``param.``
    prefix, the kept metric columns, ``status`` and ``reason``."""
    from dse.core.columns import metric_column

    measured = trials[trials["reused_from"].isna()].sort_values("trial", kind="mergesort")
    params = [c for c in measured.columns if c.startswith("param.") and c != "param.family"]
    metrics = [metric_column(m) for m in _KEPT_METRICS if metric_column(m) in measured.columns]
    table = measured[[*params, *metrics, "status", "reason"]].copy()
    table.columns = [c.removeprefix("param.") for c in table.columns]
    return table.drop_duplicates(subset=[c.removeprefix("param.") for c in params])


def record(run_root: Path, experiment_file: Path = EXPERIMENT
           ) -> tuple[pd.DataFrame, dict[str, object]]:
    from dse.app.api import load_experiment, run_campaign
    from dse.core.exceptions import DseError
    from dse.farm.cluster import shutdown
    from dse.results import load_campaign, trials_frame

    experiment = load_experiment(experiment_file)
    spec = experiment.spec.model_copy(update={"runs_dir": run_root, "dashboards_dir": run_root})
    experiment = dataclasses.replace(experiment, spec=spec)
    started = time.perf_counter()
    stopped = ""
    try:
        run_campaign(experiment, report=False)
    except DseError as exc:
        # A failed candidate never completes, so past the end of the grid the loop replays it
        # (reused, failed again) until max_failed; by then every candidate was measured once.
        stopped = str(exc)
    finally:
        shutdown()
    seconds = time.perf_counter() - started
    table = distinct_rows(trials_frame(load_campaign(experiment.run_dir)))
    notes: dict[str, object] = {
        "recorded_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "experiment": _shown(experiment_file),
        "cpu_affinity": sorted(__import__("os").sched_getaffinity(0)),
        "campaign_seconds": round(seconds, 1),
        "cpu_model": cpu_model(),
        "cpu_count": __import__("os").cpu_count(),
        "platform": platform.platform(),
        "versions": versions(),
        "candidates": len(table),
        "ok": int((table["status"] == "ok").sum()),
        "stopped_by": stopped,
    }
    return table, notes


def _shown(path: Path) -> str:
    """``path`` relative to the repository when inside it."""
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(resolved)


def _quick_experiment(folder: Path) -> Path:
    (folder / "space.yaml").write_text(QUICK_SPACE)
    (folder / "record-quick.yaml").write_text(QUICK_EXPERIMENT)
    return folder / "record-quick.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="keep the campaign's run folder here (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=TABLE, help="the CSV table to write")
    parser.add_argument("--experiment", type=Path, default=EXPERIMENT,
                        help="the grid campaign to record (default: search_table/record.yaml)")
    parser.add_argument("--quick", action="store_true",
                        help="record a two-candidate space into a temporary table (--out and "
                             "--experiment ignored)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = (args.run_dir or Path(tmp)).resolve()
        if args.quick:
            args.experiment = _quick_experiment(Path(tmp))
            args.out = Path(tmp) / "table.csv"
        table, notes = record(root, args.experiment)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False, float_format="%.6g")
        args.out.with_suffix(".json").write_text(json.dumps(notes, indent=2) + "\n")
    print(f"{len(table)} candidates ({notes['ok']} ok) in {notes['campaign_seconds']} s "
          f"-> {args.out}")
    print(f"BENCH record_candidates {len(table)}")
    print(f"BENCH record_ok {notes['ok']}")
    print(f"BENCH record_seconds {notes['campaign_seconds']}")


if __name__ == "__main__":
    main()
