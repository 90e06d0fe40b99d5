"""A language model's service-level objective (``workload: {slo: ...}``): the time to first token
and the time per output token a request must stay within, by a preset users know (MLPerf
Inference's LLM latency constraints) or by its own limits, and the share of requests that must
meet both (the goodput a campaign constrains)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from dse.spec.fields import Strict
from dse.spec.near_names import allowed_hint

# MLPerf Inference's LLM server and interactive scenarios (inference rules and LoadGen's
# mlperf.conf, v5.x): p99 time to first token and p99 time per output token, in ms.
SLO_PRESETS: dict[str, tuple[float, float]] = {
    "mlperf-llama2-70b-server": (2000.0, 200.0),
    "mlperf-llama2-70b-interactive": (450.0, 40.0),
    "mlperf-llama3.1-8b-server": (2000.0, 100.0),
    "mlperf-llama3.1-8b-interactive": (500.0, 30.0),
    "mlperf-llama3.1-405b-server": (6000.0, 175.0),
    "mlperf-llama3.1-405b-interactive": (4500.0, 80.0),
    "mlperf-mixtral-8x7b-server": (2000.0, 200.0),
    "mlperf-deepseek-r1-server": (2000.0, 80.0),
    "mlperf-deepseek-r1-interactive": (1500.0, 15.0),
}

#: The share of requests that must meet the SLO when the workload does not say (MLPerf gates on
#: the 99th percentile of each limit).
DEFAULT_MIN_GOODPUT = 0.99


class SloSpec(Strict):
    """Limits a request must stay within: a preset's, or ``ttft_ms`` and ``tpot_ms`` of one's own
    (either overrides the preset's). Written as a preset's name alone or as a mapping."""

    preset: str | None = Field(
        default=None,
        description="A named SLO: " + ", ".join(f"{name} ({ttft:g} / {tpot:g} ms)"
                                                 for name, (ttft, tpot) in SLO_PRESETS.items())
                    + " — MLPerf Inference's p99 TTFT / TPOT limits.")
    ttft_ms: float | None = Field(default=None, gt=0, le=3_600_000,
                                  description="Time to first token a request may take, ms.")
    tpot_ms: float | None = Field(
        default=None, gt=0, le=3_600_000,
        description="Time per output token a request may take, ms: its decode time over its "
                    "output tokens after the first (MLPerf's per-request TPOT).")
    min_goodput: float = Field(
        default=DEFAULT_MIN_GOODPUT, gt=0, le=1,
        description="Share of timed requests that must meet both limits: the search space gets "
                    "the constraint goodput >= min_goodput unless it writes its own.")

    @model_validator(mode="before")
    @classmethod
    def _preset_name(cls, data: Any) -> Any:
        return {"preset": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _limits(self) -> SloSpec:
        if self.preset is not None and self.preset not in SLO_PRESETS:
            raise ValueError(f"unknown SLO preset {self.preset!r}; "
                             f"{allowed_hint(self.preset, SLO_PRESETS)}")
        if self.preset is None and (self.ttft_ms is None or self.tpot_ms is None):
            raise ValueError("an SLO needs a preset or both ttft_ms and tpot_ms")
        return self

    @property
    def limits(self) -> tuple[float, float]:
        """(TTFT, TPOT) a request may take, in ms: the own limits over the preset's."""
        ttft, tpot = SLO_PRESETS.get(self.preset or "", (0.0, 0.0))
        return (self.ttft_ms if self.ttft_ms is not None else ttft,
                self.tpot_ms if self.tpot_ms is not None else tpot)

    def __str__(self) -> str:
        ttft, tpot = self.limits
        named = f"{self.preset}: " if self.preset else ""
        return f"{named}TTFT <= {ttft:g} ms, TPOT <= {tpot:g} ms"
