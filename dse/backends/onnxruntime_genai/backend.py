"""The ``onnxruntime_genai`` backend: a generative language model built by ONNX Runtime GenAI's
model builder and decoded by its generator, on the CPU (:mod:`.build`, :mod:`.runner`). It runs no
fixed-shape model: every fixed-shape entry of its capability table says so."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.backends.backend_registry import register_backend
from dse.backends.base import Backend, Runner, default_threads, thread_knob
from dse.backends.weight_formats import weight_knobs
from dse.core import BuildError
from dse.plugins import BackendDeclaration, Capability, Standalone

if TYPE_CHECKING:
    from dse.artifacts import Artifact
    from dse.backends.generation_runner import GenerationRunner
    from dse.backends.op_profile import GenerationProfileRequest, OpProfile
    from dse.models import LanguageModel
    from dse.spec import HardwareProfile

NAME = "onnxruntime_genai"
REQUIRES = "onnxruntime-genai (pip install 'dse[llm]'), transformers to write the model builder's input"


def fixed_shape_capability(precision: str, kind: str) -> Capability:
    return Capability(False, f"{NAME} runs generative language models only (model.llm); a "
                             f"fixed-shape model runs on onnxruntime", "a language model")


def generation_capability(precision: str, kind: str) -> Capability:
    """fp32 compute on the CPU, weights fp32, int8 or int4 (its builder's CPU formats)."""
    if kind != "cpu":
        return Capability(False, f"dse builds ONNX Runtime GenAI models for the CPU only so far "
                                 f"(a {kind} device needs onnxruntime-genai-cuda and the "
                                 f"builder's cuda target)", "onnxruntime-genai-cuda")
    if precision != "fp32":
        return Capability(False, f"ONNX Runtime GenAI's CPU models compute in fp32 ({precision} "
                                 f"is its GPU builds'); for smaller weights set the knob "
                                 f"weights: int8 or int4", REQUIRES)
    return Capability(True, "ONNX Runtime GenAI on the CPU: its model builder's graph with a "
                            "KV cache (weights fp32, int8 or int4)", REQUIRES)


@register_backend
class OrtGenAIBackend(Backend):
    """ONNX Runtime GenAI. Knobs: ``num_threads`` (the session's intra-op threads; default: the
    profile's ``max_threads``, else every core), ``weights`` (``same``: fp32, ``int8``, ``int4``:
    the builder's MatMulNBits) and ``weight_group_size`` (int4's block size)."""

    declaration = BackendDeclaration(
        name=NAME, artifact_format="torch", capability=fixed_shape_capability,
        knobs=frozenset({"num_threads", "weights", "weight_group_size"}),
        thread_knob="num_threads", libraries=("onnxruntime-genai", "onnxruntime"),
        extra="llm", summary="ONNX Runtime GenAI: generative language models (model builder, "
                             "generator loop)",
        generation=generation_capability, profiler="onnxruntime node profiling (requests)",
        generation_standalone=Standalone("dse.backends.onnxruntime_genai.run_script",
                                         ("onnxruntime-genai", "numpy")))

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        self.check_knobs(knobs)
        thread_knob(knobs, self.thread_knob, 1)
        weight_knobs(knobs)

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        self.check_knob_values(knobs)
        raise BuildError(fixed_shape_capability(artifact.precision, profile.kind).reason)

    def generation_bundle(self, runner: GenerationRunner, model: LanguageModel,
                          out: Path) -> dict[str, Any]:
        """The model builder's folder the runner loaded (graph, weights as built, config,
        tokenizer)."""
        from dse.backends.generation_runner import copy_model_folder
        from dse.backends.onnxruntime_genai.runner import GenAIRunner

        if not isinstance(runner, GenAIRunner):
            raise BuildError(f"{NAME} exports the runners it compiled, got a "
                             f"{type(runner).__name__}")
        copy_model_folder(runner.folder, out)
        return {}

    def profile_generation(self, request: GenerationProfileRequest) -> dict[str, OpProfile]:
        from dse.backends.onnxruntime_genai.profiler import profile_genai_generation

        return profile_genai_generation(request)

    def bundled_generator(self, folder: Path, settings: Mapping[str, Any], precision: str,
                          knobs: Mapping[str, Any], profile: HardwareProfile,
                          batch_size: int) -> GenerationRunner:
        """The bundle's model-builder folder, loaded with the knobs' threads."""
        og = self._runtime(precision, knobs, profile)
        return self._loaded(og, folder, "the bundle's model", precision, knobs, profile,
                            batch_size, {"mode": "model-builder folder from a bundle"})

    def compile_generator(self, model: LanguageModel, precision: str, knobs: Mapping[str, Any],
                          profile: HardwareProfile, batch_size: int, *,
                          cache_dir: Path | None = None) -> GenerationRunner:
        og = self._runtime(precision, knobs, profile)
        from dse.backends.onnxruntime_genai.build import BUILDER_PRECISION, genai_folder

        weights, group = weight_knobs(knobs)
        folder = genai_folder(model, weights, group, cache_dir or _default_cache())
        return self._loaded(og, folder, "the built model", precision, knobs, profile, batch_size,
                            {"builder_precision": BUILDER_PRECISION[weights]})

    def _runtime(self, precision: str, knobs: Mapping[str, Any], profile: HardwareProfile) -> Any:
        """onnxruntime_genai, once the knobs, precision and device are known to be runnable;
        BuildError otherwise."""
        self.check_knob_values(knobs)
        entry = generation_capability(precision, profile.kind)
        if not entry.supported:
            raise BuildError(entry.reason)
        try:
            import onnxruntime_genai as og
        except ImportError as exc:
            raise BuildError(f"{NAME} needs onnxruntime-genai: pip install 'dse[llm]' "
                             f"({exc})") from exc
        return og

    def _loaded(self, og: Any, folder: Path, what: str, precision: str,
                knobs: Mapping[str, Any], profile: HardwareProfile, batch_size: int,
                extra: dict[str, str]) -> GenerationRunner:
        """The runner of a model-builder ``folder`` with the knobs' threads; BuildError naming
        ``what`` it is when GenAI cannot load it."""
        from dse.backends.onnxruntime_genai.runner import GenAIRunner

        weights, group = weight_knobs(knobs)
        threads = thread_knob(knobs, self.thread_knob, default_threads(profile))
        described = {"backend": NAME, "backend_version": og.__version__, "device": "cpu",
                     "precision": precision, "threads": str(threads), "weights": weights,
                     "model_folder": str(folder), "kv_cache": "ONNX Runtime GenAI (shared "
                     "past/present buffer of the request's length)", **extra}
        if weights == "int4":
            described["weight_group_size"] = str(group)
        try:
            return GenAIRunner(folder, batch_size, threads, described)
        except (RuntimeError, OSError, ValueError) as exc:
            raise BuildError(f"ONNX Runtime GenAI cannot load {what}: "
                             f"{' '.join(str(exc).split())}") from exc


def _default_cache() -> Path:
    from dse.util import user_cache_root

    return user_cache_root()
