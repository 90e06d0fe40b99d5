"""The driver's look at a user's model before any device works on it: one candidate of a factory
(its first arch values) or the ONNX file, one forward on a batch of the sample shape, and what
came back judged against what dse needs — a floating tensor of shape (batch, classes), classes
the dataset's — so that a model that cannot work fails ``dse validate`` (and the start of
``dse run``) in one line, instead of every trial failing alike on the devices.

Built-in families are dse's own and trusted: not checked. The build and forward run in a thread
under a time limit: a factory that hangs costs that limit, never a hung ``dse validate``.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dse.models.check_verdicts import passed_before, remember_pass, spec_key
from dse.plugins import DATASETS, dataset_problem, dataset_sample_shape
from dse.spec import RangeParam, Scalar

if TYPE_CHECKING:
    import torch

    from dse.models.sources import FactorySource
    from dse.spec import ModelSpec, SearchSpace

_T = TypeVar("_T")

#: Rows of the checked batch: two, so a model that drops or mixes up the batch axis shows it.
BATCH = 2
#: Architectures tried in turn when the factory refuses one (a space may hold combinations it
#: rejects, e.g. a width that is no multiple of the heads): the first that builds is checked.
ARCH_TRIES = 4
#: The longest the whole check may take by default; the first architecture gets half, so a hang
#: there still leaves time for the next.
CHECK_SECONDS = 60.0


def space_output_problems(path: Path, space: SearchSpace, timeout_s: float = CHECK_SECONDS,
                          *, recheck: bool = False) -> list[str]:
    """:func:`model_output_problems` of the search space file ``path``'s model (none: none)."""
    if space.model is None:
        return []
    batch_sizes = () if space.deployment is None else tuple(space.deployment.batch_sizes)
    return model_output_problems(path, space.model, batch_sizes=batch_sizes, timeout_s=timeout_s,
                                 recheck=recheck)


def model_output_problems(path: Path, model: ModelSpec, *, batch_sizes: tuple[int, ...] = (),
                          timeout_s: float = CHECK_SECONDS, recheck: bool = False) -> list[str]:
    """Build one candidate of ``model`` (a factory or ONNX source of the space file ``path``),
    run one forward, and say what is wrong with its output, one line each naming the file and
    field; empty when it fits (and for a built-in family). ``batch_sizes``: the space's, an ONNX
    file is run at the smallest (its graph may run at those only). Results are remembered in this
    process while the spec is the same, and a pass across processes while the sources and
    libraries it depended on are unchanged (``dse.models.check_verdicts``); ``recheck`` builds
    again regardless."""
    if model.family is not None or model.llm is not None:  # a language model: its trials say
        return []
    key = _process_key(path, model, batch_sizes)
    if recheck:
        _CHECKED.pop(key, None)
    if key not in _CHECKED:
        disk_key = _disk_key(key)
        if not recheck and passed_before(disk_key):
            _CHECKED[key] = []
            return []
        with quiet_libraries():
            found = (_factory_problems(path, model, timeout_s) if model.factory is not None
                     else _onnx_problems(path, model, batch_sizes))
        if found == []:
            remember_pass(disk_key, [Path(model.onnx).resolve()] if model.onnx else [])
        if found is None:  # ran out of time: say so, but check again next time
            first = next(first_archs(model.arch))
            return [f"{path}: model.factory: building the model (arch {first}, then the next) "
                    f"and running one forward did not finish within {timeout_s:g} s: does the "
                    f"factory or its forward hang?"]
        _CHECKED[key] = found
    return list(_CHECKED[key])


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Library warnings and log lines raised while the user's model is imported and built
    (torchao's missing optional kernels, transformers' deprecations) kept off the terminal:
    ``dse validate`` prints the spec's problems, and the model's verdict is one of them."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def known_to_fit(path: Path, model: ModelSpec, batch_sizes: tuple[int, ...] = ()) -> bool:
    """Whether this spec's model passed the check already, in this process or before with the
    same sources and libraries: its factory imported and resolved then, so the spec checks need
    not import it (and torch with it) again."""
    key = _process_key(path, model, batch_sizes)
    return _CHECKED.get(key) == [] or passed_before(_disk_key(key))


_Key = tuple[str, str, tuple[int, ...], str]


def _process_key(path: Path, model: ModelSpec, batch_sizes: tuple[int, ...]) -> _Key:
    return (str(path), model.model_dump_json(), tuple(sorted(batch_sizes)), _file_stamp(model))


def _disk_key(key: _Key) -> str:
    return spec_key(str(Path(key[0]).resolve()), key[1], json.dumps(key[2]))


# What this process found of each spec already checked (validate reads a space once per file
# naming it; `dse run` once more at its start).
_CHECKED: dict[_Key, list[str]] = {}


def _file_stamp(model: ModelSpec) -> str:
    if model.onnx is None:
        return ""
    try:
        stat = Path(model.onnx).stat()
    except OSError:
        return ""
    return f"{stat.st_size}:{stat.st_mtime_ns}"


