"""What an OpenVINO compiled model says it runs with: its properties as read back, in words, for
a runner's describe() (the settings in effect, not those asked for)."""

from __future__ import annotations

from typing import Any


def in_effect(compiled: Any, threads_asked: str) -> dict[str, str]:
    """describe()'s settings as the compiled model reports them, not as they were asked ("n/a"
    for a property the device's plugin does not have)."""
    supported = set(compiled.get_property("SUPPORTED_PROPERTIES"))

    def read(key: str) -> str | None:
        return property_text(compiled.get_property(key)) if key in supported else None

    return {"threads": read("INFERENCE_NUM_THREADS") or threads_asked,
            "performance_hint": (read("PERFORMANCE_HINT") or "n/a").lower(),
            "num_streams": read("NUM_STREAMS") or "n/a",
            "optimal_infer_requests": read("OPTIMAL_NUMBER_OF_INFER_REQUESTS") or "n/a",
            "inference_precision": read("INFERENCE_PRECISION_HINT") or "n/a",
            "cpu_pinning": read("ENABLE_CPU_PINNING") or "n/a",
            "execution_devices": ",".join(str(name) for name in
                                          compiled.get_property("EXECUTION_DEVICES"))}


def property_text(value: Any) -> str:
    """A property's value in words: an ``openvino.Type`` by its short name (``bf16``), an enum
    by its member's name (``LATENCY``), anything else as ``str``."""
    type_name = getattr(value, "get_type_name", None)
    if callable(type_name):
        return str(type_name())
    return str(getattr(value, "name", value))
