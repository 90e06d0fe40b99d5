"""A loaded language model written out as a Hugging Face folder, which other tools load without
dse: ONNX Runtime GenAI's model builder, and the torch ``run.py`` of an exported bundle."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dse.models.llm import LanguageModel


def save_hf_folder(model: LanguageModel, folder: Path, dtype: str = "float32") -> None:
    """The loaded weights as a Hugging Face folder (config, safetensors, tokenizer): what ONNX
    Runtime GenAI's model builder reads, and what an exported torch bundle loads. transformers
    will not save a model it dequantized from GGUF, so a model built from the same config takes
    its weights first; the config forgets the GGUF file's quantization (the weights handed over
    are the dequantized ones, and a reader would take them as GGUF-quantized). A config model
    without a tokenizer gets a word-level one over its vocabulary. ``dtype`` (a torch dtype's
    name): the weights' type in the files (a bf16 deployment's bundle need not carry fp32)."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.module.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh: Any = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    fresh.load_state_dict(model.module.state_dict())
    fresh.to(getattr(torch, dtype)).save_pretrained(folder)
    if model.tokenizer is not None:
        model.tokenizer.save_pretrained(folder)
    else:
        word_tokenizer(int(config.vocab_size)).save_pretrained(folder)


def word_tokenizer(vocab_size: int) -> Any:
    """A word-level tokenizer over ``vocab_size`` ids (``<i>`` is id i), for a config model."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({f"<{i}>": i for i in range(vocab_size)},
                                       unk_token="<0>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=words, unk_token="<0>")
