"""The duels of a campaign as tables and words: each trial's side of its duels as a column of
the trials table, a front row's verdicts in a line, and one line for the whole campaign ("3 duels:
2 decided (trial 12 faster than 7 by 3.1 % ±1.2 % on p50, ...), 1 tie"). The records themselves
are :mod:`dse.search.duel_records`."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import optuna
import pandas as pd

from dse.core import DUEL_COLUMN, StudyAttr
from dse.measure import A_FASTER, TIE
from dse.results.dtypes import text_column
from dse.search import DISTURBED, FAILED, DuelRecord, MetricVerdict, parse_cell, read_records, trial_cells

#: Decided duels the campaign's line spells out; the others are counted.
SHOWN_DECIDED = 3
_PERCENTILE = re.compile(r"latency_(p\d+)_ms")


def duel_columns(study: optuna.Study, numbers: Sequence[int]) -> dict[str, pd.Series]:
    """The trials table's duel column for the trials ``numbers`` of ``study`` (each trial's
    side of its counted duels, JSON), or nothing when no trial was in one."""
    cells = trial_cells(read_records(study.user_attrs), numbers)
    return {DUEL_COLUMN: text_column(cells)} if any(cells) else {}


def duel_text(cell: object) -> str:
    """A trial's duels in words, from its table cell: ``p50 3.1 % ±1.2 % faster than #7; p99
    tie with #7`` ("" for none)."""
    parts = []
    for entry in parse_cell(cell):
        name = short_name(str(entry["metric"]))
        if entry["verdict"] == "tie":
            parts.append(f"{name} tie with #{entry['vs']}")
            continue
        ratio, low, high = (float(entry[k]) if entry[k] is not None else math.nan
                            for k in ("ratio", "low", "high"))
        gain, half = _gain(str(entry["metric"]), ratio, low, high, entry["verdict"] == "faster")
        parts.append(f"{name} {gain:.1f} % ±{half:.1f} % {entry['verdict']} than #{entry['vs']}")
    return "; ".join(parts)


def duel_summary(studies: Sequence[optuna.Study]) -> str:
    """One line on the campaign's duels: how many ran, what the decided ones found, how many
    tied, were disturbed (timed again by the next run) or failed; "" when none ran."""
    several = len(studies) > 1
    records = [(study, record) for study in studies for record in read_records(study.user_attrs)]
    if not records:
        return ""
    decided, ties, disturbed, failed = [], 0, 0, []
    for study, record in records:
        if record.status == DISTURBED:
            disturbed += 1
        elif record.status == FAILED:
            failed.append(record.reason)
        elif any(v.verdict != TIE for v in record.verdicts):
            decided.append(_decided_text(record, _device(study) if several else ""))
        else:
            ties += 1
    parts = []
    if decided:
        shown = ", ".join(decided[:SHOWN_DECIDED])
        more = f", {len(decided) - SHOWN_DECIDED} more" if len(decided) > SHOWN_DECIDED else ""
        parts.append(f"{len(decided)} decided ({shown}{more})")
    if ties:
        parts.append(f"{ties} tie" + ("" if ties == 1 else "s"))
    if disturbed:
        parts.append(f"{disturbed} disturbed by other work (timed again on the next run)")
    if failed:
        parts.append(f"{len(failed)} failed ({failed[0]})")
    count = len(records)
    return f"{count} duel{'' if count == 1 else 's'}: " + ", ".join(parts)


def short_name(metric: str) -> str:
    """``latency_p50_ms`` -> ``p50``, ``throughput_sps`` -> ``throughput``."""
    match = _PERCENTILE.fullmatch(metric)
    return match.group(1) if match else metric.removesuffix("_sps")


def _decided_text(record: DuelRecord, device: str) -> str:
    """``trial 12 faster than 7 by 3.1 % ±1.2 % on p50`` for each decided objective."""
    where = f"{device} " if device else ""
    texts = []
    for verdict in record.verdicts:
        if verdict.verdict == TIE:
            continue
        a_wins = verdict.verdict == A_FASTER
        winner, loser = (record.a, record.b) if a_wins else (record.b, record.a)
        gain, half = _gain(verdict.metric, *_from_a(verdict, a_wins), True)
        texts.append(f"{where}trial {winner} faster than {loser} by {gain:.1f} % ±{half:.1f} % "
                     f"on {short_name(verdict.metric)}")
    return "; ".join(texts)


def _from_a(verdict: MetricVerdict, a_wins: bool) -> tuple[float, float, float]:
    """The winner's value over the loser's, with its interval."""
    if a_wins:
        return verdict.ratio, verdict.low, verdict.high
    return 1 / verdict.ratio, 1 / verdict.high, 1 / verdict.low


def _gain(metric: str, ratio: float, low: float, high: float, wins: bool) -> tuple[float, float]:
    """How much better (in %) the winner of a verdict is, from its value over the loser's
    (``ratio`` of the trial whose side this is: ``wins`` says whether it won), and half the
    interval's width, in %: latency lower, throughput higher."""
    if not wins:
        ratio, low, high = 1 / ratio, 1 / high, 1 / low
    latency = metric != "throughput_sps"
    gain = (1 - ratio) if latency else (ratio - 1)
    return 100 * gain, 100 * (high - low) / 2


def _device(study: optuna.Study) -> str:
    return str(study.user_attrs.get(StudyAttr.DEVICE_PROFILE) or study.study_name)
