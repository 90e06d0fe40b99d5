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

from dse.exceptions import DseError, SpecError
from dse.spec.bounded_yaml import MAX_FILE_BYTES, LimitExceeded, SpecLoader
from dse.spec.errors import describe_validation_error, describe_yaml_error
from dse.spec.filesystem import FileRefused, folder_problem, read_regular_file
from dse.spec.models import ExperimentSpec, HardwareProfile, SearchSpace

if TYPE_CHECKING:
    from dse.candidate import Candidate
    from dse.storage import CampaignStorage

M = TypeVar("M", bound=BaseModel)
# A custom evaluator: measures a candidate on the driver's machine, returns metric -> value.
Evaluator = Callable[["Candidate"], Mapping[str, float]]

KINDS: dict[str, type[BaseModel]] = {
    "search_space": SearchSpace,
    "hw_profile": HardwareProfile,
    "experiment": ExperimentSpec,
}
_FOLDER_KINDS = {"search_spaces": "search_space", "hw_profiles": "hw_profile",
                 "experiments": "experiment"}


def read_yaml(path: Path) -> dict[str, Any]:
    """The top-level mapping of a YAML file, or SpecError with one clear line. Only a regular file
    of at most ``MAX_FILE_BYTES`` is read, and the YAML in it is held to the limits of
    ``dse.spec.bounded_yaml``: no file makes this take more than a fraction of a second."""
    text = _read_text(path)
    try:
        data = yaml.load(text, Loader=SpecLoader)  # a SafeLoader: no arbitrary objects
    except LimitExceeded as exc:
        raise SpecError([f"{path}: {exc}"]) from None
    except yaml.YAMLError as exc:
        raise SpecError([describe_yaml_error(path, exc)]) from None
    if not isinstance(data, dict):
        raise SpecError([f"{path}: (top level): expected a mapping of keys, "
                         f"found {type(data).__name__}"])
    return data


def _read_text(path: Path) -> str:
    try:
        data = read_regular_file(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        raise SpecError([f"{path}: file not found"]) from None
    except FileRefused as exc:
        raise SpecError([f"{path}: (file): {exc}"]) from None
    except OSError as exc:
        raise SpecError([f"{path}: cannot read: {exc.strerror}"]) from None
    except ValueError:  # open() refuses a name with a NUL character, e.g. from a YAML "\0"
        raise SpecError([f"{str(path)!r}: not a usable file name (it contains a NUL "
                         f"character)"]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError([f"{path}: not a text file (invalid UTF-8)"]) from None


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
        return output_folders(self.path, self.spec)["runs_dir"]

    @property
    def cache_dir(self) -> Path:
        return output_folders(self.path, self.spec).get("cache_dir", self.run_dir / "cache")

    @property
    def storage(self) -> CampaignStorage:
        """Where the campaign's study lives (``storage:``; an ``env:NAME`` read now)."""
        from dse.storage import CampaignStorage

        return CampaignStorage.from_setting(self.spec.storage, self.run_dir,
                                            where=f"{self.path}: storage")

    @property
    def dashboard_path(self) -> Path:
        folder = output_folders(self.path, self.spec)["dashboards_dir"]
        return (folder / f"{self.spec.name}.html").resolve()


def output_folders(path: Path, spec: ExperimentSpec) -> dict[str, Path]:
    """The folders a campaign writes to, by the field of the experiment at ``path`` that names
    each: ``runs_dir`` (its run folder, ``<runs_dir>/<name>``), ``dashboards_dir`` and, when set,
    ``cache_dir``; resolved against the experiment's folder."""
    base = path.parent
    folders = {"runs_dir": base / spec.runs_dir / spec.name, "dashboards_dir": base / spec.dashboards_dir}
    if spec.cache_dir is not None:
        folders["cache_dir"] = base / spec.cache_dir
    return {field: folder.resolve() for field, folder in folders.items()}


def _folder_problems(path: Path, spec: ExperimentSpec) -> list[str]:
    """A line for each folder of :func:`output_folders` that the campaign could not create or
    write to: found at validate time, rather than as an OSError once a run has begun."""
    try:
        folders = output_folders(path, spec)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symbolic link loop (Python 3.11)
        return [f"{path}: runs_dir: cannot resolve the output folders: {exc}"]
    problems = []
    for field, folder in folders.items():
        problem = folder_problem(folder)
        if problem is not None:
            problems.append(f"{path}: {field}: {problem}; allowed: a folder this user can "
                            f"write to, or a path where one can be created")
    return problems


def _storage_problems(path: Path, spec: ExperimentSpec) -> list[str]:
    """An ``env:NAME`` storage whose variable is unset or holds no usable URL: said at validate
    time (the form itself is checked with the field)."""
    from dse.storage import CampaignStorage

    try:
        CampaignStorage.from_setting(spec.storage, Path(), where=f"{path}: storage")
    except DseError as exc:
        return [str(exc)]
    return []


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
        problems.extend(_timer_check(path, spec, devices))
    problems.extend(_folder_problems(path, spec))
    problems.extend(_storage_problems(path, spec))
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


def _timer_check(path: Path, spec: ExperimentSpec, devices: list[HardwareProfile]) -> list[str]:
    """CUDA events time only on a CUDA device (a Jetson's GPU included)."""
    if spec.measurement.timer != "cuda":
        return []
    return [f"{path}: measurement.timer: cuda times with CUDA events, and devices[{index}] "
            f"({device.name!r}) is a {device.kind} device; allowed: host, or cuda with only "
            f"cuda and jetson devices"
            for index, device in enumerate(devices) if device.kind not in ("cuda", "jetson")]


def _percentile_check(path: Path, spec: ExperimentSpec, space: SearchSpace) -> list[str]:
    """A latency percentile that an objective or constraint uses needs enough samples for its
    confidence interval, and max_iters must allow them."""
    from dse.order_statistics import percentile_quantile, samples_for_ci

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
