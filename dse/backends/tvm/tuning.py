"""MetaSchedule auto-tuning for the TVM backend, and the device cache of its tuning databases.

Tuning searches schedules per operator (task) for the target and measures each on the device;
what it finds is a MetaSchedule database (workloads and tuning records). A database depends on
the model, its precision and shapes (batch size), the target and the device, so its cache key
names all of them plus the device fingerprint and the trial budget: a second campaign on the same
device finds it and tunes nothing.

Candidates are built in this process (:class:`InProcessBuilder`) rather than in MetaSchedule's
pool of fresh processes: each pool worker imports TVM's tensor intrinsics before its first build,
which on a small CPU takes about as long as the pool's 30 s build timeout and fails every
candidate (docs/benchmarks.md, "Backends"). They are still measured in MetaSchedule's runner
process, so a schedule that crashes cannot take the device worker with it.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.artifacts import ArtifactCache, device_cache_root, device_fingerprint, fingerprint_id
from dse.core import BuildError

TUNING_SUBFOLDER = "tvm-tuning"
# Candidates MetaSchedule proposes per round (at most the per-task budget).
TRIALS_PER_ROUND = 16
# A tuning seed, so the same budget on the same device tunes the same way.
TUNING_SEED = 0
# Candidate schedules evolved per round (see _strategy).
POPULATION = 128
_WORKLOADS = "database_workload.json"
_RECORDS = "database_tuning_record.json"


@dataclass(frozen=True)
class TuningKey:
    """What a tuning database depends on (the model is named by its ONNX file's SHA-256)."""

    model_sha256: str
    precision: str
    batch_size: int
    target: str
    trials: int
    host_cpu: str

    def as_key(self) -> dict[str, Any]:
        fingerprint = device_fingerprint()
        return {"stage": "tvm-metaschedule", "model": self.model_sha256,
                "precision": self.precision, "batch_size": self.batch_size,
                "target": self.target, "trials": self.trials, "host_cpu": self.host_cpu,
                "device": fingerprint_id(fingerprint)}


@dataclass(frozen=True)
class TunedDatabase:
    """A tuning database unpacked into ``folder``, what its tuning cost when it was made, and
    whether this build reused it from the cache."""

    folder: Path
    tuning_seconds: float
    tasks: int
    reused: bool
    entry: Path


def tuning_cache() -> ArtifactCache:
    """``$DSE_DEVICE_CACHE/tvm-tuning`` (a per-user temp folder when unset)."""
    return ArtifactCache(device_cache_root() / TUNING_SUBFOLDER)


def tuned_database(prepared: Any, target: Any, key: TuningKey, scratch: Path) -> TunedDatabase:
    """The tuning database for ``prepared`` (a Relax module after the pre-tuning passes), from
    the cache or tuned now with ``key.trials`` trials, unpacked under ``scratch``."""
    made: dict[str, float] = {}

    def tune_into(entry: Path) -> None:
        # MetaSchedule's schedule rules load every target's tensor intrinsics (once per process):
        # a cost of the process, kept out of this model's tuning time.
        _load_tensor_intrinsics()

        with tempfile.TemporaryDirectory(prefix="dse-tvm-tune-") as work:
            start = time.perf_counter()
            tasks = _tune(prepared, target, key.trials, Path(work))
            seconds = time.perf_counter() - start
            made["seconds"] = seconds
            entry.write_text(json.dumps({
                "tuning_seconds": seconds, "tasks": tasks,
                "workloads": (Path(work) / _WORKLOADS).read_text(),
                "records": (Path(work) / _RECORDS).read_text()}))

    entry, built = tuning_cache().get_or_build(key.as_key(), ".json", tune_into)
    try:
        packed = json.loads(entry.read_text())
        folder = scratch / "database"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / _WORKLOADS).write_text(packed["workloads"])
        (folder / _RECORDS).write_text(packed["records"])
    except (OSError, ValueError, KeyError) as exc:
        raise BuildError(f"tvm: the tuning database {entry} cannot be read: {exc}") from exc
    return TunedDatabase(folder, float(packed["tuning_seconds"]), int(packed["tasks"]),
                         reused=not built, entry=entry)


