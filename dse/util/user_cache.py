"""Where dse keeps what belongs to the user rather than to a campaign: kept verdicts of the model
output check, the default cache of ``dse verify``.

``$DSE_CACHE_HOME``, else ``$XDG_CACHE_HOME/dse``, else ``~/.cache/dse``; the test suite points
``DSE_CACHE_HOME`` at a folder of its own so that no test reads what another run left.
"""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_root() -> Path:
    explicit = os.environ.get("DSE_CACHE_HOME")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dse"
