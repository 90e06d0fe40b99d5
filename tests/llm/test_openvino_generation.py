"""OpenVINO as a generation runtime (the ``openvino`` backend's stateful IR of a language model),
on small random-weight models transformers builds from a config: the same greedy tokens as eager
torch at fp32, logits for quality, the KV cache's bytes at the applied precision, NNCF's weight
formats, and refused knobs and combinations named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.accuracy import heldout_ids, language_quality, prompt_ids
from dse.backends import get_backend
from dse.core import BuildError
from dse.models import load_language_model
from dse.spec.loading import load_profile

pytest.importorskip("transformers", reason="needs transformers (pip install 'dse[llm]')")
pytest.importorskip("openvino", reason="needs openvino (pip install 'dse[openvino]')")

PROFILE = load_profile(Path(__file__).resolve().parents[2] / "hw_profiles" / "local-cpu.yaml")
# Every width a multiple of 32, so that int4's groups of 32 divide each layer's input.
CONFIG = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96}


def _model(model_type: str = "llama"):  # type: ignore[no-untyped-def]
    return load_language_model({"kind": "config", "config": model_type, "base": CONFIG,
                                "seed": 0}, {})


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_greedy_tokens_are_torchs(model_type: str, tmp_path: Path) -> None:
    model = _model(model_type)
    prompts = prompt_ids(None, model.vocab_size, "builtin", 3, 9)
    backend = get_backend("openvino")
    with get_backend("torch").compile_generator(model, "fp32", {"num_threads": 1}, PROFILE,
                                                3) as torch_runner:
        expected = torch_runner.generate(prompts, 7)
        reference = torch_runner.logits(prompts)
    with backend.compile_generator(model, "fp32", {"num_threads": 1}, PROFILE, 3,
                                   cache_dir=tmp_path) as runner:
        assert np.array_equal(runner.generate(prompts, 7), expected)
        # Twice: each request starts from an empty state.
        assert np.array_equal(runner.generate(prompts, 7), expected)
        logits = runner.logits(prompts)
        assert logits.shape == reference.shape and np.abs(logits - reference).max() < 1e-3
        described = runner.describe()
        assert described["inference_precision"] == "f32"
        assert described["kv_cache_precision"] == "f32"
        # 2 (keys, values) x layers x batch x KV heads x (prompt + output - 1) x head size x 4.
        head_dim = CONFIG["hidden_size"] // CONFIG["num_attention_heads"]
        assert runner.kv_cache_bytes() == (2 * CONFIG["num_hidden_layers"] * 3
                                           * CONFIG["num_key_value_heads"] * (9 + 7 - 1)
                                           * head_dim * 4)
    # The IR is cached: a second build finds the folder.
    assert len(list((tmp_path / "openvino_llm").iterdir())) == 1


def test_weight_and_cache_formats_shrink_and_stay_close(tmp_path: Path) -> None:
    model = _model()
    ids = heldout_ids(None, model.vocab_size, 96)
    backend = get_backend("openvino")
    with backend.compile_generator(model, "fp32", {"num_threads": 1}, PROFILE, 1,
                                   cache_dir=tmp_path) as fp32:
        reference, full_bytes = fp32.logits(ids), fp32.weights_bytes
    sizes = {}
    for knobs in ({"weights": "int8"}, {"weights": "int4", "weight_group_size": 32},
                  {"kv_cache": "int8"}):
        with backend.compile_generator(model, "fp32", {"num_threads": 1, **knobs}, PROFILE, 1,
                                       cache_dir=tmp_path) as runner:
            quality = language_quality(runner.logits(ids), reference, ids)
            assert quality["token_agreement"] > 0.5, (knobs, quality)
            sizes[str(knobs)] = runner.weights_bytes
            if "kv_cache" in knobs:
                assert runner.describe()["kv_cache_precision"] == "u8"
                runner.generate(ids[:, :8], 4)
                cache = runner.kv_cache_bytes()
                assert cache == (2 * CONFIG["num_hidden_layers"] * CONFIG["num_key_value_heads"]
                                 * (8 + 4 - 1) * CONFIG["hidden_size"] // 4)
    assert full_bytes is not None
    assert sizes["{'weights': 'int8'}"] < full_bytes / 2
    assert sizes["{'weights': 'int4', 'weight_group_size': 32}"] < sizes["{'weights': 'int8'}"]


def test_refused_knobs_and_precisions_are_named(tmp_path: Path) -> None:
    model = _model()
    backend = get_backend("openvino")
    with pytest.raises(BuildError,
                       match=r"knob\(s\) \['performance_hint'\].*not for a generative"):
        backend.compile_generator(model, "fp32", {"performance_hint": "latency"}, PROFILE, 1,
                                  cache_dir=tmp_path)
    with pytest.raises(BuildError, match=r"kv_cache.*one of"):
        backend.compile_generator(model, "fp32", {"kv_cache": "int4"}, PROFILE, 1,
                                  cache_dir=tmp_path)
    with pytest.raises(BuildError, match="weights: int8 or int4"):
        backend.compile_generator(model, "int8", {}, PROFILE, 1, cache_dir=tmp_path)
    with pytest.raises(BuildError, match="groups of 128"):
        # 96 inputs of the down projection: groups of 128 do not divide them.
        backend.compile_generator(model, "fp32", {"weights": "int4", "weight_group_size": 128},
                                  PROFILE, 1, cache_dir=tmp_path)


def test_a_fixed_shape_model_refuses_the_language_model_knobs() -> None:
    backend = get_backend("openvino")
    with pytest.raises(BuildError, match="'kv_cache' must be one of"):
        backend.check_knob_values({"kv_cache": "fp8"})
    with pytest.raises(BuildError, match=r"\['kv_cache', 'weights'\].*generative language"):
        backend.compile(None, {"weights": "int8", "kv_cache": "int8"},  # type: ignore[arg-type]
                        PROFILE, 1)


def test_a_request_computes_the_last_positions_logits_only(tmp_path: Path) -> None:
    """The IR takes the positions whose logits to compute: a request's prefill gets the last
    prompt position's (the head over the whole prompt would cost it as much again as the
    vocabulary is wide), the quality pass every position's; the two agree where they overlap."""
    import openvino as ov

    from dse.backends.openvino.llm_ir import IR_FILE, stateful_ir

    model = _model()
    prompts = prompt_ids(None, model.vocab_size, "builtin", 2, 9)
    folder = stateful_ir(model, "same", 32, tmp_path)
    compiled = ov.Core().compile_model(str(folder / IR_FILE), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    feed = {"input_ids": prompts, "attention_mask": np.ones_like(prompts),
            "position_ids": np.ascontiguousarray(np.broadcast_to(np.arange(9), (2, 9)))}
    shapes, last = [], []
    for keep in (np.array([8]), np.arange(9)):
        request = compiled.create_infer_request()
        request.infer({**feed, "logits_to_keep": keep})
        logits = request.get_tensor("logits").data
        shapes.append(logits.shape)
        last.append(np.array(logits[:, -1]))
    assert shapes == [(2, 1, model.vocab_size), (2, 9, model.vocab_size)]
    assert np.abs(last[0] - last[1]).max() < 1e-4
