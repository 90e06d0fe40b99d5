"""The experiment's models: sampler, warm start, screening, baseline, budget, interference policy,
measurement protocol, farm and the ``ExperimentSpec`` that ties a search space to its devices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from dse.core import SpecError
from dse.spec.duel_models import DuelSpec
from dse.spec.fields import (
    GENERATION_PERCENTILE_METRIC,
    NAME_PATTERN,
    PERCENTILE_METRIC,
    BackendName,
    EvaluatorRef,
    PercentileName,
    Precision,
    SamplerName,
    Scalar,
    Strict,
)
from dse.spec.sampler_settings import checked_settings, settings_schema


class SamplerSpec(Strict):
    """The Optuna sampler that proposes candidates: its name and seed, and as further keys of the
    same block the chosen sampler's own settings (`dse list samplers`), e.g. {name: tpe, seed: 1,
    startup_trials: 5}."""

    # The settings are validated by the sampler's declared ``settings_model``
    # (dse.plugins.samplers), not by this model: validating the block keeps them as written
    # (``settings``), so an experiment with a key its sampler refuses still loads and every other
    # check still runs in the same pass; the refusal is a line of ``checked_options``, which
    # ``dse validate`` and loading an experiment report (dse.spec.cross_checks). ``options`` is
    # what a sampler's builder reads.

    name: SamplerName = Field(
        default="surrogate",
        description="Sampler: one of the registered samplers (`dse list samplers`); default "
                    "surrogate. The block's other keys beside seed are the chosen sampler's own "
                    "settings.")
    seed: int = Field(default=0, ge=0, description="Sampler seed.")
    # The block's keys beside name and seed, as written: checked against the sampler's settings
    # model by checked_options, never by this model's own validation (see above).
    _settings: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_settings(cls, data: Any, handler: ModelWrapValidatorHandler[SamplerSpec]) -> SamplerSpec:
        if not isinstance(data, Mapping):
            return handler(data)
        own = {key: value for key, value in data.items() if key in cls.model_fields}
        spec = handler(own)
        spec._settings = {str(key): value for key, value in data.items()
                          if key not in cls.model_fields}
        return spec

    @model_serializer(mode="wrap")
    def _with_settings(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Dumped as written, so a dump validates back to the same block.
        dumped: dict[str, Any] = handler(self)
        return {**dumped, **self._settings}

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> Any:
        # Editor completion of the settings: every registered sampler's, each saying which
        # samplers take it (which keys the chosen one takes is checked_options' business).
        json_schema = handler(schema)
        handler.resolve_ref_schema(json_schema)["properties"].update(settings_schema())
        return json_schema

    @property
    def settings(self) -> dict[str, Any]:
        """The block's keys beside ``name`` and ``seed``, as written (not yet checked)."""
        return dict(self._settings)

    @property
    def options(self) -> BaseModel | None:
        """The chosen sampler's settings, an instance of its ``settings_model`` (None for a sampler
        that takes none): what its builder reads.

        Raises:
            SpecError: a key the sampler does not take, or a value it refuses (one line each, as
                :meth:`checked_options` words them).
        """
        options, problems = self.checked_options()
        if problems:
            raise SpecError(problems)
        return options

    def checked_options(self) -> tuple[BaseModel | None, list[str]]:
        """The chosen sampler's validated settings (None when it takes none, or when a value is
        refused), and one line per problem (``sampler.KEY: ...``, the file is the caller's to add):
        a key the sampler does not take, a value its settings model refuses."""
        return checked_settings(self.name, self._settings)


_WARM_START_WORDS = {"auto": {}, "off": {"enabled": False}}


