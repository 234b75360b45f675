"""TZ104: starred unpacking of shapes becomes index- or concatenation-based code that fx records
as graph ops, so the graph stays generic in the shape:

- ``b, t, *_ = x.shape``            -> ``b, t = x.shape[0], x.shape[1]``
- ``(*input_shape, -1, d)``         -> ``input_shape + (-1, d)``      (input_shape is a shape)
- ``x.view(*input_shape, -1)``      -> ``x.view(input_shape + (-1,))``  (size-taking functions)
- ``torch.zeros(b, t)`` (traced b, t) -> ``torch.zeros((b, t))``  (proxies do not parse as varargs sizes)

Other starred uses of a shape (``f(*input_shape)`` for an arbitrary ``f``) move into a wrapped
function.

A starred *target* is a list in Python, while ``x.shape[1:]`` is a ``torch.Size`` (a tuple):
``rest == [4, 4]`` would flip to False and ``rest.append`` would raise. So ``b, *rest = x.shape``
becomes indexing only when ``rest`` is used where a shape and a list behave alike (as a size
argument, ``*rest``, ``rest[i]``, ``len(rest)``); any other use keeps the unpacking as written, in
a wrapped function (``rest`` stays a list at run time; ``list(x.shape[1:])`` would not trace)."""

from __future__ import annotations

import libcst as cst

from ...registry.rules import EXPRESSION, FX_ITERATED, META, RuleSpec, SIZES, STARRED, Symptom
from ..wrapper_names import describe
from ..detect import SIZE_FACTORIES
from ..taint import VALUE, dotted
from ._own_expressions import ScopedTransformer, transform_own_expressions
from .base import RuleContext, RuleHooks, claimed

SPEC = RuleSpec(
    code="TZ104",
    title="starred shape",
    summary="starred unpacking of shapes becomes index-based / tuple-concatenation code",
    guide_anchor="correcting-shape-inference",
    stage=EXPRESSION,
    precedence=50,  # before TZ106: both may rewrite one statement's expressions
    claims=((STARRED, META), (SIZES, META)),
    symptoms=(Symptom(
        key="starred_shape",
        title="starred unpacking of a shape",
        why="`*shape` iterates a symbolic shape whose length fx cannot know",
        fix="index the shape instead (`b, t = x.shape[0], x.shape[1]`; `shape + (-1,)`)",
        patterns=((FX_ITERATED, r"(^|[(\[,=\s])\*(?!\*)\s*[A-Za-z_(]"),),
        precedence=50,
    ),),
)
CODE = SPEC.code
HOOKS = RuleHooks()

# Tensor methods and torch functions taking the whole size as `*sizes` or one tuple.
SIZE_METHODS = frozenset({"view", "reshape", "expand", "repeat", "permute", "new_zeros", "new_ones",
                          "new_empty", "tile", "resize_", "expand_as_size"})
SIZE_FUNCTIONS = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn",
                            "torch.Size"})


def _concat(parts: list[tuple[bool, cst.BaseExpression]]) -> cst.BaseExpression:
    groups: list[cst.BaseExpression] = []
    plain: list[cst.BaseExpression] = []

    def flush() -> None:
        if plain:
            elements = [cst.Element(e) for e in plain]
            groups.append(cst.Tuple(elements if len(elements) > 1 else
                                    [cst.Element(plain[0], comma=cst.Comma())]))
            plain.clear()

    for starred, expr in parts:
        if starred:
            flush()
            groups.append(expr)
        else:
            plain.append(expr)
    flush()
    out = groups[0]
    for g in groups[1:]:
        out = cst.BinaryOperation(left=out, operator=cst.Add(), right=g)
    return out


def _strip(expr: cst.BaseExpression) -> cst.BaseExpression:
    return expr.with_changes(lpar=[], rpar=[]) if hasattr(expr, "lpar") else expr


