"""Whether a stored study may be resumed with a search space: a hash of each section of the
space that changes what a trial means, kept on the study, and the comparison that tolerates a
metric renamed since and a section added since."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dse.core import former_metric_name, stable_hash
from dse.spec import SearchSpace

if TYPE_CHECKING:
    from collections.abc import Mapping


# The parts of a space that change what a trial means; a resumed study must not mix two of them.
_SPACE_SECTIONS = ("model", "training", "deployment", "constraints", "parameters", "metrics")


def space_fingerprint(space: SearchSpace, *, former_names: bool = False) -> dict[str, str]:
    """A hash of each section of ``space`` that changes what a trial means. ``former_names``:
    with each renamed metric a constraint bounds under its former name, as a study written
    before the rename holds it (see ``dse.core.metrics.RENAMED_METRICS``)."""
    dumped = space.model_dump(mode="json")
    if former_names:
        dumped["constraints"] = [{**c, "metric": former_metric_name(c["metric"])}
                                 for c in dumped["constraints"]]
    return {section: stable_hash(dumped[section]) for section in _SPACE_SECTIONS}


def changed_sections(space: SearchSpace, stored: Mapping[str, str]) -> list[str]:
    """The sections of ``space`` that differ from the ``stored`` fingerprint of a study (its
    ``space_fingerprint`` attribute): a study must not be resumed with any of them."""
    before = space_fingerprint(space, former_names=True)
    return [section for section, now in space_fingerprint(space).items()
            if not _unchanged(section, now, stored, before[section])]


def _unchanged(section: str, now: str, stored: Mapping[str, str], before_renames: str) -> bool:
    """Whether a space section is as the stored study knew it: ``now``, or ``before_renames``
    (the section with renamed metrics under their former names) for a study written before a
    metric was renamed. A study made before a section existed (free ``parameters``, declared
    ``metrics``) knew it as the field's default."""
    if section in stored:
        return stored[section] in (now, before_renames)
    field = SearchSpace.model_fields[section]
    default = field.get_default(call_default_factory=True)
    return stable_hash(default if default is None else _json(default)) == now


def _json(value: object) -> object:
    return json.loads(json.dumps(value, default=str))
