"""What an ExecuTorch ``.pte`` file runs, read back from the file itself: which instructions of its
``forward`` plan are calls into a backend delegate (XNNPACK) and which are ExecuTorch's own kernels.

The build cache keeps one file per artifact, so the delegation facts cannot travel beside the
``.pte``; and the runtime's ``Method`` exposes only its input and output tensors. The file's
execution plan is the ground truth in any case: it is what the runtime executes, after every
lowering and memory-planning pass. It is read with ExecuTorch's own deserializer
(``executorch.exir._serialize._deserialize_pte_binary``, pure Python over the flatbuffer).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.backends.base import delegation_entries, first_error_line
from dse.core import BuildError

# Instructions of this namespace are the runtime's bookkeeping (views over planned memory, symbolic
# sizes, scalar arithmetic), not operators computed outside the delegate.
_PRIM_NAMESPACE = "executorch_prim::"
# The name calls_by_backend gives ExecuTorch's own kernels (portable, or optimized where linked).
KERNELS = "kernels"


@dataclass(frozen=True)
class Delegation:
    """The instructions of one method's plan, by where they run.

    Attributes:
        delegated: backend id (``XnnpackBackend``) -> delegate calls, one per lowered subgraph.
        outside: operator name (``aten::cumsum``) -> kernel calls run by ExecuTorch outside any
            delegate.
        prims: kernel calls of the runtime's own ``executorch_prim`` operators.
    """

    delegated: Counter[str]
    outside: Counter[str]
    prims: int

    def settings(self) -> dict[str, str]:
        """The describe() entries: a fallback is recorded, never passed off as delegated."""
        by_backend = {**self.delegated, KERNELS: sum(self.outside.values())}
        return {**delegation_entries(sum(self.delegated.values()), self.outside),
                "delegated_subgraphs": str(sum(self.delegated.values())),
                "delegate_backends": ",".join(sorted(self.delegated)) or "none",
                "calls_by_backend": ",".join(f"{name}={count}" for name, count in by_backend.items()),
                "runtime_prim_calls": str(self.prims)}


def read_delegation(path: Path, method: str = "forward") -> Delegation:
    """The delegation of ``method`` in the ``.pte`` at ``path``; BuildError for a file that is not
    an ExecuTorch program or has no such method."""
    from executorch.exir._serialize import _deserialize_pte_binary
    from executorch.exir.schema import DelegateCall, KernelCall

    try:
        program = _deserialize_pte_binary(path.read_bytes()).program
    except Exception as exc:  # the flatbuffer reader raises whatever a bad byte leads it to
        raise BuildError(f"executorch: {path.name} is not a readable ExecuTorch program: "
                         f"{type(exc).__name__}: {first_error_line(exc)}") from exc
    plans = {plan.name: plan for plan in program.execution_plan}
    if method not in plans:
        raise BuildError(f"executorch: {path.name} has no method {method!r} (it has "
                         f"{sorted(plans)})")
    plan: Any = plans[method]
    delegated: Counter[str] = Counter()
    outside: Counter[str] = Counter()
    prims = 0
    for chain in plan.chains:
        for instruction in chain.instructions:
            call = instruction.instr_args
            if isinstance(call, DelegateCall):
                delegated[plan.delegates[call.delegate_index].id] += 1
            elif isinstance(call, KernelCall):
                name = str(plan.operators[call.op_index].name)
                if name.startswith(_PRIM_NAMESPACE):
                    prims += 1
                else:
                    outside[name] += 1
    return Delegation(delegated, outside, prims)