class _Starred(ScopedTransformer):
    def __init__(self, ctx: RuleContext):
        self.ctx = ctx
        self.changed = 0

    def leave_Tuple(self, original, updated):
        if not any(isinstance(e, cst.StarredElement) for e in updated.elements):
            return updated
        parts = [(isinstance(e, cst.StarredElement), e.value) for e in updated.elements]
        if not all(self.ctx.is_shape(v) for s, v in parts if s):
            return updated
        self.changed += 1
        joined = _concat(parts)
        return joined.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) if len(parts) > 1 else joined

    def leave_Call(self, original, updated):
        if dotted(updated.func) in SIZE_FACTORIES and not any(a.star for a in updated.args):
            positional = [a for a in updated.args if a.keyword is None]
            if len(positional) > 1 and any(self.ctx.taint.of(a.value) for a in original.args if a.keyword is None):
                # torch.zeros(b, t) -> torch.zeros((b, t)): fx cannot pass proxies as varargs sizes
                self.changed += 1
                size = cst.Tuple([cst.Element(a.value) for a in positional])
                rest = [a for a in updated.args if a.keyword is not None]
                first = cst.Arg(size, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if rest
                                else cst.MaybeSentinel.DEFAULT)
                return updated.with_changes(args=[first] + rest)
        if not any(a.star == "*" for a in updated.args):
            return updated
        func = updated.func
        sized = (isinstance(func, cst.Attribute) and func.attr.value in SIZE_METHODS) or dotted(func) in SIZE_FUNCTIONS
        positional = [a for a in updated.args if a.keyword is None and a.star != "**"]
        if not sized or not all(self.ctx.is_shape(a.value) for a in positional if a.star == "*"):
            return updated
        self.changed += 1
        size = _strip(_concat([(a.star == "*", a.value) for a in positional]))
        rest = [a for a in updated.args if a.keyword is not None or a.star == "**"]
        first = cst.Arg(size, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if rest else cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(args=[first] + rest)

    # A concatenation that is a whole right-hand side or argument needs no parentheses.
    def leave_Assign(self, original, updated):
        return updated.with_changes(value=self._bare(original.value, updated.value))

    def leave_Arg(self, original, updated):
        return updated.with_changes(value=self._bare(original.value, updated.value))

    def leave_Return(self, original, updated):
        if updated.value is None:
            return updated
        return updated.with_changes(value=self._bare(original.value, updated.value))

    @staticmethod
    def _bare(original, updated):
        if isinstance(original, cst.Tuple) and isinstance(updated, cst.BinaryOperation):
            return _strip(updated)
        return updated


class _Uses(cst.CSTVisitor):
    """Is ``name`` used anywhere a list and a ``torch.Size`` could behave differently?"""

    def __init__(self, name: str):
        self.name = name
        self.stack: list[cst.CSTNode] = []
        self.list_use = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Name) and node.value == self.name and not self._size_like(node):
            self.list_use = True
        self.stack.append(node)
        return not self.list_use

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()

    def _size_like(self, node: cst.Name) -> bool:
        parent = self.stack[-1] if self.stack else None
        grand = self.stack[-2] if len(self.stack) > 1 else None
        if (isinstance(parent, cst.Attribute) and parent.attr is node) or \
                (isinstance(parent, cst.Arg) and parent.keyword is node):
            return True  # `obj.rest`, `f(rest=...)`: another name
        if isinstance(parent, cst.StarredElement):
            return True  # (*rest, -1): the same items either way
        if isinstance(parent, cst.Arg) and isinstance(grand, cst.Call) and parent.keyword is None:
            if parent.star == "*":
                return True
            func = grand.func
            return (dotted(func) in SIZE_FUNCTIONS | SIZE_FACTORIES | {"len"}
                    or (isinstance(func, cst.Attribute) and func.attr.value in SIZE_METHODS))
        if isinstance(parent, cst.Subscript) and len(parent.slice) == 1 \
                and isinstance(parent.slice[0].slice, cst.Index):
            # rest[i] read (a write into a Size raises): the same int either way
            holder = grand
            return not isinstance(holder, (cst.AssignTarget, cst.Del)) and \
                not (isinstance(holder, cst.AugAssign) and holder.target is parent)
        return False


