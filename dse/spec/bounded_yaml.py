"""A YAML loader for specs whose cost is bounded by fixed limits, not by what a file says.

YAML lets a small file describe a huge value: an alias (``*a``) repeats its anchor's value at each
use, so ten levels of ten aliases each ("billion laughs") describe 10^10 values in under 1 KB.
PyYAML builds that value cheaply (every use shares one Python object), but whatever walks it
afterwards (pydantic, ``repr()`` in an error message) walks the whole expansion. A 5,000-digit
integer makes ``int()`` raise (Python refuses to convert more than 4,300 digits), and PyYAML's
composer and constructor recurse once per level of nesting.

:class:`SpecLoader` therefore weighs each node as it composes it, before anything is constructed:
its size with every alias expanded, its depth, the characters of its text. Each weight is computed
once per node from its children's, so an alias costs one look-up, and the first node over a limit
stops the parse with :class:`LimitExceeded` naming the field and line. Composing stops after
``MAX_VALUES`` nodes, so no file costs more than that many nodes of work (about 0.3 s in PyYAML's
pure-Python parser) before it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from dse.spec.errors import join_path, short_repr

# The limits. The shipped specs are under 3 KB, with about 150 values at most 7 levels deep and no
# text over 200 characters; each limit is far above what a spec needs and far below what costs.
MAX_FILE_BYTES = 1 << 20
"""A spec file's size: 1 MiB, 300x the largest shipped spec. PyYAML scans 1 MiB in about 0.3 s."""
MAX_VALUES = 10_000
"""Values (scalars and collections, keys included) in one file, every alias counted at each use:
room for a free-parameter list of thousands of choices; pure-Python PyYAML composes 10,000 values in
about 0.3 s, and pydantic validates them in milliseconds."""
MAX_DEPTH = 32
"""Levels of nesting, aliases expanded: a spec needs about 7; PyYAML and pydantic recurse once a
level, far from Python's recursion limit of 1,000 at 32."""
MAX_TEXT_CHARS = 10_000
"""Characters of one string (a key included): a path is at most 4,096, a description a paragraph."""
MAX_NUMBER_CHARS = 100
"""Characters of one number: a 64-bit integer has 20 digits, a float under 30; Python cannot even
convert an integer of more than 4,300 digits."""
MAX_EXPANDED_CHARS = MAX_FILE_BYTES
"""Characters of text in the whole file, aliases expanded: what a file without aliases may hold,
so that printing any part of the value costs no more than reading the file did."""

_NUMBER_TAGS = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})


class LimitExceeded(yaml.YAMLError):
    """A file went past one of this module's limits. Its text reads ``FIELD: found ... on line N;
    allowed: ...`` (the caller puts the file name in front)."""

    def __init__(self, field: str, line: int, found: str, allowed: str) -> None:
        super().__init__(f"{field}: found {found} on line {line}; allowed: {allowed}")


@dataclass(frozen=True)
class _Weight:
    """What a node costs once every alias in it is expanded."""

    values: int
    height: int
    """Levels of collections below the node: 0 for a scalar."""
    chars: int


class SpecLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (no arbitrary objects) with the limits of this module, and a key
    written twice in one mapping refused (PyYAML keeps the last silently, so a typo'd copy-paste
    would quietly override the first value)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._path: list[Any] = []
        """How the composer reached the node it composes: None (the root, or a key), a sequence
        index, or the key node of a mapping value."""
        self._composed = 0
        self._weights: dict[int, _Weight] = {}
        """id(node) -> weight, for every node composed whole; an anchor not in it is still open."""

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._path.append(index)
        try:
            event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]  # stubs
            line = 0 if event.start_mark is None else event.start_mark.line + 1
            self._admit(line)
            node = super().compose_node(parent, index)
            assert node is not None  # compose_node is only called where an event starts a node
            self._weigh(node, isinstance(event, yaml.AliasEvent), line)
            return node
        finally:
            self._path.pop()

    def _admit(self, line: int) -> None:
        """Refuse a node past the count or the depth before composing it (and its children)."""
        self._composed += 1
        if self._composed > MAX_VALUES:
            raise LimitExceeded(self._field(), line, f"more than {MAX_VALUES:,} values",
                                f"at most {MAX_VALUES:,} values in one file")
        if len(self._path) - 1 > MAX_DEPTH:  # the root is level 0
            raise self._too_deep(line)

    def _weigh(self, node: Node, alias: bool, line: int) -> None:
        if alias:
            weight = self._weights.get(id(node))
            if weight is None:  # `&a [*a]`: its expansion never ends
                raise LimitExceeded(self._field(), line, "an alias inside the value it names",
                                    "aliases of values that end before them")
        else:
            weight = self._own_weight(node, line)
            self._weights[id(node)] = weight
        if len(self._path) - 1 + weight.height > MAX_DEPTH:
            raise self._too_deep(line)
        if weight.values > MAX_VALUES:
            raise LimitExceeded(self._field(), line,
                                f"a value of {weight.values:,} values with its aliases expanded",
                                f"at most {MAX_VALUES:,} values in one file, an alias counting "
                                f"its value at each use")
        if weight.chars > MAX_EXPANDED_CHARS:
            raise LimitExceeded(self._field(), line,
                                f"a value of {weight.chars:,} characters with its aliases expanded",
                                f"at most {MAX_EXPANDED_CHARS:,} characters in one file, an "
                                f"alias counting its value at each use")

    def _own_weight(self, node: Node, line: int) -> _Weight:
        """A node's weight from its children's (all composed, so all weighed)."""
        if isinstance(node, ScalarNode):
            self._check_scalar(node, line)
            return _Weight(values=1, height=0, chars=len(node.value))
        if isinstance(node, SequenceNode):
            children: list[Node] = node.value
        else:
            assert isinstance(node, MappingNode)
            children = [child for pair in node.value for child in pair]
        weights = [self._weights[id(child)] for child in children]
        return _Weight(values=1 + sum(w.values for w in weights),
                       height=1 + max((w.height for w in weights), default=0),
                       chars=sum(w.chars for w in weights))

    def _check_scalar(self, node: ScalarNode, line: int) -> None:
        length = len(node.value)
        if node.tag in _NUMBER_TAGS and length > MAX_NUMBER_CHARS:
            raise LimitExceeded(self._field(), line, f"a number of {length:,} characters",
                                f"numbers of at most {MAX_NUMBER_CHARS} characters")
        if length > MAX_TEXT_CHARS:
            raise LimitExceeded(self._field(), line, f"a text of {length:,} characters",
                                f"texts of at most {MAX_TEXT_CHARS:,} characters")

    def _too_deep(self, line: int) -> LimitExceeded:
        return LimitExceeded(self._field(), line,
                             f"collections nested more than {MAX_DEPTH} levels deep (nested too "
                             f"deeply)", f"at most {MAX_DEPTH} levels; a spec needs only a few")

    def _field(self) -> str:
        """The field path of the node being composed, e.g. ``model.arch.depth[2]``."""
        parts: list[int | str] = []
        for index in self._path:
            if isinstance(index, int):
                parts.append(index)
            elif isinstance(index, ScalarNode):
                parts.append(index.value)
            elif index is not None:  # the value of a key that is itself a list or mapping
                parts.append("?")
        return join_path(parts)


def _mapping_without_duplicates(loader: SpecLoader, node: MappingNode) -> dict[Any, Any]:
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
                None, None, f"key {short_repr(key)} appears twice (first on line {first + 1}); "
                            f"write it once", key_node.start_mark)
    return loader.construct_mapping(node, deep=True)


SpecLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                           _mapping_without_duplicates)