class WarmStartSpec(Strict):
    """Seeding a device's new study with the feasible Pareto front of another device's study of
    the campaign (in the same storage). Written ``auto``, ``off``, or ``{from: <profile>,
    max_trials: N}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True,
                              validate_by_alias=True)

    enabled: bool = Field(default=True, description="Seed new studies at all (off: false).")
    source: str | None = Field(
        default=None, alias="from", pattern=NAME_PATTERN,
        description="Device profile whose study seeds the others (none: the study with the most "
                    "completed trials).")
    max_trials: int | None = Field(
        default=None, ge=1,
        description="At most this many seeded trials per study (none: half the budget).")

    @model_validator(mode="before")
    @classmethod
    def _words(cls, data: object) -> object:
        # YAML 1.1 reads a bare `off` as false and `on` as true.
        if isinstance(data, bool):
            data = "auto" if data else "off"
        if isinstance(data, str):
            if data not in _WARM_START_WORDS:
                raise ValueError(f"warm_start must be auto, off or {{from: <profile>, "
                                 f"max_trials: N}}, got {data!r}")
            return _WARM_START_WORDS[data]
        return data

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> Any:
        return {"anyOf": [{"enum": list(_WARM_START_WORDS), "type": "string"}, handler(schema)]}


class ScreeningSpec(Strict):
    """Multi-fidelity measurement: a short screening timing for every candidate; the full
    protocol only for those that could still enter the device's noise-aware front."""

    enabled: bool = Field(default=False, description="Screen candidates before the full protocol.")
    target_rel_ci: float = Field(
        default=0.05, gt=0, lt=1,
        description="Screening stops once the 95% CI of the median is within ± this fraction.")
    max_seconds: float = Field(default=0.5, gt=0,
                               description="Most seconds of screening timing per candidate.")
    margin: float = Field(
        default=0.05, ge=0, lt=1,
        description="Optimism for metrics measured without a confidence interval (memory, "
                    "energy, throughput): a screened value counts as this fraction better.")


class SearchSpec(Strict):
    """How the search spends device time across devices and measurement fidelities."""

    warm_start: WarmStartSpec = Field(
        default_factory=WarmStartSpec,
        description="auto, off, or {from: <profile>, max_trials: N}: seed a device's new study "
                    "with another device's front.")
    screening: ScreeningSpec = Field(default_factory=ScreeningSpec,
                                     description="Screening measurement before the full one.")


class BaselineSpec(Strict):
    """The user's current configuration: measured first on every device that can run it, and
    the reference every trial is reported against. It names a value for each parameter of the
    search space, as the space groups them; every value must lie in the space."""

    arch: dict[str, Scalar] = Field(
        default_factory=dict,
        description="A value for every architecture parameter of the space (spaces with a model).")
    backend: BackendName | None = Field(
        default=None, description="Backend of the current deployment (spaces with a deployment).")
    precision: Precision | None = Field(
        default=None, description="Precision of the current deployment (spaces with a deployment).")
    batch_size: int | None = Field(
        default=None, ge=1, le=65536,
        description="Batch size of the current deployment (spaces with a deployment).")
    knobs: dict[str, Scalar] = Field(
        default_factory=dict,
        description="A value for every knob the space searches for this backend.")
    params: dict[str, Scalar] = Field(
        default_factory=dict,
        description="A value for every free parameter of the space (spaces with parameters:).")


class BudgetSpec(Strict):
    """When the campaign stops."""

    trials: int = Field(ge=1, le=1_000_000,
                        description="Distinct candidates to measure to an ok result per device "
                                    "(a repeat of a measured candidate is reused, not counted).")
    max_failed: int = Field(default=50, ge=1,
                            description="Stop, with an error, after this many failed or "
                                        "infeasible trials in one run.")
    trial_timeout_s: float = Field(default=600.0, gt=0,
                                   description="A trial still running after this is failed.")
    stop_after_same_failure: int = Field(
        default=3, ge=0,
        description="Stop, with an error naming the reason, when the first this many distinct "
                    "candidates the farm measured in a run all fail for the same reason and none "
                    "completed (a model that cannot work); 0: never.")


