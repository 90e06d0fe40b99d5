"""Read a campaign study's trials straight from its SQLite database, without SQLAlchemy's ORM.

Optuna's RDB storage builds every trial through the ORM: the 10,000 trials of a campaign take
seconds, most of a dashboard's time, where sqlite3 reads the same rows in a fraction of one
(docs/benchmarks.md, "Reports"). Only Optuna's schema ``v3.2.0.a`` (Optuna 3.2 to 5.x) is read here; for
any other, :func:`read_trials` returns None and the caller reads through Optuna.
"""

from __future__ import annotations

import copy
import json
import math
import sqlite3
from collections import defaultdict
from collections.abc import Container, Iterable
from contextlib import closing
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import optuna
from optuna.distributions import BaseDistribution, json_to_distribution
from optuna.trial import FrozenTrial, TrialState

KNOWN_SCHEMAS = frozenset({"v3.2.0.a"})
_SPECIAL = {"INF_POS": math.inf, "INF_NEG": -math.inf, "NAN": math.nan}


@lru_cache(maxsize=1024)
def _distribution(text: str) -> BaseDistribution:
    # A campaign repeats the same few distributions on every trial: parse each text once.
    return json_to_distribution(text)


def _number(value: float | None, kind: str) -> float:
    return _SPECIAL[kind] if kind in _SPECIAL else float(value)  # type: ignore[arg-type]


def _time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def read_trials(db: Path, study_name: str) -> list[FrozenTrial] | None:
    """The trials of ``study_name`` in the database ``db``, ordered by number, read-only; None
    when the database's schema is not one this reader knows."""
    uri = f"file:{quote(str(db.resolve()))}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as db_conn:
        # One read transaction: every SELECT below sees the same state of a study being written
        # (as the ORM's session does).
        db_conn.execute("BEGIN")
        version = db_conn.execute("SELECT version_num FROM alembic_version").fetchone()
        if version is None or version[0] not in KNOWN_SCHEMAS:
            return None
        found = db_conn.execute("SELECT study_id FROM studies WHERE study_name = ?",
                                (study_name,)).fetchone()
        if found is None:
            raise KeyError(f"no study {study_name!r} in {db}")

        def rows(table: str, columns: str) -> Iterable[tuple[Any, ...]]:
            # In insertion order (rowid), the order in which Optuna's ORM lists them.
            return db_conn.execute(
                f"SELECT x.trial_id, {columns} FROM {table} x JOIN trials t "
                f"ON t.trial_id = x.trial_id WHERE t.study_id = ? ORDER BY x.rowid", found)

        params: dict[int, list[tuple[str, float, str]]] = defaultdict(list)
        for trial_id, name, value, text in rows("trial_params",
                                                "x.param_name, x.param_value, "
                                                "x.distribution_json"):
            params[trial_id].append((name, value, text))
        values: dict[int, dict[int, float]] = defaultdict(dict)
        for trial_id, objective, value, kind in rows("trial_values",
                                                     "x.objective, x.value, x.value_type"):
            values[trial_id][objective] = _number(value, kind)
        attrs: dict[str, dict[int, dict[str, Any]]] = {}
        for table in ("trial_user_attributes", "trial_system_attributes"):
            attrs[table] = defaultdict(dict)
            for trial_id, key, text in rows(table, "x.key, x.value_json"):
                attrs[table][trial_id][key] = json.loads(text)
        steps: dict[int, dict[int, float]] = defaultdict(dict)
        for trial_id, step, value, kind in rows(
                "trial_intermediate_values",
                "x.step, x.intermediate_value, x.intermediate_value_type"):
            steps[trial_id][step] = _number(value, kind)

        trials = []
        for trial_id, number, state, started, completed in db_conn.execute(
                "SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials "
                "WHERE study_id = ? ORDER BY number", found):
            own = params.get(trial_id, [])
            by_objective = values.get(trial_id)
            trials.append(FrozenTrial(
                number=number, state=TrialState[state], value=None,
                values=None if not by_objective else [by_objective[i]
                                                      for i in sorted(by_objective)],
                datetime_start=_time(started), datetime_complete=_time(completed),
                params={n: _distribution(t).to_external_repr(v) for n, v, t in own},
                distributions={n: _distribution(t) for n, _, t in own},
                user_attrs=attrs["trial_user_attributes"].get(trial_id, {}),
                system_attrs=attrs["trial_system_attributes"].get(trial_id, {}),
                intermediate_values=steps.get(trial_id, {}), trial_id=trial_id))
        return trials


class SnapshotStudy(optuna.Study):
    """A study whose trials were read once, straight from its database (:func:`read_trials`):
    what a report reads is one consistent snapshot, read in a fraction of the time Optuna's ORM
    takes. Only for reading: the search loop opens its studies itself, and a write here would
    not show in the snapshot."""

    def __init__(self, study_name: str, storage: str, trials: list[FrozenTrial]) -> None:
        super().__init__(study_name=study_name, storage=storage)
        self._snapshot = trials

    def get_trials(self, deepcopy: bool = True,
                   states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        trials = [t for t in self._snapshot if states is None or t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials
