"""The ``measurement.duels`` settings: paired, interleaved re-measurements of two close candidates
on a device's front (``dse.search.duels`` chooses the pairs, ``dse.measure.duel`` times them)."""

from __future__ import annotations

from pydantic import Field

from dse.spec.fields import Strict


class DuelSpec(Strict):
    """Duels of close calls: at the end of each device's search, pairs of candidates on or near
    its front whose intervals overlap on a timing objective are timed again side by side, in
    alternating short blocks, and their order on that objective is decided from the paired ratio
    (which cancels the drift between separate runs)."""

    enabled: bool = Field(default=True, description="Duel close calls at all (false: never).")
    max_pairs: int = Field(
        default=4, ge=0, le=1000,
        description="Most pairs dueled on each device, those whose order changes the front "
                    "most first; a resumed campaign duels only chosen pairs not yet decided.")
    time_share: float = Field(
        default=0.1, ge=0, le=1000, allow_inf_nan=False,
        description="Duels on a device are planned to take this share of the device time its "
                    "search spent measuring (each trial's device_seconds), each pair at the "
                    "time of a duel that decides at its first look (its warm-up and min_rounds "
                    "rounds: 0.7 s at the defaults; one that goes on takes up to max_seconds): "
                    "a small campaign duels fewer pairs, or none.")
    close_within: float = Field(
        default=0.1, ge=0, le=100, allow_inf_nan=False,
        description="Two measured values of a timing objective closer than this fraction count "
                    "as a close call even where their intervals do not overlap: separate runs "
                    "drift further apart than one run's interval says unless "
                    "measurement.run_to_run widens them. 0: overlapping "
                    "intervals only.")
    max_seconds: float = Field(
        default=4.0, gt=0, le=600, allow_inf_nan=False,
        description="Most seconds of alternating timing per pair; a duel stops earlier once "
                    "every contested objective is decided (building the two candidates again "
                    "from the caches comes on top).")
    block_seconds: float = Field(
        default=0.02, gt=0, le=10, allow_inf_nan=False,
        description="Seconds of one short block of timed calls of one candidate; the shorter, "
                    "the less drift fits between a block of one and the next of the other.")
    min_difference: float = Field(
        default=0.01, ge=0, le=1, allow_inf_nan=False,
        description="A duel names the faster candidate only when the whole 95% interval of "
                    "their ratio lies beyond this relative difference, else it is a tie: two "
                    "sessions of one and the same model differ by a fraction of a percent (where "
                    "their memory landed), which no configuration choice should rest on.")
    min_rounds: int = Field(
        default=6, ge=3, le=10_000,
        description="Block pairs (A then B, or B then A) timed before a duel may stop early.")
