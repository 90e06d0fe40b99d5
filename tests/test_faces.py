"""Every package's face: what the rest of dse imports from a package (``make lint`` keeps deep
imports out). Each listed name resolves; a face that loads its names on first use
(:mod:`dse.util.faces`) lists the same names for the type checker as for the loader, and
importing it imports none of its modules."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = sorted(path.parent.name for path in (REPO / "dse").glob("*/__init__.py")
                  if path.parent.name not in ("cli", "examples", "testing"))
# The faces that load their names on first use (dse.util.faces), told apart without importing.
LAZY = [package for package in PACKAGES
        if "lazy_names(__name__" in (REPO / "dse" / package / "__init__.py").read_text()]


def _type_checking_names(package: str) -> dict[str, str]:
    tree = ast.parse((REPO / "dse" / package / "__init__.py").read_text())
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module
                for alias in statement.names:
                    names[alias.asname or alias.name] = statement.module
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_every_listed_name_resolves(package: str) -> None:
    face = importlib.import_module(f"dse.{package}")
    assert face.__all__, f"dse.{package} lists no names"
    for name in face.__all__:
        assert getattr(face, name) is not None
        assert name in dir(face)


@pytest.mark.parametrize("package", LAZY)
def test_a_lazy_face_tells_the_type_checker_what_it_loads(package: str) -> None:
    face = importlib.import_module(f"dse.{package}")
    assert _type_checking_names(package) == face._NAMES


def test_importing_the_lazy_faces_loads_none_of_their_modules() -> None:
    assert len(LAZY) >= 8
    code = ("import sys\n" + "".join(f"import dse.{package}\n" for package in LAZY)
            + "print(sorted(m for m in sys.modules if m.startswith('dse.') and m.count('.') > 1"
            " and m != 'dse.util.faces' and not m.startswith('dse.core.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
