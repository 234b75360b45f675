"""Hoisting part of an `if`/`elif` chain: the branches before the first data-dependent test
stay (their conditions are plain Python while tracing); that branch and the rest move."""

from __future__ import annotations

from typing import Callable

import libcst as cst

from ...registry.wrapped import WRAPPED_PREFIX
from ..wrapper_names import describe
from ..taint import CLEAN
from .base import RuleContext


def branches(stmt: cst.If) -> list[cst.If]:
    out = [stmt]
    while isinstance(out[-1].orelse, cst.If):
        out.append(out[-1].orelse)
    return out


def first_branch(stmt: cst.If, pick: Callable[[cst.If], bool]) -> int | None:
    for i, br in enumerate(branches(stmt)):
        if pick(br):
            return i
    return None


def _and_operands(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And) and not test.lpar:
        return _and_operands(test.left) + _and_operands(test.right)
    return [test]


def _join_and(operands: list[cst.BaseExpression]) -> cst.BaseExpression:
    joined = operands[0]
    for operand in operands[1:]:
        joined = cst.BooleanOperation(left=joined, operator=cst.And(), right=operand)
    return joined


def _split_plain_guard(stmt: cst.If, ctx: RuleContext) -> tuple[cst.BaseExpression, cst.If] | None:
    """`if plain and traced: body` with no else -> (`plain`, `if traced: body`): the leading operands
    that are plain Python while tracing (`pixel_values is not None`) stay a Python `if`, so a
    sample without images never calls the wrapped image branch (which hands the dict it fills back
    as a proxy, after which `outputs.get("image") is not None` would always hold)."""
    if stmt.orelse is not None:
        return None
    operands = _and_operands(stmt.test)
    plain = 0
    while plain < len(operands) - 1 and ctx.taint.of(operands[plain]) == CLEAN:
        plain += 1
    if plain == 0:
        return None
    return _join_and(operands[:plain]), cst.If(test=_join_and(operands[plain:]), body=stmt.body)


def hoist_from(stmt: cst.If, index: int, ctx: RuleContext, *, code: str, reason: str, prefix: str = WRAPPED_PREFIX,
               desc: str | None = None) -> list[cst.BaseStatement] | None:
    chain = branches(stmt)
    moved = chain[index]
    desc = desc or f"{ctx.method}_{describe(moved.test)}"
    if index == 0:
        split = _split_plain_guard(stmt, ctx)
        if split is not None:
            guard, inner = split
            replacement = ctx.hoist([inner], code=code, desc=desc, reason=reason, span=stmt, prefix=prefix)
            if replacement is None:
                return None
            ctx.guard_kept = True  # the body is the wrapped call already: not the original's to rewrite
            return [stmt.with_changes(test=guard, body=cst.IndentedBlock(replacement))]
        return ctx.hoist([stmt], code=code, desc=desc, reason=reason, span=stmt, prefix=prefix)
    standalone = moved.with_changes(leading_lines=[])
    replacement = ctx.hoist([standalone], code=code, desc=desc, reason=reason, span=moved, prefix=prefix)
    if replacement is None:
        return None
    new_else = cst.Else(body=cst.IndentedBlock(replacement), leading_lines=moved.leading_lines)
    rebuilt: cst.BaseStatement = chain[index - 1].with_changes(orelse=new_else)
    for br in reversed(chain[: index - 1]):
        rebuilt = br.with_changes(orelse=rebuilt)
    return [rebuilt]
