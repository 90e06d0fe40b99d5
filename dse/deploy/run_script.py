"""A bundle's ``run.py``: the backend's ``load`` (the module its declaration names, e.g.
``dse.backends.tvm.run_script``), the command line every bundle shares
(``dse.backends._run_script_main``), and the settings recorded at export, joined into one file that
imports no dse."""

from __future__ import annotations

import pprint
from importlib import resources
from typing import Any

from dse.core import DseError
from dse.plugins import declaration

_MAIN = "dse.backends._run_script_main"
_GENERATION_MAIN = "dse.backends._generation_run_main"


def _part(module: str) -> str:
    """The text of ``module`` (a dotted name), read as a file of its package, never imported."""
    package, _, leaf = module.rpartition(".")
    try:
        return (resources.files(package) / f"{leaf}.py").read_text()
    except (FileNotFoundError, ModuleNotFoundError):
        raise DseError(f"no run script {module!r}: no file {leaf}.py in package {package!r}") from None


def render_run_script(backend: str, settings: dict[str, Any]) -> str:
    """The text of ``run.py`` for a model deployed on ``backend`` with ``settings`` (the keys
    shared command line and the backend's ``load`` read: ``backend``, ``precision``, ``batch_size``,
    ``input_shape``, ``knobs``, ``threads``, ``model_file``, ``inputs_file``, and whatever the
    backend's ``bundle_extras`` added). DseError when the backend has no standalone runner."""
    standalone = declaration(backend).standalone
    if standalone is None:
        raise DseError(f"backend {backend!r} has no standalone run.py in dse")
    return _joined(f"this bundle's model ({backend}", settings, standalone.script, _MAIN, "load")


def render_generation_run_script(backend: str, settings: dict[str, Any]) -> str:
    """The text of a language model's ``run.py`` on ``backend`` with ``settings`` (the keys the
    shared command line and the backend's ``load_generator`` read: ``backend``, ``precision``,
    ``batch_size``, ``knobs``, ``threads``, ``model_dir``, ``prompts_file``, ``tokens_file``,
    ``output_tokens``, and the runtime's own). DseError when the backend has no standalone
    generation runner."""
    standalone = declaration(backend).generation_standalone
    if standalone is None:
        raise DseError(f"backend {backend!r} has no standalone run.py for a language model in "
                       f"dse")
    return _joined(f"this bundle's language model ({backend}", settings, standalone.script,
                   _GENERATION_MAIN, "load_generator")


def _joined(what: str, settings: dict[str, Any], script: str, main: str, loader: str) -> str:
    """``run.py``: a docstring saying how to run ``what``, the settings, the backend's part
    (``script``, defining ``loader``) and the shared command line (``main``)."""
    header = (f'"""Run {what} {settings["precision"]}, batch {settings["batch_size"]}) with '
              f'only its runtime installed:\n\n'
              f'    pip install -r requirements.txt\n    python run.py --help\n\n'
              f'Written by ``dse export``; the settings below are the ones it was measured '
              f'with."""\n\n')
    literal = pprint.pformat(settings, width=100, sort_dicts=True)
    return (header + "# ruff: noqa\n# mypy: ignore-errors\n"
            + f"SETTINGS = {literal}\n\n\n"
            + _part(script).rstrip() + "\n\n\n"
            + _part(main).rstrip() + "\n\n\n"
            + f'if __name__ == "__main__":\n    main({loader}, SETTINGS)\n')
