"""Model families: arch parameters -> ``torch.nn.Module``.

Importing this package imports no torch; the families register themselves when the registry is
first read (:mod:`dse.plugins.families`).
"""

from dse.models.family import FAMILIES, ModelFamily, get_family, register_family

__all__ = ["FAMILIES", "ModelFamily", "get_family", "register_family"]
