"""A device's profile written out as a profile folder (layout: :mod:`dse.profiling.summary`)."""

from __future__ import annotations

import shutil
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.profiling.op_table import op_table, verdict_counts
from dse.profiling.summary import (
    OPS_CSV,
    OPS_PARQUET,
    TRACE_FILE,
    ProfileSummary,
    write_summary,
)
from dse.util import atomic_write_text

if TYPE_CHECKING:
    import pandas as pd

    from dse.core import Candidate
    from dse.profiling.session import DeviceProfile

PROFILES_DIR = "profiles"


def profile_folder(run_dir: Path, device: str, trial: int, phase: str = "") -> Path:
    """``<run folder>/profiles/<device>/trial-NNNNN`` (trial numbers are per device study), with
    ``-<phase>`` for a language model's phase (``trial-00003-decode``)."""
    return run_dir / PROFILES_DIR / device / f"trial-{trial:05d}{f'-{phase}' if phase else ''}"


def write_profile(folder: Path, found: DeviceProfile, *, campaign: str, device: str,
                  device_id: str, trial: int, candidate: Candidate,
                  trial_p50_ms: float | None) -> tuple[ProfileSummary, pd.DataFrame]:
    """Write ``found`` into ``folder`` (emptied first: a profile is one window, never merged
    with an older one); its summary and per-operator table."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    files: dict[str, str] = {}
    for name, data in found.files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        files[f"raw:{name}"] = name
    ops = found.op_profile
    table = op_table(ops.ops if ops else [], ops.runs if ops else found.runs, found.ceilings)
    atomic_write_text(folder / OPS_CSV, table.to_csv(index=False))
    table.to_parquet(folder / OPS_PARQUET, index=False)
    files.update({"ops_csv": OPS_CSV, "ops_parquet": OPS_PARQUET})
    # A trace over the size a device sends back was left there (the notes say so).
    if ops is not None and ops.trace is not None and ops.trace.name in found.files:
        if ops.trace.name != TRACE_FILE:
            shutil.copyfile(folder / ops.trace.name, folder / TRACE_FILE)
        files["trace"] = TRACE_FILE
    summary = _summary(found, table, files, campaign=campaign, device=device,
                       device_id=device_id, trial=trial, candidate=candidate,
                       trial_p50_ms=trial_p50_ms)
    write_summary(summary, folder)
    return summary, table


def _summary(found: DeviceProfile, table: pd.DataFrame, files: dict[str, str], *, campaign: str,
             device: str, device_id: str, trial: int, candidate: Candidate,
             trial_p50_ms: float | None) -> ProfileSummary:
    ops = found.op_profile
    unprofiled = _median_ms(found.unprofiled_us)
    profiled = _median_ms(ops.run_us) if ops else None
    op_ms = None
    if ops is not None and ops.run_op_us:
        op_ms = statistics.median(ops.run_op_us) / 1e3
    elif ops is not None and ops.runs:
        op_ms = float(table["total_ms"].sum()) / ops.runs
    device_ms = None
    if ops is not None and ops.runs and table["device_ms"].notna().any():
        device_ms = float(table["device_ms"].sum()) / ops.runs
    notes = [*(ops.notes if ops else []), *found.notes,
             "profiled in a window of its own after the campaign's measurement; the campaign's "
             "study and results are unchanged"]
    return ProfileSummary(
        campaign=campaign, device=device, device_id=device_id, trial=trial,
        candidate=candidate.to_dict(), backend=candidate.backend, precision=candidate.precision,
        batch_size=candidate.batch_size, created=datetime.now(timezone.utc).isoformat(),
        profiler=ops.profiler if ops else "", profiler_missing=found.profiler_missing,
        runs=ops.runs if ops else found.runs, trial_p50_ms=trial_p50_ms,
        unprofiled_p50_ms=unprofiled,
        profiled_p50_ms=profiled, op_ms_per_run=op_ms,
        coverage=None if op_ms is None or not unprofiled else op_ms / unprofiled,
        unattributed_ms=None if op_ms is None or unprofiled is None else unprofiled - op_ms,
        profiler_overhead_ms=None if profiled is None or unprofiled is None
        else profiled - unprofiled,
        host_ms_per_run=unprofiled, device_ms_per_run=device_ms, ceilings=found.ceilings,
        verdicts=verdict_counts(table), perf=found.perf, nsight=found.nsight, files=files,
        notes=notes, window=found.window, phase=found.phase)


def _median_ms(values_us: list[float] | Any) -> float | None:
    return statistics.median(values_us) / 1e3 if values_us else None
