"""Measurement: latency harness, statistics and telemetry probes.

The harness and statistics load on first use of one of their names: importing a subpackage —
``dse.measure.telemetry``, which the probe registry reads when a profile is validated — must not
bring scipy and the harness with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.util import lazy_names

if TYPE_CHECKING:
    from dse.measure.duel import BLOCK_WARM_SHARE as BLOCK_WARM_SHARE
    from dse.measure.duel import WARMUP_MAX_S as WARMUP_MAX_S
    from dse.measure.duel import WARMUP_SHARE as WARMUP_SHARE
    from dse.measure.duel import DuelRun as DuelRun
    from dse.measure.duel import run_duel as run_duel
    from dse.measure.duel_stats import A_FASTER as A_FASTER
    from dse.measure.duel_stats import B_FASTER as B_FASTER
    from dse.measure.duel_stats import TIE as TIE
    from dse.measure.duel_stats import PairedRatio as PairedRatio
    from dse.measure.duel_stats import Verdict as Verdict
    from dse.measure.duel_stats import verdict as verdict
    from dse.measure.footprint import model_footprint_mb as model_footprint_mb
    from dse.measure.footprint import rss_bytes as rss_bytes
    from dse.measure.footprint import trim_heap as trim_heap
    from dse.measure.generation import GenerationStats as GenerationStats
    from dse.measure.generation import generation_quality as generation_quality
    from dse.measure.generation import halves_shift_pct as halves_shift_pct
    from dse.measure.generation import measure_generation as measure_generation
    from dse.measure.generation import unstable_reason as unstable_reason
    from dse.measure.generation import without_interval as without_interval
    from dse.measure.harness import measure_latency as measure_latency
    from dse.measure.provenance import cpu_clocks_mhz as cpu_clocks_mhz
    from dse.measure.provenance import host_provenance as host_provenance
    from dse.measure.quality_labels import disturbed as disturbed
    from dse.measure.quality_labels import measurement_quality as measurement_quality
    from dse.measure.remeasure import next_run as next_run
    from dse.measure.run_to_run import RunToRun as RunToRun
    from dse.measure.run_to_run import calibration_path as calibration_path
    from dse.measure.run_to_run import estimate as estimate
    from dse.measure.run_to_run import load as load
    from dse.measure.run_to_run import save as save
    from dse.measure.scenarios import OfflineStats as OfflineStats
    from dse.measure.scenarios import measure_offline as measure_offline
    from dse.measure.scenarios import measure_sustained as measure_sustained
    from dse.measure.stats import PERCENTILES as PERCENTILES
    from dse.measure.stats import LatencyStats as LatencyStats
    from dse.measure.stats import drift_pct as drift_pct
    from dse.measure.stats import quantile_ci as quantile_ci
    from dse.measure.stats import samples_for_ci as samples_for_ci
    from dse.measure.stats import summarize as summarize
    from dse.measure.telemetry import PROBES as PROBES
    from dse.measure.telemetry import Probe as Probe
    from dse.measure.telemetry import ProbeResult as ProbeResult
    from dse.measure.telemetry import ProbeSettings as ProbeSettings
    from dse.measure.telemetry import Trace as Trace
    from dse.measure.telemetry import Window as Window
    from dse.measure.telemetry import entry_name as entry_name
    from dse.measure.telemetry import make_probe as make_probe
    from dse.measure.telemetry import make_probes as make_probes
    from dse.measure.telemetry.nvml_throttle import THROTTLING_REASONS as THROTTLING_REASONS
    from dse.measure.telemetry.nvml_throttle import reason_bits as reason_bits
    from dse.measure.timers import timer_overhead_ns as timer_overhead_ns

# Each name loads its module on first use (see dse.util.faces).
_NAMES = {
    "A_FASTER": "dse.measure.duel_stats",
    "BLOCK_WARM_SHARE": "dse.measure.duel",
    "B_FASTER": "dse.measure.duel_stats",
    "DuelRun": "dse.measure.duel",
    "GenerationStats": "dse.measure.generation",
    "LatencyStats": "dse.measure.stats",
    "OfflineStats": "dse.measure.scenarios",
    "PERCENTILES": "dse.measure.stats",
    "PROBES": "dse.measure.telemetry",
    "PairedRatio": "dse.measure.duel_stats",
    "Probe": "dse.measure.telemetry",
    "ProbeResult": "dse.measure.telemetry",
    "ProbeSettings": "dse.measure.telemetry",
    "RunToRun": "dse.measure.run_to_run",
    "THROTTLING_REASONS": "dse.measure.telemetry.nvml_throttle",
    "TIE": "dse.measure.duel_stats",
    "Trace": "dse.measure.telemetry",
    "Verdict": "dse.measure.duel_stats",
    "WARMUP_MAX_S": "dse.measure.duel",
    "WARMUP_SHARE": "dse.measure.duel",
    "Window": "dse.measure.telemetry",
    "calibration_path": "dse.measure.run_to_run",
    "cpu_clocks_mhz": "dse.measure.provenance",
    "disturbed": "dse.measure.quality_labels",
    "drift_pct": "dse.measure.stats",
    "entry_name": "dse.measure.telemetry",
    "estimate": "dse.measure.run_to_run",
    "generation_quality": "dse.measure.generation",
    "halves_shift_pct": "dse.measure.generation",
    "host_provenance": "dse.measure.provenance",
    "load": "dse.measure.run_to_run",
    "make_probe": "dse.measure.telemetry",
    "make_probes": "dse.measure.telemetry",
    "measure_generation": "dse.measure.generation",
    "measure_latency": "dse.measure.harness",
    "measure_offline": "dse.measure.scenarios",
    "measure_sustained": "dse.measure.scenarios",
    "measurement_quality": "dse.measure.quality_labels",
    "model_footprint_mb": "dse.measure.footprint",
    "next_run": "dse.measure.remeasure",
    "quantile_ci": "dse.measure.stats",
    "reason_bits": "dse.measure.telemetry.nvml_throttle",
    "rss_bytes": "dse.measure.footprint",
    "run_duel": "dse.measure.duel",
    "samples_for_ci": "dse.measure.stats",
    "save": "dse.measure.run_to_run",
    "summarize": "dse.measure.stats",
    "timer_overhead_ns": "dse.measure.timers",
    "trim_heap": "dse.measure.footprint",
    "unstable_reason": "dse.measure.generation",
    "verdict": "dse.measure.duel_stats",
    "without_interval": "dse.measure.generation",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
