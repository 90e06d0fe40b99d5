"""A profile page's content as plain data, no plotly: :func:`profile_page_info` reads one profile
folder (:mod:`dse.profiling.summary`: ``summary.json`` and ``ops.parquet`` / ``ops.csv``) and says
what each panel of the page shows; :mod:`dse.report.profile_page` draws it. The page's file name
(:func:`profile_page_name`) is how the campaign dashboard and the index find it.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from dse.profiling import (
    OP_COLUMNS,
    OPS_CSV,
    OPS_PARQUET,
    SUMMARY_FILE,
    UNKNOWN,
    VERDICTS,
    Ceilings,
    ProfileSummary,
    read_summary,
)
from dse.report.profile_tables import (
    AccountingInfo,
    FileLink,
    accounting_info,
    counters_table,
    file_links,
    header_fields,
    kernels_table,
    ops_table,
    stacks_table,
    symbols_table,
)
from dse.report.table_info import TableInfo

# The bar chart's operators: enough to see where the time goes, few enough to read their names.
TOP_OPS = 15
# How many operators not drawn on the roofline are named in its note (the table has them all).
NOT_DRAWN_NAMED = 12
# How far the ceilings reach beyond the points and the ridge, as a factor on log axes.
_MARGIN = 2.0
_NAME_LIMIT = 60
_PAGE_INFIX = "-profile-"
_TRIAL_INFIX = "-trial-"


class TopOpsInfo(NamedTuple):
    """The operators that take most time per run, most first."""

    labels: list[str]
    """Unique bar labels (``1. name``), clipped."""
    ms_per_run: list[float]
    verdicts: list[str]
    hover: list[str]
    """HTML-escaped, as plotly's hover reads markup."""
    note: str
    empty_reason: str | None


class OpPoints(NamedTuple):
    """The operators of one verdict on the roofline."""

    verdict: str
    names: list[str]
    x: list[float]
    """Arithmetic intensity, FLOP/B."""
    y: list[float]
    """Attained rate, GFLOP/s."""
    share: list[float]
    """Of the summed operator time, 0..1 (the marker's size)."""
    hover: list[str]


class CeilingLine(NamedTuple):
    """A roof as a polyline in (FLOP/B, GFLOP/s)."""

    name: str
    x: list[float]
    y: list[float]


class OpRooflineInfo(NamedTuple):
    groups: list[OpPoints]
    """One per verdict that has drawable operators, in :data:`VERDICTS` order."""
    ceilings: list[CeilingLine]
    not_drawn: list[str]
    """``name (op_type: why)`` of every operator without a place on log axes."""
    note: str
    empty_reason: str | None
    x_title: str = "arithmetic intensity [FLOP/B]"
    y_title: str = "attained [GFLOP/s]"


class HostDeviceInfo(NamedTuple):
    """Host and accelerator time per run, bar by bar."""

    labels: list[str]
    host_ms: list[float]
    device_ms: list[float]
    note: str
    empty_reason: str | None


class ProfilePageInfo(NamedTuple):
    """Everything the profile page shows; the HTML is a rendering of this."""

    campaign: str
    device: str
    trial: int
    backend: str
    title: str
    header: list[tuple[str, str]]
    accounting: AccountingInfo
    top_ops: TopOpsInfo
    roofline: OpRooflineInfo
    host_device: HostDeviceInfo
    ops: TableInfo
    counters: TableInfo
    stacks: TableInfo
    symbols: TableInfo
    kernels: TableInfo
    notes: list[str]
    files: list[FileLink]


def profile_page_name(campaign: str, device: str, trial: int, phase: str = "") -> str:
    """The profile page's file name in the campaign's dashboards folder, e.g.
    ``profile_page_name("tiny", "local-cpu", 3) == "tiny-profile-local-cpu-trial-00003.html"``;
    a language model's phase ends it (``...-trial-00003-decode.html``).

    Raises:
        ValueError: ``campaign`` or ``device`` would leave the folder (a path separator, ``..``).
    """
    for name in (campaign, device):
        if not name or "/" in name or os.sep in name or name.startswith("."):
            raise ValueError(f"a profile page name needs a plain campaign and device name, but "
                             f"got ({campaign=}, {device=})")
    return f"{campaign}{_PAGE_INFIX}{device}{_TRIAL_INFIX}{trial:05d}" \
           f"{f'-{phase}' if phase else ''}.html"


