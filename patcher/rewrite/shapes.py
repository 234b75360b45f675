"""Which expressions and locals hold a shape (a tuple of sizes), for TZ104's rewrites."""

from __future__ import annotations

import libcst as cst

from .taint import dotted, target_names
from .walk import descendants


def is_shape_expr(node: cst.CSTNode, shape_names: set[str]) -> bool:
    if isinstance(node, cst.Name):
        return node.value in shape_names
    if isinstance(node, cst.Attribute):
        return node.attr.value == "shape"
    if isinstance(node, cst.Call):
        return (isinstance(node.func, cst.Attribute) and node.func.attr.value == "size" and not node.args) or (
            dotted(node.func) in ("torch.Size", "tuple"))
    if isinstance(node, cst.Subscript):
        return is_shape_expr(node.value, shape_names) and all(isinstance(e.slice, cst.Slice) for e in node.slice)
    if isinstance(node, cst.Tuple):
        return True
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return is_shape_expr(node.left, shape_names) and is_shape_expr(node.right, shape_names)
    return False


def shape_names_of(fn: cst.FunctionDef) -> set[str]:
    """Locals every assignment of which is a shape (or tuple) expression."""
    values: dict[str, list[cst.CSTNode]] = {}
    others: set[str] = set()

    for node in descendants(fn.body, stop=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        if isinstance(node, cst.Assign):
            for t in node.targets:
                if isinstance(t.target, cst.Name):
                    values.setdefault(t.target.value, []).append(node.value)
                else:
                    others.update(target_names(t.target))
        elif isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
            others.add(node.target.value)
        elif isinstance(node, cst.For):
            others.update(target_names(node.target))
    names: set[str] = set()
    for _ in range(3):
        for name, vals in values.items():
            if name not in others and all(is_shape_expr(v, names) for v in vals):
                names.add(name)
    return names
