"""`measurement.duels`: its defaults, and a bad setting in one line naming the file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse.app.api import validate_files
from dse.spec import MeasureSpec
from dse.spec.duel_models import DuelSpec
from tests.conftest import tiny_experiment_text


def test_duels_are_on_and_small_by_default() -> None:
    spec = MeasureSpec().duels
    assert spec == DuelSpec()
    assert spec.enabled and spec.max_pairs == 4 and spec.time_share == 0.1
    assert MeasureSpec.model_validate({"duels": {"enabled": False}}).duels.enabled is False


@pytest.mark.parametrize(("setting", "line"), [
    ("max_pairs: many", "measurement.duels.max_pairs: Input should be a valid integer, unable "
                        "to parse string as an integer; found 'many'"),
    ("max_seconds: -1", "measurement.duels.max_seconds: Input should be greater than 0; found -1"),
    ("min_rounds: 2", "measurement.duels.min_rounds: Input should be greater than or equal to 3; "
                      "found 2"),
    ("rounds: 3", "measurement.duels.rounds: unknown key 'rounds'; did you mean 'min_rounds'?"),
])
def test_a_bad_duel_setting_is_one_line_naming_file_and_field(tiny_campaign: Path, setting: str,
                                                              line: str) -> None:
    text = tiny_experiment_text(2)
    tiny_campaign.write_text(text.replace("second_looks: 0}",
                                          f"second_looks: 0, duels: {{{setting}}}}}"))
    assert validate_files([tiny_campaign]) == [f"{tiny_campaign}: {line}"]