# -- what the output should be --------------------------------------------------------------


def dataset_classes(dataset: str | None, sample_shape: tuple[int, ...]) -> int | None:
    """How many logits a classifier of ``dataset`` returns: as declared, else counted from a
    loaded split's labels; None without a dataset."""
    if dataset is None:
        return None
    declared = DATASETS[dataset]
    if declared.classes is not None:
        return declared.classes
    split = declared.load(0, sample_shape)
    return int(split.y_train.max()) + 1


def output_problem(output: Any, batch: int, classes: int | None) -> str | None:
    """Why a forward's ``output`` on ``batch`` samples is not what dse scores — a floating tensor
    of shape (batch, classes), or (batch, ...) without a dataset — naming what came back and,
    where the logits are inside it, which field to return; None when it fits."""
    import torch

    wanted = f"(batch, {classes})" if classes is not None else "(batch, ...)"
    if not isinstance(output, torch.Tensor):
        where = _logits_inside(output, batch, classes)
        hint = (f"; return its {where}: wrap the model in a torch.nn.Module whose forward "
                f"returns model(x){where}" if where else "")
        return f"forward returned {_describe(output)}, not a tensor of shape {wanted}{hint}"
    shape = tuple(output.shape)
    if not output.is_floating_point():
        return (f"forward returned a tensor of {str(output.dtype).removeprefix('torch.')}, "
                f"shape {shape}; dse scores float logits of shape {wanted}")
    if _fits(output, batch, classes):
        return None
    if classes is None:
        return (f"forward on a batch of {batch} returned a tensor of shape {shape}; dse needs the "
                f"batch axis first: {wanted}")
    return (f"forward on a batch of {batch} returned a tensor of shape {shape}, not {wanted}: "
            f"the dataset has {classes} classes, one logit each")


def _fits(value: Any, batch: int, classes: int | None) -> bool:
    import torch

    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return False
    if value.ndim < 1 or value.shape[0] != batch:
        return False
    return classes is None or tuple(value.shape) == (batch, classes)


def _logits_inside(output: Any, batch: int, classes: int | None) -> str | None:
    """Where a tensor of the wanted shape sits in an output object: ``.logits``, ``['logits']``
    (a mapping), ``[0]`` (a tuple or list); the ``logits`` name first, else the first fit."""
    logits = getattr(output, "logits", None)
    if _fits(logits, batch, classes):
        return ".logits"
    if isinstance(output, Mapping):
        names = sorted(output, key=lambda name: name != "logits")
        found = next((name for name in names if _fits(output[name], batch, classes)), None)
        return None if found is None else f"[{found!r}]"
    if isinstance(output, (tuple, list)):
        index = next((i for i, value in enumerate(output) if _fits(value, batch, classes)), None)
        return None if index is None else f"[{index}]"
    return None


def _describe(output: Any) -> str:
    """What came back, in a few words: the class name, a tuple's or list's length."""
    if isinstance(output, (tuple, list)) and type(output) in (tuple, list):
        return f"a {type(output).__name__} of {len(output)}"
    return type(output).__name__


# -- a factory ------------------------------------------------------------------------------


