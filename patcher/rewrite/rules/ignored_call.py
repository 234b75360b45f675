"""TZ106: calls to functions or methods on the ignore list (mask builders, `get_rope_index`, ...)
become calls to module-level wrapped forwarders, so fx records one opaque call and the callee
runs with real values every time the graph runs.

``create_causal_mask(**kw)`` -> ``_wrapped_create_causal_mask(**kw)``;
``self.get_rope_index(a, b=c)`` -> ``_wrapped_get_rope_index(self, a, b=c)``."""

from __future__ import annotations

import libcst as cst

from ...registry.rules import RULES, TZ106
from ._own_expressions import ScopedTransformer, transform_own_expressions

SPEC = RULES[TZ106]
CODE = SPEC.code


class _Redirect(ScopedTransformer):
    def __init__(self, ctx):
        self.ctx = ctx
        self.hits: list[tuple[str, str]] = []  # (code, callee)

    def leave_Call(self, original, updated):
        func = updated.func
        if isinstance(func, cst.Name) and not self.ctx.is_local(func.value):
            fwd = self.ctx.forwarder(func.value, method=False)
            if fwd is None:
                return updated
            self.hits.append((fwd[1], func.value))
            return updated.with_changes(func=cst.Name(fwd[0]))
        if isinstance(func, cst.Attribute):
            obj = func.value
            if isinstance(obj, cst.Call) and isinstance(obj.func, cst.Name) and obj.func.value == "super":
                return updated
            fwd = self.ctx.forwarder(func.attr.value, method=True)
            if fwd is None:
                return updated
            self.hits.append((fwd[1], func.attr.value))
            first = cst.Arg(obj, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if updated.args
                            else cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(func=cst.Name(fwd[0]), args=[first] + list(updated.args))
        return updated


def rewrite(stmt: cst.BaseStatement, ctx) -> list[cst.BaseStatement] | None:
    """Redirects every ignored call in `stmt`'s own expressions; records one rewrite per rule code."""
    if not ctx.mentions_redirected(stmt):
        return None  # cheap pre-check: running a transformer on every statement is not
    tr = _Redirect(ctx)
    new = transform_own_expressions(stmt, tr)
    if not tr.hits:
        return None
    out = [new]
    for code in dict.fromkeys(c for c, _ in tr.hits):
        names = ", ".join(dict.fromkeys(n for c, n in tr.hits if c == code))
        why = "ignored call" if code == CODE else "data-dependent method wrapped whole"
        out = ctx.replace(out, code=code, span=stmt, reason=f"{why}: {names} runs as one opaque call")
    return out