def _tune(prepared: Any, target: Any, trials: int, work: Path) -> int:
    """Tune every task of ``prepared`` with ``trials`` trials in all, shared evenly; the number
    of tasks tuned. MetaSchedule writes its JSON database into ``work``."""
    from tvm.s_tir import meta_schedule as ms

    tasks = ms.relax_integration.extract_tasks(prepared, target)
    if not tasks:
        raise BuildError("tvm: MetaSchedule found no operator to tune in this model")
    per_task = max(1, math.ceil(trials / len(tasks)))
    ms.relax_integration.tune_relax(
        prepared, {}, target, str(work), max_trials_global=max(trials, len(tasks)),
        max_trials_per_task=per_task, num_trials_per_iter=min(TRIALS_PER_ROUND, per_task),
        builder=in_process_builder(), strategy=_strategy(), seed=TUNING_SEED)
    return len(tasks)


def _strategy() -> Any:
    """MetaSchedule's evolutionary search with a smaller population than its default 512: on a
    few trials per operator the default spends most of the tuning time evolving candidates that
    are never measured."""
    from tvm.s_tir import meta_schedule as ms

    return ms.search_strategy.EvolutionarySearch(population_size=POPULATION)


def _load_tensor_intrinsics() -> None:
    """Import TVM's tensor intrinsics, made fast in a process with many modules loaded.

    Each of their hundreds of TVMScript functions calls ``inspect.stack()``, which looks up the
    source file of every frame on the stack; a frame of the frozen import machinery has no file,
    so ``inspect.getmodule`` scans all of ``sys.modules`` for it, once per such frame per call.
    In a device worker (torch, jax, Ray, the runtimes: ~3,000 modules) that took 113 s, 31 s in
    a process with torch and jax loaded. Telling inspect's own file-to-module cache which
    modules those frames belong to (true: they are those modules' code) makes each lookup one
    dictionary read: 4.8 s in the latter process.
    """
    register_frozen_import_frames()
    import tvm.s_tir.tensor_intrin  # noqa: F401


def register_frozen_import_frames() -> None:
    """Tell ``inspect`` which modules the frozen import machinery's frames belong to, so that
    looking one up is a dictionary read rather than a scan of ``sys.modules``."""
    import inspect

    for name in ("importlib._bootstrap", "importlib._bootstrap_external"):
        inspect.modulesbyfile.setdefault(f"<frozen {name}>", name)


def in_process_builder() -> Any:
    """A MetaSchedule builder that builds candidates in this process (see the module's note)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import default_export
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.tirx import build

    @derived_object
    class InProcessBuilder(PyBuilder):  # type: ignore[misc]  # TVM's classes are untyped
        def build(self, build_inputs: list[Any]) -> list[Any]:
            results = []
            for given in build_inputs:
                try:
                    # MetaSchedule's default_build (its import of the tensor intrinsics is
                    # done once, before the tuning is timed).
                    module = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(given.mod)
                    built = default_export(build(module, target=given.target))
                    results.append(BuilderResult(built, None))
                # A candidate schedule that does not build is MetaSchedule's to skip, not ours.
                except Exception as exc:
                    results.append(BuilderResult(None, f"{type(exc).__name__}: {exc}"))
            return results

    return InProcessBuilder()


def apply_database(prepared: Any, target: Any, folder: Path) -> Any:
    """``prepared`` with the tuned schedules of the database in ``folder`` applied."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    database = ms.database.JSONDatabase(str(folder / _WORKLOADS), str(folder / _RECORDS),
                                        allow_missing=False)
    with target, database:
        return relax.transform.MetaScheduleApplyDatabase()(prepared)
