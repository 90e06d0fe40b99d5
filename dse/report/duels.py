"""The duels panel of a dashboard: the campaign's line on its duels and one row per objective
each duel ordered, as plain data (:func:`duels_info`), and the section that shows it
(:func:`duels_section`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import optuna

from dse.core import StudyAttr
from dse.measure import A_FASTER, TIE
from dse.report.page import Section, message_html, table_html
from dse.report.table_info import TableInfo
from dse.results import duel_summary, short_name
from dse.search import read_records

DUELS_ANCHOR = "duels"
"""The id of the duels section."""


class DuelsInfo(NamedTuple):
    headline: str
    """The campaign's line (:func:`dse.results.duel_summary`)."""
    table: TableInfo
    """Per duel and objective: the pair, the verdict, A's value over B's with its interval,
    rounds, seconds, and whether it counts."""


def duels_info(studies: Sequence[optuna.Study]) -> DuelsInfo | None:
    """The campaign's duels, or None when none ran."""
    headline = duel_summary(studies)
    if not headline:
        return None
    several = len(studies) > 1
    columns = [*(["device"] if several else []), "trials", "objective", "verdict",
               "A / B (95% interval)", "rounds", "seconds", "counts"]
    rows = []
    for study in studies:
        device = str(study.user_attrs.get(StudyAttr.DEVICE_PROFILE) or study.study_name)
        for record in read_records(study.user_attrs):
            counts = "yes" if record.counts else f"no: {record.status}" + (
                f" ({record.reason})" if record.reason else "")
            head = [*([device] if several else []), f"{record.a} vs {record.b}"]
            tail = [str(record.rounds), f"{record.seconds:.1f}", counts]
            if not record.verdicts:
                rows.append([*head, "", "", "", *tail])
            for verdict in record.verdicts:
                said = ("tie" if verdict.verdict == TIE else
                        f"{record.a if verdict.verdict == A_FASTER else record.b} faster")
                rows.append([*head, short_name(verdict.metric), said,
                             f"{verdict.ratio:.4f} ({verdict.low:.4f}–{verdict.high:.4f})",
                             *tail])
    note = ("Each pair was timed again in alternating short blocks in one process; A is the "
            "lower trial number. A tie shows no difference beyond measurement.duels."
            "min_difference at the duel's budget; the fronts use the verdicts of the duels "
            "that count.")
    return DuelsInfo(headline, TableInfo(columns, rows, None, note=note,
                                         prose=(len(columns) - 1,)))


def duels_section(info: DuelsInfo) -> Section:
    """The section of the page: the line, then the table."""
    return Section("Duels: close calls timed side by side",
                   message_html(info.headline, "meta") + "\n" + table_html(info.table),
                   DUELS_ANCHOR)
