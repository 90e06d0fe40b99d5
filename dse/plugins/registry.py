"""One registry mechanism for every pluggable part of dse (backends, telemetry probes, model
families, datasets, zero-cost proxies, samplers): a name -> item mapping that refuses a name given
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
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

from dse.core import DseError

PLUGINS_ENV = "DSE_PLUGINS"

T = TypeVar("T")

_imported: set[str] = set()  # built-in modules already imported by a registry's first read
_plugins_loaded = False
_loading = threading.RLock()


def plugin_modules(environ: Mapping[str, str] | None = None) -> list[str]:
    """The entries of ``$DSE_PLUGINS`` (comma or whitespace separated): ``module`` or
    ``module:function``."""
    text = (os.environ if environ is None else environ).get(PLUGINS_ENV, "")
    return [name for name in text.replace(",", " ").split() if name]


def import_builtin(modules: Iterable[str]) -> None:
    """Import each module of ``modules``, and for a package every public submodule (no leading
    underscore): the parts that ship with dse register themselves when imported."""
    with _loading:
        for name in modules:
            if name in _imported:
                continue
            _imported.add(name)
            found = importlib.import_module(name)
            for module in pkgutil.iter_modules(getattr(found, "__path__", [])):
                if not module.name.startswith("_"):
                    importlib.import_module(f"{name}.{module.name}")


def load_plugins() -> None:
    """Import the modules of ``$DSE_PLUGINS`` (calling ``function`` of a ``module:function``),
    once per process; a plugin that fails says which, in one line, and is tried again next time."""
    global _plugins_loaded
    with _loading:
        if _plugins_loaded:
            return
        _plugins_loaded = True
        for entry in plugin_modules():
            module_name, _, function = entry.partition(":")
            try:
                loaded = importlib.import_module(module_name)
                if function:
                    getattr(loaded, function)()
            except Exception as exc:  # a plugin's own error: say which plugin, in one line
                _plugins_loaded = False
                raise DseError(f"{PLUGINS_ENV}: cannot load plugin {entry!r}: "
                               f"{type(exc).__name__}: {exc}") from None


class Registry(Mapping[str, T], Generic[T]):
    """Parts of one ``kind`` ("backend", "probe", ...) by name, in registration order.

    ``builtin`` names the modules holding dse's own parts of this kind (a package stands for
    every public module in it). Reading the registry (any Mapping method) first runs
    :meth:`load`; :meth:`register` refuses a name given twice."""

    def __init__(self, kind: str, builtin: tuple[str, ...],
                 describe: Callable[[T], str] = repr) -> None:
        self.kind = kind
        self.builtin = builtin
        self._items: dict[str, T] = {}
        self._describe = describe

    def load(self) -> None:
        """Fill the registry: import its built-in modules and the plugins (each once per process;
        calls made while they import, by a part's module looking a registry up, return at once)."""
        import_builtin(self.builtin)
        load_plugins()

    def register(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered (by "
                             f"{self._describe(self._items[name])}); a name is given once")
        self._items[name] = item
        return item

    def __getitem__(self, name: str) -> T:
        self.load()
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {name!r}; known: "
                           f"{', '.join(sorted(self._items)) or 'none'}") from None

    def __iter__(self) -> Iterator[str]:
        self.load()
        return iter(list(self._items))

    def __len__(self) -> int:
        self.load()
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._items

    def names(self) -> tuple[str, ...]:
        """Every registered name, sorted (the order of messages and schema enums)."""
        return tuple(sorted(self))
