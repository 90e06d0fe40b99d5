"""dse's own samplers, each Optuna's, registered by name (:mod:`dse.plugins.samplers`).

Constraints reach them without a ``constraints_func``: the loop stores each constraint with
``trial.set_constraint`` and Optuna 5's TPE, NSGA-II, NSGA-III and GP samplers read
``trial.constraints`` themselves. (``constraints_func`` is deprecated in Optuna 5, and its
``after_trial`` would store a second, unnamed copy of every constraint beside the named one.)
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from dse.plugins import SAMPLERS, SamplerDeclaration, SamplerSettings, register_sampler

if TYPE_CHECKING:
    from collections.abc import Sequence

    import optuna

    from dse.search.samplers.surrogate import SamplerContext

DEFAULT_POPULATION = 50  # Optuna's NSGAIISampler and NSGAIIISampler default
OPTUNA_STARTUP = 10  # Optuna's TPESampler and GPSampler default
# The surrogate's start before its model steers: one random candidate, then space-filling ones
# (surrogate_sampler.SPREAD_START). Over 40 seeds of the recorded tables of
# benchmarks/search_efficiency.py 3 needed fewer candidates than 5 on all five and than 8 on four.
SURROGATE_STARTUP = 3


class StartupSettings(BaseModel):
    """The settings of a sampler that proposes a start of its own (random, or space-filling for
    surrogate) before its model steers: surrogate, tpe and gp."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    startup_trials: int | None = Field(
        default=None, ge=1, title="trials before its model steers",
        description=f"Trials before the model of surrogate, tpe or gp steers (none: the "
                    f"sampler's own default: {SURROGATE_STARTUP} for surrogate — one random, then "
                    f"each the farthest from those asked —, Optuna's {OPTUNA_STARTUP} random for "
                    f"tpe and gp). Refused above budget.trials.")


class PopulationSettings(BaseModel):
    """The settings of a genetic sampler: nsga2 and nsga3."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    population_size: int | None = Field(
        default=None, ge=2, title="trials per generation",
        description=f"Trials per generation of nsga2/nsga3 (none: Optuna's default of "
                    f"{DEFAULT_POPULATION}); keep it well under the budget, or the search never "
                    f"leaves its random first generation. Refused above budget.trials.")


def make_sampler(settings: SamplerSettings, resumed_trials: int,
                 context: SamplerContext | None = None) -> optuna.samplers.BaseSampler:
    """The sampler ``settings.name`` names. The seed is offset by the trials already run, so a
    resumed campaign continues the sequence instead of replaying the first proposals.
    ``context``: the study's device space and sibling studies, for the samplers that use them."""
    from optuna.exceptions import ExperimentalWarning

    declared = SAMPLERS[settings.name]
    seed = settings.seed + resumed_trials
    with warnings.catch_warnings():
        # Optuna 5 still calls NSGA-III and the brute-force grid experimental; chosen knowingly.
        warnings.simplefilter("ignore", ExperimentalWarning)
        sampler: optuna.samplers.BaseSampler = (
            declared.build(settings, seed, context) if declared.uses_context
            else declared.build(settings, seed))
        return sampler


def _startup_trials(settings: SamplerSettings, default: int) -> int:
    """``startup_trials`` as set, else the sampler's own ``default`` (also where the caller
    passed no options at all)."""
    options: StartupSettings | None = settings.options
    if options is None or options.startup_trials is None:
        return default
    return options.startup_trials


def _population_size(settings: SamplerSettings) -> int:
    options: PopulationSettings | None = settings.options
    if options is None or options.population_size is None:
        return DEFAULT_POPULATION
    return options.population_size


def _surrogate(settings: SamplerSettings, seed: int,
               context: SamplerContext | None) -> optuna.samplers.BaseSampler:
    from dse.search.samplers.surrogate import SurrogateSampler

    return SurrogateSampler(context, seed=seed,
                            startup_trials=_startup_trials(settings, SURROGATE_STARTUP))


def _tpe(settings: SamplerSettings, seed: int) -> optuna.samplers.BaseSampler:
    import optuna

    # constant_liar: with several devices measuring at once, TPE treats the running trials as bad
    # results instead of proposing the same region to every idle device.
    return optuna.samplers.TPESampler(seed=seed,
                                      n_startup_trials=_startup_trials(settings, OPTUNA_STARTUP),
                                      multivariate=True, constant_liar=True)


def _nsga2(settings: SamplerSettings, seed: int) -> optuna.samplers.BaseSampler:
    import optuna

    return optuna.samplers.NSGAIISampler(
        seed=seed, population_size=_population_size(settings))


def _nsga3(settings: SamplerSettings, seed: int) -> optuna.samplers.BaseSampler:
    import optuna

    return optuna.samplers.NSGAIIISampler(
        seed=seed, population_size=_population_size(settings))


def _gp(settings: SamplerSettings, seed: int) -> optuna.samplers.BaseSampler:
    import optuna

    # Running trials enter its q-batch acquisition, so parallel devices get distinct points. The
    # precision and knobs of a backend are conditional parameters, which GP leaves to its random
    # fallback; that is by design here, so no warning per trial.
    return optuna.samplers.GPSampler(seed=seed,
                                     n_startup_trials=_startup_trials(settings, OPTUNA_STARTUP),
                                     warn_independent_sampling=False)


def _random(settings: SamplerSettings, seed: int) -> optuna.samplers.BaseSampler:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def _grid(settings: SamplerSettings, seed: int) -> optuna.samplers.BaseSampler:
    """Optuna's BruteForceSampler, which walks a define-by-run space, so conditional parameters
    (``precision.<backend>``, ``<backend>.<knob>``) give every valid combination once.
    (GridSampler is a product over fixed names: it would propose each candidate once per value of
    the other backends' parameters, and values the device lacks.)

    Its ``after_trial`` only calls ``study.stop()`` once the grid is exhausted, which raises
    outside ``study.optimize``; the search loop stops on its budget instead, and proposals past
    the end of the grid repeat earlier candidates, which the loop reuses unmeasured.
    """
    import optuna

    class ExhaustiveSampler(optuna.samplers.BruteForceSampler):
        def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                        state: optuna.trial.TrialState, values: Sequence[float] | None) -> None:
            return None

    return ExhaustiveSampler(seed=seed)


_STARTUP = frozenset({"startup_trials"})
_POPULATION = frozenset({"population_size"})

for _declaration in (
        SamplerDeclaration("surrogate", _surrogate,
                           "a space-filling start, then the unmeasured candidate a forest model "
                           "of the measurements expects to extend the front most", uses_context=True,
                           settings_model=StartupSettings, counts_trials=_STARTUP),
        SamplerDeclaration("tpe", _tpe, "multi-objective TPE",
                           settings_model=StartupSettings, counts_trials=_STARTUP),
        SamplerDeclaration("nsga2", _nsga2, "NSGA-II (genetic)",
                           settings_model=PopulationSettings, counts_trials=_POPULATION),
        SamplerDeclaration("nsga3", _nsga3, "NSGA-III (genetic, reference points)",
                           settings_model=PopulationSettings, counts_trials=_POPULATION),
        SamplerDeclaration("gp", _gp, "Gaussian process, constrained multi-objective",
                           settings_model=StartupSettings, counts_trials=_STARTUP),
        SamplerDeclaration("random", _random, "uniform random"),
        SamplerDeclaration("grid", _grid, "every combination of a small space once",
                           needs_steps=True)):
    register_sampler(_declaration)
