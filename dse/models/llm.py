"""Generative language models as a model source (``model: {llm: ...}``): the candidate's settings
and the loaded model.

A candidate of such a space has ``family`` ``llm:<name>`` (the GGUF file's or folder's name, or the
config's model_type) and carries in ``model``:

- ``llm``: the source — ``kind`` (``gguf``, ``folder`` or ``config``), its absolute path or
  model_type, a GGUF file's SHA-256, a config model's fixed ``base`` values and weight ``seed``;
- ``workload``: the requests it is timed with (:class:`dse.spec.WorkloadSpec`, as plain data).

A config model's architecture parameters (``arch``) are transformers config fields
(``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``,
``intermediate_size``, ``vocab_size``, ...) merged over ``base``: any causal LM that transformers
builds from its ``model_type`` (Llama, Qwen2, Gemma, Phi, ...), with random weights drawn from
the seed. :func:`load_language_model` returns the fp32 model, on the CPU, in eval mode, and its
tokenizer (none for a config model); loading a GGUF file dequantizes it (transformers needs the
``gguf`` and ``accelerate`` packages: ``pip install dse[llm]``), which takes seconds, so the last
models loaded are kept in the process.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.core import stable_hash
from dse.models.file_hash import file_sha256

if TYPE_CHECKING:
    from dse.spec import LlmSpec

LLM_PREFIX = "llm:"
#: Models kept loaded in one process (a worker measures candidates of one model in a row).
KEPT_MODELS = 2
# Config fields that count something and must be positive integers.
_COUNTS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
           "intermediate_size", "vocab_size", "max_position_embeddings", "head_dim")


def is_llm_source(family: str) -> bool:
    """Whether ``family`` names a generative language model."""
    return family.startswith(LLM_PREFIX)


def llm_candidate_source(llm: LlmSpec) -> tuple[str, dict[str, Any]]:
    """``(Candidate.family, Candidate.model["llm"])`` of a loaded space's ``model.llm`` (its
    files already absolute). ValueError when a GGUF file cannot be read."""
    settings: dict[str, Any] = {"kind": llm.kind}
    if llm.gguf is not None:
        path = Path(llm.gguf)
        settings.update(gguf=str(path), sha256=file_sha256(path))
        if llm.package is not None:
            settings["package"] = llm.package
        return LLM_PREFIX + path.name, settings
    if llm.folder is not None:
        settings["folder"] = llm.folder
        return LLM_PREFIX + Path(llm.folder).name, settings
    assert llm.config is not None  # LlmSpec holds exactly one source
    settings.update(config=llm.config, base=dict(llm.base), seed=llm.seed)
    return LLM_PREFIX + llm.config, settings


def checked_arch(settings: Mapping[str, Any], arch: Mapping[str, Any]) -> dict[str, Any]:
    """The config a config model is built from (``base`` under ``arch``), its counts checked
    without transformers: positive integers, heads that divide the hidden size, key/value heads
    that divide the heads. ValueError naming each bad value; an empty dict for a model that is
    a file (its config is its own)."""
    if settings.get("kind") != "config":
        if arch:
            raise ValueError(f"a {settings.get('kind')} language model has a fixed "
                             f"architecture; got arch {dict(arch)}")
        return {}
    config = {**dict(settings.get("base", {})), **dict(arch)}
    bad = [f"{name}={config[name]!r}" for name in _COUNTS if name in config
           and (isinstance(config[name], bool) or not isinstance(config[name], int)
                or config[name] < 1)]
    if bad:
        raise ValueError(f"config values must be positive integers: {', '.join(bad)}")
    heads = config.get("num_attention_heads")
    if heads and "hidden_size" in config and "head_dim" not in config \
            and config["hidden_size"] % heads:
        raise ValueError(f"hidden_size {config['hidden_size']} is not a multiple of "
                         f"num_attention_heads {heads}")
    kv_heads = config.get("num_key_value_heads")
    if heads and kv_heads and heads % kv_heads:
        raise ValueError(f"num_attention_heads {heads} is not a multiple of "
                         f"num_key_value_heads {kv_heads} (grouped-query attention shares each "
                         f"key/value head among a whole number of query heads)")
    return config


@dataclass
class LanguageModel:
    """A loaded causal language model: the fp32 module (on the CPU, eval mode; shared by every
    candidate of it, so never changed: a runtime copies before casting), its tokenizer (None for
    a config model), ``key`` (a stable id of these weights), the seconds the load took (0 when
    it was already loaded) and where it came from."""

    module: Any
    tokenizer: Any | None
    key: str
    load_seconds: float
    source: str

    @property
    def vocab_size(self) -> int:
        return int(self.module.config.vocab_size)

    @property
    def parameters(self) -> int:
        return int(sum(p.numel() for p in self.module.parameters()))


def weights_key(settings: Mapping[str, Any], arch: Mapping[str, Any]) -> str:
    """A stable id of the weights ``settings`` and ``arch`` give (a file's by its content)."""
    source = {k: v for k, v in settings.items() if k not in ("gguf", "package")}
    return stable_hash({"llm": source, "arch": dict(arch)})


def load_language_model(settings: Mapping[str, Any],
                        arch: Mapping[str, Any]) -> LanguageModel:
    """The model ``settings`` (a candidate's ``model["llm"]``) and ``arch`` describe, loaded or
    taken from the ones this process keeps. ValueError, in one line, when it cannot be built:
    an unknown model_type, a config transformers refuses, a file it cannot read, a package
    missing."""
    config = checked_arch(settings, arch)
    key = weights_key(settings, arch)
    kept = _LOADED.get(key)
    if kept is not None:
        _LOADED.move_to_end(key)
        return LanguageModel(kept.module, kept.tokenizer, key, 0.0, kept.source)
    start = time.perf_counter()
    try:
        with _no_progress_bars():
            module, tokenizer, source = _load(settings, config)
    except ImportError as exc:
        raise ValueError(f"loading a {settings.get('kind')} language model needs "
                         f"{exc.name or exc}: pip install 'dse[llm]'") from exc
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise ValueError(f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc
    module.eval()
    loaded = LanguageModel(module, tokenizer, key, time.perf_counter() - start, source)
    _LOADED[key] = loaded
    while len(_LOADED) > KEPT_MODELS:
        _LOADED.popitem(last=False)
    return loaded


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' progress bars off while a model loads (a worker's log is not a terminal:
    a GGUF file's 272 tensors would print a bar each), as they were after."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def _load(settings: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Any, Any, str]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kind = settings.get("kind")
    if kind == "gguf":
        path = Path(str(settings["gguf"]))
        if file_sha256(path) != settings.get("sha256"):
            raise ValueError(f"{path} is not the file the campaign began with (its SHA-256 "
                             f"changed)")
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        module = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                      dtype=torch.float32)
        return module, tokenizer, f"gguf {path.name} (dequantized to fp32)"
    if kind == "folder":
        folder = Path(str(settings["folder"]))
        tokenizer = AutoTokenizer.from_pretrained(folder)
        module = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        return module, tokenizer, f"folder {folder.name}"
    model_type = str(settings.get("config"))
    built = AutoConfig.for_model(model_type, **dict(config))
    # The seed fixes the random weights: the same config is the same model on every worker.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(settings.get("seed", 0)))
        module = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            built, dtype=torch.float32)
    return module, None, f"config {model_type} (random weights, seed {settings.get('seed', 0)})"


# The models this process loaded last, by weights key (oldest first).
_LOADED: OrderedDict[str, LanguageModel] = OrderedDict()
