"""Model families: arch parameters -> ``torch.nn.Module``.

Importing this package registers every family and imports no torch.
"""

from dse.models import cnn as _cnn  # noqa: F401 - registers the family
from dse.models import transformer as _transformer  # noqa: F401 - registers the family
from dse.models.registry import FAMILIES, ModelFamily, get_family, register_family

__all__ = ["FAMILIES", "ModelFamily", "get_family", "register_family"]
