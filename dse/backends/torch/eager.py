"""Eager PyTorch: the trained module itself, in fp32, fp16 or bf16, on the CPU or a CUDA GPU."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dse.backends.backend_registry import register_backend
from dse.backends.base import Backend, Runner, flag_knob
from dse.backends.torch.common import (
    TORCH_STANDALONE,
    TorchRunner,
    borrowed_bytes,
    check_torch_knob_device,
    check_torch_knobs,
    place_module,
    probe_batch,
    resolve_placement,
    settings,
    torch_capability,
)
from dse.backends.torch.generation_runner import (
    GENERATION_KNOBS,
    GENERATION_ONLY_KNOBS,
    compile_torch_generator,
    torch_generation_capability,
)
from dse.backends.torch.profiler import PROFILER as TORCH_PROFILER
from dse.backends.torch.profiler import profile_torch_runner
from dse.backends.torch.sdpa_knob import attention_kernel, check_module_honours
from dse.backends.weight_formats import weight_knobs
from dse.core import BuildError
from dse.plugins import BackendDeclaration, Standalone

if TYPE_CHECKING:
    from pathlib import Path

    from dse.artifacts import Artifact
    from dse.backends.bundle_extras import BundleExtras
    from dse.backends.generation_runner import GenerationRunner
    from dse.backends.op_profile import GenerationProfileRequest, OpProfile, ProfileRequest
    from dse.models import LanguageModel
    from dse.spec import HardwareProfile


@register_backend
class TorchEagerBackend(Backend):
    """Runs the trained module as it is, at the artifact's precision.

    Knobs: ``num_threads`` (default: the profile's ``max_threads``, else every core) is set once,
    here in ``compile``, not before every ``run``: torch's intra-op pool is process-wide, the
    device worker runs one runner at a time and compiles right before measuring, and a call per
    run would add its own cost to every timed iteration. ``precision_mode`` ("dtype", default:
    module and inputs cast to the precision's dtype; "autocast": the fp32 module under
    ``torch.autocast``) chooses how fp16/bf16 are applied. ``attention_kernel`` ("default",
    "math", "flash", "efficient"; see :mod:`dse.backends.torch.sdpa_knob`) restricts the model's
    ``scaled_dot_product_attention`` calls to one kernel. ``cuda_graph`` (default false; CUDA
    devices only) captures the forward at the candidate's batch size in a CUDA graph and replays
    it (:mod:`dse.backends.torch.cuda_graph`). A generative model (``Backend.compile_generator``)
    takes ``num_threads``, ``weights`` ("same", "int8", "int4": weight-only through torchao) and
    ``weight_group_size`` (int4's group along the input); a fixed-shape model refuses the last two.
    """

    declaration = BackendDeclaration(
        name="torch", artifact_format="torch",
        capability=functools.partial(torch_capability, "torch"),
        knobs=frozenset({"num_threads", "precision_mode", "attention_kernel", "cuda_graph",
                         *GENERATION_ONLY_KNOBS}),
        thread_knob="num_threads",
        libraries=("torch",), extra="torch",
        summary="eager PyTorch",
        profiler=TORCH_PROFILER, standalone=TORCH_STANDALONE,
        generation=torch_generation_capability, generation_knobs=GENERATION_KNOBS,
        language_only_knobs=GENERATION_ONLY_KNOBS,
        generation_standalone=Standalone("dse.backends.torch.generation_run_script",
                                         ("torch", "transformers", "safetensors", "torchao",
                                          "numpy")))

    def compile_generator(self, model: LanguageModel, precision: str, knobs: Mapping[str, Any],
                          profile: HardwareProfile, batch_size: int, *,
                          cache_dir: Path | None = None) -> GenerationRunner:
        """The language model in eager torch (:mod:`dse.backends.torch.generation_runner`)."""
        return compile_torch_generator(self, model, precision, knobs, profile, batch_size)

    def profile_ops(self, request: ProfileRequest) -> OpProfile:
        return profile_torch_runner(request)

    def generation_bundle(self, runner: GenerationRunner, model: LanguageModel,
                          out: Path) -> dict[str, Any]:
        """The loaded weights as a Hugging Face folder at the compute precision (the trial's
        runner cast the fp32 weights to it, and so does ``run.py``, then quantizes them as the
        knobs say, as the runner did)."""
        from dse.models import save_hf_folder

        described = runner.describe()
        save_hf_folder(model, out, described.get("dtype", "float32"))
        return {"dtype": described.get("dtype", "float32"),
                "device": described.get("device", "cpu"),
                "weight_group_size": int(described.get("weight_group_size", 0) or 0)}

    def bundled_generator(self, folder: Path, settings: Mapping[str, Any], precision: str,
                          knobs: Mapping[str, Any], profile: HardwareProfile,
                          batch_size: int) -> GenerationRunner:
        """The bundle's Hugging Face folder loaded at fp32, then deployed as a trial's model is
        (cast to the precision, weights quantized as the knobs say)."""
        import torch
        from transformers import AutoModelForCausalLM

        from dse.models import LanguageModel

        try:
            module: Any = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
        except (OSError, ValueError) as exc:
            raise BuildError(f"transformers cannot load the bundle's model folder: "
                             f"{' '.join(str(exc).split())[:300]}") from exc
        module.eval()
        model = LanguageModel(module, None, f"bundle:{folder}", 0.0, str(folder))
        return compile_torch_generator(self, model, precision, knobs, profile, batch_size)

    def profile_generation(self, request: GenerationProfileRequest) -> dict[str, OpProfile]:
        from dse.backends.torch.generation_profiler import profile_torch_generation

        return profile_torch_generation(request)

    def bundle_extras(self, runner: Runner, artifact: Artifact) -> BundleExtras:
        """The runner's module saved with ``torch.export`` (see
        :mod:`dse.backends.torch.bundle`), replayed from a CUDA graph where it was."""
        from dse.backends.torch.bundle import torch_bundle_extras
        from dse.backends.torch.cuda_graph import TorchCudaGraphRunner

        return torch_bundle_extras(runner, artifact, self.name,
                                   cuda_graph=isinstance(runner, TorchCudaGraphRunner))

    def check_knob_values(self, knobs: Mapping[str, Any]) -> None:
        check_torch_knobs(self, knobs)
        _cuda_graph(knobs)
        weight_knobs(knobs)

    def check_knob_device(self, knobs: Mapping[str, Any], device_kind: str) -> None:
        check_torch_knob_device(knobs, device_kind)
        if _cuda_graph(knobs) and device_kind == "cpu":
            raise BuildError("knob 'cuda_graph' true needs a CUDA device (it captures the "
                             "forward in a CUDA graph); a cpu device has none")

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        refused = self.declaration.kind_refusal(knobs, generative=False)
        if refused:
            raise BuildError(refused)
        placement = resolve_placement(self, artifact, knobs, profile)
        kernel = attention_kernel(knobs)
        module = place_module(artifact, placement)
        described = {**settings(self.name, placement), "mode": "eager"}
        if kernel != "default":
            check_module_honours(module, probe_batch(artifact, placement), kernel)
        runner: TorchRunner
        if _cuda_graph(knobs):
            from dse.backends.torch.cuda_graph import TorchCudaGraphRunner

            runner = TorchCudaGraphRunner(module, placement, batch_size, described,
                                          artifact.input_shape, kernel)
        else:
            runner = TorchRunner(module, placement, batch_size, described, kernel)
        runner.borrowed_bytes = borrowed_bytes(module, artifact)
        return runner


def _cuda_graph(knobs: Mapping[str, Any]) -> bool:
    return bool(flag_knob(knobs, "cuda_graph", False))
