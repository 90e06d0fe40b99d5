"""dse.report.profile_page: one trial's profile as data (``profile_page_info``) and as one offline
page, listed by the index and linked from the campaign dashboard's front row."""

from __future__ import annotations

import math
import re
from pathlib import Path
from urllib.parse import unquote

import pandas as pd
import pytest
from plotly.offline import get_plotlyjs

from dse.profiling.summary import (
    COMPUTE_BOUND,
    MEMORY_BOUND,
    OP_COLUMNS,
    OPS_CSV,
    OPS_PARQUET,
    OVERHEAD_BOUND,
    SUMMARY_FILE,
    UNKNOWN,
    Ceilings,
    NsightSection,
    PerfCounter,
    PerfSection,
    ProfileSummary,
    write_summary,
)
from dse.report import write_dashboard
from dse.report.index import (
    PROFILE_META,
    ProfileMeta,
    dashboard_entries,
    profile_entries,
    read_dashboard_meta,
    write_index,
)
from dse.report.profile_info import TOP_OPS, ceiling_lines, profile_page_info, profile_pages
from dse.report.profile_page import profile_page_name, write_profile_page
from dse.testing import example_run

RUNS = 200
PEAK_GFLOPS, BANDWIDTH_GBS = 150.0, 20.0
# A small CNN under ONNX Runtime on a CPU: (name, type, µs per call, FLOPs, bytes, verdict, why).
# Shape ops have no FLOP count (NaN), as the graph's cost table leaves them.
OPS = [
    ("/features/0/Conv", "Conv", 310.0, 28.3e6, 1.9e6, COMPUTE_BOUND, "intensity 14.9 > ridge 7.5"),
    ("/features/3/Conv", "Conv", 260.0, 37.7e6, 1.2e6, COMPUTE_BOUND, "intensity 31.4 > ridge 7.5"),
    ("/features/6/Conv", "Conv", 180.0, 18.9e6, 0.8e6, COMPUTE_BOUND, "intensity 23.6 > ridge 7.5"),
    ("/classifier/0/Gemm", "Gemm", 150.0, 4.2e6, 2.1e6, MEMORY_BOUND, "intensity 2.0 < ridge 7.5"),
    ("/features/1/Relu", "Relu", 95.0, 0.26e6, 2.1e6, MEMORY_BOUND, "intensity 0.12 < ridge 7.5"),
    ("/features/4/Relu", "Relu", 80.0, 0.13e6, 1.0e6, MEMORY_BOUND, "intensity 0.12 < ridge 7.5"),
    ("/features/2/MaxPool", "MaxPool", 75.0, 0.2e6, 1.3e6, MEMORY_BOUND, "intensity 0.15"),
    ("/features/5/MaxPool", "MaxPool", 60.0, 0.1e6, 0.65e6, MEMORY_BOUND, "intensity 0.15"),
    ("/features/7/Relu", "Relu", 55.0, 0.07e6, 0.5e6, MEMORY_BOUND, "intensity 0.12"),
    ("/classifier/2/Gemm", "Gemm", 48.0, 0.6e6, 0.35e6, MEMORY_BOUND, "intensity 1.7"),
    ("/features/8/GlobalAveragePool", "GlobalAveragePool", 40.0, 0.06e6, 0.25e6, MEMORY_BOUND,
     "intensity 0.24"),
    ("/Flatten", "Flatten", 30.0, math.nan, 0.05e6, UNKNOWN, "FLOPs unknown"),
    ("/classifier/1/Relu", "Relu", 22.0, 0.004e6, 0.03e6, OVERHEAD_BOUND, "22 µs per call for 4 kFLOP"),
    ("/Reshape", "Reshape", 18.0, math.nan, math.nan, UNKNOWN, "FLOPs and bytes unknown"),
    ("/Transpose", "Transpose", 15.0, math.nan, 0.1e6, UNKNOWN, "FLOPs unknown"),
    ("/classifier/3/Softmax", "Softmax", 12.0, 0.01e6, 0.0008e6, OVERHEAD_BOUND, "tiny"),
    ("/Cast", "Cast", 8.0, 0.0, 0.002e6, OVERHEAD_BOUND, "no arithmetic"),
    ("/Shape", "Shape", 5.0, math.nan, math.nan, UNKNOWN, "FLOPs unknown"),
]
DRAWN = [op for op in OPS if op[3] > 0 and op[4] > 0]  # NaN compares False
NOT_DRAWN = [op for op in OPS if op not in DRAWN]


