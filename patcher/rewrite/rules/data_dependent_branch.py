"""TZ101: `if`/`elif` and conditional expressions whose test depends on tensor values move into
a wrapped function called with every value they read, returning every name they assign.

Tests on configs, `self.` attributes, constants and `is None` stay: they are plain Python while
tracing. In a chain, only the branches from the first data-dependent test on move."""

from __future__ import annotations

import libcst as cst

from ...registry.rules import RULES, TZ101
from ..wrapper_names import describe
from ..taint import CLEAN, VALUE
from ._chain import branches, first_branch, hoist_from
from .base import claimed

SPEC = RULES[TZ101]
CODE = SPEC.code


def rewrite(stmt: cst.BaseStatement, ctx) -> list[cst.BaseStatement] | None:
    forced = ctx.forced == CODE
    if isinstance(stmt, cst.If):
        # The first branch whose test is traced decides: a shape test there is TZ105's.
        index = first_branch(stmt, lambda br: ctx.forces(CODE, br) or ctx.taint.of(br.test) != CLEAN)
        if index is None:
            return None
        branch = branches(stmt)[index]
        if not ctx.forces(CODE, branch) and ctx.taint.of(branch.test) != VALUE:
            return None
        return hoist_from(stmt, index, ctx, code=CODE, reason="branch on a tensor value")
    if isinstance(stmt, cst.SimpleStatementLine):
        bools = claimed(ctx.issues(stmt), SPEC)
        if not bools and not forced:
            return None
        nodes = [bools[0].node] if bools else list(stmt.body)
        return ctx.hoist([stmt], code=CODE, desc=f"{ctx.method}_{describe(*nodes)}", span=stmt,
                         reason=bools[0].detail if bools else "data-dependent statement (targeted)")
    return None
