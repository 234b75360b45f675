"""TZ105: decisions on shapes, ranks and dtypes (`.shape`, `.ndim`, `.dtype`, `torch.finfo(x.dtype)`)
that would bake the traced sample into the graph.

Prefers a rewrite that needs no decision: `if m.shape[1] != n: m = m[:, :n]` becomes the slice
alone (a no-op when the sizes already agree). That is only valid when the slice truncates the very
dim the condition tests (`if m.shape[1] != n: m = m[:n]` slices dim 0, which is no no-op). Anything
else moves into a wrapped function, which decides at run time, unless that function would hide
sequential targets the branch reaches (directly or through a method of the class): then its tests
are decided by the tracer (see ``_decided_tests``). Methods whose shape branch returns early are
wrapped whole (see ``whole_methods``)."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ...registry.rules import BOOL, FINFO, FX_CONTROL_FLOW, HOIST, META, RuleSpec, Symptom
from ..detect import iter_statements
from ..hoist import unhoistable
from ..targets import TargetIndex
from ..wrapper_names import describe
from ..taint import CLEAN, META, VALUE, Taint, class_tensor_attributes, function_taint
from ._chain import branches, first_branch, hoist_from
from .base import RuleContext, RuleHooks, claimed
from .data_dependent_loop import wrappable_methods

SPEC = RuleSpec(
    code="TZ105",
    title="branch on a shape, rank or dtype",
    summary="branches on .shape/.ndim/.dtype and torch.finfo of traced dtypes become generic or wrapped; around "
            "sequential targets, decided from the sample with a check in the graph",
    guide_anchor="shape-and-dtype-inference",
    stage=HOIST,
    precedence=30,
    claims=((BOOL, META), (FINFO, META)),
    symptoms=(Symptom(
        key="shape_branch",
        title="control flow on a shape, ndim or dtype",
        why="shapes of traced values are symbolic, so Python cannot decide the branch",
        fix="rewrite so the result does not depend on the branch (e.g. always slice), or wrap the statement",
        patterns=((FX_CONTROL_FLOW, r"\.(shape|ndim|dim\(\)|size\(|dtype)|\bisinstance\("),),
        precedence=20,  # before value control flow, which has the same message
    ),),
)
CODE = SPEC.code


def _takes_location(stmt: cst.BaseStatement, taint: Taint) -> bool:
    """An `if`/`while` the tracer failed at whose test reads shapes, ranks or dtypes only."""
    return isinstance(stmt, (cst.If, cst.While)) and taint.of(stmt.test) == META


def whole_methods(module: cst.Module, targets: TargetIndex, wrapped: dict[str, cst.FunctionDef]) -> Iterator[str]:
    """Methods with a shape branch that returns early (``if pos_embed.shape[1] == height: return
    pos_embed``): the branch cannot move on its own (its return ends the method), so the method
    runs as one opaque call, deciding at run time, unless it calls targets."""
    tensors = class_tensor_attributes(module)
    for cls, fn in wrappable_methods(module):
        taint = function_taint(fn, Taint(wrapped=wrapped, tensor_attrs=tensors.get(cls.name.value, frozenset())))
        if any(isinstance(stmt, cst.If) and taint.of(stmt.test) == META and unhoistable([stmt])
               for stmt in _all_statements(fn.body)) \
                and not targets.hidden_targets([fn.body], cls.name.value, follow_methods=True):
            yield fn.name.value


def _all_statements(block: cst.CSTNode) -> Iterator[cst.BaseStatement]:
    for stmt in iter_statements(block):
        yield stmt
        for child in (getattr(stmt, "body", None), getattr(stmt, "orelse", None)):
            if child is not None:
                yield from _all_statements(child)


HOOKS = RuleHooks(takes_location=_takes_location, whole_methods=whole_methods,
                  forward_reason="method with an early return on a shape wrapped whole")


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node).strip()


def _dim(node: cst.BaseExpression) -> int | None:
    """A non-negative integer literal dim, else None."""
    return int(node.value) if isinstance(node, cst.Integer) else None


def _size_compare(test: cst.BaseExpression):
    """`x.shape[i] != n` / `x.size(i) != n` (either side) -> (x, n, i), x and n as code strings,
    i the literal dim (None when it is not a non-negative integer literal)."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.NotEqual)):
        return None
    left, right = test.left, test.comparisons[0].comparator
    for a, b in ((left, right), (right, left)):
        base = dim = None
        if isinstance(a, cst.Subscript) and isinstance(a.value, cst.Attribute) and a.value.attr.value == "shape":
            base = a.value.value
            index = a.slice[0].slice if len(a.slice) == 1 else None
            dim = _dim(index.value) if isinstance(index, cst.Index) else None
        elif isinstance(a, cst.Call) and isinstance(a.func, cst.Attribute) and a.func.attr.value == "size" and a.args:
            base = a.func.value
            dim = _dim(a.args[0].value) if len(a.args) == 1 and a.args[0].keyword is None and not a.args[0].star \
                else None
        if base is not None:
            return _code(base), _code(b), dim
    return None


