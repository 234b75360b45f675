"""TZ103: loops over tensors and code driven by tensor data (`.tolist()`, `.item()`, `itertools`,
`list(t)`/`len(t)`/`int(t)`, item assignment) move into wrapped functions, so the iteration count
is decided by each run's input, not baked from the traced sample.

`list(t)` alone becomes `t.unbind(0)` (same elements, stays in the graph). Methods that are
data-dependent through and through (e.g. Qwen2-VL `get_rope_index`) are wrapped whole
(``HOOKS.whole_methods``, which the engine asks): their call sites call
`_wrapped_<method>(obj, ...)`. A `for` a tracer failure points at is this rule's, whatever it
iterates (``HOOKS.takes_location``)."""

from __future__ import annotations

import libcst as cst

from typing import Iterator

from ...registry.rules import DATA, FX_ITERATED, HOIST, ITER, RuleSpec, SETITEM, STARRED, Symptom, VALUE
from ..detect import find_issues, iter_statements
from ..hoist import is_fx_wrapped
from ..targets import TargetIndex
from ..wrapper_names import describe
from ..taint import CLEAN, VALUE, Taint, dotted, function_taint
from ._own_expressions import ScopedTransformer, transform_own_expressions
from .base import RuleContext, RuleHooks, claimed

SPEC = RuleSpec(
    code="TZ103",
    title="data-dependent loop or value",
    summary="loops over tensors and .tolist()/.item()/itertools-driven code move into wrapped functions",
    guide_anchor="wrapping-functions",
    stage=HOIST,
    precedence=40,  # after the branch rules: a branch holding a loop moves whole, as a branch
    claims=((ITER, None), (DATA, None), (SETITEM, None), (STARRED, VALUE)),
    symptoms=(
        Symptom(
            key="iteration",
            title="iteration over a traced value",
            why="a loop over a tensor (or list(tensor), zip, enumerate) needs its length, which is data",
            fix="wrap the loop in a module-level torch.fx.wrap function, or index over a range known from the "
                "config",
            patterns=((FX_ITERATED, None),),
            precedence=60,  # after starred shapes, which fail with the same message
        ),
        Symptom(
            key="traced_int",
            title="a traced value where Python needs an int (an index, a range, a slice bound)",
            why="Python indexes a list, counts a range and slices with a concrete int, and this value is computed "
                "from the inputs (their shapes or values): traced, it is known only when the graph runs (a "
                "ModuleList, Sequential or ModuleDict indexed or sliced by it picks the sample's modules; other "
                "containers and range() cannot)",
            fix="move the statement into a module-level torch.fx.wrap function (`patcher repair` rewrites the "
                "line so), or take the int from the config",
            patterns=((r"Proxy' object cannot be interpreted as an integer", None),
                      (r"indices must be integers or slices, not \w*Proxy", None),
                      (r"slice indices must be integers or None or have an __index__ method", None)),
            precedence=65,
        ),
        Symptom(
            key="data_dependent",
            title="data-dependent Python value (.item(), .tolist(), len())",
            why="the code turns tensor data into Python values, which do not exist while tracing",
            fix="wrap the function that uses them (add its name to `ignore`, or let the patcher wrap it)",
            patterns=((r"'len' is not supported", None), (None, r"\.(item|tolist)\(")),
            precedence=70,
        ),
    ),
)
CODE = SPEC.code

# Methods that are the graph itself: wrapping them whole would make the model opaque.
NEVER_WRAP_WHOLE = frozenset({"forward", "__init__", "__call__", "_forward"})
WHOLE_METHOD_MIN_ISSUES = 3


def wrappable_methods(module: cst.Module) -> Iterator[tuple[cst.ClassDef, cst.FunctionDef]]:
    """``(class, method)`` for each method a rule may wrap whole: not the graph itself
    (:data:`NEVER_WRAP_WHOLE`), not already ``torch.fx.wrap``-ped."""
    for cls in module.body:
        if not isinstance(cls, cst.ClassDef) or not isinstance(cls.body, cst.IndentedBlock):
            continue
        for fn in cls.body.body:
            if isinstance(fn, cst.FunctionDef) and fn.name.value not in NEVER_WRAP_WHOLE and not is_fx_wrapped(fn):
                yield cls, fn


def whole_methods(module: cst.Module, targets: TargetIndex, wrapped: dict[str, cst.FunctionDef]) -> Iterator[str]:
    """Methods data-dependent through and through (their callers call them wrapped)."""
    for cls, fn in wrappable_methods(module):
        taint = function_taint(fn, Taint(wrapped=wrapped))
        loops = data = 0
        for stmt in iter_statements(fn.body):
            if isinstance(stmt, cst.For) and taint.of_iterable(stmt.iter) == VALUE:
                loops += 1
            data += sum(1 for i in find_issues(stmt, taint) if i.kind == DATA and i.level == VALUE)
        # Loops over tensors driven by tensor data: no part of it can stay in a graph.
        if loops and loops + data >= WHOLE_METHOD_MIN_ISSUES and not targets.hidden_targets([fn.body], cls.name.value):
            yield fn.name.value


