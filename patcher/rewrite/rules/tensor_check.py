"""TZ102: checks on traced values (asserts, `if ...: raise`, `torch_compilable_check`) move into
wrapped `_check_*` functions, so they validate every run of the graph instead of failing (or
freezing their f-string message) while tracing. Checks are never deleted."""

from __future__ import annotations

import libcst as cst

from ...registry.rules import ASSERT, CHECK, FX_CONTROL_FLOW, HOIST, RuleSpec, Symptom
from ...registry.wrapped import CHECK_PREFIX
from ..wrapper_names import describe
from ..taint import CLEAN
from ._chain import branches, first_branch, hoist_from
from .base import RuleContext, RuleHooks, claimed

SPEC = RuleSpec(
    code="TZ102",
    title="check on a traced value",
    summary="checks on traced values (assert, if-raise, torch_compilable_check) move into wrapped _check_* "
            "functions",
    guide_anchor="asserts-and-checks",
    stage=HOIST,
    precedence=10,  # first: a check moves whole, with its message, whatever it tests
    claims=((ASSERT, None), (CHECK, None)),
    symptoms=(Symptom(
        key="assert",
        title="assert or check on a tensor value",
        why="an assert/check needs a concrete bool, but while tracing tensors are symbolic",
        fix="move the check into a module-level torch.fx.wrap function so it runs when the graph runs",
        patterns=((r"cond must be a bool", None), (FX_CONTROL_FLOW, r"^assert|^[^(]*check")),
        precedence=10,
    ),),
)
CODE = SPEC.code
HOOKS = RuleHooks()


def _raises_only(block: cst.BaseSuite) -> bool:
    body = getattr(block, "body", [])
    return bool(body) and all(
        isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, (cst.Raise, cst.Expr)) for x in s.body)
        and any(isinstance(x, cst.Raise) for x in s.body)
        for s in body
    )


def _check_args(stmt: cst.SimpleStatementLine) -> list[cst.CSTNode]:
    for small in stmt.body:
        if isinstance(small, cst.Assert):
            return [small.test]
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and small.value.args:
            return [small.value.args[0].value]
    return list(stmt.body)


def rewrite(stmt: cst.BaseStatement, ctx: RuleContext) -> list[cst.BaseStatement] | None:
    if isinstance(stmt, cst.SimpleStatementLine):
        checks = claimed(ctx.issues(stmt), SPEC)
        if not (checks or (ctx.forced == CODE)):
            return None
        desc = describe(*_check_args(stmt), limit=2)
        what = "assert" if any(i.kind == ASSERT for i in checks) else "check"
        return ctx.hoist([stmt], code=CODE, desc=desc, span=stmt, prefix=CHECK_PREFIX,
                         reason=f"{what} on a traced value runs when the graph runs; message formatted then")
    if isinstance(stmt, cst.If):
        # The first traced test decides; if it is not a raise-only last branch, the chain is
        # TZ101/TZ105's (and the raise moves with it).
        index = first_branch(stmt, lambda br: ctx.taint.of(br.test) != CLEAN or ctx.forces(CODE, br))
        if index is None:
            return None
        chain = branches(stmt)
        if not _raises_only(chain[index].body):
            return None
        # Only the raising branch moves; a data-dependent sibling branch is TZ101's business.
        if index < len(chain) - 1 or chain[index].orelse is not None:
            return None
        return hoist_from(stmt, index, ctx, code=CODE, prefix=CHECK_PREFIX, desc=describe(chain[index].test, limit=2),
                          reason="`if ...: raise` on a traced value runs when the graph runs")
    return None
