"""The campaign study: directions from the metrics table; a resume refuses a changed space."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dse.core.exceptions import SpecError
from dse.search.study import open_study
from dse.spec import SamplerSpec, SearchSpace
from tests.conftest import TINY_SPACE


def test_directions_and_resume_rules(tmp_path: Path) -> None:
    space = SearchSpace.model_validate(yaml.safe_load(TINY_SPACE))
    study = open_study(tmp_path, "c", space, SamplerSpec())
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    assert study.user_attrs["objectives"] == ["accuracy", "latency_p99_ms"]

    # Same space: resumes the same study.
    assert open_study(tmp_path, "c", space, SamplerSpec())._study_id == study._study_id

    wider = SearchSpace.model_validate(
        yaml.safe_load(TINY_SPACE.replace("batch_sizes: [1, 4]", "batch_sizes: [1, 4, 16]")))
    with pytest.raises(SpecError, match=r"study.db: deployment: the search space 'tiny' changed"):
        open_study(tmp_path, "c", wider, SamplerSpec())

    other = SearchSpace.model_validate(
        yaml.safe_load(TINY_SPACE.replace("  - metric: latency_p99_ms", "  - metric: process_rss_peak_mb")))
    with pytest.raises(SpecError, match="the stored study optimises"):
        open_study(tmp_path, "c", other, SamplerSpec())
