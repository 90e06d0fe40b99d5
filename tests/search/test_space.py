"""The space: only supported combinations are offered, names stay fixed per backend."""

from __future__ import annotations

import optuna
import yaml

from dse.search.space import device_options, suggest_candidate
from dse.spec import HardwareProfile, SearchSpace
from tests.conftest import LOCAL_CPU, TINY_SPACE


def test_torch_is_offered_fp32_only_and_candidates_are_stable() -> None:
    space = SearchSpace.model_validate(yaml.safe_load(TINY_SPACE))
    profile = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
    assert device_options(space, profile) == {"onnxruntime": ["fp32", "int8"], "torch": ["fp32"]}

    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        candidate = suggest_candidate(trial, space, profile)
        assert candidate.device_profile == "local-cpu"
        assert set(candidate.arch) == {"num_stages", "depth", "width_mult", "kernel_size",
                                       "expand_ratio"}
        knob = "intra_op_threads" if candidate.backend == "onnxruntime" else "num_threads"
        assert set(candidate.knobs) == {knob}
        assert (candidate.backend, candidate.precision) != ("torch", "int8")
        assert f"precision.{candidate.backend}" in trial.params
        seen.add((candidate.backend, candidate.precision))
        study.tell(trial, [0.5, 1.0])
    assert seen == {("onnxruntime", "fp32"), ("onnxruntime", "int8"), ("torch", "fp32")}


def test_candidate_ids_hash_everything_but_arch_id_only_the_model() -> None:
    from dse.core.candidate import Candidate

    a = Candidate("cnn", {"depth": 1}, "fp32", 1, "torch", {"num_threads": 1})
    b = Candidate("cnn", {"depth": 1}, "fp32", 8, "torch", {"num_threads": 1})
    assert a.arch_id == b.arch_id
    assert a.candidate_id != b.candidate_id
    assert Candidate.from_dict(a.to_dict()).candidate_id == a.candidate_id