class InterferenceSpec(Strict):
    """What a measurement window may share with other work on its device, and what to do when it
    shared more (figures from the ``cpu_interference`` probe, which runs in every window, and on
    an NVIDIA GPU from the ``gpu_interference`` probe)."""

    max_foreign_cpu_pct: float = Field(
        default=20.0, ge=0, le=100, allow_inf_nan=False,
        description="Most CPU time other processes may use in a window, as a share of all the "
                    "CPUs' time in it (interference_cpu_pct), once they took CPU from the "
                    "measurement (max_cpu_wait_pct).")
    max_cpu_wait_pct: float = Field(
        default=5.0, ge=0, le=100, allow_inf_nan=False,
        description="Other processes beyond max_foreign_cpu_pct disturb a window only when the "
                    "measuring process's threads also waited for a CPU longer than this share "
                    "of their runnable time (cpu_wait_pct): work on free cores beside the "
                    "measurement is not interference.")
    max_steal_pct: float = Field(
        default=5.0, ge=0, le=100, allow_inf_nan=False,
        description="Most time the hypervisor may give the CPUs to other guests (steal_pct).")
    max_gpu_foreign_pct: float = Field(
        default=5.0, ge=0, le=100, allow_inf_nan=False,
        description="Most of the NVIDIA GPU's SMs other processes may use in a window "
                    "(gpu_foreign_pct).")
    max_gpu_foreign_processes: int = Field(
        default=0, ge=0,
        description="Most other processes that may hold a compute context on the NVIDIA GPU at "
                    "once during a window (gpu_foreign_processes).")
    max_slowdown: float = Field(
        default=1.5, ge=0, le=100, allow_inf_nan=False,
        description="On a CPU device, a window is disturbed too when the machine itself ran "
                    "this many times slower than its best at both of the window's ends "
                    "(machine_slowdown: a reference loop timed when it opens and closes, "
                    "against the fastest the worker has timed) — a slow spell of a virtual "
                    "machine or its host, which no other process shows. 0: never.")
    action: Literal["remeasure", "flag", "ignore"] = Field(
        default="remeasure",
        description="remeasure: wait, then time the candidate again, up to max_remeasures times, "
                    "and flag it disturbed if it never ran clean; flag: flag it at once; ignore: "
                    "record the figures only.")
    max_remeasures: int = Field(
        default=2, ge=0, le=10,
        description="Re-measurements at most of a window that was disturbed or unstable (its "
                    "halves' medians more than 5% apart), with action remeasure.")
    wait_s: float = Field(default=1.0, ge=0, le=60, allow_inf_nan=False,
                          description="Seconds to wait before re-measuring, for the other work "
                                      "to pass.")


#: The relative half-width each percentile's interval must reach by default (``precision``):
#: what separates a shared machine's ordinary runs from broken ones — quiet runs meet these after
#: at most one re-measurement, the tails that mislead a front miss them by far (figures:
#: docs/benchmarks.md, "The default precision targets"). A dedicated device can be held tighter.
DEFAULT_PRECISION: dict[PercentileName, float] = {"p50": 0.25, "p90": 0.35, "p95": 0.4,
                                                  "p99": 0.5, "p999": 0.75}


