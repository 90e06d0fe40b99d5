"""What a campaign is for, in its author's words: the ``description:`` of its experiment file, else
of its search space. The dashboard shows it under its title and in a ``<meta>`` tag, which the
dashboards index reads (:mod:`dse.report.index`)."""

from __future__ import annotations

from pathlib import Path

from dse.core import SpecError
from dse.spec import read_yaml


def campaign_description(experiment: Path) -> str:
    """The experiment's ``description``, else its search space's (``search_space:`` is relative
    to the experiment file), stripped; '' when neither has one. Read with the specs' own bounded
    reader; a file that cannot be read any more (moved since the run, say) gives '' — a page
    without a description is still the campaign's page."""
    try:
        data = read_yaml(experiment)
        own = _text(data.get("description"))
        if own:
            return own
        space = data.get("search_space")
        if not isinstance(space, str):
            return ""
        return _text(read_yaml(experiment.parent / space).get("description"))
    except SpecError:
        return ""


def _text(value: object) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""
