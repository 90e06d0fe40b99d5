"""What a profile folder holds, as plain data: ``summary.json`` beside ``ops.csv`` / ``ops.parquet``.

The layout of ``<run folder>/profiles/<device>/trial-NNNNN/``:

- ``summary.json``: :class:`ProfileSummary` (this module: :func:`write_summary`, :func:`read_summary`);
- ``ops.csv`` and ``ops.parquet``: the per-operator table, one row per operator, columns
  :data:`OP_COLUMNS`;
- ``trace.json``: a Chrome/Perfetto trace of the profiled runs, when one could be made;
- the raw files of each profiler (ONNX Runtime's JSON, torch's trace, ``perf.data``,
  ``perf-stat.txt``, Nsight reports), named in ``summary.files``.

Readers (the profile page, the index) need nothing but this module and pandas.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dse.util import atomic_write_text

SUMMARY_FILE = "summary.json"
OPS_CSV = "ops.csv"
OPS_PARQUET = "ops.parquet"
TRACE_FILE = "trace.json"
SUMMARY_VERSION = 1

# The per-operator table's columns, in order. Per-call figures are over all profiled calls.
OP_COLUMNS = (
    "name",            # operator (node, layer, kernel) name as the profiler gives it
    "op_type",         # operator type
    "where",           # provider / delegate / device that ran it ("" when not said)
    "calls",           # calls over all profiled runs
    "total_ms",        # wall time over all profiled runs
    "ms_per_run",      # total_ms / runs
    "share",           # of the summed operator time, 0..1
    "us_per_call",     # total_ms / calls, microseconds
    "flops",           # per call; NaN when unknown
    "bytes",           # per call, inputs and outputs each once; NaN when unknown
    "intensity",       # flops / bytes, FLOP/B; NaN when either is unknown
    "gflops",          # attained: flops / us_per_call; NaN when unknown
    "gbs",             # attained: bytes / us_per_call; NaN when unknown
    "verdict",         # one of VERDICTS
    "verdict_reason",  # why, in words
    "device_ms",       # accelerator time over all runs; NaN on a CPU
    "input_shapes",    # as the profiler recorded them; may be empty
)
COMPUTE_BOUND = "compute-bound"
MEMORY_BOUND = "memory-bound"
OVERHEAD_BOUND = "overhead-bound"
UNKNOWN = "unknown"
VERDICTS = (COMPUTE_BOUND, MEMORY_BOUND, OVERHEAD_BOUND, UNKNOWN)


@dataclass
class Ceilings:
    """The roofline the verdicts are made against.

    Attributes:
        peak_gflops: attainable compute rate, GFLOP/s, at the candidate's thread count.
        peak_bandwidth_gbs: attainable memory bandwidth, GB/s.
        source: where the figures come from (the device profile's peaks, or measured on the
            device now: what, with how many threads).
        threads: threads the measured ceilings used (0 when they come from the profile).
    """

    peak_gflops: float | None
    peak_bandwidth_gbs: float | None
    source: str
    threads: int = 0

    @property
    def ridge(self) -> float | None:
        """The intensity (FLOP/B) where the compute roof meets the bandwidth slope."""
        if self.peak_gflops is None or self.peak_bandwidth_gbs is None:
            return None
        return self.peak_gflops / self.peak_bandwidth_gbs


@dataclass
class PerfCounter:
    """One ``perf stat`` event: its value, or why there is none (``<not supported>``)."""

    name: str
    value: float | None
    unit: str = ""
    reason: str = ""


@dataclass
class PerfSection:
    """Linux ``perf`` over the profiled window: counters and sampled call stacks."""

    counters: list[PerfCounter] = field(default_factory=list)
    stat_missing: str = ""
    """Why there are no counters at all (perf absent, not permitted); "" when there are."""
    stacks: list[dict[str, Any]] = field(default_factory=list)
    """The most sampled call stacks: ``{"stack": "root;...;leaf", "samples": n}``, most first."""
    symbols: list[dict[str, Any]] = field(default_factory=list)
    """The most sampled leaf functions: ``{"symbol": name, "samples": n, "share": 0..1}``."""
    record_missing: str = ""
    """Why there are no call stacks; "" when there are."""


@dataclass
class NsightSection:
    """NVIDIA Nsight Systems / Compute over the same window, where installed."""

    nsys_missing: str = ""
    ncu_missing: str = ""
    kernels: list[dict[str, Any]] = field(default_factory=list)
    """Per-kernel summary rows (name, calls, total_ms, ...), from ``nsys stats`` / ``ncu``."""


@dataclass
class ProfileSummary:
    """Everything about one profile but the per-operator rows (those are ``ops.*``)."""

    campaign: str
    device: str
    """The device profile's name."""
    device_id: str
    trial: int
    candidate: dict[str, Any]
    backend: str
    precision: str
    batch_size: int
    created: str
    """ISO time the profile was made."""
    profiler: str
    """The backend profiler that made the table; "" when none ran."""
    profiler_missing: str
    """Why there is no per-operator table; "" when there is one."""
    runs: int
    trial_p50_ms: float | None
    """The campaign's measured p50 of this trial (the study's), when it has one."""
    unprofiled_p50_ms: float | None
    """p50 of plain calls of the same runner in the same process: one after each profiled call
    where the backend's profiler runs in a sibling of the runner (``ProfileRequest.between``),
    else half in a window before the profilers and half after them."""
    profiled_p50_ms: float | None
    """p50 of the calls under the backend profiler (its overhead included)."""
    op_ms_per_run: float | None
    """Operator time summed per run: the median over runs where the profiler tells runs apart
    (``OpProfile.run_op_us``), else the mean."""
    coverage: float | None
    """op_ms_per_run / unprofiled_p50_ms: the share of the measured latency the operators
    account for. Above 1 when the profiler's own work inside each operator's time (ONNX
    Runtime's: about 2 µs per node) outweighs the time no operator claims."""
    unattributed_ms: float | None
    """unprofiled_p50_ms - op_ms_per_run: time in a call outside every operator (the runtime's
    dispatch, input and output copies, the Python call); negative when the profiler's overhead
    lengthens the operators more than that."""
    profiler_overhead_ms: float | None
    """profiled_p50_ms - unprofiled_p50_ms: what the backend's profiler added to a call."""
    host_ms_per_run: float | None
    device_ms_per_run: float | None
    ceilings: Ceilings
    verdicts: dict[str, int]
    perf: PerfSection
    nsight: NsightSection
    files: dict[str, str]
    """Role -> file name in the profile folder (``ops_csv``, ``trace``, ``raw:<what>``)."""
    notes: list[str] = field(default_factory=list)
    window: dict[str, float] = field(default_factory=dict)
    """Epoch seconds: ``start`` and ``end`` of the profiling window (never a measurement's)."""
    version: int = SUMMARY_VERSION
    phase: str = ""
    """A language model's phase one call is (``prefill``: a request's prefill; ``decode``: one
    decode step); empty for a fixed-shape model, whose call is its forward pass."""


def write_summary(summary: ProfileSummary, folder: Path) -> Path:
    path = folder / SUMMARY_FILE
    atomic_write_text(path, json.dumps(asdict(summary), indent=2, sort_keys=True, default=str))
    return path


def read_summary(folder: Path) -> ProfileSummary:
    """The summary of the profile in ``folder``; ValueError naming the file when it is not one."""
    path = folder / SUMMARY_FILE
    try:
        raw = json.loads(path.read_text())
        raw["ceilings"] = Ceilings(**raw["ceilings"])
        perf = raw["perf"]
        perf["counters"] = [PerfCounter(**c) for c in perf["counters"]]
        raw["perf"] = PerfSection(**perf)
        raw["nsight"] = NsightSection(**raw["nsight"])
        return ProfileSummary(**raw)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a dse profile summary ({type(exc).__name__}: {exc})") from None