class MeasureSpec(Strict):
    """How each candidate is timed: adaptive single-stream latency, optional offline and
    sustained runs."""

    target_rel_ci: float = Field(
        default=0.01, gt=0, lt=1,
        description="Stop once the 95% CI of the median is within ± this fraction of it.")
    min_iters: int = Field(default=30, ge=1, description="Fewest timed iterations (a floor).")
    max_iters: int = Field(default=1_000_000, ge=1, description="Most timed iterations (a cap).")
    min_seconds: float = Field(default=0.2, ge=0, allow_inf_nan=False,
                               description="Fewest seconds of timing.")
    max_seconds: float = Field(
        default=5.0, gt=0, allow_inf_nan=False,
        description="Most seconds of timing spent on precision (the median's target_rel_ci and "
                    "the percentiles' precision); a run still short of its sample floors goes "
                    "on, up to max_extension times this.")
    max_extension: float = Field(
        default=4.0, ge=1, le=100, allow_inf_nan=False,
        description="A run that has not reached its sample floors (the calls a percentile's "
                    "interval needs: p99 368 independent ones) within max_seconds goes on up to "
                    "this multiple of max_seconds, as on a slower machine it must; one still "
                    "short is underpowered: re-measured once, kept with its values, off the "
                    "front. 1: never extend.")
    precision: dict[PercentileName, float] = Field(
        default_factory=lambda: dict(DEFAULT_PRECISION),
        description="The relative half-width each percentile's 95% interval must reach for a "
                    "trial to count as measured precisely (the larger side, relative to the "
                    "value, from the run itself before any run-to-run floor), for the "
                    "percentiles in `percentiles`; a percentile left out keeps its default "
                    f"({', '.join(f'{k} {v:g}' for k, v in DEFAULT_PRECISION.items())}). The "
                    "run aims for it within max_seconds; a trial that misses it is re-measured "
                    "once with a longer window and, if still short, is imprecise: kept, shown "
                    "apart, off the front.")
    warmup_max_seconds: float = Field(
        default=1.0, ge=0, allow_inf_nan=False,
        description="Cap on the warm-up that runs until the median settles.")
    percentiles: list[PercentileName] | None = Field(
        default=None,
        description="Latency percentiles each run must give a 95% confidence interval (a floor "
                    "on samples: p99 needs at least 368, p999 3688); a percentile without one "
                    "is reported missing, never as a value. Default: p50 and every percentile "
                    "an objective or constraint uses.")
    blocks: int = Field(
        default=3, ge=1, le=50,
        description="Independent blocks each candidate is timed in, each warmed up afresh and "
                    "given an equal share of the floors and caps; every reported interval also "
                    "holds how much the blocks disagree (between_run_cv), which is what the next "
                    "run sees. 1: one block, within-run intervals only.")
    block_gap_s: float = Field(
        default=0.0, ge=0, le=60, allow_inf_nan=False,
        description="Seconds between blocks, spent calling the candidate untimed (the device stays "
                    "under the same load): spreads the blocks in time, so the intervals also hold "
                    "what drifts over that time, at that cost per candidate.")
    timer: Literal["host", "cuda"] = Field(
        default="host",
        description="host: the host's monotonic clock around each call (a runner returns host "
                    "memory, so a sample is end to end: copies, launches, device work). cuda: "
                    "CUDA events around each call, read on the GPU's own clock (finer than the "
                    "host's; for CUDA devices only, refused for the others at validate time).")
    run_to_run: Literal["auto", "off"] = Field(
        default="auto",
        description="auto: where `dse calibrate` measured this device's run-to-run variation, "
                    "every interval is at least as wide as it (what a later run of the same "
                    "candidate would see); off: intervals from the run alone.")
    offline_concurrency: int = Field(
        default=0, ge=0, le=256,
        description="Requests kept in flight for the offline throughput run (0: no such run).")
    offline_seconds: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                                   description="Length of the offline throughput run.")
    interference: InterferenceSpec = Field(
        default_factory=InterferenceSpec,
        description="Detecting other work during a window, and re-measuring or flagging it.")
    non_ok_on_front: bool = Field(
        default=False,
        description="Let trials whose measurement is not clean (measurement_quality "
                    "disturbed, underpowered, unstable or imprecise) onto the reported front; by default "
                    "they are kept in every table, shown apart, and off the front.")
    second_looks: int = Field(
        default=8, ge=0, le=1000,
        description="Trials at most, per device, measured once more at the end of its search "
                    "because their measurement was not clean (disturbed, unstable, underpowered "
                    "or imprecise: the other work that disturbed them has often passed by then), "
                    "the most promising first. A second look is a trial of its own "
                    "(second_look_of names the first); a clean one competes for the front in "
                    "the first's place, which stays in the tables. 0: none; none either with "
                    "non_ok_on_front, where labels keep no trial off the front.")
    second_looks_near_front: float = Field(
        default=2.0, ge=1.0, le=10.0, allow_inf_nan=False,
        description="Clean trials this close to the front get a second look too, after those "
                    "not measured cleanly and within second_looks: those that would be on the "
                    "front were their latency, throughput and energy objectives this many times "
                    "better. A machine can run a whole window slow with nothing to see; of a "
                    "candidate's two clean looks the faster competes, and the slower stays in "
                    "the tables (slower_than_first). 1: only trials not measured cleanly.")
    sustained_seconds: float = Field(
        default=0.0, ge=0, allow_inf_nan=False,
        description="Run the candidate this long without pause and report latency drift beside "
                    "thermal telemetry (0: no sustained run).")
    duels: DuelSpec = Field(
        default_factory=DuelSpec,
        description="Paired duels of close calls at the end of each device's search: two "
                    "candidates on or near the front whose intervals overlap on a timing "
                    "objective, timed again in alternating short blocks, their order decided "
                    "from the paired ratio; the fronts use the verdict.")

    @field_validator("precision", mode="after")
    @classmethod
    def _precision_with_defaults(
            cls, value: dict[PercentileName, float]) -> dict[PercentileName, float]:
        for name, target in value.items():
            if not 0 < target < 100:
                raise ValueError(f"precision of {name} must lie in (0, 100) (a relative "
                                 f"half-width: 0.1 is ±10%), got {target}")
        return {**DEFAULT_PRECISION, **value}

    @model_validator(mode="after")
    def _ordered(self) -> MeasureSpec:
        if self.min_iters > self.max_iters:
            raise ValueError(f"`min_iters <= max_iters` must hold, got {self.min_iters}, "
                             f"{self.max_iters}")
        if self.min_seconds > self.max_seconds:
            raise ValueError(f"`min_seconds <= max_seconds` must hold, got {self.min_seconds}, "
                             f"{self.max_seconds}")
        if self.blocks > self.max_iters:
            raise ValueError(f"`blocks <= max_iters` must hold, got {self.blocks}, "
                             f"{self.max_iters}")
        if not self.percentiles:
            return self
        # Here, and only for percentiles named: the statistics import scipy (half a second),
        # which loading a spec should not.
        from dse.util import percentile_quantile, samples_for_ci

        for name in self.percentiles:
            needed = samples_for_ci(percentile_quantile(name))
            if needed > self.max_iters:
                raise ValueError(f"max_iters = {self.max_iters} can never give {name} a 95% "
                                 f"confidence interval (that needs at least {needed} samples)")
        return self

    def for_metrics(self, names: Sequence[str]) -> MeasureSpec:
        """This spec with :attr:`percentiles` filled in where unset: p50 and every latency
        percentile (or its CI bound) among ``names``, the campaign's objectives and constraints
        (a generative model's too: ``ttft_p99_ms`` asks for p99)."""
        if self.percentiles is not None:
            return self
        used: list[PercentileName] = ["p50"]
        for name in names:
            match = PERCENTILE_METRIC.match(name) or GENERATION_PERCENTILE_METRIC.match(name)
            if match and match["p"] not in used:
                used.append(match["p"])  # type: ignore[arg-type]
        return self.model_copy(update={"percentiles": used})

    def required_quantiles(self) -> tuple[float, ...]:
        """The quantiles of :attr:`percentiles` (p50 alone where none are set)."""
        from dse.util import percentile_quantile

        return tuple(percentile_quantile(name) for name in self.percentiles or ["p50"])

    def required_precision(self) -> dict[str, float]:
        """The precision each percentile of :attr:`percentiles` must reach (p50 alone where
        none are set), by percentile name."""
        names: list[PercentileName] = self.percentiles or ["p50"]
        return {str(name): self.precision[name] for name in names}

    def latency_arguments(self) -> dict[str, Any]:
        """The keyword arguments of ``dse.measure_latency`` that this protocol sets: one mapping
        from the YAML to the harness, for every caller that times a candidate under it."""
        from dse.util import percentile_quantile

        return {"target_rel_ci": self.target_rel_ci, "min_iters": self.min_iters,
                "max_iters": self.max_iters, "min_seconds": self.min_seconds,
                "max_seconds": self.max_seconds, "warmup_max_seconds": self.warmup_max_seconds,
                "required_quantiles": self.required_quantiles(), "blocks": self.blocks,
                "block_gap_s": self.block_gap_s, "timer": self.timer,
                "max_extension": self.max_extension,
                "precision": {percentile_quantile(name): target
                              for name, target in self.required_precision().items()}}


