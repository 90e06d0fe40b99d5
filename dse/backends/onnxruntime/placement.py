"""Which execution provider each node of an ONNX Runtime session actually ran on, and whether that
is acceptable for the backend being measured.

ONNX Runtime assigns every node a provider when the session is created and says nothing when a node
the requested provider cannot run lands on the CPU provider instead. A latency measured that way is
partly a CPU latency, so the GPU backends check the assignment before they hand out a runner.

How it is read: the session is created with profiling on; one inference is run; ``end_profiling()``
writes a Chrome-trace JSON file and switches profiling off for good (ONNX Runtime's profiler
disables itself once it has written), so later runs are not slowed. Every executed node leaves an
event ``{"cat": "Node", "name": "<node>_kernel_time", "args": {"op_name", "provider",
"input_type_shape", "output_type_shape", ...}}``. A subgraph a compiling provider took over (the
TensorRT provider) is one fused node, named ``<provider>_<MetaDef name>_<id>``, for TensorRT
``TensorrtExecutionProvider_TRTKernel_graph_<graph>_<hash>_<i>_<id>``, whose ``op_name`` is the
MetaDef name ``TRTKernel_...`` and whose ``provider`` is ``TensorrtExecutionProvider``.

Cost: one inference on the session the runner keeps (it doubles as a warm-up), the trace's write
and parse (a few ms for the quickstart CNN; measured numbers are in tests/fixtures/ort_profiles/
README.md). No second session is made, so a TensorRT engine is built once.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dse.core import BuildError

CPU_PROVIDER = "CPUExecutionProvider"
TENSORRT_PROVIDER = "TensorrtExecutionProvider"
# Operators that read only a tensor's metadata, never its data: where they run costs nothing.
METADATA_OPS = frozenset({"Shape", "Size"})
# Element types of shape arithmetic. ONNX Runtime deliberately puts the nodes that compute shapes
# (Gather/Concat/Unsqueeze/... on the int64 output of Shape) on the CPU, next to the host-side
# shape values they feed; a node touching any other type (float, float16, int8 data) computes.
SHAPE_DTYPES = frozenset({"int64", "int32", "bool"})
_EVENT_SUFFIX = "_kernel_time"
_MAX_NAMED = 8


@dataclass(frozen=True)
class NodeRun:
    """One node as the profile saw it run.

    Attributes:
        name: the node's name in the optimised graph (a fused node's generated name for a
            compiling provider).
        op: its operator (``op_name``); a fused TensorRT subgraph has ``TRTKernel_...``.
        provider: the execution provider that ran it.
        dtypes: element types of its inputs and outputs, as the profile names them ("float",
            "int64", ...); empty when the profile recorded none.
    """

    name: str
    op: str
    provider: str
    dtypes: tuple[str, ...]

    @property
    def shape_only(self) -> bool:
        """Whether the node only handles shapes (metadata reads or int64 shape arithmetic)."""
        if self.op in METADATA_OPS:
            return True
        return bool(self.dtypes) and set(self.dtypes) <= SHAPE_DTYPES

    @property
    def fused(self) -> bool:
        """Whether the node is a subgraph a compiling provider (TensorRT) took over whole."""
        return self.op.startswith("TRTKernel") or self.name.startswith(f"{TENSORRT_PROVIDER}_")


@dataclass(frozen=True)
class Placement:
    """The nodes of one profiled inference, in the order they ran."""

    nodes: tuple[NodeRun, ...]

    def by_provider(self) -> dict[str, int]:
        """Provider -> number of nodes it ran, most nodes first (ties by name)."""
        counts = Counter(node.provider for node in self.nodes)
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    def summary(self) -> str:
        """``"TensorrtExecutionProvider=1,CPUExecutionProvider=2"``: the describe() entry."""
        return ",".join(f"{provider}={count}" for provider, count in self.by_provider().items())


def parse_profile(events: Any) -> Placement:
    """The node placement recorded in ``events``, the parsed JSON of an ONNX Runtime profile.

    Only node events count (``cat == "Node"``, name ending ``_kernel_time``); session events and
    anything a provider's own profiler adds are ignored. A node run twice is counted once. Raises
    BuildError when ``events`` is not a profile or records no node at all.
    """
    if not isinstance(events, list):
        raise BuildError(f"an ONNX Runtime profile is a JSON list of trace events, got "
                         f"{type(events).__name__}")
    nodes: dict[str, NodeRun] = {}
    for event in events:
        if not isinstance(event, dict) or event.get("cat") != "Node":
            continue
        name = str(event.get("name", ""))
        args = event.get("args")
        if not name.endswith(_EVENT_SUFFIX) or not isinstance(args, dict):
            continue
        node = name[: -len(_EVENT_SUFFIX)]
        if node not in nodes:
            nodes[node] = NodeRun(node, str(args.get("op_name", "?")),
                                  str(args.get("provider", "?")), _dtypes(args))
    if not nodes:
        raise BuildError("the ONNX Runtime profile records no node events, so where the model "
                         "ran cannot be checked")
    return Placement(tuple(nodes.values()))


def load_profile(path: Path) -> Placement:
    """:func:`parse_profile` of the JSON file ``path``; BuildError if it cannot be read."""
    try:
        events = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BuildError(f"cannot read the ONNX Runtime profile {path}: {exc}") from exc
    return parse_profile(events)


def _dtypes(args: dict[str, Any]) -> tuple[str, ...]:
    found: list[str] = []
    for key in ("input_type_shape", "output_type_shape"):
        entries = args.get(key)
        if not isinstance(entries, list):
            continue
        # Each entry is {"<element type>": [dims]}, one per input or output.
        found.extend(str(dtype) for entry in entries if isinstance(entry, dict) for dtype in entry)
    return tuple(found)


def check_placement(placement: Placement, backend: str, provider: str,
                    fallbacks: tuple[str, ...] = (), pinned_ops: frozenset[str] = frozenset()
                    ) -> None:
    """Raise BuildError unless ``placement`` is an honest ``provider`` result.

    Allowed: nodes on ``provider`` or on one of the listed ``fallbacks``, and shape-only nodes on
    the CPU provider (ONNX Runtime puts those there on purpose). Anything else on the CPU (or on an
    unlisted provider) is a silent fallback and is named in the error with its provider. Nodes of
    ``pinned_ops`` must run on ``provider`` itself (the Q/DQ nodes of an int8 TensorRT graph: on
    the CUDA fallback they are int8 TensorRT never saw). A GPU ``provider`` must also have run at
    least one node: a TensorRT result with every node on the CUDA fallback is not a TensorRT
    result.
    """
    allowed = {provider, *fallbacks}
    stray = [node for node in placement.nodes if node.provider not in allowed
             and not (node.provider == CPU_PROVIDER and node.shape_only)]
    if stray:
        raise BuildError(f"{backend}: {len(stray)} compute node(s) did not run on "
                         f"{' or '.join(sorted(allowed))}: {_name(stray)} "
                         f"(nodes by provider: {placement.summary()})")
    unpinned = [node for node in placement.nodes
                if node.op in pinned_ops and node.provider != provider]
    if unpinned:
        raise BuildError(f"{backend}: {len(unpinned)} {'/'.join(sorted(pinned_ops))} node(s) did "
                         f"not run on {provider}: {_name(unpinned)} "
                         f"(nodes by provider: {placement.summary()})")
    if provider != CPU_PROVIDER and not any(node.provider == provider
                                            for node in placement.nodes):
        raise BuildError(f"{backend}: no node ran on {provider} (nodes by provider: "
                         f"{placement.summary()})")


def _name(nodes: list[NodeRun]) -> str:
    named = ", ".join(f"{node.name} ({node.op}) on {node.provider}" for node in nodes[:_MAX_NAMED])
    return named + (f" and {len(nodes) - _MAX_NAMED} more" if len(nodes) > _MAX_NAMED else "")


def profile_first_run(session: Any, feed: dict[str, np.ndarray]) -> Placement:
    """Run ``session`` (created with ``enable_profiling``) once on ``feed`` and read where its
    nodes ran. Profiling is off afterwards; the trace file is deleted.

    Raises BuildError if the run fails (the runtime rejects the model at run time) or the trace
    cannot be read.
    """
    try:
        session.run(None, feed)
    # As when loading: ORT's run-time errors share no base class below Exception.
    except Exception as exc:
        failed_trace = _end_profiling(session)
        if failed_trace is not None:
            failed_trace.unlink(missing_ok=True)
        raise BuildError(f"onnxruntime failed on its first run: {type(exc).__name__}: "
                         f"{exc}") from exc
    trace = _end_profiling(session)
    if trace is None:
        raise BuildError("the onnxruntime session was not created with profiling on, so where "
                         "its nodes ran cannot be checked")
    try:
        return load_profile(trace)
    finally:
        trace.unlink(missing_ok=True)


def _end_profiling(session: Any) -> Path | None:
    """Stop profiling; the trace it wrote, or None when profiling was off."""
    written = str(session.end_profiling())
    return Path(written) if written else None
