"""A device's profile written out as a profile folder, from plain data (no runtime)."""

from __future__ import annotations

from pathlib import Path

from dse.backends.op_profile import OpProfile, OpRecord
from dse.core.candidate import Candidate
from dse.profiling.folder import profile_folder, write_profile
from dse.profiling.session import DeviceProfile
from dse.profiling.summary import (
    OPS_CSV,
    TRACE_FILE,
    Ceilings,
    NsightSection,
    PerfSection,
    read_summary,
)

CANDIDATE = Candidate("cnn", {"num_stages": 1}, "fp32", 8, "onnxruntime")


def _found(files: dict[str, bytes], trace: str | None) -> DeviceProfile:
    ops = OpProfile("test profiler", 4, [OpRecord("conv", "Conv", 4, 40.0, flops=1e6, bytes=1e4),
                                         OpRecord("relu", "Relu", 4, 8.0)],
                    files=[Path(name) for name in files],
                    trace=None if trace is None else Path(trace),
                    run_us=[15.0, 14.0, 16.0, 15.0], run_op_us=[12.0, 12.0, 12.0, 12.0])
    return DeviceProfile(4, [14.0, 15.0, 15.0, 16.0], [], ops, "", PerfSection(),
                         NsightSection(), Ceilings(100.0, 10.0, "test"), 1, files)


def test_the_folder_holds_summary_table_trace_and_raw_files(tmp_path: Path) -> None:
    folder = profile_folder(tmp_path, "local-cpu", 7)
    assert folder == tmp_path / "profiles" / "local-cpu" / "trial-00007"
    found = _found({"raw.json": b"[]", "torch-trace.json": b'{"traceEvents": []}'},
                   "torch-trace.json")
    summary, table = write_profile(folder, found, campaign="c", device="local-cpu",
                                   device_id="d", trial=7, candidate=CANDIDATE, trial_p50_ms=0.02)
    assert (folder / "raw.json").read_bytes() == b"[]"
    assert (folder / TRACE_FILE).read_text() == '{"traceEvents": []}'
    assert list(table["name"]) == ["conv", "relu"] and (folder / OPS_CSV).is_file()
    assert summary.op_ms_per_run == 0.012  # the median operator time per run
    assert summary.coverage == 0.012 / 0.015 and summary.unattributed_ms == 0.015 - 0.012
    assert read_summary(folder) == summary


def test_a_trace_the_device_did_not_send_is_left_out_not_a_crash(tmp_path: Path) -> None:
    """A trace over the size a device sends back stays there: the folder has no trace, the
    summary no "trace" file, and writing it does not fail (it raised FileNotFoundError)."""
    folder = tmp_path / "profile"
    found = _found({"raw.json": b"[]"}, "torch-trace.json")
    summary, _ = write_profile(folder, found, campaign="c", device="local-cpu", device_id="d",
                               trial=1, candidate=CANDIDATE, trial_p50_ms=None)
    assert "trace" not in summary.files and not (folder / TRACE_FILE).exists()
