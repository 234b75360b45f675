"""Names that hold the result of an opaque call (an ignored function, a method wrapped whole).

While tracing, an opaque call returns one proxy, which is never None; when the graph runs, the
call returns whatever its body computes, and mask builders return None or a tensor depending on
the data (``create_recurrent_attention_mask`` skips an all-ones mask). A test ``mask is None`` on
such a result is therefore decided by the data, not by the trace: it must run in the graph.

Flow-sensitive within one block: a name counts from the statement that binds it to an opaque
call's result up to the next statement that binds it otherwise (names bound before a compound
statement count inside its blocks).
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from .name_use import name_use
from .walk import descendants


def bound_to_opaque_call(stmt: cst.BaseStatement, is_opaque: Callable[[cst.Call], bool]) -> set[str]:
    """Names that ``stmt`` (``a = b = opaque(...)``) binds to an opaque call's result."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return set()
    found: set[str] = set()
    for small in stmt.body:
        if isinstance(small, cst.Assign) and isinstance(small.value, cst.Call) and is_opaque(small.value):
            found |= {t.target.value for t in small.targets if isinstance(t.target, cst.Name)}
    return found


def after_statement(current: set[str], stmt: cst.BaseStatement, is_opaque: Callable[[cst.Call], bool]) -> set[str]:
    """The opaque-result names once ``stmt`` ran: what it rebinds drops out, what it binds to an
    opaque call's result comes in."""
    return (current - set(name_use(stmt).writes)) | bound_to_opaque_call(stmt, is_opaque)


def _is_none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def tests_none_of(test: cst.BaseExpression, names: set[str]) -> bool:
    """Does ``test`` contain ``NAME is None`` / ``NAME is not None`` for one of ``names``?"""
    if not names:
        return False
    for node in descendants(test, stop=(cst.Lambda,)):
        if not isinstance(node, cst.Comparison):
            continue
        left = node.left
        for comparison in node.comparisons:
            right = comparison.comparator
            if isinstance(comparison.operator, (cst.Is, cst.IsNot)) and (
                    (isinstance(left, cst.Name) and left.value in names and _is_none(right))
                    or (isinstance(right, cst.Name) and right.value in names and _is_none(left))):
                return True
            left = right
    return False
