"""Malformed spec files, generated from the shipped seeds, and a runner that checks how dse rejects them.

``fuzz_cases`` mutates the real search spaces, hardware profiles and experiments (wrong types, unknown
keys, empty and huge values, bad metric names and units, contradictory bounds, missing referenced files,
invalid YAML, binary junk, deep nesting) with hypothesis strategies under a fixed seed, so a run is
reproducible. ``run_case`` feeds one file to ``dse validate`` in-process (and, for an experiment, to
``load_experiment`` as ``dse run`` does) and reports the exit code, the output and whether a Python
traceback escaped. Used by tests/spec/test_fuzz_specs.py and benchmarks/reliability_fuzz.py. It lives
with the tests because hypothesis is a development dependency, not one of dse's.
"""

from __future__ import annotations

import copy
import shutil
import traceback as tb
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]  # tests/spec/malformed.py -> the repository
# The folder each kind lives in: dse guesses a file's kind from it.
KIND_DIRS = {"search_space": "search_spaces", "hw_profile": "hw_profiles", "experiment": "experiments"}
_SEED_GLOBS = {"search_space": "search_spaces/*.yaml", "hw_profile": "hw_profiles/*.yaml",
               "experiment": "experiments/*.yaml"}


@dataclass(frozen=True)
class FuzzCase:
    """One malformed file: its kind, the name to write it under, its bytes, and how it was made."""

    kind: str
    name: str
    data: bytes
    mutation: str = ""
    field: str | None = None
    """The top-level key the mutation touched, when the error should name it."""


@dataclass(frozen=True)
class CaseResult:
    exit_code: int
    output: str
    traceback: bool
    names_file: bool = True
    names_field: bool = True

    @property
    def valid(self) -> bool:
        return self.exit_code == 0 and not self.traceback

    @property
    def rejected_cleanly(self) -> bool:
        return self.exit_code == 2 and not self.traceback and self.names_file


def seed_files() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """The shipped spec files of each kind, parsed: kind -> [(file name, data)]."""
    seeds: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for kind, pattern in _SEED_GLOBS.items():
        seeds[kind] = [(p.name, yaml.safe_load(p.read_text(encoding="utf-8")))
                       for p in sorted(REPO.glob(pattern))]
    return seeds


# --- values a user might plausibly (or maliciously) write in the wrong place ------------------------

_BAD_SCALARS: list[Any] = [
    None, "", " ", 0, -1, -(10**6), 10**400, 1e308, float("nan"), float("inf"), True, False,
    "yes", "12 ms", "512MB", "4 GB", "fp33", "cuda:0", "\x00", "é" * 3, "x" * 100_000,
    "${HOME}", "../../../../etc/passwd", "!!python/object:os.system", [], {}, [None], {"": None},
]
_BAD_METRICS = ["latency_p99_us", "latency", "Accuracy", "latency_p99_ms [ms]", "memory_peak_gb",
                "", "throughput", "1metric", "latency_p99_ms; rm -rf /"]
_BAD_CONSTRAINTS = ["process_rss_peak_mb <= 4 GB", "process_rss_peak_mb < 512", "process_rss_peak_mb <= ",
                    "<= 512", "memory_peak_us <= 512", "process_rss_peak_mb == 512",
                    "process_rss_peak_mb <= 1e99999", "process_rss_peak_mb <= nan", "latency_p99_ms >= -inf",
                    {"metric": "process_rss_peak_mb", "op": "<", "value": 1},
                    {"metric": "process_rss_peak_mb", "op": "<=", "value": "lots"},
                    {"metric": "process_rss_peak_mb", "op": "<=", "value": 1, "unit": "GB"}]
_MISSING_FILE = "../does-not-exist/missing.yaml"


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key/index path into a parsed YAML tree (the root excluded)."""
    found: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        items: list[tuple[Any, Any]] = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    else:
        return found
    for key, value in items:
        found.append((*prefix, key))
        found.extend(_paths(value, (*prefix, key)))
    return found


def _containers(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every mapping in the tree, the root included."""
    found = [prefix] if isinstance(node, dict) else []
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(
        node, list) else []
    for key, value in children:
        found.extend(_containers(value, (*prefix, key)))
    return found


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        node = node[part]
    return node