def ops_frame(gpu: bool = False) -> pd.DataFrame:
    rows = []
    for name, kind, us, flops, moved, verdict, why in OPS:
        total_ms = us * RUNS / 1000
        rows.append({
            "name": name, "op_type": kind, "where": "CUDAExecutionProvider" if gpu
            else "CPUExecutionProvider", "calls": RUNS, "total_ms": total_ms,
            "ms_per_run": total_ms / RUNS, "share": 0.0, "us_per_call": us, "flops": flops,
            "bytes": moved, "intensity": flops / moved if moved else math.nan,
            "gflops": flops / us / 1e3, "gbs": moved / us / 1e3, "verdict": verdict,
            "verdict_reason": why, "device_ms": total_ms * 0.7 if gpu else math.nan,
            "input_shapes": "[8,3,32,32] [16,3,3,3]" if kind == "Conv" else ""})
    frame = pd.DataFrame(rows, columns=list(OP_COLUMNS))
    frame["share"] = frame["total_ms"] / frame["total_ms"].sum()
    return frame


def write_profile(folder: Path, *, gpu: bool = False, campaign: str = "example",
                  device: str = "local-cpu", trial: int = 1,
                  ceilings: Ceilings | None = None, profiler_missing: str = "") -> Path:
    """A profile folder as ``dse profile`` leaves it: summary, ops table, trace, raw files."""
    folder.mkdir(parents=True, exist_ok=True)
    ops = ops_frame(gpu)
    op_ms = float(ops["ms_per_run"].sum())
    unprofiled = 1.75
    files = {"ops_csv": OPS_CSV, "ops_parquet": OPS_PARQUET, "trace": "trace.json",
             "raw:onnxruntime": "onnxruntime_profile.json", "raw:perf-stat": "perf-stat.txt",
             "raw:perf-record": "perf.data"}
    if profiler_missing:
        files = {"raw:perf-stat": "perf-stat.txt"}
    else:
        ops.to_csv(folder / OPS_CSV, index=False)
        ops.to_parquet(folder / OPS_PARQUET, index=False)
        (folder / "trace.json").write_text('{"traceEvents": []}')
        (folder / "onnxruntime_profile.json").write_text("[]")
    (folder / "perf-stat.txt").write_text("# perf stat\n")  # perf.data stays absent
    counters = [PerfCounter("cycles", 1.21e9), PerfCounter("instructions", 2.66e9),
                PerfCounter("cache-misses", 3.1e6), PerfCounter("branch-misses", 1.2e6),
                PerfCounter("L1-dcache-load-misses", None, reason="<not supported>"),
                PerfCounter("task-clock", 412.5, unit="msec")]
    perf = PerfSection(
        counters=counters,
        stacks=[{"stack": "python;onnxruntime::InferenceSession::Run;MlasConvOperation;"
                          "MlasSgemmKernelFma3", "samples": 420},
                {"stack": "python;onnxruntime::InferenceSession::Run;MlasPool", "samples": 95}],
        symbols=[{"symbol": "MlasSgemmKernelFma3", "samples": 420, "share": 0.41},
                 {"symbol": "MlasPool2DKernel", "samples": 95, "share": 0.09}])
    nsight = (NsightSection(kernels=[{"name": "implicit_convolve_sgemm", "calls": 600,
                                      "total_ms": 95.1}], ncu_missing="ncu not on PATH")
              if gpu else NsightSection(nsys_missing="no NVIDIA GPU on local-cpu",
                                        ncu_missing="no NVIDIA GPU on local-cpu"))
    summary = ProfileSummary(
        campaign=campaign, device=device, device_id=f"{device}-0", trial=trial,
        candidate={"family": "cnn", "arch": {"depth": 2, "width_mult": 1.0},
                   "knobs": {"intra_op_threads": 4}},
        backend="onnxruntime", precision="fp32", batch_size=8, created="2025-05-02T10:11:12",
        profiler="" if profiler_missing else "onnxruntime", profiler_missing=profiler_missing,
        runs=RUNS, trial_p50_ms=1.81, unprofiled_p50_ms=unprofiled, profiled_p50_ms=2.05,
        op_ms_per_run=None if profiler_missing else op_ms,
        coverage=None if profiler_missing else op_ms / unprofiled,
        unattributed_ms=None if profiler_missing else unprofiled - op_ms,
        profiler_overhead_ms=2.05 - unprofiled,
        host_ms_per_run=None if profiler_missing else op_ms,
        device_ms_per_run=op_ms * 0.7 if gpu else None,
        ceilings=ceilings or Ceilings(PEAK_GFLOPS, BANDWIDTH_GBS,
                                      "measured now: sgemm and stream triad", threads=4),
        verdicts={} if profiler_missing else
        {str(k): int(v) for k, v in ops["verdict"].value_counts().items()},
        perf=perf, nsight=nsight, files=files,
        notes=["the runner was warmed up with 20 calls before the profiled window"],
        window={"start": 1_746_180_000.0, "end": 1_746_180_003.5})
    write_summary(summary, folder)
    return folder


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    return write_profile(tmp_path / "runs" / "example" / "profiles" / "local-cpu" / "trial-00001")


