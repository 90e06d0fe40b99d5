"""Model families: arch parameters -> ``torch.nn.Module``.

Importing this package imports no torch; the families register themselves when the registry is
first read (:mod:`dse.parts.families`).
"""

from dse.models.registry import FAMILIES, ModelFamily, get_family, register_family

__all__ = ["FAMILIES", "ModelFamily", "get_family", "register_family"]
