"""Waiting until this process's own threads are idle: a runtime's worker threads spin for a while
after its last call (ONNX Runtime's intra-op pool about 50 ms on the 2-core development VM, one
core busy; an OpenMP pool for its block time) before they sleep. Whatever runs next in the same
process shares the cores with them: in a duel, the other candidate's block would be timed beside
the first one's spinning pool, a cost no deployment of either pays."""

from __future__ import annotations

import time

#: Length of one look at the process's CPU use, the share of one core below which a look counts
#: as idle (the process's other threads — telemetry, Ray's — use far less), and the idle looks in
#: a row that make a process that was busy idle: on a busy machine the scheduler can leave a
#: spinning thread off the CPUs for a look or two, which alone would pass for idle.
STEP_S, IDLE_SHARE, IDLE_LOOKS = 0.004, 0.2, 3


def wait_until_quiet(max_seconds: float) -> bool:
    """Sleep in short steps until this process uses under :data:`IDLE_SHARE` of a core (every
    thread of it, measured by the process's CPU clock), or ``max_seconds`` pass; whether it went
    quiet. A process idle at the first step goes on at once (nothing spins: one step is all it
    costs); one that was busy must then be idle :data:`IDLE_LOOKS` steps in a row.

    Examples:
        >>> from dse.measure.quiet import wait_until_quiet
        >>> wait_until_quiet(0.5)
        True
    """
    deadline = time.perf_counter() + max_seconds
    if _idle_look():
        return True
    idle = 0
    while time.perf_counter() < deadline:
        idle = idle + 1 if _idle_look() else 0
        if idle >= IDLE_LOOKS:
            return True
    return False


def _idle_look() -> bool:
    """One step's sleep, and whether the process used under :data:`IDLE_SHARE` of a core."""
    cpu, wall = time.process_time(), time.perf_counter()
    time.sleep(STEP_S)
    return time.process_time() - cpu < IDLE_SHARE * (time.perf_counter() - wall)
