"""Nsight Systems / Compute: the parsers on the tools' CSV formats, the command lines, what is
said where the tools are absent, and the workload child run for real (without Nsight)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from dse.profiling.nsight import (
    NCU_LAUNCH_COUNT,
    child_command,
    gpu_missing,
    ncu_import_command,
    ncu_missing,
    ncu_profile_command,
    nsys_missing,
    nsys_profile_command,
    nsys_stats_command,
    nvtx_available,
    nvtx_range,
    read_child_request,
    run_nsight,
    write_child_request,
)
from dse.profiling.nsight_output import KERNEL_KEYS, merge_kernels, parse_ncu_csv, parse_nsys_kernel_sum_csv

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nsight"
CONV = ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize64x32x64"
        "_stage5_warpsize2x2x1_g1_tensor16x8x8_kernel")
OFFSETS = ("void cask__5x_cudnn::computeOffsetsKernel<false, false>"
           "(cask__5x_cudnn::ComputeOffsetsParams)")


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


def _named(rows: list[dict[str, object]]) -> dict[object, dict[str, object]]:
    return {row["name"]: row for row in rows}


@pytest.mark.parametrize("fixture", ["nsys_cuda_gpu_kern_sum.csv", "nsys-stats-console.txt",
                                     "nsys_gpukernsum-2021.csv"])
def test_nsys_kernel_summary_rows_in_every_format(fixture: str) -> None:
    rows = parse_nsys_kernel_sum_csv(_read(fixture))
    assert len(rows) == 5
    conv = rows[0]
    assert conv["name"] == CONV
    assert conv["calls"] == 200
    assert conv["total_ms"] == pytest.approx(1.8464)
    assert conv["avg_us"] == pytest.approx(9.232)
    assert (conv["min_us"], conv["max_us"]) == (pytest.approx(9.088), pytest.approx(10.112))
    assert conv["share"] == pytest.approx(1846400 / 2800000)
    assert sum(row["share"] for row in rows) == pytest.approx(1.0)
    assert [row["total_ms"] for row in rows] == sorted((r["total_ms"] for r in rows), reverse=True)
    assert any(row["name"].startswith("void gemv2T_kernel_val<int, int, float") for row in rows)


def test_nsys_times_follow_the_unit_the_header_names() -> None:
    text = _read("nsys_cuda_gpu_kern_sum.csv").replace("(ns)", "(us)")
    assert parse_nsys_kernel_sum_csv(text)[0]["total_ms"] == pytest.approx(1846.4)
    assert parse_nsys_kernel_sum_csv("SKIPPED: nsys.sqlite does not contain CUDA kernel data.") == []


def test_ncu_details_page_is_averaged_per_kernel_and_rule_rows_are_skipped() -> None:
    rows = parse_ncu_csv(_read("ncu-details.csv"))
    named = _named(rows)
    assert len(rows) == 5
    conv = named[CONV]
    assert conv["ncu_launches"] == 2
    assert conv["duration_us"] == pytest.approx((9.41 + 9.29) / 2)
    assert conv["sm_throughput_pct"] == pytest.approx((61.84 + 62.37) / 2)
    assert conv["dram_throughput_pct"] == pytest.approx((12.93 + 13.05) / 2)
    assert conv["achieved_occupancy_pct"] == pytest.approx((22.91 + 23.04) / 2)
    assert rows[0]["name"] == CONV  # longest first
    assert named[OFFSETS]["ncu_launches"] == 2


def test_ncu_older_csv_with_progress_lines_units_and_separators() -> None:
    named = _named(parse_ncu_csv(_read("ncu-details-2021.csv")))
    assert set(named) >= {CONV, OFFSETS}
    assert named[CONV]["duration_us"] == pytest.approx(9.41)  # usecond
    assert named[CONV]["sm_throughput_pct"] == pytest.approx(61.84)  # "SM [%]"
    assert named[OFFSETS]["achieved_occupancy_pct"] == pytest.approx(14.62)
    nanoseconds = _read("ncu-details-2021.csv").replace('"usecond","9.41"', '"nsecond","9,410"')
    assert _named(parse_ncu_csv(nanoseconds))[CONV]["duration_us"] == pytest.approx(9.41)


def test_kernels_join_by_name_or_by_a_unique_base_name() -> None:
    nsys = parse_nsys_kernel_sum_csv(_read("nsys_cuda_gpu_kern_sum.csv"))
    ncu = parse_ncu_csv(_read("ncu-details.csv"))
    merged = merge_kernels(nsys, ncu)
    assert all(tuple(row) == KERNEL_KEYS for row in merged)
    assert len(merged) == 5  # the ReLU kernel's two spellings are one kernel
    named = _named(merged)
    assert named[CONV]["calls"] == 200 and named[CONV]["ncu_launches"] == 2
    relu = next(row for row in merged if "launch_clamp_scalar" in str(row["name"]))
    assert relu["name"].startswith("void at::native::vectorized_elementwise_kernel<(int)4")
    assert relu["sm_throughput_pct"] == pytest.approx((6.41 + 6.52) / 2)
    only_ncu = merge_kernels([], ncu)
    assert len(only_ncu) == 5 and only_ncu[0]["calls"] is None


def test_command_lines_name_the_window_and_the_files(tmp_path: Path) -> None:
    child = child_command(tmp_path / "request.pkl")
    assert child == [sys.executable, "-m", "dse.profiling.nsight_child",
                     str(tmp_path / "request.pkl")]
    nsys = nsys_profile_command(child, tmp_path)
    assert nsys[:2] == ["nsys", "profile"] and nsys[-len(child):] == child
    assert {"--trace=cuda,nvtx,osrt", "--capture-range=nvtx", "--nvtx-capture=dse:window",
            "--capture-range-end=stop", "--force-overwrite=true",
            f"--output={tmp_path / 'nsys'}"} <= set(nsys)
    stats = nsys_stats_command(tmp_path / "nsys.nsys-rep", tmp_path, "cuda_gpu_kern_sum")
    assert {"--report=cuda_gpu_kern_sum", "--format=csv"} <= set(stats)
    ncu = ncu_profile_command(child, tmp_path)
    assert ncu[ncu.index("--nvtx-include") + 1] == "dse:run/"
    assert ncu[ncu.index("--launch-count") + 1] == str(NCU_LAUNCH_COUNT)
    assert ncu[ncu.index("--export") + 1] == str(tmp_path / "ncu")
    assert "--target-processes" in ncu and ncu[-len(child):] == child
    assert ncu_import_command(tmp_path / "ncu.ncu-rep") == [
        "ncu", "--import", str(tmp_path / "ncu.ncu-rep"), "--csv", "--page", "details",
        "--print-kernel-base", "demangled"]


@pytest.mark.skipif(gpu_missing() is None, reason="an NVIDIA GPU is here: the tools may run")
def test_without_a_gpu_both_tools_are_missing_and_nothing_runs(tmp_path: Path) -> None:
    assert "no NVIDIA GPU here" in (nsys_missing() or "")
    assert "no NVIDIA GPU here" in (ncu_missing() or "")
    section, files = run_nsight(["false"], tmp_path, timeout_s=5)
    assert section.nsys_missing == nsys_missing()
    assert section.ncu_missing == ncu_missing()
    assert section.kernels == [] and files == []
    assert not nvtx_available()
    with nvtx_range("dse:window"), nvtx_range("dse:run"):
        pass  # a no-op here, nested or not


def _tiny_onnx(path: Path) -> Path:
    """input [batch, 1, 8, 8] -> Flatten -> MatMul [64, 10] -> logits [batch, 10]."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.linspace(-1, 1, 640, dtype=np.float32).reshape(64, 10),
                                     "weight")
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["input"], ["flat"]),
         helper.make_node("MatMul", ["flat", "weight"], ["logits"])], "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _request(tmp_path: Path, runs: int = 5) -> Path:
    import numpy as np

    from dse.artifacts import Artifact
    from dse.spec import HardwareProfile

    model = _tiny_onnx(tmp_path / "tiny.onnx")
    artifact = Artifact("onnx", model, "fp32", (1, 8, 8), model.stat().st_size)
    profile = HardwareProfile(name="test-cpu", kind="cpu", backends=["onnxruntime"],
                              precisions=["fp32"], max_threads=1)
    batch = np.ones((4, 1, 8, 8), dtype=np.float32)
    return write_child_request(tmp_path / "request.pkl", backend="onnxruntime",
                               artifact=artifact, knobs={"intra_op_threads": 1}, profile=profile,
                               batch=batch, runs=runs, warmup=2)


