"""The workload Nsight profiles: ``python -m dse.profiling.nsight_child REQUEST.pkl``.

Nsight Systems and Nsight Compute launch the program they profile, so the candidate's calls run
here, in a process of their own: compile the request's artifact with its backend, warm up
outside any NVTX range, then make the timed calls, each inside ``dse:run``, all inside
``dse:window`` (the ranges the tools' capture filters name), close the runner, exit 0. Any
failure prints one line to stderr (``... error: Type: message``, the word the parent's log
reader looks for) and exits 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dse.backends import first_error_line
from dse.profiling.nsight import (
    NVTX_RUN,
    NVTX_WINDOW,
    ChildRequest,
    nvtx_available,
    nvtx_range,
    read_child_request,
)


def run_request(request: ChildRequest) -> None:
    """Compile, warm up, and run the request's calls inside the NVTX window."""
    from dse.backends import get_backend

    nvtx_available()  # its imports (torch) now, not inside the window
    runner = get_backend(request.backend).compile(request.artifact, request.knobs,
                                                  request.profile, len(request.batch))
    try:
        for _ in range(request.warmup):
            runner.run(request.batch)
        with nvtx_range(NVTX_WINDOW):
            for _ in range(request.runs):
                with nvtx_range(NVTX_RUN):
                    runner.run(request.batch)  # synchronous: its kernels end inside the range
    finally:
        runner.close()


def main(argv: list[str] | None = None) -> int:
    """Run the request named on the command line; the process's exit status."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("dse.profiling.nsight_child error: usage: python -m dse.profiling.nsight_child "
              "REQUEST.pkl", file=sys.stderr)
        return 1
    try:
        run_request(read_child_request(Path(args[0])))
    # The process's boundary: whatever stopped the workload is told to the parent, which reads
    # the profiler's log, in one line (the runtime's own message where it gave one).
    except Exception as exc:
        print(f"dse.profiling.nsight_child error: {type(exc).__name__}: "
              f"{first_error_line(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
