"""Which (backend, precision, device kind) combinations exist, and why the others do not.

Consulted before anything heavy is imported or built, so impossible candidates are never proposed
(search) and never built (farm). Each backend declares its own entries (``capability`` of its
:class:`~dse.plugins.backends.BackendDeclaration`); this module holds the vocabulary they share and
the table derived from them. The key is (backend, precision, device kind) only: runtime knobs (a
torch.compile mode, a thread count) are validated by the backend when it compiles, and
``min_compute_capability`` is checked there too, because a profile does not name its GPU.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import product

from dse.plugins import (
    DEVICE_KINDS,
    PRECISIONS,
    Capability,
    backend_names,
    capability,
    generation_capability,
)

__all__ = ["CAPABILITIES", "DEVICE_KINDS", "PRECISIONS", "Capability", "supports",
           "supports_device"]

# bf16 arithmetic arrived with Ampere (8.0); Triton, inductor's GPU code generator, needs Volta (7.0);
# fp8 tensor cores arrived with Ada/Hopper (8.9). Jetson Orin is 8.7: bf16 yes, fp8 no.
BF16_CC = 8.0
TRITON_CC = 7.0
FP8_CC = 8.9
NO_GPU = "needs a CUDA device; a cpu profile has none"


def gpu_runtime(kind: str, what: str) -> str:
    """What a GPU backend needs on a device of ``kind``, in words."""
    return f"{what} ({'JetPack build' if kind == 'jetson' else 'CUDA build'})"


class _Table(Mapping[tuple[str, str, str], Capability]):
    """Every registered backend's entries, keyed (backend, precision, device kind); read from
    the declarations on each access, so a backend registered later (a plugin) is in it."""

    def __getitem__(self, key: tuple[str, str, str]) -> Capability:
        entry = capability(*key)
        if entry is None:
            raise KeyError(key)
        return entry

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        return iter(product(backend_names(), PRECISIONS, DEVICE_KINDS))

    def __len__(self) -> int:
        return len(backend_names()) * len(PRECISIONS) * len(DEVICE_KINDS)


CAPABILITIES: Mapping[tuple[str, str, str], Capability] = _Table()


def __getattr__(name: str) -> object:
    if name == "BACKEND_NAMES":  # derived from the registry, which fills on first use
        return backend_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def supports(backend: str, precision: str, device_kind: str) -> tuple[bool, str]:
    """Whether ``backend`` can run ``precision`` on a ``device_kind`` device, and why (not)."""
    entry = CAPABILITIES.get((backend, precision, device_kind))
    if entry is None:
        return False, (f"no capability entry for {backend=}, {precision=}, {device_kind=}; "
                       f"known backends: {list(backend_names())}, "
                       f"precisions: {sorted(PRECISIONS)}, device kinds: {sorted(DEVICE_KINDS)}")
    return entry.supported, entry.reason


def supports_device(backend: str, precision: str, device_kind: str,
                    compute_capability: float | None, *,
                    generative: bool = False) -> tuple[bool, str]:
    """:func:`supports`, plus the entry's compute-capability floor when the device's profile
    names its GPU's compute capability (a profile that does not is checked when compiling).
    ``generative``: the entry for a generative language model (the backend's declared
    ``generation`` capability) instead of a fixed-shape model's."""
    if generative:
        entry = generation_capability(backend, precision, device_kind)
        if entry is None:
            return supports(backend, precision, device_kind)  # says what is unknown
        ok, reason = entry.supported, entry.reason
    else:
        ok, reason = supports(backend, precision, device_kind)
        entry = CAPABILITIES[backend, precision, device_kind] if ok else None
    floor = entry.min_compute_capability if ok and entry is not None else None
    if floor is not None and compute_capability is not None and compute_capability < floor:
        return False, (f"{backend} {precision} needs compute capability >= {floor:g}; the device's "
                       f"GPU has {compute_capability:g}")
    return ok, reason