def _always_slice(stmt: cst.If) -> cst.BaseStatement | None:
    """The body alone, when it only truncates the compared tensor, on the compared dim, to the
    compared size: then the slice is a no-op exactly when the condition is false."""
    if stmt.orelse is not None:
        return None
    pair = _size_compare(stmt.test)
    body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else []
    if pair is None or len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine):
        return None
    tensor, size, dim = pair
    if dim is None:
        return None
    small = body[0].body
    if len(small) != 1 or not isinstance(small[0], cst.Assign) or len(small[0].targets) != 1:
        return None
    assign = small[0]
    value = assign.value
    if _code(assign.targets[0].target) != tensor or not isinstance(value, cst.Subscript) or _code(value.value) != tensor:
        return None
    truncating = 0
    for position, el in enumerate(value.slice):
        sl = el.slice
        if not isinstance(sl, cst.Slice) or sl.step is not None:
            return None
        lower_ok = sl.lower is None or _code(sl.lower) == "0"
        if sl.upper is None and lower_ok:
            continue
        if lower_ok and sl.upper is not None and _code(sl.upper) == size and position == dim:
            truncating += 1
            continue
        return None
    if truncating != 1:
        return None
    return body[0]


DECIDED_REASON = ("branch on a shape around sequential targets, which a wrapped function would hide: "
                  "decided from the sample while tracing, and checked again by the graph at every run")


def _decided_operands(test: cst.BaseExpression, ctx: RuleContext, span: cst.CSTNode) -> cst.BaseExpression:
    """``test`` with each operand that reads shapes (of its and/or/not tree) passed through a
    ``_decided_*`` function; plain Python operands stay as they are, so their short-circuits too."""
    if isinstance(test, cst.BooleanOperation):
        return test.with_changes(left=_decided_operands(test.left, ctx, span),
                                 right=_decided_operands(test.right, ctx, span))
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return test.with_changes(expression=_decided_operands(test.expression, ctx, span))
    if ctx.taint.of(test) == CLEAN:
        return test
    return ctx.decided(test.with_changes(lpar=[], rpar=[]) if isinstance(test, cst.Comparison) else test,
                       desc=f"{ctx.method}_{describe(test)}", span=span)


def _decided_tests(stmt: cst.If, index: int, ctx: RuleContext) -> cst.If | None:
    """The chain with the tests from branch ``index`` on decided by the tracer (see
    ``RuleContext.decided``): the branches keep their code, so targets inside stay in the graph,
    and a run whose shapes would take another branch fails at the check instead of silently
    running the traced one. None when a test also reads tensor values (not a shape decision)."""
    chain = branches(stmt)
    tests = [br.test for br in chain]
    for position in range(index, len(chain)):
        test = chain[position].test
        level = ctx.taint.of(test)
        if level == VALUE:
            return None
        if level == CLEAN and not ctx.forces(CODE, chain[position]):
            continue
        decided = _decided_operands(test, ctx, chain[position])
        if decided is test:  # forced at a test the static taint calls plain: decide it whole
            decided = ctx.decided(test, desc=f"{ctx.method}_{describe(test)}", span=chain[position])
        tests[position] = decided
    rebuilt = chain[-1].with_changes(test=tests[-1])
    for br, test in zip(reversed(chain[:-1]), reversed(tests[:-1])):
        rebuilt = br.with_changes(test=test, orelse=rebuilt)
    return rebuilt


def rewrite(stmt: cst.BaseStatement, ctx: RuleContext) -> list[cst.BaseStatement] | None:
    forced = ctx.forced == CODE
    if isinstance(stmt, cst.If):
        index = first_branch(stmt, lambda br: ctx.forces(CODE, br) or ctx.taint.of(br.test) != CLEAN)
        if index is None:
            return None
        branch = branches(stmt)[index]
        if not ctx.forces(CODE, branch) and ctx.taint.of(branch.test) != META:
            return None
        if index == 0 and (sliced := _always_slice(stmt)) is not None:
            new = sliced.with_changes(leading_lines=list(stmt.leading_lines))
            return ctx.replace([new], code=CODE, span=stmt,
                               reason="size check dropped: slicing to the size is a no-op when sizes agree")
        moved = [stmt] if index == 0 else [branch]
        if ctx.hides_targets(moved) and (decided := _decided_tests(stmt, index, ctx)) is not None:
            ctx.header_only = True
            return ctx.replace([decided], code=CODE, span=stmt, reason=DECIDED_REASON)
        return hoist_from(stmt, index, ctx, code=CODE, reason="branch on a shape, rank or dtype")
    if isinstance(stmt, cst.SimpleStatementLine):
        issues = claimed(ctx.issues(stmt), SPEC)
        if not issues and not forced:
            return None
        if any(i.level == VALUE for i in ctx.issues(stmt)) and not forced:
            return None  # a data-dependent construct too: TZ101/TZ103 decide
        nodes = [issues[0].node] if issues else list(stmt.body)
        return ctx.hoist([stmt], code=CODE, desc=f"{ctx.method}_{describe(*nodes)}", span=stmt,
                         reason=issues[0].detail if issues else "shape-dependent statement (targeted)")
    return None
