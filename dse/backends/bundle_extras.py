"""What a backend adds to an exported bundle beyond its artifact file (``dse export``): settings
its standalone ``run.py`` reads (an execution provider's options) and files it loads instead of
the artifact (a torch program saved with ``torch.export``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BundleExtras:
    """Made by ``Backend.bundle_extras`` on the device worker, from the compiled runner.

    Attributes:
        settings: plain JSON-able values added to ``run.py``'s settings, by name.
        files: file name -> contents, written under the bundle's ``model/`` folder and named in
            ``run.py``'s settings (``files``) by the same name.
        model_file: which file of ``files`` ``run.py`` loads as the model, when it is not the
            artifact itself ("" for the artifact).
    """

    settings: dict[str, Any] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    model_file: str = ""
