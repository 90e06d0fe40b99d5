"""The one table of metrics.

Objectives, constraints, result columns and plot axes all come from :data:`METRICS`. A metric's name
is what users write in YAML (``minimize: latency_p99_ms``); its unit appears in every table column
(``latency_p99_ms [ms]``) so a number is never read without it.

A campaign measured by a custom evaluator or a replay table may report metrics of its own, which its
search space declares (``metrics:``). :func:`declare` adds them, by name, beside the built-in table
for the rest of the process; :func:`find_metric` and :func:`metric` look in both.

A metric that was renamed keeps its old name in :data:`RENAMED_METRICS`; what comes in from outside
(YAML, stored studies, replay tables, evaluators) is read through :func:`current_metric_name`.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar


class Direction(enum.Enum):
    """Which way is better. Used for objectives, Pareto dominance and plot axis hints."""

    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


@dataclass(frozen=True)
class MetricSpec:
    """A measured quantity: its name, unit, direction of goodness and meaning.

    The built-in ones are the values of :data:`METRICS` (name -> spec); a search space's own
    are declared with :func:`declare`.

    Attributes:
        name: What users write in YAML (``minimize: latency_p99_ms``).
        unit: The unit, shown in every table column (:attr:`column`).
        direction: Which way is better (:class:`Direction`).
        description: What the metric means.
        infinite_worst: Whether the metric has a defined, infinitely bad value that is a
            result, not a failure (see below).

    Examples:
        >>> from dse import METRICS, MetricSpec
        >>> p99 = METRICS["latency_p99_ms"]
        >>> p99.unit, p99.direction.value, p99.column
        ('ms', 'minimize', 'latency_p99_ms [ms]')
        >>> METRICS["accuracy"].direction.value
        'maximize'
        >>> spec = MetricSpec.from_dict({"name": "zdt_f1", "unit": "1", "direction": "minimize"})
        >>> spec.column, spec.to_dict()["direction"], spec.infinite_worst
        ('zdt_f1 [1]', 'minimize', False)
    """

    name: str
    unit: str
    direction: Direction
    description: str
    infinite_worst: bool = False
    """The metric has a defined, infinitely bad value (``-inf`` when maximised, ``inf`` when
    minimised) that is a result, not a failure: a zero-cost proxy's score of a network that shows
    no signal. See :func:`is_measured`."""

    @property
    def column(self) -> str:
        """The column name in result tables: the metric name followed by its unit."""
        return f"{self.name} [{self.unit}]"

    def to_dict(self) -> dict[str, str]:
        """Plain data, as a study keeps a declared metric among its attributes."""
        return {"name": self.name, "unit": self.unit, "direction": self.direction.value,
                "description": self.description}

    @classmethod
    def from_dict(cls, data: Mapping[str, str]) -> MetricSpec:
        """The spec :meth:`to_dict` gave (``description`` may be absent).

        Args:
            data: ``name``, ``unit``, ``direction`` (``minimize`` or ``maximize``) and
                optionally ``description``.

        Returns:
            The spec, ``infinite_worst`` False.

        Raises:
            KeyError: When ``name``, ``unit`` or ``direction`` is absent.
            ValueError: When ``direction`` is neither ``minimize`` nor ``maximize``.
        """
        return cls(data["name"], data["unit"], Direction(data["direction"]),
                   data.get("description", ""))


def _table(*specs: MetricSpec) -> dict[str, MetricSpec]:
    return {spec.name: spec for spec in specs}


MIN = Direction.MINIMIZE
MAX = Direction.MAXIMIZE

METRICS: dict[str, MetricSpec] = _table(
    MetricSpec("accuracy", "fraction", MAX,
               "Top-1 accuracy of the deployed artifact on the held-out split."),
    MetricSpec("latency_p50_ms", "ms", MIN, "Median latency of one batch, single-stream."),
    MetricSpec("latency_p50_ci_low_ms", "ms", MIN,
               "Lower bound of the 95% confidence interval of the median latency."),
    MetricSpec("latency_p50_ci_high_ms", "ms", MIN,
               "Upper bound of the 95% confidence interval of the median latency."),
    MetricSpec("latency_p90_ms", "ms", MIN, "90th-percentile latency of one batch."),
    MetricSpec("latency_p95_ms", "ms", MIN, "95th-percentile latency of one batch."),
    MetricSpec("latency_p99_ms", "ms", MIN,
               "99th-percentile latency of one batch; reported only with its 95% CI (at least "
               "368 timed calls, more when they are correlated)."),
    MetricSpec("latency_p99_ci_low_ms", "ms", MIN,
               "Lower bound of the 95% confidence interval of the p99 latency."),
    MetricSpec("latency_p99_ci_high_ms", "ms", MIN,
               "Upper bound of the 95% confidence interval of the p99 latency."),
    MetricSpec("latency_p999_ms", "ms", MIN,
               "99.9th-percentile latency of one batch; reported only with its 95% CI (at least "
               "3688 timed calls)."),
    MetricSpec("between_run_cv", "ratio", MIN,
               "Spread of the median latency between the independent blocks a candidate was "
               "timed in (standard deviation of the block medians over their mean): how far the "
               "next run's median may move; needs measurement.blocks >= 2."),
    MetricSpec("latency_mean_ms", "ms", MIN, "Mean latency of one batch."),
    MetricSpec("latency_std_ms", "ms", MIN, "Standard deviation of the latency of one batch."),
    MetricSpec("latency_min_ms", "ms", MIN, "Fastest timed call."),
    MetricSpec("latency_max_ms", "ms", MIN, "Slowest timed call."),
    MetricSpec("latency_iqr_ms", "ms", MIN, "Interquartile range (p75 - p25) of the latency."),
    MetricSpec("first_call_ms", "ms", MIN,
               "Latency of the runner's very first call once built (lazy initialisation, "
               "allocation), kept apart from the samples; a compile step is compile_seconds."),
    MetricSpec("offline_throughput_sps", "samples/s", MAX,
               "Samples per second with several requests in flight at once (offline scenario)."),
    MetricSpec("latency_drift_pct", "%", MIN,
               "Sustained mode: median latency of the last tenth of the run against the first."),
    MetricSpec("throughput_sps", "samples/s", MAX,
               "Samples per second of single-stream calls at the candidate's batch size: batch size "
               "/ median latency (a typical call; tail spikes do not set it)."),
    MetricSpec("interference_cpu_pct", "%", MIN,
               "CPU time other processes used during the timed window, as a share of all the "
               "CPUs' time in it (/proc/stat less this process's own time); a single-threaded hog "
               "on a 2-core machine reads about 50."),
    MetricSpec("machine_slowdown", "ratio", MIN,
               "How much slower a fixed reference loop ran at the timed window's ends (the faster "
               "end) than the fastest this worker has timed it: the machine's own speed, which no "
               "other process shows (speed_canary probe)."),
    MetricSpec("cpu_wait_pct", "%", MIN,
               "Share of the measuring process's runnable time its threads spent waiting for a "
               "CPU in the window (/proc/self/task/*/schedstat): other work taking its CPU."),
    MetricSpec("steal_pct", "%", MIN,
               "Share of the CPUs' time in the window that the hypervisor gave to other guests."),
    MetricSpec("gpu_foreign_processes", "count", MIN,
               "Most other processes holding a compute context on the NVIDIA GPU at once during "
               "the window (NVML's process list, polled; in a container, one listed process "
               "from another PID namespace may be taken for the measuring one)."),
    MetricSpec("gpu_foreign_pct", "%", MIN,
               "Share of the NVIDIA GPU's SMs other processes used during the window, from NVML's "
               "per-process utilization records timed inside it; missing when NVML kept none."),
    MetricSpec("memory_model_mb", "MB", MIN,
               "The model's own host memory: the measuring process's resident memory with the "
               "runner warm and timed, minus it just before the runner was built, plus weights "
               "the runner uses from memory already resident (dse.measure.footprint). GPU memory "
               "is cuda_allocated_peak_mb / gpu_memory_used_peak_mb."),
    MetricSpec("process_rss_peak_mb", "MB", MIN,
               "Peak resident memory (RSS) of the whole measuring process over the measurement "
               "window: Python, the runtimes and their libraries as well as the model, hundreds "
               "of MB whatever the model; the model's own memory is memory_model_mb. Named "
               "memory_peak_mb before."),
    MetricSpec("cuda_allocated_peak_mb", "MB", MIN,
               "Peak memory allocated by the framework on the GPU over the window."),
    MetricSpec("gpu_memory_used_peak_mb", "MB", MIN,
               "Peak GPU memory in use (NVML, whole device) over the window."),
    MetricSpec("energy_per_inference_mj", "mJ", MIN,
               "Energy per inferred sample over the window: from the energy counter where the "
               "device has one, else from integrated power."),
    MetricSpec("power_mean_w", "W", MIN, "Mean power over the measurement window."),
    MetricSpec("temperature_peak_c", "°C", MIN, "Highest temperature read over the window."),
    MetricSpec("throttled_fraction", "fraction", MIN,
               "Fraction of the window during which the device reported throttling."),
    MetricSpec("clock_drop_pct", "%", MIN,
               "How far the mean compute clock over the window sat below its maximum."),
    MetricSpec("model_size_mb", "MB", MIN, "Size of the deployed artifact on disk."),
    MetricSpec("params_m", "M", MIN, "Number of model parameters, in millions."),
    MetricSpec("macs_m", "M", MIN,
               "Multiply-accumulates per inferred sample, from the ONNX graph (conv, gemm, "
               "matmul), in millions."),
    MetricSpec("flops_m", "MFLOP", MIN,
               "FLOPs per inferred sample, from the ONNX graph: 2 per MAC plus the elementwise, "
               "normalisation and softmax work (dse.models.op_costs)."),
    MetricSpec("weight_mb", "MB", MIN,
               "Bytes of the deployed graph's weights at their stored dtype."),
    MetricSpec("activation_mb", "MB", MIN,
               "Bytes of the intermediate tensors one call writes at the candidate's batch size."),
    MetricSpec("arithmetic_intensity", "FLOP/B", MAX,
               "FLOPs of one call per byte of its weights, activations, inputs and outputs."),
    MetricSpec("proxy_naswot", "score", MAX,
               "NASWOT (Mellor et al. 2021): log det of the untrained network's activation-code "
               "kernel on 64 training samples, computed exactly; higher predicts better accuracy. "
               "-inf when the kernel is singular (two samples share an activation code, or the "
               "codes are otherwise affinely dependent): the network cannot separate the batch.",
               infinite_worst=True),
    MetricSpec("proxy_synflow", "log-score", MAX,
               "Natural log of synflow (Tanaka et al. 2020) of the untrained, linearised network; "
               "data-free. -inf when no flow reaches the output.", infinite_worst=True),
    MetricSpec("proxy_grad_norm", "score", MAX,
               "Sum of the weight gradients' L2 norms of the cross-entropy at initialisation, on "
               "one minibatch of 64 training samples."),
    MetricSpec("achieved_gflops", "GFLOP/s", MAX,
               "Graph FLOPs of one call divided by its median latency: the rate the device "
               "reached, for the roofline view."),
    MetricSpec("max_abs_error", "logit", MIN,
               "Largest absolute difference of the deployed runner's outputs from the fp32 torch "
               "reference on a fixed validation batch."),
    MetricSpec("rel_l2_error", "fraction", MIN,
               "Relative L2 error ||y - y_ref|| / ||y_ref|| of the deployed outputs against the "
               "fp32 torch reference on the validation batch."),
    MetricSpec("top1_agreement", "fraction", MAX,
               "Share of the validation batch where the deployed runner's top-1 class equals the "
               "fp32 torch reference's."),
    MetricSpec("compile_seconds", "s", MIN,
               "Time the runtime spent compiling on the device (torch.compile, engine builds), "
               "cache hits excluded."),
    MetricSpec("tuning_seconds", "s", MIN,
               "Time an auto-tuner (TVM's MetaSchedule) spent searching schedules for this "
               "candidate on its device; a build that reuses the device's cached tuning reports "
               "what that tuning cost."),
    MetricSpec("build_seconds", "s", MIN,
               "Wall time to build the artifact (export, quantization, compile), cache hits excluded."),
    MetricSpec("train_seconds", "s", MIN,
               "Wall time of the accuracy training for this architecture (0 when cached)."),
    MetricSpec("ttft_p50_ms", "ms", MIN,
               "Median time to first token of a request (generative models): the prefill of "
               "its prompts and every sequence's first token."),
    MetricSpec("ttft_p50_ci_low_ms", "ms", MIN,
               "Lower bound of the 95% confidence interval of ttft_p50_ms."),
    MetricSpec("ttft_p50_ci_high_ms", "ms", MIN,
               "Upper bound of the 95% confidence interval of ttft_p50_ms."),
    MetricSpec("ttft_p99_ms", "ms", MIN,
               "99th-percentile time to first token of a request (generative models)."),
    MetricSpec("ttft_p99_ci_low_ms", "ms", MIN,
               "Lower bound of the 95% confidence interval of ttft_p99_ms."),
    MetricSpec("ttft_p99_ci_high_ms", "ms", MIN,
               "Upper bound of the 95% confidence interval of ttft_p99_ms."),
    MetricSpec("tpot_p50_ms", "ms", MIN,
               "Median time per output token after the first, the inter-token latency of "
               "a sequence (generative models)."),
    MetricSpec("tpot_p50_ci_low_ms", "ms", MIN,
               "Lower bound of the 95% confidence interval of tpot_p50_ms."),
    MetricSpec("tpot_p50_ci_high_ms", "ms", MIN,
               "Upper bound of the 95% confidence interval of tpot_p50_ms."),
    MetricSpec("tpot_p99_ms", "ms", MIN,
               "99th-percentile time per output token after the first (generative models)."),
    MetricSpec("tpot_p99_ci_low_ms", "ms", MIN,
               "Lower bound of the 95% confidence interval of tpot_p99_ms."),
    MetricSpec("tpot_p99_ci_high_ms", "ms", MIN,
               "Upper bound of the 95% confidence interval of tpot_p99_ms."),
    MetricSpec("e2e_p50_ms", "ms", MIN,
               "Median whole-request latency: prefill and every output token (generative "
               "models)."),
    MetricSpec("e2e_p50_ci_low_ms", "ms", MIN,
               "Lower bound of the 95% confidence interval of e2e_p50_ms."),
    MetricSpec("e2e_p50_ci_high_ms", "ms", MIN,
               "Upper bound of the 95% confidence interval of e2e_p50_ms."),
    MetricSpec("e2e_p99_ms", "ms", MIN,
               "99th-percentile whole-request latency (generative models)."),
    MetricSpec("e2e_p99_ci_low_ms", "ms", MIN,
               "Lower bound of the 95% confidence interval of e2e_p99_ms."),
    MetricSpec("e2e_p99_ci_high_ms", "ms", MIN,
               "Upper bound of the 95% confidence interval of e2e_p99_ms."),
    MetricSpec("decode_tokens_per_s", "tokens/s", MAX,
               "Output tokens per second of one sequence while decoding (1000 / tpot_p50_ms)."),
    MetricSpec("device_decode_tokens_per_s", "tokens/s", MAX,
               "Output tokens per second of the whole batch while decoding (batch size x "
               "decode_tokens_per_s)."),
    MetricSpec("prefill_tokens_per_s", "tokens/s", MAX,
               "Prompt tokens per second of the batch's prefill (over ttft_p50_ms)."),
    MetricSpec("requests_per_s", "requests/s", MAX,
               "Requests completed per second, back to back, over the timed window."),
    MetricSpec("goodput", "fraction", MAX,
               "Share of the timed requests within the workload's SLO (workload.slo): time to "
               "first token and the request's own time per output token both within their "
               "limits."),
    MetricSpec("kv_cache_mb", "MB", MIN,
               "The KV cache's memory at the workload's longest context (prompt plus output "
               "tokens, every sequence of the batch), read from the runtime's own cache."),
    MetricSpec("energy_per_token_mj", "mJ", MIN,
               "Energy per output token over the timed requests (needs a power sensor)."),
    MetricSpec("perplexity", "ratio", MIN,
               "Perplexity of the deployed format on dse's held-out text (exp of the mean "
               "next-token negative log-likelihood)."),
    MetricSpec("perplexity_ratio", "ratio", MIN,
               "Perplexity over the fp32 reference's on the same tokens (1 = unchanged; a "
               "constraint such as perplexity_ratio <= 1.01 keeps formats within 1%)."),
    MetricSpec("quality_retained", "ratio", MAX,
               "The fp32 reference's perplexity over the deployed format's: the share of the "
               "reference's quality kept (1 = unchanged; MLPerf's accuracy gate is "
               "quality_retained >= 0.99)."),
    MetricSpec("token_agreement", "fraction", MAX,
               "Share of held-out positions whose most likely next token is the fp32 "
               "reference's."),
    MetricSpec("token_kl", "nats", MIN,
               "Mean KL divergence of the next-token distribution from the fp32 reference's "
               "on the held-out text."),
    MetricSpec("greedy_match", "fraction", MAX,
               "Share of the greedy output tokens of the workload's prompts that equal the fp32 "
               "reference's."),
)


# Metrics renamed since files were first written with their old name: old name -> current name.
# Every name that comes in from outside (search-space YAML, a study's attributes and trials, a
# replay table's columns, an evaluator's result) is read through current_metric_name, so what was
# written before a rename still validates, loads and reports under the current name.
RENAMED_METRICS: dict[str, str] = {
    # The whole process's RSS, not the model's memory (that is memory_model_mb).
    "memory_peak_mb": "process_rss_peak_mb",
}


def current_metric_name(name: str) -> str:
    """The current name of metric ``name``: itself, or the name it was renamed to
    (:data:`RENAMED_METRICS`)."""
    return RENAMED_METRICS.get(name, name)


def former_metric_name(name: str) -> str:
    """The name metric ``name`` had before it was renamed (the last entry of
    :data:`RENAMED_METRICS` naming it), or ``name`` itself: what files written before the rename
    hold."""
    former = [old for old, new in RENAMED_METRICS.items() if new == name]
    return former[-1] if former else name


V = TypeVar("V")


def current_metric_keys(values: Mapping[str, V]) -> dict[str, V]:
    """``values`` (metric name -> anything) with every key under its current name
    (:func:`current_metric_name`); where a mapping holds a metric under both names, the value under
    the current name wins."""
    out: dict[str, V] = {}
    for key, value in values.items():
        name = current_metric_name(str(key))
        if name != key and name in values:
            continue
        out[name] = value
    return out


def current_constraint_text(text: str) -> str:
    """A constraint as written ``<metric> <op> <value>`` (``memory_peak_mb <= 4096``), with its
    metric under its current name (``process_rss_peak_mb <= 4096``)."""
    name, space, rest = text.partition(" ")
    return f"{current_metric_name(name)}{space}{rest}"


# The values a built-in metric can take, where the quantity itself bounds them: a constraint
# outside its range can never hold. Metrics not listed (temperature, drift, proxies) are unbounded.
_NON_NEGATIVE_UNITS = frozenset({"ms", "MB", "mJ", "W", "s", "M", "MFLOP", "GFLOP/s", "samples/s",
                                 "FLOP/B", "logit", "ratio", "count", "tokens/s", "requests/s",
                                 "nats"})
_FRACTIONS = frozenset({"accuracy", "throttled_fraction", "top1_agreement", "token_agreement",
                        "greedy_match", "goodput"})


def value_range(name: str) -> tuple[float, float]:
    """The smallest and largest value metric ``name`` can take ((-inf, inf) when unbounded)."""
    spec = METRICS.get(name)
    if name in _FRACTIONS:
        return 0.0, 1.0
    if spec is not None and (spec.unit in _NON_NEGATIVE_UNITS or name == "rel_l2_error"):
        return 0.0, float("inf")
    return float("-inf"), float("inf")


def is_measured(name: str, value: float) -> bool:
    """Whether ``value`` is a measurement of metric ``name``: a finite number, or the metric's
    defined infinitely bad value (``-inf`` for a maximised metric marked ``infinite_worst``,
    ``inf`` for a minimised one). NaN, and any other infinity, is no measurement."""
    if math.isfinite(value):
        return True
    spec = find_metric(name)
    if spec is None or not spec.infinite_worst or math.isnan(value):
        return False
    return (value < 0) == (spec.direction is Direction.MAXIMIZE)


# Metrics declared by the search spaces of this process's campaigns (see the module docstring).
_DECLARED: dict[str, MetricSpec] = {}
_COLUMN_RE = re.compile(r"^(?P<name>.+) \[(?P<unit>[^\[\]]*)\]$")


def declare(specs: Iterable[MetricSpec]) -> None:
    """Make declared metrics known by name, beside the built-in table, for the rest of the process.

    Declaring the same metric again is harmless. Raises ValueError for a built-in name, or for a
    name already declared with another unit or direction (two campaigns that disagree on what a
    metric means cannot share one process's tables).
    """
    specs = list(specs)
    for spec in specs:
        if spec.name in METRICS:
            raise ValueError(f"metric {spec.name!r} is built in; declare only new metrics")
        if spec.name in RENAMED_METRICS:
            raise ValueError(f"metric {spec.name!r} is the former name of the built-in "
                             f"{RENAMED_METRICS[spec.name]!r}; declare only new metrics")
        known = _DECLARED.get(spec.name)
        if known is not None and (known.unit, known.direction) != (spec.unit, spec.direction):
            raise ValueError(
                f"metric {spec.name!r} is declared already as [{known.unit}] "
                f"{known.direction.value}, now as [{spec.unit}] {spec.direction.value}")
    for spec in specs:
        _DECLARED.setdefault(spec.name, spec)


def find_metric(name: str) -> MetricSpec | None:
    """The spec of a built-in or declared metric, or None."""
    return METRICS.get(name) or _DECLARED.get(name)


def metric(name: str) -> MetricSpec:
    """The spec of ``name``; raises KeyError naming the known metrics when it does not exist."""
    spec = find_metric(name)
    if spec is None:
        known = sorted(METRICS) + sorted(_DECLARED)
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(known)}")
    return spec


def name_of_column(column: str) -> str:
    """The metric name in a column heading ``name [unit]`` (inverse of :attr:`MetricSpec.column`);
    a heading without a unit is the name itself."""
    match = _COLUMN_RE.match(column)
    return match["name"] if match else column