def profile_pages(dashboards_dir: Path, campaign: str) -> dict[tuple[str, int], str]:
    """The campaign's profile pages in ``dashboards_dir``, by (device, trial): one listing of the
    folder, names read by :func:`profile_page_name`'s convention, no page opened. A language
    model's trial links its decode page where it has one (a decode step is most of a request's
    time), else its prefill page."""
    prefix = f"{campaign}{_PAGE_INFIX}"
    pages: dict[tuple[str, int], str] = {}
    try:
        listing = list(os.scandir(dashboards_dir))
    except OSError:  # no folder yet: no pages
        return pages
    for entry in listing:
        if not (entry.name.startswith(prefix) and entry.name.endswith(".html")):
            continue
        device, infix, number = entry.name[len(prefix):-len(".html")].rpartition(_TRIAL_INFIX)
        number, _, phase = number.partition("-")
        if not (infix and device and number.isdigit() and entry.is_file()):
            continue
        key = (device, int(number))
        if phase in ("", "decode") or key not in pages:
            pages[key] = entry.name
    return pages


# A language model's profile is of one phase: the title says which call a row's time is per.
_PHASE_TITLES = {"prefill": " (prefill: one call is a request's prefill)",
                 "decode": " (decode: one call is a decode step)"}


def profile_page_info(folder: Path, page_dir: Path | None = None) -> ProfilePageInfo:
    """Read the profile in ``folder`` and lay out the page; links to its files are relative to
    ``page_dir`` (where the page will be; the profile folder itself by default).

    Raises:
        ValueError: ``folder`` holds no readable profile (one line naming the file).
    """
    summary = read_summary(folder)
    ops = read_ops(folder, summary)
    if summary.profiler_missing:
        why = f"no per-operator table: {summary.profiler_missing}"
    elif ops.empty:
        why = f"the profiler ({summary.profiler}) recorded no operator"
    else:
        why = None
    return ProfilePageInfo(
        campaign=summary.campaign, device=summary.device, trial=summary.trial,
        backend=summary.backend,
        title=f"{summary.campaign} — profile of trial {summary.trial}"
              f"{_PHASE_TITLES.get(summary.phase, '')} on {summary.device}",
        header=header_fields(summary),
        accounting=accounting_info(summary),
        top_ops=top_ops_info(ops, summary, why),
        roofline=op_roofline_info(ops, summary.ceilings, why),
        host_device=host_device_info(ops, summary),
        ops=ops_table(ops, why),
        counters=counters_table(summary.perf),
        stacks=stacks_table(summary.perf),
        symbols=symbols_table(summary.perf),
        kernels=kernels_table(summary.nsight),
        notes=list(summary.notes),
        files=file_links(folder, summary, folder if page_dir is None else page_dir),
    )


def read_ops(folder: Path, summary: ProfileSummary) -> pd.DataFrame:
    """The per-operator table (``ops.parquet``, else ``ops.csv``), text columns as text; an
    empty table when the summary says no profiler ran and none was written.

    Raises:
        ValueError: the table is absent where the summary says a profiler ran, unreadable, or
            lacks some of :data:`OP_COLUMNS` (one line naming the file).
    """
    parquet, csv = folder / OPS_PARQUET, folder / OPS_CSV
    path = parquet if parquet.is_file() else csv
    if not path.is_file():
        if summary.profiler_missing:
            return pd.DataFrame({column: [] for column in OP_COLUMNS})
        raise ValueError(f"{csv}: no per-operator table (neither {OPS_PARQUET} nor {OPS_CSV}), "
                         f"though {SUMMARY_FILE} names profiler {summary.profiler!r}")
    try:
        frame = pd.read_parquet(path) if path == parquet else pd.read_csv(path)
    except (OSError, ValueError, ImportError) as exc:
        raise ValueError(f"{path}: not a per-operator table ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())})") from None
    missing = [column for column in OP_COLUMNS if column not in frame.columns]
    if missing:
        raise ValueError(f"{path}: per-operator table lacks column(s) {missing}")
    for column in ("name", "op_type", "where", "verdict", "verdict_reason", "input_shapes"):
        frame[column] = frame[column].astype("string").fillna("").astype(str)
    numeric = [c for c in OP_COLUMNS if c not in ("name", "op_type", "where", "verdict",
                                                    "verdict_reason", "input_shapes")]
    for column in numeric:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    # Most time first; the name breaks ties, so the same table always gives the same page.
    return frame.sort_values(["ms_per_run", "name"], ascending=[False, True],
                             kind="stable").reset_index(drop=True)