def test_the_child_compiles_and_runs_the_request(tmp_path: Path) -> None:
    request = _request(tmp_path)
    read = read_child_request(request)
    assert (read.backend, read.runs, read.warmup, read.batch.shape) == ("onnxruntime", 5, 2,
                                                                          (4, 1, 8, 8))
    done = subprocess.run(child_command(request), capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr


def test_a_failing_child_says_why_in_one_line_and_exits_1(tmp_path: Path) -> None:
    done = subprocess.run(child_command(_request(tmp_path, runs=-1)), capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"dse.profiling.nsight_child error: ValueError: {tmp_path / 'request.pkl'}: runs must "
        f"be an integer >= 0, got -1"]


def test_a_tool_past_its_time_is_killed_with_what_it_started(tmp_path: Path) -> None:
    from dse.profiling.nsight import _failure, _run_tool

    pids, log = tmp_path / "pids", tmp_path / "tool.log"
    script = f"echo $$ > {pids}; sleep 30 & echo $! >> {pids}; wait"
    code = _run_tool(["sh", "-c", script], 0.5, log)
    assert code is None
    assert _failure("nsys profile", code, None, log, 0.5) == (
        "nsys profile timed out after 0.5 s (killed)")
    # The tool and its child alike were sent SIGKILL: each exits (its pidfd becomes readable)
    # as soon as the kernel tears it down — not after its 30 s. Reading /proc at once raced with
    # that teardown: the reparented `sleep` was once still running for a moment (CI, 2026-12-03).
    for pid in map(int, pids.read_text().split()):
        try:
            handle = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # gone already
        try:
            readable, _, _ = select.select([handle], [], [], 10.0)
        finally:
            os.close(handle)
        assert readable, f"process {pid} still runs: the tool's group was not killed"


def test_a_failed_tool_is_told_by_its_error_line(tmp_path: Path) -> None:
    from dse.profiling.nsight import _failure

    log = tmp_path / "ncu.log"
    log.write_text("==PROF== Connected to process 4211 (/usr/bin/python3.11)\n"
                   "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
                   "NVIDIA GPU Performance Counters on the target device 0.\n"
                   "==PROF== Disconnected from process 4211\n")
    assert _failure("ncu", 1, tmp_path / "ncu.ncu-rep", log, 60) == (
        "ncu exited 1 and wrote no ncu.ncu-rep: ==ERROR== ERR_NVGPUCTRPERM - The user does not "
        "have permission to access NVIDIA GPU Performance Counters on the target device 0.")
    assert _failure("nsys stats", 0, log, log, 60) == ""
