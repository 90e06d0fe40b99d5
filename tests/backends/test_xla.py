"""The xla backend: ONNX lowered to jax and compiled by XLA agrees with ONNX Runtime on dse's
families and the shipped ONNX model, leaves the HLO it compiled beside the artifact, and checks
its knobs. The shared suites (test_conformance, test_capability_walk) cover the Runner contract."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dse.accuracy import TrainedModel, train_or_load
from dse.accuracy.sequences import load_sequence_split
from dse.artifacts import Artifact, ArtifactCache, build_artifact
from dse.backends import CAPABILITIES, get_backend
from dse.core.candidate import Candidate
from dse.core.exceptions import BuildError
from dse.spec import HardwareProfile, TrainingSpec
from tests.backends.conftest import CPU_PROFILE, ArtifactFor
from tests.conftest import REPO

XLA = get_backend("xla")
TRANSFORMER = {"num_layers": 2, "num_heads": 2, "hidden": 32, "mlp_ratio": 2, "seq_len": 16}
BRIEF = TrainingSpec(epochs=1, batch_size=64, learning_rate=0.01, seed=0, threads=1)
CUDA_PROFILE = HardwareProfile(name="test-gpu", kind="cuda", backends=["xla"], precisions=["fp32"])


def _ort_logits(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    result: np.ndarray = session.run(None, {session.get_inputs()[0].name: x})[0]
    return result


def _artifact(path: Path, input_shape: tuple[int, ...], precision: str = "fp32") -> Artifact:
    return Artifact("onnx", path, precision, input_shape, path.stat().st_size)


@pytest.fixture(scope="module")
def transformer_trained(tmp_path_factory: pytest.TempPathFactory) -> TrainedModel:
    return train_or_load("transformer", TRANSFORMER, BRIEF, tmp_path_factory.mktemp("trained"))


@pytest.fixture(scope="module")
def sequences() -> np.ndarray:
    split = load_sequence_split(0, TRANSFORMER["seq_len"], 8, n_train=64, n_test=32)
    return np.ascontiguousarray(split.x_test, dtype=np.float32)


@pytest.fixture(scope="module")
def transformer_for(transformer_trained: TrainedModel, sequences: np.ndarray,
                    tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Artifact]:
    cache = ArtifactCache(tmp_path_factory.mktemp("transformer-artifacts"))

    def build(precision: str) -> Artifact:
        candidate = Candidate("transformer", TRANSFORMER, precision, 4, "xla")
        artifact, _ = build_artifact(candidate, transformer_trained, cache, sequences[:16])
        return artifact

    return build


# --- agreement with ONNX Runtime -----------------------------------------------------------------

@pytest.mark.parametrize("batch", [4, 7])
def test_cnn_matches_onnxruntime(artifact_for: ArtifactFor, batch: int) -> None:
    artifact = artifact_for("xla", "fp32")
    assert artifact.path is not None
    x = np.random.default_rng(1).random((batch, *artifact.input_shape), dtype=np.float32)
    with XLA.compile(artifact, {"num_threads": 1}, CPU_PROFILE, batch) as runner:
        np.testing.assert_allclose(runner.run(x), _ort_logits(artifact.path, x), atol=1e-4)


def test_transformer_matches_onnxruntime(transformer_for: Callable[[str], Artifact],
                                         sequences: np.ndarray) -> None:
    artifact = transformer_for("fp32")
    assert artifact.path is not None
    with XLA.compile(artifact, {"num_threads": 1}, CPU_PROFILE, 4) as runner:
        logits = np.concatenate([runner.run(sequences[i:i + 4]) for i in range(0, 32, 4)])
    np.testing.assert_allclose(logits, _ort_logits(artifact.path, sequences), atol=1e-4)


@pytest.mark.parametrize(("precision", "atol"), [("fp16", 5e-2), ("bf16", 2.5e-1)])
def test_low_precision_transformer_stays_near_fp32(transformer_for: Callable[[str], Artifact],
                                                   sequences: np.ndarray, precision: str,
                                                   atol: float) -> None:
    reference = transformer_for("fp32")
    assert reference.path is not None
    low = transformer_for(precision)
    # A CPU refuses the precision (XLA computes it in fp32 there): the GPU path's lowering of the
    # fp16/bf16 graph is checked here by handing the file over as what the CPU runs.
    with pytest.raises(BuildError, match=f"computes {precision} Conv and dot in fp32"):
        XLA.compile(low, {"num_threads": 1}, CPU_PROFILE, 8)
    assert low.path is not None
    as_cpu_runs = _artifact(low.path, low.input_shape)
    with XLA.compile(as_cpu_runs, {"num_threads": 1}, CPU_PROFILE, 8) as runner:
        logits = runner.run(sequences[:8])
    np.testing.assert_allclose(logits, _ort_logits(reference.path, sequences[:8]), atol=atol)


def test_shipped_onnx_model_matches_onnxruntime(tmp_path: Path) -> None:
    # A copy: the HLO is written beside the artifact, which must not be the repository's file.
    path = tmp_path / "digits-cnn.onnx"
    shutil.copyfile(REPO / "search_spaces" / "models" / "digits-cnn.onnx", path)
    x = np.random.default_rng(2).random((3, 1, 8, 8), dtype=np.float32)
    with XLA.compile(_artifact(path, (1, 8, 8)), {"num_threads": 1}, CPU_PROFILE, 3) as runner:
        np.testing.assert_allclose(runner.run(x), _ort_logits(path, x), atol=1e-4)


@pytest.mark.parametrize("knobs", [{"weights": "arguments"}, {"depthwise_conv": "grouped"},
                                   {"xla_cpu_enable_fast_math": True}])
def test_lowering_choices_compute_the_same_logits(artifact_for: ArtifactFor,
                                                  knobs: dict[str, object]) -> None:
    artifact = artifact_for("xla", "fp32")
    assert artifact.path is not None
    x = np.random.default_rng(3).random((4, *artifact.input_shape), dtype=np.float32)
    with XLA.compile(artifact, {"num_threads": 1, **knobs}, CPU_PROFILE, 4) as runner:
        np.testing.assert_allclose(runner.run(x), _ort_logits(artifact.path, x), atol=1e-4)
        assert all(str(v) in runner.describe().values() or k == "xla_cpu_enable_fast_math"
                   for k, v in knobs.items())


# --- what XLA compiled ---------------------------------------------------------------------------

def test_hlo_beside_the_artifact_and_provenance(artifact_for: ArtifactFor) -> None:
    import jax
    import jaxlib.version

    artifact = artifact_for("xla", "fp32")
    assert artifact.path is not None
    with XLA.compile(artifact, {"num_threads": 1}, CPU_PROFILE, 4) as runner:
        info = runner.describe()
        assert runner.compile_seconds is not None and runner.compile_seconds > 0
        runner.run(np.zeros((2, *artifact.input_shape), np.float32))  # a partial batch
        assert runner.describe()["compiled_batches"] == "2,4"
    hlo = Path(info["hlo_file"])
    assert hlo.parent == artifact.path.parent
    assert hlo.name.startswith(f"{artifact.path.name}.xla-") and hlo.name.endswith(".hlo.txt")
    text = hlo.read_text()
    assert text.startswith("HloModule") and "f32[4,1,8,8]" in text
    assert info["backend"] == "xla"
    assert info["backend_version"] == info["jax_version"] == jax.__version__
    assert info["jaxlib_version"] == jaxlib.version.__version__
    assert info["xla_platform"] == "cpu" and info["device"] == "cpu"
    assert info["jax_default_backend"] == jax.default_backend()
    assert info["threads"] == "1"
    assert "Conv:" in info["onnx_ops"]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the pool back from /proc")
@pytest.mark.parametrize("threads", [1, 2])
def test_each_thread_count_gets_a_pool_of_that_size(artifact_for: ArtifactFor,
                                                    threads: int) -> None:
    with XLA.compile(artifact_for("xla", "fp32"), {"num_threads": threads}, CPU_PROFILE,
                     4) as runner:
        info = runner.describe()
    assert info["threads"] == info["xla_cpu_pool_threads"] == str(threads)


def test_importing_the_backend_imports_no_jax() -> None:
    code = "import sys, dse.backends.xla.backend; assert 'jax' not in sys.modules, 'jax imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# --- refusals ------------------------------------------------------------------------------------

def _model_with_det(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Det", ["input"], ["logits"])], "det",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)
    return path


def test_unknown_op_is_a_one_line_build_error(tmp_path: Path) -> None:
    artifact = _artifact(_model_with_det(tmp_path / "det.onnx"), (4, 4))
    with pytest.raises(BuildError, match=r"no implementation of ONNX op\(s\) \['Det'\]; "
                                         r"supported: .*Conv") as caught:
        XLA.compile(artifact, {}, CPU_PROFILE, 1)
    assert "\n" not in str(caught.value)


def test_int8_is_refused_with_the_reason(artifact_for: ArtifactFor) -> None:
    int8 = artifact_for("onnxruntime", "int8")
    with pytest.raises(BuildError, match="QDQ graph: XLA would run"):
        XLA.compile(int8, {}, CPU_PROFILE, 4)


def test_capability_entries() -> None:
    assert CAPABILITIES["xla", "fp32", "cpu"].supported
    assert CAPABILITIES["xla", "bf16", "cuda"].min_compute_capability == 8.0
    assert "jax[cuda12]" in CAPABILITIES["xla", "fp32", "cuda"].requires
    for precision in ("int8", "fp8"):
        assert not CAPABILITIES["xla", precision, "cpu"].supported
    assert not any(CAPABILITIES["xla", p, "jetson"].supported for p in ("fp32", "fp16", "bf16"))


@pytest.mark.parametrize(("knobs", "message"), [
    ({"weights": "inline"}, r"'weights' must be one of \['constants', 'arguments'\]"),
    ({"depthwise_conv": 1}, r"'depthwise_conv' must be one of"),
    ({"matmul_precision": "tf32"}, r"'matmul_precision' must be one of"),
    ({"xla_cpu_enable_fast_math": 1}, r"'xla_cpu_enable_fast_math' must be one of \[False, True\]"),
    ({"xla_gpu_autotune_level": 5}, r"'xla_gpu_autotune_level' must be an integer 0-4"),
    ({"xla_gpu_autotune_level": True}, r"'xla_gpu_autotune_level' must be an integer 0-4"),
    ({"num_threads": 0}, r"'num_threads' must be an integer >= 1"),
])
def test_bad_knob_values_are_refused_before_any_runtime(knobs: dict[str, object],
                                                        message: str) -> None:
    with pytest.raises(BuildError, match=message):
        XLA.check_knob_values(knobs)


def test_device_specific_knobs_are_refused_on_the_other_device(artifact_for: ArtifactFor) -> None:
    artifact = artifact_for("xla", "fp32")
    XLA.check_knob_values({"xla_gpu_autotune_level": 4, "xla_cpu_enable_fast_math": True})
    with pytest.raises(BuildError, match="'xla_gpu_autotune_level' sets XLA's GPU compiler"):
        XLA.compile(artifact, {"xla_gpu_autotune_level": 2}, CPU_PROFILE, 4)
    with pytest.raises(BuildError, match="'xla_cpu_enable_fast_math' sets XLA's CPU compiler"):
        XLA.compile(artifact, {"xla_cpu_enable_fast_math": True}, CUDA_PROFILE, 4)


# --- single ops the families do not use, against ONNX Runtime ------------------------------------

def _single_op_model(path: Path, node: onnx.NodeProto, shape: list[str | int],
                     initializers: dict[str, np.ndarray]) -> Path:
    graph = helper.make_graph(
        [node], "op", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


OPS: dict[str, tuple[onnx.NodeProto, dict[str, np.ndarray]]] = {
    "maxpool": (helper.make_node("MaxPool", ["input"], ["logits"], kernel_shape=[3, 3],
                                 strides=[2, 2], pads=[1, 1, 1, 1]), {}),
    "avgpool": (helper.make_node("AveragePool", ["input"], ["logits"], kernel_shape=[3, 3],
                                 pads=[1, 1, 1, 1]), {}),
    "batchnorm": (helper.make_node("BatchNormalization", ["input", "s", "b", "m", "v"],
                                   ["logits"]),
                  {k: np.linspace(0.5, 1.5, 3, dtype=np.float32) for k in "sbmv"}),
    "depthwise-strided": (helper.make_node("Conv", ["input", "w"], ["logits"], group=3,
                                           strides=[2, 2], pads=[1, 0, 1, 2], dilations=[1, 2]),
                          {"w": np.random.default_rng(0).random((6, 1, 3, 3), np.float32)}),
    "globalavg": (helper.make_node("GlobalAveragePool", ["input"], ["logits"]), {}),
    "flatten": (helper.make_node("Flatten", ["input"], ["logits"], axis=2), {}),
    "slice-steps": (helper.make_node("Slice", ["input", "st", "en", "ax", "sp"], ["logits"]),
                    {"st": np.array([-1, 0]), "en": np.array([-9, 5]), "ax": np.array([3, 1]),
                     "sp": np.array([-2, 2])}),
    "gather-negative": (helper.make_node("Gather", ["input", "i"], ["logits"], axis=3),
                        {"i": np.array([-1, 0, 2])}),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_single_op_matches_onnxruntime(tmp_path: Path, name: str) -> None:
    node, initializers = OPS[name]
    path = _single_op_model(tmp_path / f"{name}.onnx", node, ["batch", 3, 8, 8], initializers)
    x = np.random.default_rng(4).standard_normal((2, 3, 8, 8)).astype(np.float32)
    with XLA.compile(_artifact(path, (3, 8, 8)), {"num_threads": 1}, CPU_PROFILE, 2) as runner:
        np.testing.assert_allclose(runner.run(x), _ort_logits(path, x), atol=1e-5)


def test_a_missing_runtime_names_the_extra_to_install(artifact_for: ArtifactFor,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` now raises ImportError
    with pytest.raises(BuildError, match=r"xla: jax cannot be imported .*install dse\[xla\]"):
        XLA.compile(artifact_for("xla", "fp32"), {}, CPU_PROFILE, 2)
