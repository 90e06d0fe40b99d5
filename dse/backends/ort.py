"""ONNX Runtime on the CPU execution provider."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.backends.base import Backend, Runner, default_threads, thread_knob
from dse.backends.registry import register_backend
from dse.exceptions import BuildError

if TYPE_CHECKING:
    from dse.build import Artifact
    from dse.spec import HardwareProfile

PROVIDER = "CPUExecutionProvider"


class OrtRunner(Runner):
    """One ``InferenceSession``: ``run`` feeds its single input and returns its first output."""

    def __init__(self, session: Any, batch_size: int, settings: dict[str, str]) -> None:
        self._session: Any = session
        self._input = session.get_inputs()[0].name
        self._output = session.get_outputs()[0].name
        self._settings = settings
        self.batch_size = batch_size

    def run(self, x: np.ndarray) -> np.ndarray:
        if self._session is None:
            raise RuntimeError("run() on a closed onnxruntime runner")
        feed = np.ascontiguousarray(x, dtype=np.float32)
        result: np.ndarray = self._session.run([self._output], {self._input: feed})[0]
        return result

    def describe(self) -> dict[str, str]:
        if self._session is None:
            return dict(self._settings)
        # Read back from the session rather than echoed from the knobs: this is what ORT uses.
        options = self._session.get_session_options()
        threads = str(options.intra_op_num_threads)
        return {**self._settings, "threads": threads, "intra_op_threads": threads,
                "inter_op_threads": str(options.inter_op_num_threads),
                "providers": ",".join(self._session.get_providers())}

    def close(self) -> None:
        self._session = None


@register_backend
class OrtBackend(Backend):
    """Loads an ONNX artifact (fp32 or QDQ int8) into a CPU session.

    Knobs: ``intra_op_threads`` (default: the profile's ``max_threads``, else every core) and
    ``inter_op_threads`` (default 1; with sequential execution only one operator runs at a time).
    Both are always set on the session: the process environment is no guide, since Ray workers
    export ``OMP_NUM_THREADS=1``.
    """

    name = "onnxruntime"
    knobs = frozenset({"intra_op_threads", "inter_op_threads"})
    thread_knob = "intra_op_threads"

    def compile(self, artifact: Artifact, knobs: Mapping[str, Any], profile: HardwareProfile,
                batch_size: int) -> Runner:
        self.check_knobs(knobs)
        intra = thread_knob(knobs, "intra_op_threads", default_threads(profile))
        inter = thread_knob(knobs, "inter_op_threads", 1)
        if artifact.format != "onnx" or artifact.path is None:
            raise BuildError(f"onnxruntime loads ONNX files, got a {artifact.format!r} artifact")
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = intra
        options.inter_op_num_threads = inter
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            session = ort.InferenceSession(str(artifact.path), sess_options=options,
                                           providers=[PROVIDER])
        # ORT reports an unloadable model with its own exception types (Fail, InvalidGraph,
        # NotImplemented...), which share no base class below Exception.
        except Exception as exc:
            raise BuildError(f"onnxruntime could not load {artifact.path.name}: "
                             f"{type(exc).__name__}: {exc}") from exc
        providers = session.get_providers()
        if PROVIDER not in providers:
            raise BuildError(f"onnxruntime session runs on {providers}, not {PROVIDER}")
        settings = {
            "backend": self.name,
            "backend_version": ort.__version__,
            "device": PROVIDER,
            "precision": artifact.precision,
            "threads": str(intra),
            "providers": ",".join(providers),
            "intra_op_threads": str(intra),
            "inter_op_threads": str(inter),
            "execution_mode": "sequential",
            "graph_optimization_level": "ORT_ENABLE_ALL",
            "onnxruntime_build_device": ort.get_device(),
        }
        return OrtRunner(session, batch_size, settings)
