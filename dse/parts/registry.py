"""One registry mechanism for every pluggable part of dse (backends today; probes, families,
datasets, proxies and samplers as they move over): a name -> item mapping that refuses a name given
twice and fills itself, on first use, by importing the parts that ship with dse and the modules
named in ``$DSE_PLUGINS``.

Filling on first use rather than at import keeps ``import dse`` light and lets a part's module
import anything of dse (the build layer, say) without an import circle: the registry lives at the
bottom of the layers and reaches the parts only by module name. A plugin is any importable module
that registers parts when imported (``DSE_PLUGINS=mylab.npu_backend dse run ...``), or
``module:function`` for a module that registers from a function (one that has other uses too,
such as a test file); every process that looks a part up — the driver and each device worker —
loads the same list, so set the variable where ``dse run`` and ``dse worker`` start.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from dse.exceptions import DseError

PLUGINS_ENV = "DSE_PLUGINS"
# Packages whose every public module (no leading underscore) is imported to fill the registries.
BUILTIN_PACKAGES = ("dse.backends",)

T = TypeVar("T")

_loaded = False
_loading = threading.RLock()


def plugin_modules(environ: Mapping[str, str] | None = None) -> list[str]:
    """The entries of ``$DSE_PLUGINS`` (comma or whitespace separated): ``module`` or
    ``module:function``."""
    text = (os.environ if environ is None else environ).get(PLUGINS_ENV, "")
    return [name for name in text.replace(",", " ").split() if name]


def load_parts() -> None:
    """Import the built-in parts and the plugins, once per process (a no-op after the first
    call, and for calls made while it runs: a part's module may look a registry up)."""
    global _loaded
    with _loading:
        if _loaded:
            return
        _loaded = True
        for package in BUILTIN_PACKAGES:
            found = importlib.import_module(package)
            for module in pkgutil.iter_modules(found.__path__):
                if not module.name.startswith("_"):
                    importlib.import_module(f"{package}.{module.name}")
        for entry in plugin_modules():
            module_name, _, function = entry.partition(":")
            try:
                loaded = importlib.import_module(module_name)
                if function:
                    getattr(loaded, function)()
            except Exception as exc:  # a plugin's own error: say which plugin, in one line
                _loaded = False
                raise DseError(f"{PLUGINS_ENV}: cannot load plugin {entry!r}: "
                               f"{type(exc).__name__}: {exc}") from None


class Registry(Mapping[str, T], Generic[T]):
    """Parts of one ``kind`` ("backend", ...) by name, in registration order. Reading it (any
    Mapping method) first runs :func:`load_parts`; :meth:`register` refuses a name given twice."""

    def __init__(self, kind: str, describe: Callable[[T], str] = repr) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._describe = describe

    def register(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered (by "
                             f"{self._describe(self._items[name])}); a name is given once")
        self._items[name] = item
        return item

    def __getitem__(self, name: str) -> T:
        load_parts()
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {name!r}; known: "
                           f"{', '.join(sorted(self._items)) or 'none'}") from None

    def __iter__(self) -> Iterator[str]:
        load_parts()
        return iter(list(self._items))

    def __len__(self) -> int:
        load_parts()
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        load_parts()
        return name in self._items

    def names(self) -> tuple[str, ...]:
        """Every registered name, sorted (the order of messages and schema enums)."""
        return tuple(sorted(self))
