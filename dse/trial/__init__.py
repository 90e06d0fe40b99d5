"""A trial on its device: the candidate's model prepared and built, timed inside its telemetry
window, screened, dueled, exported — what a device worker runs, apart from the Ray plumbing that
carries it there (:mod:`dse.farm`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.util import lazy_names

if TYPE_CHECKING:
    from dse.trial.bundle_jobs import compare_outputs as compare_outputs
    from dse.trial.bundle_jobs import export_prepared as export_prepared
    from dse.trial.bundle_jobs import verify_prepared_model as verify_prepared_model
    from dse.trial.calibrate import calibrate_device as calibrate_device
    from dse.trial.calibrate import device_key as device_key
    from dse.trial.candidate_model import ArchFailure as ArchFailure
    from dse.trial.duel_window import DuelReport as DuelReport
    from dse.trial.duel_window import DuelRequest as DuelRequest
    from dse.trial.duel_window import duel_prepared as duel_prepared
    from dse.trial.generation_bundle_jobs import export_generator as export_generator
    from dse.trial.generation_bundle_jobs import token_agreement as token_agreement
    from dse.trial.generation_bundle_jobs import (
        verify_prepared_generator as verify_prepared_generator,
    )
    from dse.trial.generation_timing import measure_generator as measure_generator
    from dse.trial.isolation import NodeLock as NodeLock
    from dse.trial.isolation import Span as Span
    from dse.trial.isolation import current_node_id as current_node_id
    from dse.trial.llm_model import PreparedGenerator as PreparedGenerator
    from dse.trial.llm_model import prepare_generator as prepare_generator
    from dse.trial.prepare import PreparedCandidate as PreparedCandidate
    from dse.trial.prepare import check_deployable as check_deployable
    from dse.trial.prepare import prepare_candidate as prepare_candidate
    from dse.trial.screening import FrontPoint as FrontPoint
    from dse.trial.screening import Screening as Screening
    from dse.trial.screening import screening_measure as screening_measure
    from dse.trial.screening import screening_verdict as screening_verdict
    from dse.trial.timing import measure_prepared as measure_prepared

# Each name loads its module on first use (see dse.util.faces).
_NAMES = {
    "ArchFailure": "dse.trial.candidate_model",
    "DuelReport": "dse.trial.duel_window",
    "DuelRequest": "dse.trial.duel_window",
    "FrontPoint": "dse.trial.screening",
    "NodeLock": "dse.trial.isolation",
    "PreparedCandidate": "dse.trial.prepare",
    "PreparedGenerator": "dse.trial.llm_model",
    "Screening": "dse.trial.screening",
    "Span": "dse.trial.isolation",
    "calibrate_device": "dse.trial.calibrate",
    "check_deployable": "dse.trial.prepare",
    "compare_outputs": "dse.trial.bundle_jobs",
    "current_node_id": "dse.trial.isolation",
    "device_key": "dse.trial.calibrate",
    "duel_prepared": "dse.trial.duel_window",
    "export_generator": "dse.trial.generation_bundle_jobs",
    "token_agreement": "dse.trial.generation_bundle_jobs",
    "verify_prepared_generator": "dse.trial.generation_bundle_jobs",
    "export_prepared": "dse.trial.bundle_jobs",
    "measure_generator": "dse.trial.generation_timing",
    "measure_prepared": "dse.trial.timing",
    "prepare_candidate": "dse.trial.prepare",
    "prepare_generator": "dse.trial.llm_model",
    "screening_measure": "dse.trial.screening",
    "screening_verdict": "dse.trial.screening",
    "verify_prepared_model": "dse.trial.bundle_jobs",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
