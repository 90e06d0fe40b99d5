"""One evaluator call and what it came to: the :class:`Outcome` that becomes the trial's result
whatever the user's function returned or raised, and how a function is named so that a worker
process can import it again (``module:qualname``).
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from dse.core import Candidate

# Raised by the evaluator itself, never by a Ctrl-C, away from the driver's main thread: Python
# delivers signals to the main thread only, and the worker process ignores SIGINT.
_USER_STOPS: tuple[type[BaseException], ...] = (SystemExit, KeyboardInterrupt)


class InfeasibleCandidate(Exception):
    """Raised by an evaluator for a candidate that cannot exist (a replay table has no row for
    it): the trial is recorded ``infeasible`` with the message, and the campaign goes on.

    Examples:
        >>> from dse import Candidate, InfeasibleCandidate
        >>> def evaluator(candidate):
        ...     if candidate.params["width"] > 512:
        ...         raise InfeasibleCandidate("width > 512 does not fit in the device's memory")
        ...     return {"params_m": candidate.params["width"] / 1000}
        >>> evaluator(Candidate(params={"width": 256}))
        {'params_m': 0.256}
        >>> try:
        ...     evaluator(Candidate(params={"width": 1024}))
        ... except InfeasibleCandidate as exc:
        ...     print(exc)
        width > 512 does not fit in the device's memory
    """


@dataclass(frozen=True)
class Outcome:
    """What one evaluator call came to.

    ``kind``: ``returned`` (``result`` is what it returned, ``seconds`` how long the call took),
    ``infeasible`` (``error`` is the :class:`InfeasibleCandidate` message) or ``failed``
    (``error`` says why, worded to follow "evaluator <name> ": "raised ValueError: ...").
    """

    kind: Literal["returned", "infeasible", "failed"]
    result: object = None
    error: str = ""
    seconds: float = 0.0


def call_outcome(function: Callable[[Candidate], object], candidate: Candidate,
                 contain: tuple[type[BaseException], ...] = _USER_STOPS) -> Outcome:
    """Call ``function(candidate)``; whatever it returns or raises, as an Outcome.

    ``contain``: the exceptions beyond ``Exception`` that fail the call rather than propagate.
    Off the driver's main thread they can only come from the evaluator; in the main thread a
    KeyboardInterrupt may be the user's Ctrl-C, which must stop the run (pass ``()``).
    """
    started = time.perf_counter()
    try:
        result = function(candidate)
    except InfeasibleCandidate as exc:
        return Outcome("infeasible", error=str(exc))
    except Exception as exc:  # the house failure policy: a candidate's failure is a result
        return Outcome("failed", error=f"raised {type(exc).__name__}: {exc}")
    except contain as exc:
        return Outcome("failed", error=_stop_reason(exc))
    return Outcome("returned", result=result, seconds=time.perf_counter() - started)


def _stop_reason(exc: BaseException) -> str:
    detail = f" (exit code {exc.code!r})" if isinstance(exc, SystemExit) else ""
    return (f"raised {type(exc).__name__}{detail}: an evaluator cannot stop the campaign, so "
            f"only this trial fails")


def timed_out(timeout_s: float, what_then: str) -> Outcome:
    return Outcome("failed", error=f"timed out after {timeout_s:g} s (budget.trial_timeout_s); "
                                   f"{what_then}")


def importable_reference(function: object) -> str | None:
    """``module:qualname`` when importing that finds ``function`` itself, else None (a closure,
    a lambda, a bound method, a callable object, anything of ``__main__``)."""
    module_name = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        return None
    # The driver's __main__ is another module in a worker process; "<locals>", "<lambda>" are
    # not reachable by attribute.
    if module_name == "__main__" or "<" in qualname:
        return None
    module = sys.modules.get(module_name)
    try:
        found = _resolve(module, qualname) if module is not None else None
    except AttributeError:
        return None
    return f"{module_name}:{qualname}" if found is function else None


def _resolve(owner: object, qualname: str) -> object:
    for part in qualname.split("."):
        owner = getattr(owner, part)
    return owner


def load_reference(reference: str) -> Callable[[Candidate], object]:
    """The callable ``module:qualname`` names (as :func:`importable_reference` wrote it)."""
    module_name, _, qualname = reference.partition(":")
    function = _resolve(importlib.import_module(module_name), qualname)
    if not callable(function):
        raise TypeError(f"{reference} is a {type(function).__name__}, not a function")
    return function