def _takes_location(stmt: cst.BaseStatement, taint: Taint) -> bool:
    """A `for` the tracer failed at is this rule's, whatever it iterates."""
    return isinstance(stmt, cst.For)


HOOKS = RuleHooks(takes_location=_takes_location, whole_methods=whole_methods,
                  forward_reason="data-dependent method wrapped whole")


def _unbind_list(stmt: cst.SimpleStatementLine, ctx: RuleContext) -> cst.SimpleStatementLine | None:
    """`x = list(t)` -> `x = t.unbind(0)` when `t` is a traced tensor."""
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return None
    value = stmt.body[0].value
    if not (isinstance(value, cst.Call) and dotted(value.func) == "list" and len(value.args) == 1
            and not value.args[0].star and ctx.taint.of(value.args[0].value) == VALUE):
        return None
    arg = value.args[0].value
    if not isinstance(arg, (cst.Name, cst.Attribute)):
        return None
    unbind = cst.Call(func=cst.Attribute(arg, cst.Name("unbind")), args=[cst.Arg(cst.Integer("0"))])
    return stmt.with_changes(body=[stmt.body[0].with_changes(value=unbind)])


def _is_sections(node: cst.CSTNode) -> bool:
    """A list of split sizes (not one size): its length is the number of chunks."""
    if isinstance(node, (cst.List, cst.Tuple)):
        return True
    name = dotted(node) or ""
    last = name.rsplit(".", 1)[-1]
    return "section" in last or last.endswith(("sizes", "splits"))


class _IndexSplits(ScopedTransformer):
    """`enumerate(t.split(sections, ...))` -> `enumerate(t.split(sections, ...)[i] for i in range(len(sections)))`:
    the chunk count comes from the Python list, so iteration needs no proxy."""

    def __init__(self, ctx: RuleContext):
        self.ctx = ctx
        self.changed = 0

    def leave_Call(self, original, updated):
        if dotted(updated.func) != "enumerate" or len(updated.args) != 1:
            return updated
        inner = updated.args[0].value
        if not (isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute)
                and inner.func.attr.value == "split" and inner.args
                and self.ctx.taint.of(inner.func.value) == VALUE
                and self.ctx.taint.of(inner.args[0].value) == CLEAN and _is_sections(inner.args[0].value)):
            return updated
        self.changed += 1
        index = cst.Name("_tz_chunk")
        gen = cst.GeneratorExp(
            elt=cst.Subscript(inner, [cst.SubscriptElement(cst.Index(index))]),
            for_in=cst.CompFor(target=index, iter=cst.parse_expression(
                f"range(len({cst.Module([]).code_for_node(inner.args[0].value)}))")),
            lpar=[], rpar=[],
        )
        return updated.with_changes(args=[updated.args[0].with_changes(value=gen)])


def rewrite(stmt: cst.BaseStatement, ctx: RuleContext) -> list[cst.BaseStatement] | None:
    forced = ctx.forced == CODE
    if isinstance(stmt, (cst.For, cst.While)):
        head = stmt.iter if isinstance(stmt, cst.For) else stmt.test
        level = ctx.taint.of_iterable(head) if isinstance(stmt, cst.For) else ctx.taint.of(head)
        if not forced and level == CLEAN:
            return None
        kind = "loop_over" if isinstance(stmt, cst.For) else "while"
        return ctx.hoist([stmt], code=CODE, desc=f"{ctx.method}_{kind}_{describe(head, limit=2)}", span=stmt,
                         reason=f"`{type(stmt).__name__.lower()}` driven by a traced value")
    if isinstance(stmt, cst.SimpleStatementLine):
        issues = claimed(ctx.issues(stmt), SPEC)
        if not issues and not forced:
            return None
        if issues and all(i.kind == ITER for i in issues):
            tr = _IndexSplits(ctx)
            new = transform_own_expressions(stmt, tr)
            if tr.changed and not claimed(ctx.issues(new), SPEC):
                return ctx.replace([new], code=CODE, span=stmt,
                                   reason="iterate split chunks by index over the Python list of sizes")
        if issues and all(i.kind == ITER for i in issues) and (new := _unbind_list(stmt, ctx)) is not None:
            return ctx.replace([new], code=CODE, span=stmt, reason="list(tensor) -> tensor.unbind(0) stays in the graph")
        targets = [t.target for s in stmt.body if isinstance(s, cst.Assign) for t in s.targets]
        desc = describe(*targets) if targets else describe(issues[0].node if issues else stmt)
        if issues and issues[0].kind == SETITEM:
            desc = "set_" + describe(issues[0].node, limit=1)
        return ctx.hoist([stmt], code=CODE, desc=f"{ctx.method}_{desc}", span=stmt,
                         reason=issues[0].detail if issues else "data-dependent statement (targeted)")
    return None
