"""The tree reads like the layer contract: ``dse/`` holds packages only, each one a layer (or a
sibling within one) of ``pyproject.toml``'s import contract, and each package below the top layer
keeps the rest of dse behind its face (a ``protected`` contract). A new loose module or a package
left out of the contract fails here, before it blurs the picture."""

from __future__ import annotations

from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
TOP = {"cli", "examples", "testing"}  # nothing of dse imports them: no face to keep


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _packages() -> set[str]:
    return {path.parent.name for path in (REPO / "dse").glob("*/__init__.py")}


def test_dse_holds_packages_only() -> None:
    loose = sorted(path.name for path in (REPO / "dse").glob("*.py") if path.name != "__init__.py")
    assert loose == [], f"modules outside every layer's folder: {loose}"


def test_every_package_is_one_layer_of_the_contract() -> None:
    (layers,) = [c for c in _contracts() if c["name"] == "dse layers"]
    named = [entry.strip() for layer in layers["layers"]  # type: ignore[attr-defined]
             for entry in str(layer).split("|")]
    assert all(entry.startswith("dse.") and entry.count(".") == 1 for entry in named), named
    assert sorted(entry.removeprefix("dse.") for entry in named) == sorted(_packages())


def test_every_package_below_the_top_has_a_protected_face() -> None:
    protected = {str(c["allowed_importers"][0]).removeprefix("dse.")  # type: ignore[index]
                 for c in _contracts() if c["type"] == "protected"}
    assert protected == _packages() - TOP
