"""TZ101: `if`/`elif` and conditional expressions whose test depends on tensor values move into
a wrapped function called with every value they read, returning every name they assign.

Tests on configs, `self.` attributes, constants and `is None` stay: they are plain Python while
tracing. An `is None` test of an opaque call's result (`mask = create_recurrent_attention_mask(...)`
then `if mask is None:`) moves: the call is one proxy while tracing, never None, but returns None
or a tensor by the data when the graph runs; so does a truth test of a traced value stored in a
dict and read back (`x if outputs.get("image") else None`, see traced_items). In a chain, only
the branches from the first data-dependent test on move. A conditional expression nested in a
larger statement moves alone (see _conditional)."""

from __future__ import annotations

import libcst as cst

from typing import Iterator

from ...registry.rules import BOOL, FX_CONTROL_FLOW, HOIST, META, RuleSpec, Symptom, VALUE
from ..detect import iter_statements
from ..hoist import is_fx_wrapped
from ..targets import TargetIndex
from ..wrapper_names import describe
from ..taint import CLEAN, VALUE, Taint, function_taint
from ..walk import descendants
from ._chain import branches, first_branch, hoist_from
from ._conditional import hoist_conditionals, nested_conditionals
from .base import RuleContext, RuleHooks, claimed
from .data_dependent_loop import NEVER_WRAP_WHOLE

SPEC = RuleSpec(
    code="TZ101",
    title="data-dependent branch",
    summary="data-dependent if/elif and conditional expressions move into wrapped functions",
    guide_anchor="conditional-execution",
    stage=HOIST,
    # After TZ102 (a raise-only branch is a check); exclusive with TZ105, which takes
    # tests on shapes (META) where this one takes tests on values.
    precedence=20,
    claims=((BOOL, VALUE),),
    symptoms=(Symptom(
        key="control_flow",
        title="control flow on a tensor value",
        why="`if`/`while`/`and`/`or`/ternaries need a concrete bool, but traced tensors are symbolic",
        fix="move the statement into a module-level torch.fx.wrap function, or add the enclosing function to "
            "`ignore`",
        patterns=((FX_CONTROL_FLOW, None),),
        precedence=40,  # whatever control flow the check and shape symptoms did not take
        forces_rule=False,
    ),),
)
CODE = SPEC.code



def _returns_on_value(fn: cst.FunctionDef, taint: Taint) -> bool:
    """Does a branch on tensor values return from inside it? Such a branch cannot move alone: a
    wrapped function cannot return for its caller."""
    for stmt in iter_statements(fn.body):
        if not isinstance(stmt, cst.If):
            continue
        for branch in branches(stmt):
            if taint.of(branch.test) == VALUE and any(
                    isinstance(node, cst.Return) for node in descendants(branch.body, stop=(cst.FunctionDef, cst.Lambda))):
                return True
    return False


def whole_methods(module: cst.Module, targets: TargetIndex, wrapped: dict[str, cst.FunctionDef]) -> Iterator[str]:
    """Helpers (module-level functions and methods, never a forward) with a branch on tensor values
    that returns: they move whole, and their callers call them wrapped, unless they reach a target."""
    for stmt in module.body:
        owner, defs = None, [stmt]
        if isinstance(stmt, cst.ClassDef):
            owner = stmt.name.value
            defs = list(stmt.body.body) if isinstance(stmt.body, cst.IndentedBlock) else []
        for fn in defs:
            if not isinstance(fn, cst.FunctionDef) or fn.name.value in NEVER_WRAP_WHOLE or is_fx_wrapped(fn):
                continue
            if _returns_on_value(fn, function_taint(fn, Taint(wrapped=wrapped))) \
                    and not targets.hidden_targets([fn.body], owner):
                yield fn.name.value


#: A statement the tracer failed at that no other rule takes by its form is a value branch's.
HOOKS = RuleHooks(location_fallback=True, whole_methods=whole_methods,
                  forward_reason="helper returning from a branch on a tensor value wrapped whole")


_OPAQUE_NONE = "None test of an opaque call's result"
_TRACED_ITEM = "truth test of an item of a dict holding a traced value"


def _undecided(test: cst.BaseExpression, ctx: RuleContext) -> str | None:
    """Why a test that taint calls plain cannot be decided while tracing, or None."""
    if ctx.tests_opaque_none(test):
        return _OPAQUE_NONE
    if ctx.tests_traced_item(test):
        return _TRACED_ITEM
    return None


def rewrite(stmt: cst.BaseStatement, ctx: RuleContext) -> list[cst.BaseStatement] | None:
    forced = ctx.forced == CODE
    if isinstance(stmt, cst.If):
        # The first branch whose test is traced decides: a shape test there is TZ105's.
        index = first_branch(stmt, lambda br: ctx.forces(CODE, br) or ctx.taint.of(br.test) != CLEAN
                             or _undecided(br.test, ctx) is not None)
        if index is None:
            return None
        branch = branches(stmt)[index]
        undecided = _undecided(branch.test, ctx)
        if undecided is not None and ctx.taint.of(branch.test) != VALUE:
            return hoist_from(stmt, index, ctx, code=CODE, reason=undecided)
        if not ctx.forces(CODE, branch) and ctx.taint.of(branch.test) != VALUE:
            return None
        return hoist_from(stmt, index, ctx, code=CODE, reason="branch on a tensor value")
    if isinstance(stmt, cst.SimpleStatementLine):
        bools = [(i.node, i.detail) for i in claimed(ctx.issues(stmt), SPEC)]
        bools += [(node.test, _undecided(node.test, ctx)) for node in descendants(stmt, stop=(cst.Lambda,))
                  if isinstance(node, cst.IfExp) and ctx.taint.of(node.test) != VALUE
                  and _undecided(node.test, ctx) is not None]
        if not bools and not forced:
            return None
        if bools and not ctx.mentions_redirected(stmt):
            tests = [node for node, _ in bools]
            conditionals = nested_conditionals(stmt, tests, tests + [i.node for i in ctx.issues(stmt)])
            if conditionals is not None:
                return hoist_conditionals(stmt, conditionals, ctx, code=CODE, reason=bools[0][1])
        nodes = [bools[0][0]] if bools else list(stmt.body)
        return ctx.hoist([stmt], code=CODE, desc=f"{ctx.method}_{describe(*nodes)}", span=stmt,
                         reason=bools[0][1] if bools else "data-dependent statement (targeted)")
    return None