def _deep(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


# --- mutations: each returns (data or raw bytes, description, top-level field or None) -------------

Mutated = tuple[Any, str, str | None]


@st.composite
def _set_value(draw: st.DrawFn, data: dict[str, Any]) -> Mutated:
    path = draw(st.sampled_from(_paths(data)))
    value = draw(st.one_of(st.sampled_from(_BAD_SCALARS), st.integers(), st.floats(),
                           st.text(max_size=20), st.builds(_deep, st.integers(1, 60), st.none())))
    out = copy.deepcopy(data)
    _get(out, path[:-1])[path[-1]] = value
    return out, f"set {path} to {value!r:.40}", str(path[0])


@st.composite
def _unknown_key(draw: st.DrawFn, data: dict[str, Any]) -> Mutated:
    where = draw(st.sampled_from(_containers(data)))
    key = draw(st.sampled_from(["colour", "extra", "Name", "nmae", "trails", "backend", "0", "null"]))
    out = copy.deepcopy(data)
    target = _get(out, where)
    if key in target:
        key += "_x"
    target[key] = draw(st.sampled_from([1, "x", None, [1], {"a": 1}]))
    return out, f"unknown key {key!r} at {where}", str(where[0]) if where else key


@st.composite
def _delete_key(draw: st.DrawFn, data: dict[str, Any]) -> Mutated:
    path = draw(st.sampled_from([p for p in _paths(data) if isinstance(_get(data, p[:-1]), dict)]))
    out = copy.deepcopy(data)
    del _get(out, path[:-1])[path[-1]]
    return out, f"delete {path}", None  # a deleted optional key can leave a valid file


@st.composite
def _domain(draw: st.DrawFn, kind: str, data: dict[str, Any]) -> Mutated:
    """Mistakes specific to the kind: bad metrics and units, low > high, missing referenced files."""
    out = copy.deepcopy(data)
    options: list[tuple[str, str]] = []
    if kind == "search_space":
        options += [("objectives", "metric"), ("constraints", "constraint"), ("model", "range"),
                    ("model", "missing_onnx"), ("deployment", "backend"),
                    ("deployment", "precision"), ("constraints", "impossible")]
    elif kind == "hw_profile":
        options += [("backends", "backend"), ("precisions", "precision"), ("kind", "kind"),
                    ("table", "missing_table"), ("telemetry", "probe")]
    else:
        options += [("search_space", "missing_space"), ("devices", "missing_device"),
                    ("measurement", "contradiction"), ("budget", "budget"),
                    ("sampler", "sampler"), ("evaluator", "evaluator"), ("devices", "no_devices")]
    field, what = draw(st.sampled_from(options))
    if what == "metric":
        out["objectives"] = [{"metric": draw(st.sampled_from(_BAD_METRICS))}]
    elif what == "constraint":
        out["constraints"] = [draw(st.sampled_from(_BAD_CONSTRAINTS))]
    elif what == "impossible":  # no value can meet both
        out["constraints"] = ["process_rss_peak_mb <= 10", "process_rss_peak_mb >= 20", "accuracy >= 2"]
    elif what == "range":
        low = draw(st.integers(-5, 10))
        out["model"] = {**(out.get("model") or {}), "family": "cnn",
                        "arch": {"depth": {"low": low + draw(st.integers(1, 5)), "high": low},
                                 "width_mult": {"low": 0, "high": 1, "log": True}}}
    elif what == "missing_onnx":
        out["model"] = {"onnx": "models/missing.onnx"}
    elif what == "backend":
        value = draw(st.sampled_from(["onnx-runtime", "TensorRT", "tflite", "", "cuda"]))
        if kind == "search_space":
            out["deployment"] = {**(out.get("deployment") or {}), "backends": {value: {}}}
        else:
            out["backends"] = [value]
    elif what == "precision":
        value = draw(st.sampled_from(["fp33", "FP16", "int4", "8", ""]))
        if kind == "search_space":
            out["deployment"] = {**(out.get("deployment") or {}), "precisions": [value]}
        else:
            out["precisions"] = [value]
    elif what == "kind":
        out["kind"] = draw(st.sampled_from(["gpu", "tpu", "CPU", ""]))
    elif what == "missing_table":
        out["kind"], out["table"] = "replay", "tables/missing.csv"
    elif what == "probe":
        out["telemetry"] = draw(st.sampled_from([["rapl", "rapl"], ["nvml_power_mw"], "rapl", [1]]))
    elif what == "missing_space":
        out["search_space"] = _MISSING_FILE
    elif what == "missing_device":
        out["devices"] = [*out.get("devices", []), "../hw_profiles/missing.yaml"]
    elif what == "no_devices":
        out["devices"] = []
    elif what == "contradiction":
        out["measurement"] = {"min_iters": 100, "max_iters": 10, "min_seconds": 5, "max_seconds": 1}
    elif what == "budget":
        out["budget"] = {"trials": draw(st.sampled_from([0, -3, "many", 10**30, 1.5]))}
    elif what == "sampler":
        out["sampler"] = {"name": draw(st.sampled_from(["bayes", "TPE", "", "nsga2x"]))}
    elif what == "evaluator":  # only names that cannot import anything with side effects
        out["evaluator"] = draw(st.sampled_from(
            ["no_such_module_fuzz:f", "dse.examples.evaluators:nope", "dse.examples.evaluators",
             ":f", "dse.examples.evaluators:__doc__"]))
    return out, f"{what} at {field}", field


@st.composite
def _raw(draw: st.DrawFn, text: str) -> Mutated:
    """Bytes that are not a valid YAML mapping."""
    choice = draw(st.sampled_from(["truncate", "junk", "binary", "nesting", "scalar", "tabs",
                                   "empty", "huge", "duplicate"]))
    raw: bytes
    if choice == "truncate":
        cut = draw(st.integers(0, len(text)))
        raw = (text[:cut] + draw(st.sampled_from(["{", "[", ": :", "\"", "- - -", "&a *b"]))).encode()
    elif choice == "junk":
        raw = (text + "\n" + draw(st.sampled_from(["key: [1, 2", "? {", "@x", "%YAML 9.9",
                                                   "!!binary zz"]))).encode()
    elif choice == "binary":
        raw = draw(st.binary(min_size=1, max_size=256))
    elif choice == "nesting":  # far deeper than any spec: the parser must not crash the CLI
        depth = draw(st.sampled_from([50, 500, 5000, 20000]))
        raw = ("name: x\nmodel: " + "[" * depth + "]" * depth + "\n").encode()
    elif choice == "scalar":
        raw = draw(st.sampled_from([b"42\n", b"- a\n- b\n", b"null\n", b"'just a string'\n"]))
    elif choice == "tabs":
        raw = text.replace("  ", "\t").encode()
    elif choice == "empty":
        raw = b""
    elif choice == "huge":
        raw = ("name: " + "x" * 2_000_000 + "\n").encode()
    else:
        raw = (text + "\n" + text).encode()
    return raw, f"raw {choice}", None


def _case_strategy(seeds: dict[str, list[tuple[str, dict[str, Any]]]]) -> st.SearchStrategy[Any]:
    @st.composite
    def build(draw: st.DrawFn) -> tuple[str, str, Mutated]:
        kind = draw(st.sampled_from(sorted(seeds)))
        seed_name, data = draw(st.sampled_from(seeds[kind]))
        family = draw(st.sampled_from(["set", "unknown", "delete", "domain", "domain", "raw"]))
        if family == "set":
            mutated = draw(_set_value(data))
        elif family == "unknown":
            mutated = draw(_unknown_key(data))
        elif family == "delete":
            mutated = draw(_delete_key(data))
        elif family == "domain":
            mutated = draw(_domain(kind, data))
        else:
            mutated = draw(_raw(yaml.safe_dump(data, sort_keys=False)))
        return kind, seed_name, mutated

    return build()


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True).encode()