def top_ops_info(ops: pd.DataFrame, summary: ProfileSummary, why: str | None) -> TopOpsInfo:
    """The :data:`TOP_OPS` operators with most time per run, and the verdicts of all."""
    if why is not None:
        return TopOpsInfo([], [], [], [], "", why)
    top = ops.head(TOP_OPS)
    labels = [f"{i}. {_clip(name)}" for i, name in enumerate(top["name"], start=1)]
    counts = summary.verdicts or {str(k): int(v) for k, v in ops["verdict"].value_counts().items()}
    verdicts = ", ".join(f"{int(counts[v])} {v}" for v in [*VERDICTS, *sorted(set(counts)
                                                                              - set(VERDICTS))]
                         if counts.get(v))
    rest = len(ops) - len(top)
    note = f"Operators by verdict: {verdicts}." if verdicts else ""
    if rest > 0:
        share = float(ops["share"].iloc[len(top):].sum())
        note += f" {rest} more operator(s), {share:.1%} of the operator time, are in the table below."
    return TopOpsInfo(labels, top["ms_per_run"].tolist(), [_verdict(v) for v in top["verdict"]],
                      [_op_hover(row) for row in _records(top)], note.strip(), None)


def op_roofline_info(ops: pd.DataFrame, ceilings: Ceilings, why: str | None) -> OpRooflineInfo:
    """Each operator with known, positive FLOPs and bytes at (intensity, attained GFLOP/s),
    grouped by verdict, under the ceilings the verdicts were made against."""
    if why is not None:
        return OpRooflineInfo([], [], [], "", why)
    x, y = ops["intensity"], ops["gflops"]
    drawn = (x > 0) & (y > 0) & x.map(math.isfinite) & y.map(math.isfinite)
    not_drawn = [f"{row['name']} ({row['op_type'] or 'op'}: {_why_not_drawn(row)})"
                 for row in _records(ops[~drawn])]
    notes = []
    if not_drawn:
        named = "; ".join(not_drawn[:NOT_DRAWN_NAMED])
        more = len(not_drawn) - NOT_DRAWN_NAMED
        notes.append(f"{len(not_drawn)} operator(s) not drawn (no place on log axes): {named}"
                     + (f"; and {more} more (all are in the table)." if more > 0 else "."))
    points = ops[drawn]
    if points.empty:
        return OpRooflineInfo([], [], not_drawn, " ".join(notes),
                              "no operator has both a FLOP count and bytes moved, so none has a "
                              "place on the roofline")
    groups = []
    for verdict in [*VERDICTS, *sorted(set(points["verdict"].map(_verdict)) - set(VERDICTS))]:
        rows = points[points["verdict"].map(_verdict) == verdict]
        if not rows.empty:
            groups.append(OpPoints(verdict, rows["name"].tolist(), rows["intensity"].tolist(),
                                   rows["gflops"].tolist(), rows["share"].fillna(0.0).tolist(),
                                   [_op_hover(row) for row in _records(rows)]))
    lines, ceiling_note = ceiling_lines(ceilings, float(points["intensity"].min()),
                                        float(points["intensity"].max()))
    return OpRooflineInfo(groups, lines, not_drawn, " ".join([ceiling_note, *notes]).strip(), None)