def test_the_info_lays_out_header_accounting_and_top_operators(profile: Path) -> None:
    info = profile_page_info(profile)
    header = dict(info.header)
    assert (info.campaign, info.device, info.trial, info.backend) == (
        "example", "local-cpu", 1, "onnxruntime")
    assert header["device"] == "local-cpu (local-cpu-0)"
    assert header["knobs"] == "intra_op_threads=4" and header["batch size"] == "8"
    assert header["profiling window"] == "3.5 s"
    op_ms = sum(op[2] for op in OPS) / 1000
    rows = {row[0].split(" (")[0]: row[1:] for row in info.accounting.table.rows}
    assert rows["operator time per run"] == [f"{op_ms:.4g}", f"{op_ms / 1.75:.1%}"]
    # The remainder is always shown, with its share of the unprofiled latency.
    assert rows["unattributed remainder"] == [f"{1.75 - op_ms:.4g}", f"{(1.75 - op_ms) / 1.75:.1%}"]
    assert f"account for {op_ms / 1.75:.1%} of the unprofiled p50" in info.accounting.coverage
    assert "Profiler overhead" in info.accounting.overhead and "+17.1%" in info.accounting.overhead
    top = info.top_ops
    assert len(top.labels) == TOP_OPS and top.labels[0] == "1. /features/0/Conv"
    assert top.ms_per_run == sorted(top.ms_per_run, reverse=True)
    assert f"{len(OPS) - TOP_OPS} more operator(s)" in top.note
    assert "3 compute-bound, 8 memory-bound, 3 overhead-bound, 4 unknown" in top.note


def test_the_roofline_groups_drawable_operators_by_verdict_under_the_ceilings(
        profile: Path) -> None:
    roofline = profile_page_info(profile).roofline
    assert roofline.empty_reason is None
    assert [g.verdict for g in roofline.groups] == [COMPUTE_BOUND, MEMORY_BOUND, OVERHEAD_BOUND]
    assert sum(len(g.x) for g in roofline.groups) == len(DRAWN)
    conv = roofline.groups[0]
    assert conv.names[0] == "/features/0/Conv"
    assert conv.x[0] == pytest.approx(28.3 / 1.9) and conv.y[0] == pytest.approx(28.3e6 / 310e3)
    assert 0 < conv.share[0] < 1
    # The operators without a place on log axes are named, with why.
    assert roofline.not_drawn == [
        "/Flatten (Flatten: FLOPs unknown)", "/Reshape (Reshape: FLOPs unknown)",
        "/Transpose (Transpose: FLOPs unknown)", "/Cast (Cast: no FLOPs)",
        "/Shape (Shape: FLOPs unknown)"]
    assert "5 operator(s) not drawn" in roofline.note
    assert "Ceilings: measured now: sgemm and stream triad (4 thread(s))." in roofline.note
    # The roof: bandwidth slope to the ridge (150 / 20 = 7.5 FLOP/B), then the flat peak.
    (ceiling,) = roofline.ceilings
    low = min(op[3] / op[4] for op in DRAWN) / 2
    high = max(op[3] / op[4] for op in DRAWN) * 2
    assert ceiling.x == pytest.approx([low, 7.5, high])
    assert ceiling.y == pytest.approx([BANDWIDTH_GBS * low, PEAK_GFLOPS, PEAK_GFLOPS])
    assert ceiling.name == "peak 150 GFLOP/s, 20 GB/s"


