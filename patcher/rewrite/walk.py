"""Fast child access for libcst nodes.

`CSTNode.children` rebuilds the node through the visitor machinery on every call, which made
the rewriter 3-4x slower than parsing. Here children are read from the dataclass fields
directly, skipping whitespace, parentheses and punctuation, which no analysis looks at.
Order is field order (lexical for nearly all nodes; `a if t else b` yields t first).
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import libcst as cst

_SKIP_FIELDS = ("whitespace", "lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after", "header",
                "footer", "colon", "dot", "equal", "star_tok", "lbracket", "rbracket", "lbrace", "rbrace",
                "first_line", "empty_lines", "last_line", "newline", "trailing_whitespace", "asynchronous",
                "walrus", "arrow", "indent", "import_tok", "keyword_tok")
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls) if not f.name.startswith(_SKIP_FIELDS))
        _FIELDS[cls] = names
    return names


_IS_NODE: dict[type, bool] = {}


def _is_node(tp: type) -> bool:
    # CSTNode is an ABC: isinstance() on it is slow enough to dominate a walk.
    known = _IS_NODE.get(tp)
    if known is None:
        known = _IS_NODE[tp] = issubclass(tp, cst.CSTNode)
    return known


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    out = []
    for name in _fields(type(node)):
        value = getattr(node, name)
        tp = type(value)
        if tp is list or tp is tuple:
            out.extend(item for item in value if _is_node(type(item)))
        elif value is not None and _is_node(tp):
            out.append(value)
    return out


def descendants(node: cst.CSTNode, stop=()) -> Iterator[cst.CSTNode]:
    """`node` and everything below it, not entering node types in `stop` (yielded, not entered)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if stop and isinstance(current, stop) and current is not node:
            continue
        stack.extend(reversed(children(current)))
