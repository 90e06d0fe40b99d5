"""The portable front: architectures on the front of more than one device."""

from __future__ import annotations

import pandas as pd

from dse.results import portable_front


def _front() -> pd.DataFrame:
    return pd.DataFrame({
        "trial": [0, 3, 1, 2, 5],
        "device": ["cpu", "cpu", "jetson", "jetson", "gpu"],
        "param.arch.width": [0.5, 1.0, 0.5, 2.0, 0.5],
        "param.arch.depth": [1, 2, 1, 1, 1],
        "param.precision": ["int8", "fp32", "fp16", "fp16", "fp8"],
    })


def test_an_architecture_on_several_fronts_is_portable_whatever_its_deployment() -> None:
    portable = portable_front(_front())
    assert portable.to_dict("records") == [{
        "param.arch.width": 0.5, "param.arch.depth": 1, "devices": "cpu, gpu, jetson",
        "device_count": 3, "trials": "cpu#0, gpu#5, jetson#1"}]


def test_one_device_has_no_portable_front() -> None:
    one = _front()[lambda f: f["device"] == "cpu"]
    assert portable_front(one).empty
    assert list(portable_front(one).columns) == ["param.arch.width", "param.arch.depth", "devices",
                                                 "device_count", "trials"]


def test_free_parameters_are_the_key_when_there_is_no_architecture() -> None:
    front = pd.DataFrame({"trial": [0, 1], "device": ["a", "b"], "param.x": [0.1, 0.1],
                          "param.knob.threads": [1, 2]})
    assert portable_front(front)[["param.x", "device_count"]].to_dict("records") == [
        {"param.x": 0.1, "device_count": 2}]