def fuzz_cases(n: int, seed_value: int = 0) -> Iterator[FuzzCase]:
    """``n`` malformed files, the same ones for the same ``seed_value`` and program.

    Hypothesis also draws constants it finds in the project's loaded modules, so another entry point
    (pytest vs the benchmark) or an edited module may give a different, equally reproducible set."""
    seeds = seed_files()
    drawn: list[tuple[str, str, Mutated]] = []
    strategy = _case_strategy(seeds)

    @seed(seed_value)
    @settings(max_examples=n, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case: tuple[str, str, Mutated]) -> None:
        drawn.append(case)

    collect()
    for index, (kind, seed_name, (value, mutation, field)) in enumerate(drawn[:n]):
        yield FuzzCase(kind=kind, name=f"fuzz-{index:04d}-{Path(seed_name).stem}.yaml",
                       data=_to_bytes(value), mutation=f"{seed_name}: {mutation}", field=field)


def prepare_folder(folder: Path) -> None:
    """Copy the seed tree (with the ONNX model and replay tables the seeds name) into ``folder``."""
    for directory in KIND_DIRS.values():
        if not (folder / directory).exists():
            shutil.copytree(REPO / directory, folder / directory,
                            ignore=shutil.ignore_patterns("runs", "dashboards", "__pycache__"))


def run_case(case: FuzzCase, folder: Path) -> CaseResult:
    """Write the case under ``folder`` and run ``dse validate`` on it (and ``load_experiment``)."""
    from typer.testing import CliRunner

    from dse.app.api import load_experiment
    from dse.cli import app
    from dse.core.exceptions import DseError

    prepare_folder(folder)
    path = folder / KIND_DIRS[case.kind] / case.name
    path.write_bytes(case.data)
    try:
        result = CliRunner().invoke(app, ["validate", str(path)])
        output = result.output
        escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
        if escaped and result.exc_info is not None:
            output += "".join(tb.format_exception(*result.exc_info))
        code = result.exit_code
        if case.kind == "experiment":  # what `dse run` does before it measures
            try:
                load_experiment(path)
            except DseError:
                run_code = 2
            except Exception:  # a traceback `dse run` would print
                output += tb.format_exc()
                escaped, run_code = True, 1
            else:
                run_code = 0
            if run_code != code and not escaped:
                output += f"\n(validate exited {code} but load_experiment gave {run_code})"
                code = max(code, run_code)
    finally:
        path.unlink(missing_ok=True)
    traceback = escaped or "Traceback" in output
    names_field = case.field is None or code == 0 or case.field in output
    return CaseResult(exit_code=code, output=output, traceback=traceback,
                      names_file=code == 0 or case.name in output, names_field=names_field)
