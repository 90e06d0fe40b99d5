"""The zero-cost proxies scored on untrained torch models, by name (:data:`PROXIES`), each
declared once by its own module (:class:`ProxyDeclaration`, registered with
:func:`register_proxy`): dse's own in ``dse/accuracy/proxies.py``, others from ``$DSE_PLUGINS``.
A proxy ``x`` fills the metric ``proxy_x`` (built in for dse's own; a plugin's is declared in the
search space's ``metrics:``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dse.plugins.registry import Registry


@dataclass(frozen=True)
class ProxyDeclaration:
    """A zero-cost proxy: a score of an untrained network, higher = predicted better.

    Attributes:
        name: the proxy's name; its metric is ``proxy_<name>``.
        score: ``(module, inputs, labels) -> float`` on torch tensors; the module is the
            proxy's own copy, free to change.
        lowest_meaning: what the score's defined lowest value, ``-inf``, says of the network
            ("" when it has none).
    """

    name: str
    score: Callable[[Any, Any, Any], float]
    lowest_meaning: str = ""


PROXIES: Registry[ProxyDeclaration] = Registry(
    "proxy", ("dse.accuracy",), lambda declared: f"the declaration of {declared.name!r}")


def register_proxy(declaration: ProxyDeclaration) -> ProxyDeclaration:
    """Register a proxy under its name (a name given twice is refused)."""
    return PROXIES.register(declaration.name, declaration)
