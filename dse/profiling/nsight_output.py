"""What Nsight Systems and Nsight Compute report, read: the kernel rows of an ``nsys stats``
kernel summary CSV and of ``ncu --csv --page details``, and the two joined into one row per
kernel with every :data:`KERNEL_KEYS` key.

Pure functions on text, no tool run here (:mod:`dse.profiling.nsight` runs them); tested on
fixtures in the tools' documented CSV formats (``tests/fixtures/nsight/``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

KERNEL_KEYS = ("name", "calls", "total_ms", "avg_us", "min_us", "max_us", "share",
               "ncu_launches", "duration_us", "sm_throughput_pct", "dram_throughput_pct",
               "achieved_occupancy_pct")
"""Every kernel row has these keys; a figure its tool did not give is None."""
_TIME_UNITS_US = {"ns": 1e-3, "nsec": 1e-3, "nsecond": 1e-3, "us": 1.0, "usec": 1.0, "usecond": 1.0,
                  "ms": 1e3, "msec": 1e3,
                  "msecond": 1e3, "s": 1e6, "sec": 1e6, "second": 1e6}
# ncu's names for the figures kept, across versions: details page (2022+, older), raw metrics.
_NCU_FIGURES = {
    "Duration": "duration_us", "gpu__time_duration.sum": "duration_us",
    "Compute (SM) Throughput": "sm_throughput_pct", "Compute (SM) [%]": "sm_throughput_pct",
    "SM [%]": "sm_throughput_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "DRAM Throughput": "dram_throughput_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "Achieved Occupancy": "achieved_occupancy_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
}


def parse_nsys_kernel_sum_csv(text: str) -> list[dict[str, Any]]:
    """Kernel rows (name, calls, total_ms, avg_us, min_us, max_us, share) of an
    ``nsys stats --report cuda_gpu_kern_sum`` (or the older ``gpukernsum``) CSV, most time first.

    Lines before the header (nsys's progress on a console) are skipped; times are in the unit
    the header names (``Total Time (ns)``; ``--timeunit`` changes it), nanoseconds where it
    names none (the old ``Average`` columns). ``share`` is of the summed kernel time.
    """
    rows = list(_csv_from(text, "Instances"))
    if not rows:
        return []
    header = list(rows[0])
    total = _column(header, "Total Time")
    avg, low, high = (_column(header, f) for f in (("Avg", "Average"), ("Min", "Minimum"),
                                                     ("Max", "Maximum")))
    totals = [_us(row, total) / 1e3 for row in rows]
    summed = sum(totals) or 1.0
    kernels = [{"name": row["Name"], "calls": int(_number(row["Instances"]) or 0),
                "total_ms": total_ms, "avg_us": _us(row, avg), "min_us": _us(row, low),
                "max_us": _us(row, high), "share": total_ms / summed}
               for row, total_ms in zip(rows, totals, strict=True)]
    return sorted(kernels, key=lambda k: -float(k["total_ms"]))


def _csv_from(text: str, marker: str) -> Iterator[dict[str, str]]:
    """The rows of the CSV table in ``text`` whose header line holds ``marker``."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if marker in line and "," in line), None)
    if start is None:
        return iter(())
    return csv.DictReader(io.StringIO("\n".join(lines[start:])))


def _column(header: list[str], names: str | tuple[str, ...]) -> str:
    wanted = (names,) if isinstance(names, str) else names
    for column in header:
        if column.split(" (")[0] in wanted:
            return column
    raise ValueError(f"no column {wanted} in {header}")


def _us(row: dict[str, str], column: str) -> float:
    """The time in ``column`` in microseconds; its unit is the header's ``(ns)``, else ns."""
    unit = column.rpartition("(")[2].rstrip(")") if "(" in column else "ns"
    return (_number(row[column]) or 0.0) * _TIME_UNITS_US.get(unit, 1e-3)


def _number(text: str | None) -> float | None:
    """A number as the tools print it (``1,024``; ``n/a``: None)."""
    try:
        return float((text or "").replace(",", ""))
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """Per kernel name, over its profiled launches: launches, and the mean duration_us,
    sm_throughput_pct, dram_throughput_pct, achieved_occupancy_pct where ncu gave them (None
    where not), from ``ncu --csv --page details`` (one row per launch and metric; rule rows and
    other metrics skipped; ``==PROF==`` lines before the header skipped). Longest first."""
    launches: dict[str, set[str]] = {}
    sums: dict[tuple[str, str], list[float]] = {}
    for row in _csv_from(text, '"Kernel Name"'):
        name, figure = row.get("Kernel Name") or "", _NCU_FIGURES.get(row.get("Metric Name") or "")
        launches.setdefault(name, set()).add(row.get("ID") or "")
        value = _ncu_value(row, figure)
        if figure is not None and value is not None:
            sums.setdefault((name, figure), []).append(value)
    kernels = [{"name": name, "ncu_launches": len(ids),
                **{figure: _mean(sums.get((name, figure))) for figure in _NCU_FIGURES.values()}}
               for name, ids in launches.items() if name]
    return sorted(kernels, key=lambda k: -(k["duration_us"] or 0.0))


def _ncu_value(row: dict[str, str], figure: str | None) -> float | None:
    value = _number(row.get("Metric Value"))
    if figure != "duration_us" or value is None:
        return value
    return value * _TIME_UNITS_US.get(row.get("Metric Unit") or "", 1e-3)


def _mean(values: list[float] | None) -> float | None:
    return sum(values) / len(values) if values else None


def merge_kernels(nsys_rows: list[dict[str, Any]],
                  ncu_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per kernel with every :data:`KERNEL_KEYS` key: nsys's timing joined with ncu's
    figures by name, or by base function name where the two demanglers spell templates apart
    and that base name is unique on both sides; kernels only ncu saw come last."""
    ncu_by_name = {row["name"]: row for row in ncu_rows}
    ncu_by_base = _unique_by_base(ncu_rows)
    nsys_bases = _unique_by_base(nsys_rows)
    merged, used = [], set()
    for row in nsys_rows:
        base = _base_name(row["name"])
        match = ncu_by_name.get(row["name"]) or (
            ncu_by_base.get(base) if base in nsys_bases else None)
        if match is not None:
            used.add(match["name"])
        merged.append(_kernel_row({**(match or {}), **row}))
    merged += [_kernel_row(row) for row in ncu_rows if row["name"] not in used]
    return merged


def _unique_by_base(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_base: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_base.setdefault(_base_name(row["name"]), []).append(row)
    return {base: found[0] for base, found in by_base.items() if len(found) == 1}


def _base_name(name: str) -> str:
    """``at::native::vectorized_elementwise_kernel`` of ``void at::native::vectorized_eleme...
    <4, ...>(int, T2, T3)``: the function without return type, template or parameters."""
    text = name.removeprefix("void ")
    cut = min((i for i in (text.find("<"), text.find("(")) if i >= 0), default=len(text))
    return text[:cut].strip()


def _kernel_row(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row.get(key) for key in KERNEL_KEYS}
