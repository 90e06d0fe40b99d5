"""`make setup` writes the bytecode of what it installs: where the environment sets
PYTHONDONTWRITEBYTECODE Python never writes it, and every `dse` process and Ray worker would
compile each module it imports again (seconds of a finished campaign's `dse run`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

# What a `dse run` imports on the driver and in a worker; a module found without valid bytecode is
# listed (at most 10 of them) by the subprocess.
_PROBE = """
import importlib.util, json, os, sys, sysconfig
import dse.cli, dse.app.api, optuna, pandas, plotly, ray, sqlalchemy, torch
purelib = sysconfig.get_paths()["purelib"]
stale = []
for module in list(sys.modules.values()):
    source = getattr(module, "__file__", None) or ""
    if not (source.startswith(purelib) and source.endswith(".py")):
        continue
    cached = importlib.util.cache_from_source(source)
    try:
        with open(cached, "rb") as pyc:
            header = pyc.read(16)
    except OSError:
        stale.append(source)
        continue
    # A timestamp pyc holds its source's mtime (seconds, 32 bits) at bytes 8-12.
    flags = int.from_bytes(header[4:8], "little")
    if flags == 0 and int.from_bytes(header[8:12], "little") != int(os.stat(source).st_mtime) & 0xFFFFFFFF:
        stale.append(source)
print(json.dumps({"checked": sum(1 for m in sys.modules.values()
                                 if (getattr(m, "__file__", None) or "").startswith(purelib)),
                  "stale": stale[:10], "stale_count": len(stale)}))
"""


def test_installed_packages_have_bytecode_though_python_writes_none() -> None:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-c", _PROBE], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=300, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["checked"] > 1000  # torch, pandas, optuna, ray and the rest were imported
    assert found["stale_count"] == 0, (
        f"{found['stale_count']} installed modules without valid bytecode, e.g. "
        f"{found['stale']}: `make setup` compiles them (compileall); rerun it")
