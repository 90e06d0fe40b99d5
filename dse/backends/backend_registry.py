"""The backend registry: one instance per backend class, registered with its declaration by
:func:`register_backend` from the backend's own module, and filled on first use (see
:mod:`dse.plugins.registry`: the built-in backends, then ``$DSE_PLUGINS``)."""

from __future__ import annotations

from typing import TypeVar

from dse.backends.base import Backend
from dse.plugins import BACKEND_DECLARATIONS, Registry

BACKENDS: Registry[Backend] = Registry("backend", ("dse.backends",),
                                       lambda backend: type(backend).__qualname__)

_B = TypeVar("_B", bound=type[Backend])


def register_backend(cls: _B) -> _B:
    """Class decorator: register one instance of ``cls`` under its declaration's name, and the
    declaration for the layers that must not import backends (build, spec, measure). A name
    given twice is refused."""
    declared = cls.__dict__.get("declaration")
    if declared is None:
        raise TypeError(f"{cls.__qualname__}: a backend declares itself: set the class "
                        f"attribute declaration = BackendDeclaration(...)")
    BACKENDS.register(declared.name, cls())
    BACKEND_DECLARATIONS.register(declared.name, declared)
    return cls


def get_backend(name: str) -> Backend:
    """The registered backend ``name``; raises KeyError listing the known backends."""
    return BACKENDS[name]
