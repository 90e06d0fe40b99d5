"""The backend registry: a plain dict filled at import by :func:`register_backend`."""

from __future__ import annotations

from typing import TypeVar

from dse.backends.base import Backend

BACKENDS: dict[str, Backend] = {}

_B = TypeVar("_B", bound=type[Backend])


def register_backend(cls: _B) -> _B:
    """Class decorator: register one instance of ``cls`` under ``cls.name``."""
    if cls.name in BACKENDS:
        raise ValueError(f"backend {cls.name!r} is already registered "
                         f"(by {type(BACKENDS[cls.name]).__qualname__})")
    BACKENDS[cls.name] = cls()
    return cls


def get_backend(name: str) -> Backend:
    """The registered backend ``name``; raises KeyError listing the known backends."""
    try:
        return BACKENDS[name]
    except KeyError:
        known = ", ".join(sorted(BACKENDS)) or "none"
        raise KeyError(f"unknown backend {name!r}; known: {known}") from None
