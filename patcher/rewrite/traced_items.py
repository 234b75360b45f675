"""Dicts holding a traced value: ``outputs["image"] = self.get_image_features(...)``.

The dict stays a Python dict while tracing, but the item is a proxy: a truth test of the item read
back (``... if outputs.get("image") else None``) cannot be decided while tracing, though it is plain
Python when the graph runs. Flow-sensitive within one block, as the vision-language models fill
such a dict only after testing it (``if outputs.get("image") is None and pixel_values is not None:``
reads None while tracing, which the trace decides correctly): a name counts from the statement
that stores a traced value in it until it is bound again.
"""

from __future__ import annotations

import libcst as cst

from .name_use import name_use
from .taint import VALUE, Taint
from .walk import descendants

_ITEM_READS = frozenset({"get", "pop", "setdefault"})
_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def stores_traced_value(stmt: cst.BaseStatement, taint: Taint) -> set[str]:
    """Names of dicts that ``stmt`` (or a block inside it) stores a traced value in."""
    found: set[str] = set()
    for node in descendants(stmt, stop=_NESTED_SCOPES):
        if isinstance(node, cst.Assign) and taint.of(node.value) == VALUE:
            found |= {t.target.value.value for t in node.targets
                      if isinstance(t.target, cst.Subscript) and isinstance(t.target.value, cst.Name)}
    return found


def after_statement(current: set[str], stmt: cst.BaseStatement, taint: Taint) -> set[str]:
    return (current - set(name_use(stmt).writes)) | stores_traced_value(stmt, taint)


def _reads_item(node: cst.BaseExpression, names: set[str]) -> bool:
    if isinstance(node, cst.Subscript):
        return isinstance(node.value, cst.Name) and node.value.value in names
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in _ITEM_READS and isinstance(node.func.value, cst.Name)
            and node.func.value.value in names)


def truth_tests_item(test: cst.BaseExpression, names: set[str]) -> bool:
    """Is ``test`` (or an operand of its ``and``/``or``/``not``) a read of an item of ``names``?"""
    if not names:
        return False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return truth_tests_item(test.expression, names)
    if isinstance(test, cst.BooleanOperation):
        return truth_tests_item(test.left, names) or truth_tests_item(test.right, names)
    return _reads_item(test, names)
