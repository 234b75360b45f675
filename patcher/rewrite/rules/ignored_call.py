"""TZ106: calls to functions or methods on the ignore list (mask builders, `get_rope_index`, ...)
become calls to module-level wrapped forwarders, so fx records one opaque call and the callee
runs with real values every time the graph runs.

``create_causal_mask(**kw)`` -> ``_wrapped_create_causal_mask(**kw)``;
``self.get_rope_index(a, b=c)`` -> ``_wrapped_get_rope_index(self, a, b=c)``."""

from __future__ import annotations

import libcst as cst

from ...registry.rules import RULES, TZ106
from ._own_expressions import ScopedTransformer, transform_own_expressions
from .base import RuleContext, RuleHooks

SPEC = RULES[TZ106]
CODE = SPEC.code
HOOKS = RuleHooks(forwards_ignored=True, forward_reason="ignored call")


class _Redirect(ScopedTransformer):
    def __init__(self, ctx: RuleContext):
        self.ctx = ctx
        self.hits: list[tuple[str, str, str]] = []  # (code, reason, callee)

    def leave_Call(self, original, updated):
        func = updated.func
        if isinstance(func, cst.Name) and not self.ctx.is_local(func.value):
            fwd = self.ctx.forwarder(func.value, method=False)
            if fwd is None:
                return updated
            self.hits.append((fwd.code, fwd.reason, func.value))
            return updated.with_changes(func=cst.Name(fwd.function))
        if isinstance(func, cst.Attribute):
            obj = func.value
            if isinstance(obj, cst.Call) and isinstance(obj.func, cst.Name) and obj.func.value == "super":
                return updated
            fwd = self.ctx.forwarder(func.attr.value, method=True)
            if fwd is None:
                return updated
            self.hits.append((fwd.code, fwd.reason, func.attr.value))
            first = cst.Arg(obj, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if updated.args
                            else cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(func=cst.Name(fwd.function), args=[first] + list(updated.args))
        return updated


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
