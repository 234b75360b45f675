"""Hoisting part of an `if`/`elif` chain: the branches before the first data-dependent test
stay (their conditions are plain Python while tracing); that branch and the rest move."""

from __future__ import annotations

from typing import Callable

import libcst as cst

from ..naming import describe


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


def hoist_from(stmt: cst.If, index: int, ctx, *, code: str, reason: str, prefix: str = "_wrapped",
               desc: str | None = None) -> list[cst.BaseStatement] | None:
    chain = branches(stmt)
    moved = chain[index]
    desc = desc or f"{ctx.method}_{describe(moved.test)}"
    if index == 0:
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
