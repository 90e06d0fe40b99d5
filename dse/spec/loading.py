"""Load YAML specs into validated models; resolve an experiment's referenced files."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dse.exceptions import SpecError
from dse.spec.errors import describe_validation_error, describe_yaml_error
from dse.spec.models import ExperimentSpec, HardwareProfile, SearchSpace

if TYPE_CHECKING:
    from dse.candidate import Candidate

M = TypeVar("M", bound=BaseModel)
# A custom evaluator: measures a candidate in the driver process, returns metric -> value.
Evaluator = Callable[["Candidate"], Mapping[str, float]]

KINDS: dict[str, type[BaseModel]] = {
    "search_space": SearchSpace,
    "hw_profile": HardwareProfile,
    "experiment": ExperimentSpec,
}
_FOLDER_KINDS = {"search_spaces": "search_space", "hw_profiles": "hw_profile",
                 "experiments": "experiment"}


class _SpecLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key written twice in one mapping (PyYAML keeps the last silently,
    so a typo'd copy-paste would quietly override the first value)."""


def _mapping_without_duplicates(loader: _SpecLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` may legitimately override keys
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            repeated = key in seen
        except TypeError:  # an unhashable key: construct_mapping reports it
            continue
        seen.add(key)
        first = first_line.setdefault(key, key_node.start_mark.line)
        if repeated:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice (first on line {first + 1}); write it once",
                key_node.start_mark)
    return loader.construct_mapping(node, deep=True)


_SpecLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                            _mapping_without_duplicates)


def read_yaml(path: Path) -> dict[str, Any]:
    """The top-level mapping of a YAML file, or SpecError with one clear line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([f"{path}: file not found"]) from None
    except IsADirectoryError:
        raise SpecError([f"{path}: is a directory, expected a YAML file"]) from None
    except UnicodeDecodeError:
        raise SpecError([f"{path}: not a text file (invalid UTF-8)"]) from None
    except OSError as exc:
        raise SpecError([f"{path}: cannot read: {exc.strerror}"]) from None
    except ValueError:  # open() refuses a name with a NUL character, e.g. from a YAML "\0"
        raise SpecError([f"{str(path)!r}: not a usable file name (it contains a NUL "
                         f"character)"]) from None
    try:
        data = yaml.load(text, Loader=_SpecLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        raise SpecError([describe_yaml_error(path, exc)]) from None
    except RecursionError:  # PyYAML parses nested collections recursively
        raise SpecError([f"{path}: (file): invalid YAML: collections nested too deeply; a spec "
                         f"needs only a few levels"]) from None
    if not isinstance(data, dict):
        raise SpecError([f"{path}: (top level): expected a mapping of keys, "
                         f"found {type(data).__name__}"])
    return data


def load_model(path: Path, model: type[M]) -> M:
    data = read_yaml(path)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(describe_validation_error(path, model, exc)) from None


def load_profile(path: Path) -> HardwareProfile:
    """A hardware profile whose replay table (if any) is resolved against the profile's folder
    and exists."""
    profile = load_model(path, HardwareProfile)
    if profile.table is None:
        return profile
    table = (path.parent / profile.table).resolve()
    if not table.is_file():
        raise SpecError([f"{path}: table: file not found: {table}"])
    return profile.model_copy(update={"table": table})


def load_search_space(path: Path) -> SearchSpace:
    """A search space, with the ONNX model file it names (if any) resolved against its folder and
    checked to exist."""
    space = load_model(path, SearchSpace)
    model = space.model
    if model is None or model.onnx is None:
        return space
    onnx_path = (path.parent / model.onnx).resolve()
    if not onnx_path.is_file():
        raise SpecError([f"{path}: model.onnx: file not found: {onnx_path}"])
    resolved = model.model_copy(update={"onnx": str(onnx_path)})
    return space.model_copy(update={"model": resolved})


def resolve_evaluator(reference: str, where: str) -> Evaluator:
    """The function ``module:function`` names; SpecError starting with ``where`` when the module
    cannot be imported or has no such callable."""
    module_name, _, name = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError([f"{where}: cannot import module {module_name!r} ({exc}); it must be "
                         f"installed or on PYTHONPATH"]) from None
    except Exception as exc:  # the module's own code failed: say so on one line, not a traceback
        raise SpecError([f"{where}: importing module {module_name!r} failed: "
                         f"{type(exc).__name__}: {exc}"]) from None
    function = getattr(module, name, None)
    if function is None:
        raise SpecError([f"{where}: module {module_name!r} has no function {name!r}"])
    if not callable(function):
        raise SpecError([f"{where}: {reference} is not a function; found "
                         f"{type(function).__name__} {function!r:.60}"])
    evaluator: Evaluator = function
    return evaluator


def guess_kind(path: Path, data: dict[str, Any]) -> str:
    """Which of the three kinds a file is: by its folder, else by its keys."""
    for part in reversed(path.resolve().parts[:-1]):
        if part in _FOLDER_KINDS:
            return _FOLDER_KINDS[part]
    if "budget" in data or "devices" in data:
        return "experiment"
    if "deployment" in data or "model" in data or "objectives" in data:
        return "search_space"
    return "hw_profile"


@dataclass(frozen=True)
class Experiment:
    """A campaign with its search space and device profiles loaded and cross-checked."""

    spec: ExperimentSpec
    path: Path
    space: SearchSpace
    devices: tuple[HardwareProfile, ...]
    evaluator: Evaluator | None = None
    """The function the experiment's ``evaluator:`` names, imported."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def run_dir(self) -> Path:
        return (self.path.parent / self.spec.runs_dir / self.spec.name).resolve()

    @property
    def cache_dir(self) -> Path:
        if self.spec.cache_dir is None:
            return self.run_dir / "cache"
        return (self.path.parent / self.spec.cache_dir).resolve()

    @property
    def dashboard_path(self) -> Path:
        return (self.path.parent / self.spec.dashboards_dir / f"{self.spec.name}.html").resolve()


def load_experiment_files(path: Path) -> Experiment:
    """Load an experiment and the files it names; every problem in every file is reported at once."""
    spec = load_model(path, ExperimentSpec)
    problems: list[str] = []
    space: SearchSpace | None = None
    devices: list[HardwareProfile] = []
    try:
        space = load_search_space(path.parent / spec.search_space)
    except SpecError as exc:
        problems.extend(exc.problems)
        # The lines above name the space's file; say which experiment field pointed at it.
        problems.append(f"{path}: search_space: the search space above is invalid")
    for index, device_path in enumerate(spec.devices):
        try:
            devices.append(load_profile(path.parent / device_path))
        except SpecError as exc:
            problems.extend(exc.problems)
            problems.append(f"{path}: devices[{index}]: the profile above is invalid")
    evaluator = None
    if spec.evaluator is not None:
        try:
            evaluator = resolve_evaluator(spec.evaluator, f"{path}: evaluator")
        except SpecError as exc:
            problems.extend(exc.problems)
    if space is not None and not problems:
        problems.extend(_cross_check(path, space, devices))
        problems.extend(_percentile_check(path, spec, space))
    if problems:
        raise SpecError(problems)
    assert space is not None
    return Experiment(spec=spec, path=path, space=space, devices=tuple(devices),
                      evaluator=evaluator)


def _cross_check(path: Path, space: SearchSpace, devices: list[HardwareProfile]) -> list[str]:
    problems = []
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        problems.append(f"{path}: devices: two profiles share a name: {names}")
    wanted = set() if space.deployment is None else set(space.deployment.backends)
    for index, device in enumerate(devices):
        # A replay profile without a backend list takes the space's; no deployment, no check.
        if not wanted or not device.backends:
            continue
        if not wanted & set(device.backends):
            problems.append(
                f"{path}: devices[{index}]: profile {device.name!r} runs none of the space's "
                f"backends {sorted(wanted)}; it runs {device.backends}")
    return problems


def _percentile_check(path: Path, spec: ExperimentSpec, space: SearchSpace) -> list[str]:
    """A latency percentile that an objective or constraint uses needs enough samples for its
    confidence interval, and max_iters must allow them."""
    from dse.measure.stats import percentile_quantile, samples_for_ci

    metrics = [o.metric for o in space.objectives] + [c.metric for c in space.constraints]
    measure = spec.measurement.for_metrics(metrics)
    problems = []
    for name in measure.percentiles or []:
        needed = samples_for_ci(percentile_quantile(name))
        if needed > measure.max_iters:
            problems.append(
                f"{path}: measurement.max_iters: {measure.max_iters} samples can never give "
                f"latency {name} (used by {space.name}'s objectives or constraints) a 95% "
                f"confidence interval; it needs at least {needed}")
    return problems


def write_schemas(folder: Path) -> list[Path]:
    """Write one JSON schema per YAML kind, for editor completion."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, model in KINDS.items():
        target = folder / f"{kind}.schema.json"
        target.write_text(json.dumps(model.model_json_schema(), indent=2) + "\n")
        written.append(target)
    return written
