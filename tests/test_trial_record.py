"""The trial record's names: each spelt once, in dse.core.trial_record, and read and written by it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import dse
from dse.core.trial_record import StudyAttr, TrialAttr

PACKAGE = Path(dse.__file__).parent
# (module, literal) pairs allowed to stay literal.
ALLOWED: set[tuple[str, str]] = set()


def _names(cls: type) -> dict[str, str]:
    return {key: value for key, value in vars(cls).items() if not key.startswith("_")}


@pytest.mark.parametrize("cls", [TrialAttr, StudyAttr])
def test_each_name_is_its_value_in_capitals(cls: type) -> None:
    # A stored study is read by the values: changing one means renaming its constant too.
    names = _names(cls)
    assert names
    assert {key: value.upper() for key, value in names.items()} == {k: k for k in names}


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_user_attrs(node: ast.AST, aliases: set[str]) -> bool:
    return ((isinstance(node, ast.Attribute) and node.attr == "user_attrs")
            or (isinstance(node, ast.Name) and node.id in aliases))


def _aliases(scope: ast.AST) -> set[str]:
    """Names bound to some ``x.user_attrs`` in the scope (``attrs = trial.user_attrs``)."""
    return {target.id for node in ast.walk(scope) if isinstance(node, ast.Assign)
            and _is_user_attrs(node.value, set())
            for target in node.targets if isinstance(target, ast.Name)}


def _literal_keys(scope: ast.AST, aliases: set[str]) -> Iterator[tuple[int, str]]:
    """(line, literal) of each attribute name written as a string literal in the scope."""
    for node in ast.walk(scope):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr == "set_user_attr" or (
                    node.func.attr == "get" and _is_user_attrs(node.func.value, aliases)):
                key = _literal(node.args[0])
        elif isinstance(node, ast.Subscript) and _is_user_attrs(node.value, aliases):
            key = _literal(node.slice)
        elif (isinstance(node, ast.Compare) and len(node.ops) == 1
              and isinstance(node.ops[0], ast.In | ast.NotIn)
              and _is_user_attrs(node.comparators[0], aliases)):
            key = _literal(node.left)
        elif isinstance(node, ast.keyword) and node.arg == "user_attrs" and isinstance(
                node.value, ast.Dict):
            for item in node.value.keys:
                if _literal(item) is not None:
                    yield node.value.lineno, str(_literal(item))
        if key is not None:
            yield node.lineno, key


def _found() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE.parent).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        scopes = [node for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
        hits = set(_literal_keys(tree, set()))
        for scope in scopes:
            hits |= set(_literal_keys(scope, _aliases(scope)))
        found += [f"{where}:{line}: {key!r}" for line, key in sorted(hits)
                  if (where, key) not in ALLOWED]
    return found


def test_no_trial_or_study_attribute_is_named_by_a_literal() -> None:
    found = _found()
    assert not found, ("name these attributes by dse.core.trial_record's TrialAttr / StudyAttr:\n"
                       + "\n".join(found))


def test_the_scan_sees_each_form() -> None:
    source = (
        "def f(trial, study):\n"
        "    trial.set_user_attr('a', 1)\n"
        "    study.user_attrs.get('b')\n"
        "    trial.user_attrs['c']\n"
        "    'd' in trial.user_attrs\n"
        "    study.enqueue_trial({}, user_attrs={'e': 1})\n"
        "    attrs = trial.user_attrs\n"
        "    attrs.get('f'), attrs['g'], 'h' not in attrs\n"
        "    other = {}\n"
        "    other.get('not an attribute')\n")
    scope = ast.parse(source).body[0]
    assert sorted(key for _, key in _literal_keys(scope, _aliases(scope))) == list("abcdefgh")
