"""What a TVM bundle's ``run.py`` loads (``dse export``): the runner's own compiled Relax
executable, exported as a shared library, so the bundle runs the kernels that were measured
(MetaSchedule's tuned schedules included) with only apache-tvm installed: no ONNX import, no
compile and no tuning database on the user's side.

``export_library`` links the executable's object code with the host's C compiler (``cc``, else
``$CXX``/``g++``); a host without one cannot export a TVM bundle and gets a BuildError saying so.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from dse.backends.bundle_extras import BundleExtras
from dse.core import BuildError

# The bundle's library file, under its model/ folder.
LIBRARY = "model.so"


def tvm_bundle_extras(library: Any, device: str) -> BundleExtras:
    """The exported library of a runner's loaded executable (``library``, a
    ``tvm.runtime.Module``) and the device kind it runs on (``cpu`` or ``cuda``)."""
    with tempfile.TemporaryDirectory(prefix="dse-tvm-export-") as scratch:
        path = Path(scratch) / LIBRARY
        try:
            library.export_library(str(path), workspace_dir=scratch)
            data = path.read_bytes()
        except Exception as exc:  # TVM raises RuntimeError, and the compiler's own failures
            lines = [line for line in str(exc).splitlines() if line.strip()]
            raise BuildError(f"tvm: the compiled executable could not be exported as a shared "
                             f"library (it needs a C compiler on this host): "
                             f"{type(exc).__name__}: {lines[-1][:300] if lines else ''}") from exc
    return BundleExtras(settings={"device": device}, files={LIBRARY: data}, model_file=LIBRARY)
