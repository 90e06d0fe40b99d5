"""A language model's bundle: each runtime's model folder with the workload's prompts and the
greedy tokens recorded on them, and a run.py that, with only the runtime installed, decodes the
same tokens and times requests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from dse.core import Candidate
from dse.deploy import RecordedTrial, write_generation_bundle
from dse.deploy.manifest import manifest_problems
from dse.spec.loading import load_profile
from dse.trial import export_generator, prepare_generator

pytest.importorskip("transformers", reason="needs transformers (pip install 'dse[llm]')")

PROFILE = load_profile(Path(__file__).resolve().parents[2] / "hw_profiles" / "local-cpu.yaml")
# Every width a multiple of 32: int4's groups of 32 divide each layer's input.
BASE = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2}
RUNTIMES = {"torch": ("transformers", {"weights": "int8"}),
            "openvino": ("openvino", {"weights": "int4", "weight_group_size": 32}),
            "onnxruntime_genai": ("onnxruntime_genai", {})}


def _recorded() -> RecordedTrial:
    return RecordedTrial(campaign="llm", experiment="experiments/llm.yaml", device="local-cpu",
                         device_id="local-cpu#0", trial=3,
                         metrics={"ttft_p50_ms": 1.5, "tpot_p50_ms": 0.5}, missing={},
                         provenance={}, quality="ok", objectives=["tpot_p50_ms"],
                         constraints=[], measurement={})


@pytest.mark.parametrize("backend", sorted(RUNTIMES))
def test_a_bundle_runs_alone_and_decodes_the_recorded_tokens(backend: str,
                                                              tmp_path: Path) -> None:
    library, knobs = RUNTIMES[backend]
    pytest.importorskip(library, reason=f"needs {library} (pip install 'dse[llm]')")
    candidate = Candidate(
        family="llm:llama", precision="fp32", batch_size=2, backend=backend,
        knobs={"num_threads": 1, **knobs}, device_profile="local-cpu",
        model={"llm": {"kind": "config", "config": "llama", "seed": 0, "base": BASE},
               "workload": {"prompt_tokens": 8, "output_tokens": 5}})
    prepared = prepare_generator(candidate, PROFILE, tmp_path / "cache")
    try:
        exported = export_generator(candidate, prepared, None)
    finally:
        prepared.runner.close()
    folder = write_generation_bundle(tmp_path / "bundle", exported, candidate, _recorded(),
                                     "name: local-cpu\n")
    assert manifest_problems(folder) == []
    deployment = yaml.safe_load((folder / "deployment.yaml").read_text())
    assert deployment["kind"] == "generation"
    assert deployment["deployment"]["knobs"] == candidate.knobs
    assert deployment["workload"]["prompt_tokens"] == 8
    assert np.load(folder / "data" / "prompts.npy").shape == (2, 8)
    assert np.load(folder / "data" / "tokens.npy").shape == (2, 5)
    assert (folder / "requirements.txt").read_text().startswith(
        "--extra-index-url" if backend == "torch" else "")
    # run.py imports no dse: run from the bundle's folder, in a fresh interpreter.
    done = subprocess.run([sys.executable, "run.py", "--repeat", "2"], cwd=folder,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the same as recorded at export: 100.0% of the tokens" in done.stdout, done.stdout
    assert "2 requests of 2 x 8 prompt tokens and 5 output tokens: TTFT p50" in done.stdout
