"""Load YAML specs into validated models; resolve an experiment's referenced files."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dse.core import SpecError
from dse.spec.bounded_yaml import MAX_FILE_BYTES, LimitExceeded, SpecLoader
from dse.spec.cross_checks import experiment_problems
from dse.spec.errors import describe_validation_error, describe_yaml_error
from dse.spec.experiment import Evaluator as Evaluator
from dse.spec.experiment import Experiment as Experiment
from dse.spec.experiment import output_folders as output_folders
from dse.spec.filesystem import FileRefused, read_regular_file
from dse.spec.llm_files import resolve_llm_files
from dse.spec.models import ExperimentSpec, HardwareProfile, SearchSpace
from dse.spec.partial_space import valid_parts

M = TypeVar("M", bound=BaseModel)
# Checks of a search space (its file, the space) that need more than the spec layer: one line each.
SpaceChecks = Callable[[Path, SearchSpace], list[str]]

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
    space, problems = check_search_space(path)
    if problems:
        raise SpecError(problems)
    assert space is not None
    return space


def check_search_space(path: Path) -> tuple[SearchSpace | None, list[str]]:
    """The search space at ``path`` (its ONNX model file, if any, resolved against its folder)
    and its problems, one line each. When it has some, the space returned (if any) holds only
    the sections valid on their own (:func:`dse.spec.partial_space.valid_parts`), for the checks
    that read only those."""
    try:
        data = read_yaml(path)
    except SpecError as exc:
        return None, exc.problems
    try:
        space: SearchSpace | None = SearchSpace.model_validate(data)
        problems: list[str] = []
    except ValidationError as exc:
        space, problems = valid_parts(data), describe_validation_error(path, SearchSpace, exc)
    if space is not None and space.generative:
        space, found = resolve_llm_files(path, space)
        return space, problems + found
    if space is None or space.model is None or space.model.onnx is None:
        return space, problems
    onnx_path = (path.parent / space.model.onnx).resolve()
    if not onnx_path.is_file():
        problems.append(f"{path}: model.onnx: file not found: {onnx_path}")
        return space.model_copy(update={"model": None}), problems  # the model's checks need it
    resolved = space.model.model_copy(update={"onnx": str(onnx_path)})
    return space.model_copy(update={"model": resolved}), problems


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


@dataclass
class ExperimentFiles:
    """What reading an experiment and the files it names found, all of it in one pass."""

    path: Path
    problems: list[str] = field(default_factory=list)
    """Every problem found, one line each, naming file and field."""
    experiment: Experiment | None = None
    """The experiment, when every file it names loaded (``problems`` may still hold lines of
    the checks across them)."""
    space_path: Path | None = None
    space: SearchSpace | None = None
    """The search space; where it is invalid, the sections of it valid on their own (see
    :func:`check_search_space`), for the checks that read only those."""


def read_experiment_files(path: Path, space_checks: SpaceChecks | None = None) -> ExperimentFiles:
    """Read the experiment at ``path`` and every file it names, and check them across. Where
    the experiment itself is invalid, the files its ``search_space`` and ``devices`` name are
    still read, so their problems come in the same pass. ``space_checks(space_path, space)``:
    the checks of a higher layer (the registries), run on the space or, where it is invalid, on
    the sections of it valid on their own; their lines follow the space's own."""
    found = ExperimentFiles(path)
    try:
        data = read_yaml(path)
    except SpecError as exc:
        found.problems.extend(exc.problems)
        return found
    spec: ExperimentSpec | None = None
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        found.problems.extend(describe_validation_error(path, ExperimentSpec, exc))
    space_file = spec.search_space if spec is not None else _named_file(data.get("search_space"))
    space_valid = False
    if space_file is not None:
        found.space_path = path.parent / space_file
        found.space, space_problems = check_search_space(found.space_path)
        space_valid = not space_problems
        if found.space is not None and space_checks is not None:
            space_problems.extend(space_checks(found.space_path, found.space))
        found.problems.extend(space_problems)
        if space_problems:  # the lines above name the space's file; say which field pointed at it
            found.problems.append(f"{path}: search_space: the search space above is invalid")
    device_files = (list(enumerate(spec.devices)) if spec is not None
                    else _named_files(data.get("devices")))
    devices = _read_devices(path, device_files, found.problems)
    if spec is None:
        return found
    evaluator, evaluator_valid = None, True
    if spec.evaluator is not None:
        try:
            evaluator = resolve_evaluator(spec.evaluator, f"{path}: evaluator")
        except SpecError as exc:
            found.problems.extend(exc.problems)
            evaluator_valid = False
    space = found.space if space_valid else None
    found.problems.extend(experiment_problems(path, spec, space, devices))
    if space is not None and evaluator_valid and len(devices) == len(spec.devices):
        found.experiment = Experiment(spec=spec, path=path, space=space,
                                      devices=tuple(profile for _, profile in devices),
                                      evaluator=evaluator)
    return found


def _read_devices(path: Path, files: list[tuple[int, Path]],
                  problems: list[str]) -> list[tuple[int, HardwareProfile]]:
    """The profiles of ``devices:`` that load, each with its index; a line in ``problems`` for
    each that does not."""
    devices = []
    for index, device_file in files:
        try:
            devices.append((index, load_profile(path.parent / device_file)))
        except SpecError as exc:
            problems.extend(exc.problems)
            problems.append(f"{path}: devices[{index}]: the profile above is invalid")
    return devices


def _named_file(value: object) -> Path | None:
    """A file an invalid experiment names (a non-empty string), to read all the same."""
    return Path(value) if isinstance(value, str) and value and "\0" not in value else None


def _named_files(value: object) -> list[tuple[int, Path]]:
    """The files an invalid experiment's ``devices:`` names, each with its index."""
    if not isinstance(value, list):
        return []
    named = [(index, _named_file(item)) for index, item in enumerate(value)]
    return [(index, file) for index, file in named if file is not None]


def load_experiment_files(path: Path) -> Experiment:
    """Load an experiment and the files it names; every problem in every file is reported at
    once (SpecError)."""
    found = read_experiment_files(path)
    if found.problems:
        raise SpecError(found.problems)
    assert found.experiment is not None
    return found.experiment


def write_schemas(folder: Path) -> list[Path]:
    """Write one JSON schema per YAML kind, for editor completion."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, model in KINDS.items():
        target = folder / f"{kind}.schema.json"
        target.write_text(json.dumps(model.model_json_schema(), indent=2) + "\n")
        written.append(target)
    return written