def test_an_unknown_ceiling_is_left_out_and_said_so() -> None:
    compute_only, note = ceiling_lines(Ceilings(100.0, None, "profile"), 0.5, 20.0)
    assert [(c.x, c.y) for c in compute_only] == [([0.25, 40.0], [100.0, 100.0])]
    assert "memory-bandwidth ceiling is unknown" in note and "compute" not in note.split(".")[0]
    bandwidth_only, note = ceiling_lines(Ceilings(None, 10.0, ""), 0.5, 20.0)
    assert [(c.x, c.y) for c in bandwidth_only] == [([0.25, 40.0], [2.5, 400.0])]
    assert note == "The compute ceiling is unknown (no peak GFLOP/s), so it is not drawn."
    none, note = ceiling_lines(Ceilings(None, None, ""), 0.5, 20.0)
    assert none == [] and "compute ceiling is unknown" in note and "memory-bandwidth" in note


def test_tables_give_counters_or_their_reason_stacks_symbols_and_kernels(profile: Path) -> None:
    info = profile_page_info(profile)
    counters = {row[0]: row[1:] for row in info.counters.rows}
    assert counters["L1-dcache-load-misses"] == ["", "", "<not supported>"]
    assert counters["cycles"][0] == "1,210,000,000"
    assert counters["task-clock"] == ["412.5", "msec", ""]
    assert counters["instructions per cycle"][0] == "2.2"
    assert info.stacks.rows[0] == ["420", "python → onnxruntime::InferenceSession::Run → "
                                          "MlasConvOperation → MlasSgemmKernelFma3"]
    assert info.symbols.rows[0] == ["MlasSgemmKernelFma3", "420", "41.00"]
    assert info.kernels.empty_reason == ("No Nsight kernels: Nsight Systems: no NVIDIA GPU on "
                                         "local-cpu; Nsight Compute: no NVIDIA GPU on local-cpu.")
    # All operators, most time first; the device column is left out on a CPU.
    assert len(info.ops.rows) == len(OPS) and info.ops.rows[0][0] == "/features/0/Conv"
    assert "device ms (all runs)" not in info.ops.columns and "verdict" in info.ops.columns
    flatten = next(row for row in info.ops.rows if row[0] == "/Flatten")
    assert flatten[info.ops.columns.index("FLOP per call")] == ""
    # No device time on a CPU: said, not drawn.
    assert info.host_device.empty_reason is not None
    assert info.host_device.empty_reason.startswith("No device time: local-cpu")


def test_on_a_gpu_host_and_device_time_sit_side_by_side(tmp_path: Path) -> None:
    info = profile_page_info(write_profile(tmp_path / "p", gpu=True, device="a100"))
    host_device = info.host_device
    assert host_device.empty_reason is None
    assert len(host_device.labels) == TOP_OPS and host_device.labels[0] == "1. /features/0/Conv"
    assert host_device.host_ms[0] == pytest.approx(0.31)
    assert host_device.device_ms[0] == pytest.approx(0.7 * 0.31)
    op_ms = sum(op[2] for op in OPS) / 1000
    assert host_device.note.startswith(f"All operators: {op_ms:.4g} ms on the host, "
                                       f"{0.7 * op_ms:.4g} ms on the device per run.")
    assert info.kernels.rows == [["implicit_convolve_sgemm", "600", "95.1"]]
    assert info.kernels.note == "Nsight Compute: ncu not on PATH"


def test_a_csv_only_profile_reads_like_the_parquet_one(profile: Path) -> None:
    parquet = profile_page_info(profile)
    (profile / OPS_PARQUET).unlink()
    assert profile_page_info(profile).ops == parquet.ops


def test_a_bad_or_absent_folder_is_one_line_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / SUMMARY_FILE))) as caught:
        profile_page_info(tmp_path)
    assert "\n" not in str(caught.value)
    folder = write_profile(tmp_path / "p")
    (folder / OPS_PARQUET).unlink()
    (folder / OPS_CSV).unlink()
    with pytest.raises(ValueError, match=re.escape(f"{folder / OPS_CSV}: no per-operator table")):
        profile_page_info(folder)
    pd.DataFrame({"name": ["x"]}).to_csv(folder / OPS_CSV, index=False)
    with pytest.raises(ValueError, match=r"ops\.csv: per-operator table lacks column\(s\)"):
        profile_page_info(folder)


