"""The model families a search space may name (``model.family``), by name (:data:`FAMILIES`):
one instance of each ``dse.models.ModelFamily`` subclass, registered by its own module with
``dse.models.register_family`` — dse's own in ``dse/models/``, others from ``$DSE_PLUGINS``. The
YAML enum of family names is derived from here.
"""

from __future__ import annotations

from typing import Any

from dse.plugins.registry import Registry

# ModelFamily instances (the class lives in the models layer, above this one).
FAMILIES: Registry[Any] = Registry("model family", ("dse.models",),
                                   lambda family: type(family).__qualname__)


def family_names() -> tuple[str, ...]:
    """Every registered model family's name, sorted."""
    return FAMILIES.names()