def ceiling_lines(ceilings: Ceilings, low: float, high: float) -> tuple[list[CeilingLine], str]:
    """The roof over intensities ``low`` to ``high`` (widened to show the ridge): the bandwidth
    slope up to the ridge, then the flat peak; a ceiling that is None is left out and said so."""
    peak, bandwidth, ridge = ceilings.peak_gflops, ceilings.peak_bandwidth_gbs, ceilings.ridge
    low = min(low, ridge if ridge is not None else low) / _MARGIN
    high = max(high, ridge if ridge is not None else high) * _MARGIN
    source = f"Ceilings: {ceilings.source}" if ceilings.source else ""
    if ceilings.threads:
        source += f" ({ceilings.threads} thread(s))"
    lines, unknown = [], []
    if peak is not None and bandwidth is not None and ridge is not None:
        lines.append(CeilingLine(f"peak {_amount(peak)} GFLOP/s, {_amount(bandwidth)} GB/s",
                                 [low, ridge, high], [bandwidth * low, peak, peak]))
    elif peak is not None:
        lines.append(CeilingLine(f"peak {_amount(peak)} GFLOP/s", [low, high], [peak, peak]))
    elif bandwidth is not None:
        lines.append(CeilingLine(f"memory {_amount(bandwidth)} GB/s", [low, high],
                                 [bandwidth * low, bandwidth * high]))
    if peak is None:
        unknown.append("the compute ceiling is unknown (no peak GFLOP/s), so it is not drawn")
    if bandwidth is None:
        unknown.append("the memory-bandwidth ceiling is unknown (no peak GB/s), so it is not drawn")
    text = "; ".join(unknown)
    text = text[:1].upper() + text[1:] + "." if text else ""
    return lines, " ".join(part for part in (text, source + "." if source else "") if part)


def host_device_info(ops: pd.DataFrame, summary: ProfileSummary) -> HostDeviceInfo:
    """Host and device time per run of the top operators that have device time (the totals in
    the note: they would dwarf the operators' bars); the totals alone when no operator has."""
    host, device = summary.host_ms_per_run, summary.device_ms_per_run
    if device is None:
        on_host = "" if host is None else f" ({host:.4g} ms per run of operator time, on the host)"
        return HostDeviceInfo([], [], [], "", f"No device time: {summary.device} runs this "
                              f"candidate on its CPU{on_host}, or the profiler does not separate "
                              f"accelerator time; host time is all there is.")
    runs = max(summary.runs, 1)
    timed = ops[ops["device_ms"].map(lambda v: math.isfinite(v))].head(TOP_OPS)
    totals = (f"All operators: {'unknown' if host is None else f'{host:.4g} ms'} on the host, "
              f"{device:.4g} ms on the device per run.")
    note = ("Host time is the operators' wall time as the host saw it (launches included); device "
            "time is the accelerator's kernels. They overlap, so they need not add up to the "
            "latency.")
    if timed.empty:  # only the totals: they are the chart
        return HostDeviceInfo(["all operators"], [math.nan if host is None else host], [device],
                              note, None)
    # The totals would dwarf every operator's bars: they are said, and the operators drawn.
    labels = [f"{i}. {_clip(n)}" for i, n in enumerate(timed["name"], 1)]
    host_ms = timed["ms_per_run"].tolist()
    device_ms = (timed["device_ms"] / runs).tolist()
    note = f"{totals} {note}"
    return HostDeviceInfo(labels, host_ms, device_ms, note, None)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows as dicts keyed by column name (the table's columns are all text)."""
    return [{str(key): value for key, value in row.items()} for row in frame.to_dict("records")]


def _why_not_drawn(row: Mapping[str, Any]) -> str:
    flops, moved = row["flops"], row["bytes"]
    if not math.isfinite(flops):
        return "FLOPs unknown"
    if not math.isfinite(moved):
        return "bytes unknown"
    if flops <= 0:
        return "no FLOPs"
    return "bytes zero" if moved <= 0 else "no attained rate"


def _op_hover(row: Mapping[str, Any]) -> str:
    lines = [f"<b>{_escape(row['name'])}</b> ({_escape(row['op_type'])})",
             f"{row['ms_per_run']:.4g} ms per run, {row['share']:.1%} of operator time",
             f"{int(row['calls']) if math.isfinite(row['calls']) else '?'} call(s), "
             f"{row['us_per_call']:.4g} µs per call"]
    if math.isfinite(row["intensity"]) and math.isfinite(row["gflops"]):
        lines.append(f"{row['intensity']:.4g} FLOP/B, {row['gflops']:.4g} GFLOP/s, "
                     f"{row['gbs']:.4g} GB/s")
    lines.append(_escape(f"{_verdict(row['verdict'])}: {row['verdict_reason']}".strip(": ")))
    return "<br>".join(lines)


def _escape(text: object) -> str:
    """Plain text as plotly's labels take it: they read markup."""
    return html.escape(_clip(str(text), 200), quote=False)


def _verdict(value: str) -> str:
    return value or UNKNOWN


def _clip(text: str, limit: int = _NAME_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _amount(value: float) -> str:
    """``300,000`` for a datasheet figure; a small one keeps three significant digits."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"

