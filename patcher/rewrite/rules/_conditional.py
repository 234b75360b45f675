"""Hoisting a conditional expression nested in a larger statement on its own.

``return Output(logits=x, image=out["image"].pooled if out.get("image") else None)``: moving the
whole statement would hand the output object's parts to a wrapped function (fx rebuilds a dict
subclass as a plain dict, so `outputs.last_hidden_state` would fail there), and the statement's
other parts stay traceable anyway. Only the conditional expression becomes a wrapped call,
evaluated where it stood, so nothing runs earlier or more often than in the original.
"""

from __future__ import annotations

import libcst as cst

from ..wrapper_names import describe
from ..walk import children, descendants
from .base import RuleContext

# Nodes whose names the wrapped function could not see (their own scope) or that bind names.
_OWN_SCOPE = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_UNMOVABLE = (cst.NamedExpr, cst.Yield, cst.Await)


def _whole_values(stmt: cst.SimpleStatementLine) -> set[int]:
    """ids of the expressions that are a small statement's entire value (`y = <e>`, `return <e>`)."""
    return {id(small.value) for small in stmt.body if getattr(small, "value", None) is not None}


def nested_conditionals(stmt: cst.BaseStatement, tests: list[cst.CSTNode],
                        issue_nodes: list[cst.CSTNode]) -> list[cst.IfExp] | None:
    """The outermost conditional expressions whose test is one of ``tests``, when moving just them
    handles every issue of the statement (``issue_nodes`` all lie inside them); None otherwise,
    and for a conditional that is a statement's whole value (the statement moves, as before)."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return None
    wanted = {id(test) for test in tests}
    whole = _whole_values(stmt)
    found: list[cst.IfExp] = []

    def visit(node: cst.CSTNode) -> bool:
        if isinstance(node, cst.IfExp) and id(node.test) in wanted:
            found.append(node)
            return id(node) not in whole and not any(isinstance(n, _UNMOVABLE) for n in descendants(node))
        if isinstance(node, _OWN_SCOPE) and any(id(n) in wanted for n in descendants(node)):
            return False
        return all(visit(child) for child in children(node))

    if not visit(stmt) or not found:
        return None
    inside = {id(n) for ifexp in found for n in descendants(ifexp)}
    if not all(id(node) in inside for node in issue_nodes):
        return None
    return found


class _Substitute(cst.CSTTransformer):
    def __init__(self, calls: dict[int, cst.BaseExpression]):
        self.calls = calls

    def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp) -> cst.BaseExpression:
        return self.calls.get(id(original), updated)


def hoist_conditionals(stmt: cst.SimpleStatementLine, conditionals: list[cst.IfExp], ctx: RuleContext, *, code: str,
                       reason: str) -> list[cst.BaseStatement] | None:
    """``stmt`` with each conditional expression replaced by a call of a wrapped function returning it."""
    calls: dict[int, cst.BaseExpression] = {}
    comments: list[cst.EmptyLine] = []
    for ifexp in conditionals:
        alone = cst.SimpleStatementLine([cst.Return(ifexp.with_changes(lpar=[], rpar=[]))])
        replacement = ctx.hoist([alone], code=code, desc=f"{ctx.method}_{describe(ifexp.test)}", reason=reason,
                                span=stmt)
        if replacement is None:
            return None
        line = replacement[0]
        calls[id(ifexp)] = line.body[0].value.with_changes(lpar=ifexp.lpar, rpar=ifexp.rpar)
        comments.extend(line.leading_lines)
    new = stmt.visit(_Substitute(calls))
    return [new.with_changes(leading_lines=list(stmt.leading_lines) + comments)]
