"""How far a device's runs of one candidate land apart, measured once, and held by every interval.

The blocks of one run sample what varies inside it (warm-up state, what changes within seconds);
what moves from one process, minute or campaign to the next (memory layout, a neighbour on the
host's shared cores, clocks settling elsewhere) they cannot see: on the 2-core VM this project is
developed on, runs in separate processes sat 3-14% apart while each run's blocks agreed within 1-2%.
Kalibera & Jones ("Rigorous Benchmarking in Reasonable Time", 2013) measure the variation of each
level once, in a dimensioning experiment, and plan for it. Here that experiment is
``dse calibrate``: reference workloads measured in fresh processes spread over time, on the device,
with the campaign's protocol. Its result, the relative standard deviation of each percentile
across those runs, for the workload that varied most (:class:`RunToRun`), is a floor on every
later interval of that device: an interval always reaches from ``value / f`` to ``value x f``
with ``f = exp(t x cv)`` (Student's t at the calibration's degrees of freedom; for small cv about
``t x cv x value`` either side), so it holds what the next run would see. The floor is a factor,
as the variation it holds is (a slower moment scales every call), so it never reaches below
zero however large the variation. The precision a run itself reached (``achieved_rel_ci``,
``target_met``) stays its own.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dse.measure.stats import CONFIDENCE, PERCENTILES
from dse.util import atomic_write_text, student_t_quantile

#: Bumped when the file's meaning changes; an older file is not used (calibrate again).
FORMAT = 1


@dataclass(frozen=True)
class RunToRun:
    """A device's run-to-run variation: ``cv[percentile]`` is the relative standard deviation of
    that percentile over ``runs`` runs of the reference workloads, taken from the workload that
    varied most (``workload_cv`` has each one's, of the median), with ``degrees_of_freedom`` =
    runs - 1; measured on ``device`` at ``measured_at`` (UNIX seconds). ``per_workload`` keeps each
    workload's p50 of every run, in order."""

    cv: dict[str, float]
    runs: int
    workloads: int
    degrees_of_freedom: int
    device: str
    measured_at: float
    per_workload: dict[str, list[float]] = field(default_factory=dict)
    workload_cv: dict[str, float] = field(default_factory=dict)

    def factor(self, percentile: str) -> float:
        """The floor's factor for ``percentile``: every interval reaches at least from
        ``value / factor`` to ``value x factor``. NaN where the calibration has no figure for
        that percentile."""
        cv = self.cv.get(percentile, math.nan)
        if not math.isfinite(cv) or self.degrees_of_freedom < 1:
            return math.nan
        return math.exp(student_t_quantile(0.5 + CONFIDENCE / 2, self.degrees_of_freedom) * cv)

    def widen(self, percentile: str, value: float,
              interval: tuple[float, float] | None) -> tuple[float, float] | None:
        """``interval`` widened to at least ``value`` divided and multiplied by :meth:`factor`;
        None stays None (too few samples for any interval is not made up for by a floor)."""
        if interval is None:
            return None
        factor = self.factor(percentile)
        if not math.isfinite(factor):
            return interval
        return min(interval[0], value / factor), max(interval[1], value * factor)

    def describe(self) -> str:
        """One line: the figures and where they come from."""
        figures = ", ".join(f"{name} {100 * self.cv[name]:.1f}%" for name, _ in PERCENTILES
                            if name in self.cv)
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(self.measured_at))
        return (f"run-to-run variation {figures} ({self.runs} runs x {self.workloads} "
                f"workload(s) on {self.device}, {when} UTC)")


def _relative_sd(values: Sequence[float]) -> float:
    """Standard deviation over mean; NaN under two values or a mean that is not positive."""
    mean = sum(values) / len(values) if values else 0.0
    if len(values) < 2 or mean <= 0:
        return math.nan
    return math.sqrt(sum((v / mean - 1.0) ** 2 for v in values) / (len(values) - 1))


def estimate(runs: Mapping[str, Sequence[Mapping[str, float]]], *, device: str,
             measured_at: float | None = None) -> RunToRun:
    """Each percentile's relative spread over the runs of each workload; the largest is the
    device's figure.

    ``runs`` maps a workload to its runs in order, each a ``{percentile: ms}`` mapping. How far
    runs move depends on the workload (on the 2-core development VM a 16 ms torch model moved
    three times as much as a 0.1 ms ONNX Runtime one), and a floor must hold for the candidates
    that move most: pooling would set it by the average workload. Raises ValueError with fewer
    than two runs of every workload."""
    usable = {name: list(done) for name, done in runs.items() if len(done) >= 2}
    if not usable:
        raise ValueError("run-to-run variation needs at least two runs of a workload")
    cv: dict[str, float] = {}
    for name, _ in PERCENTILES:
        spreads = [_relative_sd([run[name] for run in done
                                 if math.isfinite(run.get(name, math.nan))])
                   for done in usable.values()]
        finite = [value for value in spreads if math.isfinite(value)]
        if finite:
            cv[name] = max(finite)
    fewest = min(len(done) for done in usable.values())
    return RunToRun(cv=cv, runs=fewest, workloads=len(usable), degrees_of_freedom=fewest - 1,
                    device=device, measured_at=time.time() if measured_at is None else measured_at,
                    per_workload={name: [run["p50"] for run in done]
                                  for name, done in usable.items()},
                    workload_cv={name: _relative_sd([run["p50"] for run in done])
                                 for name, done in usable.items()})


def calibration_path(cache_dir: Path, profile: str, device_key: str) -> Path:
    """Where a device's calibration lives in a campaign's cache: one file per physical device."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in device_key)
    return cache_dir / "run_to_run" / profile / f"{safe}.json"


def save(calibration: RunToRun, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"format": FORMAT, **asdict(calibration)}, indent=1))


def load(path: Path) -> tuple[RunToRun | None, str]:
    """The calibration at ``path``, or None and why there is none to use (never raises: a
    campaign measures on without a floor, and its provenance says so)."""
    if not path.exists():
        return None, f"not calibrated: no {path} (run `dse calibrate EXPERIMENT`)"
    try:
        raw = json.loads(path.read_text())
        if raw.pop("format", None) != FORMAT:
            return None, f"{path} is from another dse version: run `dse calibrate` again"
        calibration = RunToRun(**raw)
        if not isinstance(calibration.cv, dict) or calibration.degrees_of_freedom < 1:
            raise ValueError("no degrees of freedom")
    except (OSError, ValueError, TypeError) as exc:
        return None, f"{path} cannot be used ({type(exc).__name__}: {exc}): run `dse calibrate` again"
    return calibration, calibration.describe()
