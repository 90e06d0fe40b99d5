"""Waiting until this process's own threads are idle: a runtime's worker threads spin for a while
after its last call (ONNX Runtime's intra-op pool about 50 ms on the 2-core development VM, one
core busy; an OpenMP pool for its block time) before they sleep. Whatever runs next in the same
process shares the cores with them: in a duel, the other candidate's block would be timed beside
the first one's spinning pool, a cost no deployment of either pays."""

from __future__ import annotations

import time

#: Length of one look at the process's CPU use, the share of one core below which a look counts
#: as idle (the process's other threads — telemetry, Ray's — use far less), and the idle looks in
#: a row that make the process idle: on a busy machine the scheduler can leave a spinning thread
#: off the CPUs for a look or two, which alone would pass for idle.
STEP_S, IDLE_SHARE, IDLE_LOOKS = 0.004, 0.2, 3


def wait_until_quiet(max_seconds: float) -> bool:
    """Sleep in short steps until :data:`IDLE_LOOKS` steps in a row see this process use under
    :data:`IDLE_SHARE` of a core (every thread of it, measured by the process's CPU clock), or
    ``max_seconds`` pass; whether it went quiet.

    Examples:
        >>> from dse.measure.quiet import wait_until_quiet
        >>> wait_until_quiet(0.5)
        True
    """
    deadline = time.perf_counter() + max_seconds
    idle = 0
    while True:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(STEP_S)
        idle = idle + 1 if time.process_time() - cpu < IDLE_SHARE * (
            time.perf_counter() - wall) else 0
        if idle >= IDLE_LOOKS:
            return True
        if time.perf_counter() >= deadline:
            return False
