"""The names of the trial record: the user attributes of each Optuna trial of a dse study, and
those of the study itself, in one place.

The search writes them (``dse.search``: the loop, a device's search, screening, second looks,
warm start, duels) and ``dse.testing.records`` writes them the same way; the results, the
report, the API and the commands read them. The trials table (``dse.results.table``) gives an
attribute it shows a column of the same name. Stored studies are read by these names, so a
value never changes: a new name is a new attribute.
"""

from __future__ import annotations

from typing import Final


class TrialAttr:
    """The user attributes of a trial, each with what it holds and who writes it."""

    # Every trial given a candidate (dse.search.loop).
    #: The candidate measured, as ``Candidate.to_dict()``.
    CANDIDATE: Final = "candidate"
    #: Its ``Candidate.candidate_id``: identical candidates share it.
    CANDIDATE_ID: Final = "candidate_id"

    # Every finished trial (DeviceSearch.record; the loop and DeviceSearch.recover on a trial
    # an interrupt or a dead driver stopped).
    #: ``ok``, ``infeasible`` or ``failed``.
    STATUS: Final = "status"
    #: Why the status is not ok, in words (empty when ok).
    REASON: Final = "reason"
    #: Metric name -> measured value.
    METRICS: Final = "metrics"
    #: Metric name -> why it has no value.
    MISSING: Final = "missing"
    #: The harness's label of an ok measurement: ``ok`` when measured cleanly, else what
    #: disturbed it; absent when the harness gave none (DeviceSearch.record).
    MEASUREMENT_QUALITY: Final = "measurement_quality"

    # A trial a device measured (dse.search.loop).
    #: The measurement's provenance: text key -> text value.
    PROVENANCE: Final = "provenance"
    #: The farm device that measured it.
    DEVICE_ID: Final = "device_id"
    #: Its latency samples: a ``.npz`` file, relative to the run folder.
    SAMPLES_FILE: Final = "samples_file"
    #: ``arch`` on a failure of the model itself, which every candidate of its architecture
    #: reuses (also on a trial that reused one).
    FAILURE_SCOPE: Final = "failure_scope"
    #: True on a second look of a clean trial that measured its candidate slower than the first
    #: did: the first keeps its place on the front and the look competes no more (the machine
    #: ran a slow spell in one of them: dse.search.loop, dse.search.second_looks).
    SLOWER_THAN_FIRST: Final = "slower_than_first"

    # Device time and fidelity (dse.search.screening.fidelity_attrs, written by the loop).
    #: The device's exclusive measurement window, in seconds.
    DEVICE_SECONDS: Final = "device_seconds"
    #: With screening: ``screen`` (screened out) or ``full`` (went on to the full protocol).
    FIDELITY: Final = "fidelity"
    #: With screening: the seconds of the screening measurement.
    SCREEN_SECONDS: Final = "screen_seconds"
    #: With screening: the seconds of the full measurement (0 when screened out).
    FULL_SECONDS: Final = "full_seconds"

    # Where a trial came from, when not from the sampler's own choice.
    #: The number of the trial whose result it reused instead of measuring (dse.search.loop).
    REUSED_FROM: Final = "reused_from"
    #: The number of the trial an interrupt stopped, whose parameters it measures again
    #: (DeviceSearch.recover).
    REQUEUED_FROM: Final = "requeued_from"
    #: True on a trial stopped mid-measurement: the next run measures its candidate again
    #: (dse.search.loop, DeviceSearch.recover).
    INTERRUPTED: Final = "interrupted"
    #: The number of the trial whose candidate it measures again at the end of the search
    #: (dse.search.loop, dse.search.second_looks). A trial with a second look whose status is
    #: ok competes no more; the look does, in its place, unless it is SLOWER_THAN_FIRST.
    SECOND_LOOK_OF: Final = "second_look_of"
    #: The trial of another device's study that seeded it: ``{"study", "device", "trial"}``
    #: (dse.search.warm_start).
    WARM_START_FROM: Final = "warm_start_from"
    #: True on the campaign's baseline, queued first (dse.search.study).
    BASELINE: Final = "baseline"


class StudyAttr:
    """The user attributes of a device's study, each with what it holds and who writes it."""

    # The campaign, as of its last run (dse.search.study; METRICS: dse.app.api).
    #: The campaign's name.
    CAMPAIGN: Final = "campaign"
    #: The name of the device profile the study searches.
    DEVICE_PROFILE: Final = "device_profile"
    #: The objectives' metric names, in the order of the trials' values.
    OBJECTIVES: Final = "objectives"
    #: The constraints, as text (``process_rss_peak_mb <= 4096``).
    CONSTRAINTS: Final = "constraints"
    #: The metrics the campaign's search space declares, as ``MetricSpec.to_dict()``.
    METRICS: Final = "metrics"
    #: The search space's fingerprint, by section: what a resumed campaign compares.
    SPACE_FINGERPRINT: Final = "space_fingerprint"
    #: The device's peak compute and memory bandwidth, for the roofline
    #: (dse.search.study.device_peaks).
    DEVICE_PEAKS: Final = "device_peaks"
    #: Whether trials not measured cleanly may be on the front (measurement.non_ok_on_front).
    NON_OK_ON_FRONT: Final = "non_ok_on_front"

    # The baseline and the warm start (dse.search.study, dse.search.warm_start).
    #: The candidate id of the campaign's baseline on this device.
    BASELINE_CANDIDATE_ID: Final = "baseline_candidate_id"
    #: Why the device has no baseline, in words.
    BASELINE_SKIPPED: Final = "baseline_skipped"
    #: What the warm start queued from another device's study, and what it left out and why.
    WARM_START: Final = "warm_start"

    #: The duels of close calls on the device's front and their verdicts
    #: (dse.search.duel_records).
    DUELS: Final = "duels"
