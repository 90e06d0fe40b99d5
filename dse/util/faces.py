"""A package face whose names load on first use (PEP 562).

A face lists each public name with the module that defines it; importing the package imports
none of those modules, so a light module of the package — or a subprocess started with
``python -m`` on one of its modules — never pays for a heavy sibling. Static checkers read the
same names from the face's ``if TYPE_CHECKING:`` imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, names: Mapping[str, str]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``'s face: ``names`` maps each public name
    to the module it is read from; a name is imported once, then kept on the package."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