def test_a_profile_without_an_operator_table_still_gets_a_page(tmp_path: Path) -> None:
    folder = write_profile(tmp_path / "p", profiler_missing="the tvm backend has no profiler here")
    page = write_profile_page(folder, tmp_path / "page.html").read_text(encoding="utf-8")
    assert "no per-operator table: the tvm backend has no profiler here" in page
    assert "Coverage unknown: no per-operator table" in page
    assert "plotly" not in page.lower().replace("dse-profile", "")  # no figure, no plotly.js
    assert "No device time" in page


def test_the_page_is_one_offline_file_with_meta_tags_and_relative_file_links(
        profile: Path, tmp_path: Path) -> None:
    dashboards = tmp_path / "dashboards"
    out = dashboards / profile_page_name("example", "local-cpu", 1)
    assert out.name == "example-profile-local-cpu-trial-00001.html"
    assert write_profile_page(profile, out) == out
    page = out.read_text(encoding="utf-8")
    plotlyjs = get_plotlyjs()
    assert page.count(plotlyjs) == 1
    outside = page.replace(plotlyjs, "")
    assert outside.count('class="plotly-graph-div"') == 2  # top operators, roofline (no GPU)
    assert not re.search(r"<script[^>]*\bsrc=", outside)
    assert not re.search(r"""(src|href)=["']?https?://""", outside)
    assert f'<meta name="{PROFILE_META}" content="example/local-cpu/trial 1">' in page
    assert read_dashboard_meta(out).profile == ProfileMeta("example", "local-cpu", 1,
                                                           "onnxruntime")
    links = re.findall(r'<li><a href="([^"]+)">([^<]+)</a>', page)
    assert {name for _, name in links} == {SUMMARY_FILE, OPS_CSV, OPS_PARQUET, "trace.json",
                                           "onnxruntime_profile.json", "perf-stat.txt"}
    for href, name in links:
        assert not href.startswith("/")
        assert (dashboards / unquote(href)).resolve() == (profile / name).resolve()
    assert "perf.data — raw:perf-record (absent)" in page
    for text in ("Latency accounting", "unattributed remainder", "&lt;not supported&gt;",
                 "MlasSgemmKernelFma3", "No Nsight kernels", "5 operator(s) not drawn",
                 "the runner was warmed up"):
        assert text in page


def test_a_page_name_cannot_leave_the_folder() -> None:
    with pytest.raises(ValueError, match="plain campaign and device name"):
        profile_page_name("example", "../x", 1)


def test_the_index_lists_profiles_apart_and_the_dashboard_links_the_trials_row(
        profile: Path, tmp_path: Path) -> None:
    dashboards = tmp_path / "dashboards"
    run_dir = example_run(tmp_path / "runs" / "example")
    off_front = write_profile(tmp_path / "other", trial=3)
    for folder, trial in ((profile, 1), (off_front, 3)):
        write_profile_page(folder, dashboards / profile_page_name("example", "local-cpu", trial))
    assert profile_pages(dashboards, "example") == {
        ("local-cpu", 1): "example-profile-local-cpu-trial-00001.html",
        ("local-cpu", 3): "example-profile-local-cpu-trial-00003.html"}
    dashboard = write_dashboard(run_dir, dashboards / "example.html").read_text(encoding="utf-8")

    index = write_index(dashboards).read_text(encoding="utf-8")
    assert [e.file for e in dashboard_entries(dashboards)] == ["example.html"]
    assert [(e.profile.trial, e.file) for e in profile_entries(dashboards)] == [
        (1, "example-profile-local-cpu-trial-00001.html"),
        (3, "example-profile-local-cpu-trial-00003.html")]
    assert "1 campaign dashboard(s)" in index and "<h2>Profiles</h2>" in index
    assert ('<tr><td>example</td><td>local-cpu</td><td class="number">1</td><td>onnxruntime</td>'
            '<td><a href="example-profile-local-cpu-trial-00001.html">profile</a></td>') in index
    # The front's rows: trial 1 (on the front) links its page; 0 and 2 have none.
    front = dashboard[dashboard.index('<table class="front">'):]
    front = front[:front.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", front, flags=re.S)
    assert "<th>profile</th>" in rows[0]
    linked = [re.match(r"<td>(\d+)</td>", row)[1] for row in rows[1:]  # type: ignore[index]
              if 'href="example-profile-local-cpu-trial-' in row]
    assert linked == ["1"]
    # Every profiled trial, on the front or not, in a table of its own.
    assert "Profiled trials (dse profile)" in dashboard
    assert 'href="example-profile-local-cpu-trial-00003.html"' in dashboard

