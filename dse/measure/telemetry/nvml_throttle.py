"""Decoding NVML's clocks-event-reasons bitmask (formerly "clocks throttle reasons").

NVML reports *why* the GPU runs below its maximum clock as a bitmask. Some bits are real throttling
(the device slowed our work because of power or heat); others are configuration or plain idleness.
:data:`THROTTLING_REASONS` names the first kind; ``throttled_fraction`` counts only those.
"""

from __future__ import annotations

import re
from types import ModuleType

#: NVML's bits by the suffix of their constant (``nvmlClocksEventReason<Suffix>`` and the older
#: ``nvmlClocksThrottleReason<Suffix>``), used when pynvml is not installed. A test asserts it equals
#: pynvml's constants, so it cannot drift from NVML.
FALLBACK_BITS: dict[str, int] = {
    "GpuIdle": 0x1,
    "ApplicationsClocksSetting": 0x2,
    "UserDefinedClocks": 0x2,
    "SwPowerCap": 0x4,
    "HwSlowdown": 0x8,
    "SyncBoost": 0x10,
    "SwThermalSlowdown": 0x20,
    "HwThermalSlowdown": 0x40,
    "HwPowerBrakeSlowdown": 0x80,
    "DisplayClockSetting": 0x100,
    "BoardLimit": 0x200,
    "Reliability": 0x400,
}

_PREFIXES = ("nvmlClocksEventReason", "nvmlClocksThrottleReason")
# Not reasons but summaries of the others; they would decode every mask as "all".
_NOT_REASONS = frozenset({"None", "All"})
# pynvml keeps UserDefinedClocks only as a deprecated alias of ApplicationsClocksSetting (same bit);
# decoding names each bit once, by its current name.
_DEPRECATED_ALIASES = frozenset({"user_defined_clocks"})

#: Reasons that mean the device slowed the work down against its will: the power limit (software cap,
#: or the board's hardware power brake), and temperature (software or hardware thermal slowdown), plus
#: the generic hardware slowdown that NVML raises for either. Left out on purpose: ``gpu_idle`` (clocks
#: drop because there is no work, not because work is held back), ``applications_clocks_setting`` /
#: ``user_defined_clocks`` and ``display_clock_setting`` (clocks an operator or the display chose, a
#: configuration recorded in provenance), ``sync_boost`` (clocks held level with the other GPUs of a sync
#: group), and the older ``board_limit`` / ``reliability`` bits, which current NVML no longer reports
#: as clocks events and whose meaning nvml.h leaves undocumented.
THROTTLING_REASONS: tuple[str, ...] = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)


def snake_case(suffix: str) -> str:
    """``"HwPowerBrakeSlowdown"`` -> ``"hw_power_brake_slowdown"``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", suffix).lower()


def bits_from_module(nvml: ModuleType) -> dict[str, int]:
    """The reason bits a pynvml module defines, by constant suffix (both naming families)."""
    bits: dict[str, int] = {}
    for attribute in dir(nvml):
        for prefix in _PREFIXES:
            suffix = attribute.removeprefix(prefix)
            if suffix == attribute or suffix in _NOT_REASONS:
                continue
            value = int(getattr(nvml, attribute))
            if bits.setdefault(suffix, value) != value:
                raise ValueError(f"pynvml defines {suffix!r} as both {bits[suffix]:#x} and {value:#x}")
    return bits


def reason_bits() -> dict[str, int]:
    """Reason name (snake case) -> bit, from pynvml's real constants when it is installed."""
    try:
        import pynvml
    except ImportError:
        bits = FALLBACK_BITS
    else:
        bits = bits_from_module(pynvml)
    return {snake_case(suffix): bit for suffix, bit in bits.items()}


def throttling_mask() -> int:
    """The bits of :data:`THROTTLING_REASONS` OR-ed together."""
    bits = reason_bits()
    mask = 0
    for name in THROTTLING_REASONS:
        mask |= bits[name]
    return mask


def decode_clock_event_reasons(mask: int) -> list[str]:
    """The names of the reasons set in ``mask``, lowest bit first; unknown bits as ``unknown_0x...``."""
    names: list[str] = []
    known = 0
    for name, bit in sorted(reason_bits().items(), key=lambda item: item[1]):
        known |= bit
        if mask & bit and name not in _DEPRECATED_ALIASES:
            names.append(name)
    unknown = mask & ~known
    bit = 1
    while unknown:
        if unknown & bit:
            names.append(f"unknown_{bit:#x}")
            unknown &= ~bit
        bit <<= 1
    return names
