"""TZ107: an empty-shape guard before a reshape,

    if 0 in shape:
        return torch.empty(shape, dtype=x.dtype, device=x.device)
    return x.reshape(shape)

(LongT5's ``_split_into_blocks``) asks whether a traced shape holds a zero, which fx cannot
answer. The guard is not droppable: with a zero in ``shape`` but elements in ``x`` the reshape
fails where the guard returns an empty tensor. So the guard's ``return`` becomes a rebinding of
``x`` to the empty tensor, and that moves into a wrapped function; the reshape that follows then
gives the same tensor (``shape`` is what the empty tensor already has), for every input shape.

Only this exact shape is taken: ``shape`` and ``x`` plain local names (so the reshape reads the
same shape after the rebinding), the guard's tensor made from ``shape`` alone by a size factory,
and the very next statement ``return x.reshape(shape)`` (or ``.view``)."""

from __future__ import annotations

import libcst as cst

from ...registry.rules import FX_ITERATED, HOIST, RuleSpec, Symptom
from ..taint import CLEAN, dotted
from ..walk import descendants
from .base import RuleContext, RuleHooks

SPEC = RuleSpec(
    code="TZ107",
    title="empty-shape guard",
    summary="`if 0 in shape: return torch.empty(shape, ...)` before `return x.reshape(shape)` becomes a wrapped "
            "rebinding of x to that empty tensor",
    guide_anchor="shape-and-dtype-inference",
    stage=HOIST,
    # Before TZ105 and TZ103, which would try to move the guard whole and refuse (it returns).
    precedence=25,
    claims=(),  # `0 in shape` is no issue detect.py finds: the construct is matched whole
    symptoms=(Symptom(
        key="empty_shape_guard",
        title="a zero looked for in a traced shape",
        why="`0 in shape` iterates a symbolic shape whose length and sizes fx cannot know",
        fix="let the guard run when the graph runs: rebind the tensor to the empty one in a wrapped function",
        patterns=((FX_ITERATED, r"^(if|elif)\s+0\s+in\s"),),
        precedence=55,  # before iteration in general, which fails with the same message
    ),),
)
CODE = SPEC.code
HOOKS = RuleHooks()

_FACTORIES = frozenset({"torch.empty", "torch.zeros", "torch.ones"})  # shape in, tensor of that shape out
_RESHAPES = frozenset({"reshape", "view"})


def _sole_return(stmt: cst.CSTNode) -> cst.BaseExpression | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Return):
        return stmt.body[0].value
    return None


def _tested_shape(stmt: cst.If) -> cst.Name | None:
    """``shape`` of ``if 0 in shape:`` with no else, or None."""
    test = stmt.test
    if stmt.orelse is not None or not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if isinstance(test.left, cst.Integer) and test.left.value == "0" and isinstance(target.operator, cst.In) \
            and isinstance(target.comparator, cst.Name):
        return target.comparator
    return None


def _empty_of(value, shape: str) -> bool:
    """Is ``value`` ``torch.empty(shape, <keywords>)`` (or zeros/ones): a tensor of exactly ``shape``?"""
    if not (isinstance(value, cst.Call) and dotted(value.func) in _FACTORIES and value.args):
        return False
    first, rest = value.args[0], value.args[1:]
    return (first.keyword is None and not first.star and isinstance(first.value, cst.Name)
            and first.value.value == shape and all(a.keyword is not None for a in rest))


def _reshaped(value, shape: str) -> str | None:
    """``x`` of ``x.reshape(shape)`` / ``x.view(shape)``, or None."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in _RESHAPES and isinstance(value.func.value, cst.Name)
            and len(value.args) == 1):
        return None
    arg = value.args[0]
    if arg.keyword is None and not arg.star and isinstance(arg.value, cst.Name) and arg.value.value == shape:
        return value.func.value.value
    return None


def _next_statement(stmt: cst.BaseStatement, body: list | None) -> cst.BaseStatement | None:
    """The statement right after ``stmt`` in whichever block of the function holds it."""
    blocks = [body or []]
    for top in body or []:
        blocks += [n.body for n in descendants(top, stop=(cst.FunctionDef, cst.ClassDef))
                   if isinstance(n, cst.IndentedBlock)]
    for block in blocks:
        for i, s in enumerate(block[:-1]):
            if s is stmt:
                return block[i + 1]
    return None


def rewrite(stmt: cst.BaseStatement, ctx: RuleContext) -> list[cst.BaseStatement] | None:
    if not isinstance(stmt, cst.If):
        return None
    shape = _tested_shape(stmt)
    if shape is None or ctx.taint.of(stmt.test) == CLEAN:
        return None  # a shape Python knows while tracing: the guard traces as it is
    body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else stmt.body.body
    empty = _sole_return(body[0]) if len(body) == 1 else None
    if empty is None or not _empty_of(empty, shape.value):
        return None
    tensor = _reshaped(_sole_return(_next_statement(stmt, ctx.body)), shape.value)
    if tensor is None or tensor == shape.value:
        return None
    rebind = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(tensor))], empty)])
    guard = stmt.with_changes(body=cst.IndentedBlock([rebind]))
    return ctx.hoist([guard], code=CODE, desc=f"{ctx.method}_empty_shape_guard", span=stmt,
                     reason=f"empty-shape guard: {tensor} becomes the empty tensor, which the reshape keeps")
