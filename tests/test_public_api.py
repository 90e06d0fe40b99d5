"""The public API, ``dse.__all__``: every name resolves and is documented, and the examples in the
docstrings of the modules that define the names run (as doctests, from the repository root, whose
shipped experiment files some of them load)."""

from __future__ import annotations

import doctest
import importlib
import inspect
from pathlib import Path

import pytest

import dse

REPO = Path(__file__).resolve().parents[1]

# Data, not code: nothing of their own to document (METRICS's entries are MetricSpec's example).
DATA = frozenset({"__version__", "METRICS"})

# The modules dse's lazy loader takes the names from (dse._NAMES), and the ones that define them
# where those differ: the examples live in the docstrings of the defining module. Written out so
# that collecting the tests imports nothing heavy; test_defining_modules_are_listed keeps it true.
MODULES = sorted(set(dse._NAMES.values()) | {
    "dse.search.evaluators.calls",  # InfeasibleCandidate, re-exported by dse.search.evaluators.dispatchers
    "dse.search.evaluators.replay",  # ReplayEvaluator, re-exported by dse.search.evaluators.dispatchers
    "dse.storage.campaign",  # CampaignStorage, re-exported by dse.storage
})

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _public() -> list[str]:
    return sorted(set(dse.__all__) - DATA)


def _defining_modules() -> set[str]:
    return {getattr(dse, name).__module__ for name in _public()}


def test_defining_modules_are_listed() -> None:
    assert _defining_modules() <= set(MODULES)


@pytest.mark.parametrize("module_name", MODULES)
def test_doctests(module_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the examples name the shipped files relative to the repository
    module = importlib.import_module(module_name)
    results = doctest.testmod(module, optionflags=FLAGS, report=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed"
    if module_name in _defining_modules():
        # A module that only re-exports (dse.storage) has no examples of its own; every module
        # that defines a public name shows at least one that runs (not only skipped ones).
        assert results.attempted > 0


@pytest.mark.parametrize("name", _public())
def test_name_is_documented(name: str) -> None:
    obj = getattr(dse, name)
    doc = obj.__doc__  # its own: inspect.getdoc would fall back to a base class's
    assert doc and doc.strip(), f"{name} has no docstring"
    # A dataclass without a docstring gets its signature as one.
    assert not doc.startswith(f"{name}("), f"{name} has only the dataclass's generated docstring"
    assert "Examples:" in doc and ">>>" in doc, f"{name} shows no example"
    if inspect.isfunction(obj):
        for section in ("Args:", "Returns:"):
            assert section in doc, f"{name} has no {section} section"


def test_dir_lists_all_of_the_public_api() -> None:
    listed = sorted(dir(dse))
    assert [name for name in dse.__all__ if name not in listed] == []