class FarmSpec(Strict):
    """Where the devices are and how the farm treats faults."""

    address: str | None = Field(
        default=None,
        description="Ray head address (HOST:PORT) of a device farm; none: an embedded local Ray. "
                    "`dse run --address` overrides it.")
    max_retries: int = Field(
        default=2, ge=0, le=20,
        description="Times a trial whose device worker or node died is re-dispatched to another "
                    "device of the same profile before it is failed.")
    quarantine_after: int = Field(
        default=3, ge=1, le=1000,
        description="A device whose trials fail this many times in a row is quarantined: it gets "
                    "no more trials in this campaign.")


class ExperimentSpec(Strict):
    """A campaign: a search space on one or more devices, with a sampler and a budget."""

    name: str = Field(pattern=NAME_PATTERN, description="Campaign name; names its run folder.")
    description: str = Field(default="", description="What the campaign is for.")
    search_space: Path = Field(description="Search-space YAML, relative to this file.")
    devices: list[Path] = Field(min_length=1,
                                description="Hardware-profile YAMLs, relative to this file.")
    evaluator: EvaluatorRef | None = Field(
        default=None,
        description="A custom evaluator, module:function, that measures the candidates of every "
                    "device but replay ones instead of the farm: function(candidate) -> "
                    "{metric: value}. The module must be importable.")
    sampler: SamplerSpec = Field(default_factory=SamplerSpec, description="Sampler settings.")
    search: SearchSpec = Field(default_factory=SearchSpec,
                               description="Warm start across devices and screening.")
    baseline: BaselineSpec | None = Field(
        default=None,
        description="The current configuration, measured first and reported against (none: no "
                    "baseline).")
    budget: BudgetSpec = Field(description="Trial budget.")
    measurement: MeasureSpec = Field(default_factory=MeasureSpec,
                                     description="Latency sampling settings.")
    farm: FarmSpec = Field(default_factory=FarmSpec,
                           description="Device farm address and fault handling.")
    storage: str = Field(
        default="sqlite",
        description="Where the campaign's study lives: sqlite (study.db in the run folder, the "
                    "default), journal (Optuna's journal file, study.journal in the run folder), "
                    "postgresql://USER@HOST[:PORT]/DATABASE (a server shared by a team; the "
                    "password from PGPASSWORD or ~/.pgpass, never in this file), or env:NAME (an "
                    "environment variable holding such a URL).")
    runs_dir: Path = Field(default=Path("runs"),
                           description="Where run folders go, relative to this file.")
    dashboards_dir: Path | None = Field(
        default=None,
        description="Where the dashboard (<name>.html) and the index of every campaign's page go, "
                    "relative to this file. Default: the project's dashboards/ (the folder above "
                    "this file's when this file is in experiments/, else dashboards/ beside this "
                    "file), so a campaign never writes outside its project.")
    cache_dir: Path | None = Field(
        default=None,
        description="Build cache (trained weights, artifacts), relative to this file; campaigns "
                    "and farm workers that name the same folder share it. Default: the run "
                    "folder's cache/.")

    @field_validator("storage")
    @classmethod
    def _storage_form(cls, value: str) -> str:
        from dse.storage import STORAGE_FORMS, setting_problem

        problem = setting_problem(value)
        if problem is not None:
            raise ValueError(f"{problem}; allowed: {STORAGE_FORMS}")
        return value
