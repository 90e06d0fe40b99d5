"""The search: space -> Optuna study -> candidates, the loop that measures them, fronts, duels and
second looks; its samplers and evaluators are sub-packages. Names load on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.util import lazy_names

if TYPE_CHECKING:
    from dse.search.duel_records import DISTURBED as DISTURBED
    from dse.search.duel_records import FAILED as FAILED
    from dse.search.duel_records import DuelRecord as DuelRecord
    from dse.search.duel_records import MetricVerdict as MetricVerdict
    from dse.search.duel_records import parse_cell as parse_cell
    from dse.search.duel_records import read_records as read_records
    from dse.search.duel_records import trial_cells as trial_cells
    from dse.search.duel_round import run_duels as run_duels
    from dse.search.duels import pending_pairs as pending_pairs
    from dse.search.evaluators.dispatchers import EvaluatorDispatcher as EvaluatorDispatcher
    from dse.search.evaluators.dispatchers import InfeasibleCandidate as InfeasibleCandidate
    from dse.search.evaluators.dispatchers import MixedDispatcher as MixedDispatcher
    from dse.search.evaluators.dispatchers import known_metrics as known_metrics
    from dse.search.evaluators.replay import ReplayEvaluator as ReplayEvaluator
    from dse.search.experiment_checks import search_problems as search_problems
    from dse.search.lease import Lease as Lease
    from dse.search.loop import JobDispatcher as JobDispatcher
    from dse.search.loop import ProgressCallback as ProgressCallback
    from dse.search.loop import SearchLoop as SearchLoop
    from dse.search.loop import TrialOutcome as TrialOutcome
    from dse.search.pareto import default_reference as default_reference
    from dse.search.pareto import front_mask as front_mask
    from dse.search.pareto import hypervolume as hypervolume
    from dse.search.pareto import hypervolume_history as hypervolume_history
    from dse.search.pareto import noise_aware_mask as noise_aware_mask
    from dse.search.pareto import pareto_front as pareto_front
    from dse.search.pareto import pareto_mask as pareto_mask
    from dse.search.second_looks import pending_second_looks as pending_second_looks
    from dse.search.space import device_combinations as device_combinations
    from dse.search.study import StudyProgress as StudyProgress
    from dse.search.study import open_experiment_studies as open_experiment_studies
    from dse.search.study import study_progress as study_progress

# Each name loads its module on first use (see dse.util.faces).
_NAMES = {
    "DISTURBED": "dse.search.duel_records",
    "DuelRecord": "dse.search.duel_records",
    "EvaluatorDispatcher": "dse.search.evaluators.dispatchers",
    "FAILED": "dse.search.duel_records",
    "InfeasibleCandidate": "dse.search.evaluators.dispatchers",
    "JobDispatcher": "dse.search.loop",
    "Lease": "dse.search.lease",
    "MetricVerdict": "dse.search.duel_records",
    "MixedDispatcher": "dse.search.evaluators.dispatchers",
    "ProgressCallback": "dse.search.loop",
    "ReplayEvaluator": "dse.search.evaluators.replay",
    "SearchLoop": "dse.search.loop",
    "StudyProgress": "dse.search.study",
    "TrialOutcome": "dse.search.loop",
    "default_reference": "dse.search.pareto",
    "device_combinations": "dse.search.space",
    "front_mask": "dse.search.pareto",
    "hypervolume": "dse.search.pareto",
    "hypervolume_history": "dse.search.pareto",
    "known_metrics": "dse.search.evaluators.dispatchers",
    "noise_aware_mask": "dse.search.pareto",
    "open_experiment_studies": "dse.search.study",
    "pareto_front": "dse.search.pareto",
    "pareto_mask": "dse.search.pareto",
    "parse_cell": "dse.search.duel_records",
    "pending_pairs": "dse.search.duels",
    "pending_second_looks": "dse.search.second_looks",
    "read_records": "dse.search.duel_records",
    "run_duels": "dse.search.duel_round",
    "search_problems": "dse.search.experiment_checks",
    "study_progress": "dse.search.study",
    "trial_cells": "dse.search.duel_records",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