def first_archs(arch: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The architectures the check tries, first values first: each parameter's choices in
    order, a range's low end then its high end (integers stay integers)."""
    names = list(arch)
    values = [_ends(arch[name]) for name in names]
    for combination in itertools.islice(itertools.product(*values), ARCH_TRIES):
        yield dict(zip(names, combination, strict=True))


def _ends(spec: Any) -> list[Scalar]:
    if isinstance(spec, RangeParam):
        return list(dict.fromkeys([spec.low, spec.high]))
    return list(spec)


def _factory_problems(path: Path, model: ModelSpec, timeout_s: float) -> list[str] | None:
    """Problems of the first architecture the factory builds; the first failure when none of
    :func:`first_archs` builds; None when the time ran out before any answer."""
    from dse.models.sources import FactorySource

    assert model.factory is not None
    source = FactorySource(model.factory)
    deadline = time.monotonic() + timeout_s
    failures: list[str] = []
    for index, arch in enumerate(first_archs(model.arch)):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        # A hang on the first architecture leaves time for the next.
        outcome = _in_thread(partial(_check_arch, path, model, source, arch),
                             left / 2 if index == 0 else left)
        if outcome is None:
            continue
        if isinstance(outcome, list):  # it built: what its output says is the answer
            return outcome
        failures.append(outcome)
    if failures:
        return [f"{path}: model.factory: {failures[0]}"]
    return None


def _check_arch(path: Path, model: ModelSpec, source: FactorySource,
                arch: dict[str, Any]) -> list[str] | str:
    """Build ``arch`` and judge one forward: the problems found (a list, empty when it fits), or
    why the factory refused it (a one-line string: the next architecture is tried)."""
    import torch

    with torch.random.fork_rng(devices=[]):  # the process's own random stream stays as it was
        torch.manual_seed(0)
        try:
            module, example = source.call(arch)
        except ValueError as exc:
            return f"{_one_line(str(exc))} (arch {arch})"
        return _judge(path, model, module, arch, example)


def _judge(path: Path, model: ModelSpec, module: torch.nn.Module, arch: dict[str, Any],
           example: tuple[int, ...] | None) -> list[str]:
    """The sample shape (``input_shape``, else the example's) against the dataset and the
    example, then one forward's output."""
    declared = tuple(model.input_shape) if model.input_shape is not None else None
    if declared is not None and example is not None and declared != example:
        return [f"{path}: model.input_shape: {list(declared)}, but the factory's example input "
                f"has samples of shape {list(example)} (arch {arch}): make them agree, or drop "
                f"input_shape"]
    shape = declared or example or dataset_sample_shape(model.dataset)
    if shape is None:
        held = ("" if model.dataset is None else
                f"; dataset {model.dataset} holds samples of more than one shape")
        return [f"{path}: model.factory: the factory returned only a module (arch {arch}){held}: "
                f"return (module, example input) or set model.input_shape"]
    if model.dataset is not None:
        problem = dataset_problem(model.dataset, shape)
        if problem is not None:
            whose = "model.input_shape" if declared else "the factory's example input"
            return [f"{path}: model.dataset: {problem} ({whose}, arch {arch})"]
    classes = dataset_classes(model.dataset, shape)
    output = _forward(module, shape)
    if isinstance(output, str):
        return [f"{path}: model.factory: {output} (arch {arch})"]
    problem = output_problem(output, BATCH, classes)
    return [] if problem is None else [f"{path}: model.factory: {problem} (arch {arch})"]


def _forward(module: torch.nn.Module, shape: tuple[int, ...]) -> Any:
    """The module's output on a standard-normal float32 batch (as dse feeds), in eval mode and
    without gradients; a one-line string when the forward raises."""
    import torch

    batch = torch.randn((BATCH, *shape), dtype=torch.float32)
    module.eval()
    try:
        with torch.no_grad():
            return module(batch)
    except Exception as exc:  # the user's code: what it raised is the answer, in one line
        return (f"forward on a float32 batch of shape {(BATCH, *shape)} failed: "
                f"{type(exc).__name__}: {_one_line(str(exc))}")


def _in_thread(work: Callable[[], _T], timeout_s: float) -> _T | None:
    """``work()`` in a daemon thread; None when it has not returned within ``timeout_s`` (the
    thread is left to finish or to hang on its own: a user's code cannot be stopped)."""
    result: list[_T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # handed to the caller's thread below
            failure.append(exc)

    thread = threading.Thread(target=run, name="dse-model-output-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if failure:
        raise failure[0]
    return result[0] if result else None


def _one_line(text: str) -> str:
    return " ".join(text.split())


# -- an ONNX file ---------------------------------------------------------------------------


def _onnx_problems(path: Path, model: ModelSpec, batch_sizes: tuple[int, ...]) -> list[str]:
    """The file's first output, as dse scores it, on a batch of the smallest searched size (or
    the size the file fixes): run by ONNX Runtime's CPU provider, as the fp32 reference is."""
    import numpy as np

    from dse.models.onnx_file import onnx_input

    assert model.onnx is not None
    field = f"{path}: model.onnx"
    try:
        info = onnx_input(Path(model.onnx))
        import onnxruntime as ort
    except (ValueError, ImportError):
        return []  # the file's own checks said so already; no runtime here: nothing to run
    batch = info.fixed_batch or min(batch_sizes, default=BATCH)
    options = ort.SessionOptions()
    options.log_severity_level = 4  # its errors come back in the line below, not on stderr too
    # ONNX Runtime's own exception types share no base class below Exception.
    try:
        session = ort.InferenceSession(model.onnx, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        return [f"{field}: ONNX Runtime (CPU, which computes every candidate's fp32 reference) "
                f"cannot load it: {type(exc).__name__}: {_one_line(str(exc))}"]
    rows = np.random.default_rng(0).standard_normal((batch, *info.sample_shape), dtype=np.float32)
    try:
        outputs = session.run(None, {info.name: rows})
    except Exception as exc:
        return [f"{field}: ONNX Runtime (CPU) failed on a float32 batch of shape "
                f"{rows.shape}: {type(exc).__name__}: {_one_line(str(exc))}"]
    first = np.asarray(outputs[0])
    classes = dataset_classes(model.dataset, info.sample_shape)
    name = session.get_outputs()[0].name
    if not np.issubdtype(first.dtype, np.floating):
        return [f"{field}: its first output {name!r} is {first.dtype}; dse scores the first "
                f"output as float logits"]
    if first.ndim >= 1 and first.shape[0] == batch and (
            classes is None or first.shape == (batch, classes)):
        return []
    wanted = f"(batch, {classes})" if classes is not None else "(batch, ...)"
    return [f"{field}: its first output {name!r} has shape {first.shape} on a batch of {batch}, "
            f"not {wanted}: dse scores the first output as the logits"
            + (f", one per class of dataset {model.dataset}" if classes is not None else "")]