def _used_as_list(name: str, ctx: RuleContext, stmt: cst.CSTNode) -> bool:
    body = ctx.body
    if body is None:
        return True  # cannot tell: keep list semantics
    uses = _Uses(name)
    for node in body:
        if node is stmt:
            continue
        node.visit(uses)
        if uses.list_use:
            return True
    return False


def _starred_list_name(stmt: cst.SimpleStatementLine) -> str | None:
    """The starred target's name of `a, *rest = ...` (None for `*_`, or when it is no plain name)."""
    target = stmt.body[0].targets[0].target
    for el in target.elements:
        if isinstance(el, cst.StarredElement):
            if isinstance(el.value, cst.Name) and el.value.value != "_":
                return el.value.value
    return None


def _unpack_assign(stmt: cst.SimpleStatementLine, ctx: RuleContext) -> cst.SimpleStatementLine | None:
    """`a, b, *_ = x.shape` -> `a, b = x.shape[0], x.shape[1]`."""
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign) or len(stmt.body[0].targets) != 1:
        return None
    assign = stmt.body[0]
    target = assign.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)):
        return None
    elements = list(target.elements)
    stars = [i for i, e in enumerate(elements) if isinstance(e, cst.StarredElement)]
    if len(stars) != 1 or not ctx.is_shape(assign.value):
        return None
    star = stars[0]
    after = len(elements) - star - 1
    names, values = [], []
    value = assign.value
    for i, el in enumerate(elements):
        if i < star:
            index: cst.BaseSlice = cst.Index(cst.Integer(str(i)))
        elif i > star:
            index = cst.Index(cst.UnaryOperation(cst.Minus(), cst.Integer(str(len(elements) - i))))
        else:
            if isinstance(el.value, cst.Name) and el.value.value == "_":
                continue
            upper = cst.UnaryOperation(cst.Minus(), cst.Integer(str(after))) if after else None
            index = cst.Slice(lower=cst.Integer(str(star)) if star else None, upper=upper)
        names.append(el.value)
        values.append(cst.Subscript(value, [cst.SubscriptElement(index)]))
    if not names:
        return None
    if len(names) == 1:
        new_target, new_value = names[0], values[0]
    else:
        new_target = cst.Tuple([cst.Element(n) for n in names], lpar=[], rpar=[])
        new_value = cst.Tuple([cst.Element(v) for v in values], lpar=[], rpar=[])
    return stmt.with_changes(body=[assign.with_changes(targets=[cst.AssignTarget(new_target)], value=new_value)])


def rewrite(stmt: cst.BaseStatement, ctx: RuleContext) -> list[cst.BaseStatement] | None:
    forced = ctx.forced == CODE
    issues = claimed(ctx.issues(stmt), SPEC)
    if not issues and not forced:
        return None
    if isinstance(stmt, cst.SimpleStatementLine) and (new := _unpack_assign(stmt, ctx)) is not None:
        starred = _starred_list_name(stmt)
        if starred is not None and _used_as_list(starred, ctx, stmt):
            return ctx.hoist([stmt], code=CODE, desc=f"{ctx.method}_{describe(*stmt.body)}", span=stmt,
                             reason=f"starred shape unpacking; '{starred}' is used as a list, which a shape is not")
        return ctx.replace([new], code=CODE, span=stmt, reason="starred shape unpacking -> indexing")
    tr = _Starred(ctx)
    new = transform_own_expressions(stmt, tr)
    if tr.changed:
        kinds = {i.kind for i in issues}
        reason = "starred shape -> tuple concatenation" if STARRED in kinds else "traced sizes passed as one tuple"
        return ctx.replace([new], code=CODE, span=stmt, reason=reason)
    if isinstance(stmt, cst.SimpleStatementLine) and any(i.kind == STARRED for i in issues) \
            and not any(i.level == VALUE for i in ctx.issues(stmt)):
        return ctx.hoist([stmt], code=CODE, desc=f"{ctx.method}_{describe(*stmt.body)}", span=stmt,
                         reason="starred shape passed to a function that does not take a size tuple")
    return None
