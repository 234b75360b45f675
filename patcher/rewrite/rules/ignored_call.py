"""TZ106: calls to functions or methods on the ignore list (mask builders, `get_rope_index`, ...)
become calls to module-level wrapped forwarders, so fx records one opaque call and the callee
runs with real values every time the graph runs.

``create_causal_mask(**kw)`` -> ``_wrapped_create_causal_mask(**kw)``;
``self.get_rope_index(a, b=c)`` -> ``_wrapped_get_rope_index(self, a, b=c)``."""

from __future__ import annotations

from typing import Callable

import libcst as cst

from ...registry.rules import EXPRESSION, RuleSpec, Symptom
from ._own_expressions import ScopedTransformer, transform_own_expressions
from .base import RuleContext, RuleHooks

SPEC = RuleSpec(
    code="TZ106",
    title="ignored call",
    summary="calls to ignored functions/methods become calls to module-level wrapped forwarders",
    guide_anchor="wrapping-functions",
    stage=EXPRESSION,
    precedence=60,
    claims=(),  # what it rewrites is named by the ignore list, not found by detect.py
    symptoms=(Symptom(
        key="unsupported_object",
        title="a Python object fx cannot put into the graph",
        why="a non-tensor object (a cache, a custom class) reached an opaque call or the graph output",
        fix="trace with the cache off and keep the function that receives it opaque (`ignore`)",
        patterns=((r"^argument of type", None),),
        precedence=80,
    ),),
)
CODE = SPEC.code


def forwarded_callee(call: cst.Call, is_local: Callable[[str], bool]) -> tuple[str, bool] | None:
    """``(name, method)`` a call goes through a forwarder under when the module forwards ``name``;
    None for a local function (it is not the module's), ``super().name(...)`` (the parent's method,
    not the one wrapped here) and a call of any other expression."""
    func = call.func
    if isinstance(func, cst.Name):
        return None if is_local(func.value) else (func.value, False)
    if isinstance(func, cst.Attribute):
        receiver = func.value
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name) and receiver.func.value == "super":
            return None
        return func.attr.value, True
    return None


HOOKS = RuleHooks(forwards_ignored=True, forward_reason="ignored call", forwarded_callee=forwarded_callee)


class _Redirect(ScopedTransformer):
    def __init__(self, ctx: RuleContext):
        self.ctx = ctx
        self.hits: list[tuple[str, str, str]] = []  # (code, reason, callee)

    def leave_Call(self, original, updated):
        callee = forwarded_callee(updated, self.ctx.is_local)
        fwd = self.ctx.forwarder(callee[0], method=callee[1]) if callee is not None else None
        if fwd is None:
            return updated
        name, method = callee
        self.hits.append((fwd.code, fwd.reason, name))
        if not method:
            return updated.with_changes(func=cst.Name(fwd.function))
        first = cst.Arg(updated.func.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if updated.args
                        else cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(func=cst.Name(fwd.function), args=[first] + list(updated.args))


def rewrite(stmt: cst.BaseStatement, ctx: RuleContext) -> list[cst.BaseStatement] | None:
    """Redirects every forwarded call in `stmt`'s own expressions (ignored ones, and methods another
    rule wraps whole); records one rewrite per rule code, with that rule's reason."""
    if not ctx.mentions_redirected(stmt):
        return None  # cheap pre-check: running a transformer on every statement is not
    tr = _Redirect(ctx)
    new = transform_own_expressions(stmt, tr)
    if not tr.hits:
        return None
    out = [new]
    for code, why in dict.fromkeys((c, r) for c, r, _ in tr.hits):
        names = ", ".join(dict.fromkeys(n for c, _, n in tr.hits if c == code))
        out = ctx.replace(out, code=code, span=stmt, reason=f"{why}: {names} runs as one opaque call")
    return out
