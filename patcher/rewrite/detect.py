"""Find the constructs in one statement that symbolic tracing cannot get through.

Only a statement's own expressions are scanned (an `if`'s test, a `for`'s iterable, a simple
statement's expressions): the statements nested in its blocks are visited on their own, so a
rewrite stays as small as the construct that needs it.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ..registry.ignore import CHECKS_IGNORED
from ..registry.rules import ASSERT, BOOL, CHECK, DATA, FINFO, ITER, SETITEM, SIZES, STARRED
from .taint import CLEAN, META, VALUE, Taint, dotted
from .walk import children

# Builtins that iterate or coerce their argument: `bool()`/`iter()` on a proxy raise under fx.
ITERATING_CALLS = frozenset(
    {"list", "tuple", "set", "dict", "enumerate", "zip", "iter", "next", "sorted", "reversed", "range",
     "int", "float", "bool", "max", "min", "sum", "any", "all", "map", "filter"}
)
# torch factories that take sizes as varargs: with proxies only the one-tuple form parses.
SIZE_FACTORIES = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn"})
CHECK_CALLS = frozenset({*CHECKS_IGNORED, "torch._check", "torch._check_with", "torch._assert",
                         "torch._check_tensor_all", "torch._check_tensor_all_with"})


@dataclass(frozen=True)
class Issue:
    kind: str  # one of patcher.registry.rules.ISSUE_KINDS; each rule's spec claims the kinds it rewrites
    level: Level  # VALUE or META
    node: cst.CSTNode
    detail: str


def header_nodes(stmt: cst.CSTNode) -> list[cst.CSTNode]:
    if isinstance(stmt, cst.SimpleStatementLine):
        return list(stmt.body)
    if isinstance(stmt, (cst.If, cst.While)):
        return [stmt.test]
    if isinstance(stmt, cst.For):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, cst.With):
        return list(stmt.items)
    if isinstance(stmt, cst.Match):
        return [stmt.subject]
    return []


class _Finder:
    def __init__(self, taint: Taint):
        self.taint = taint
        self.issues: list[Issue] = []

    def add(self, kind: str, level: Level, node: cst.CSTNode, detail: str) -> None:
        if level != CLEAN:
            self.issues.append(Issue(kind, level, node, detail))

    def visit(self, node: cst.CSTNode) -> None:  # noqa: C901 - one dispatch table
        of = self.taint.of
        t = type(node)
        if t in (cst.Lambda, cst.FunctionDef, cst.ClassDef):
            return  # runs later (or never); not part of this statement's trace
        if t is cst.Assert:
            self.add(ASSERT, of(node.test), node, "assert on a traced value")
        elif t is cst.IfExp:
            self.add(BOOL, of(node.test), node.test, "conditional expression on a traced value")
        elif t is cst.BooleanOperation:
            self.add(BOOL, of(node.left), node.left, f"`{_op(node)}` on a traced value")
        elif t is cst.UnaryOperation and isinstance(node.operator, cst.Not):
            self.add(BOOL, of(node.expression), node.expression, "`not` on a traced value")
        elif t is cst.CompIf:
            self.add(BOOL, of(node.test), node.test, "comprehension filter on a traced value")
        elif t is cst.CompFor:
            self.add(ITER, self.taint.of_iterable(node.iter), node.iter, "comprehension over a traced value")
        elif t is cst.StarredElement or (t is cst.Arg and node.star == "*"):
            level = of(node.value)
            self.add(STARRED, level, node, "starred unpacking of a traced value")
        elif t in (cst.Assign, cst.AugAssign):
            targets = [tg.target for tg in node.targets] if t is cst.Assign else [node.target]
            for tg in targets:
                if isinstance(tg, cst.Subscript) and not _container_item(tg, self.taint):
                    self.add(SETITEM, VALUE if of(tg.value) else CLEAN, tg,
                             "item assignment into a traced tensor (proxies have no __setitem__)")
                elif isinstance(tg, cst.Attribute) and of(tg.value) == VALUE:
                    # `vision_output.pooler_output = torch.split(...)` on a module's output: setting
                    # an attribute of a proxy records nothing, so the graph would silently keep the
                    # old value; the assignment must run when the graph runs
                    self.add(SETITEM, VALUE, tg, "attribute assignment on a traced value (proxies record no setattr)")
                elif isinstance(tg, (cst.Tuple, cst.List)) and any(
                    isinstance(el, cst.StarredElement) for el in tg.elements
                ) and t is cst.Assign:
                    self.add(STARRED, of(node.value), tg, "starred unpacking of a traced value")
        elif t is cst.Call:
            name = dotted(node.func)
            args = max((of(a.value) for a in node.args), default=CLEAN)
            if name in CHECK_CALLS:
                self.add(CHECK, VALUE if args else CLEAN, node, f"`{name}` on a traced value")
            elif name in ITERATING_CALLS:
                level = max((self.taint.of_iterable(a.value) if not a.star else of(a.value) for a in node.args),
                            default=CLEAN) if name in ("list", "tuple", "enumerate", "zip", "set", "sorted") else args
                self.add(ITER, level, node, f"`{name}()` of a traced value")
            elif name is not None and name.startswith("itertools."):
                self.add(DATA, VALUE if args else CLEAN, node, f"`{name}` over traced values")
            elif name is not None and name.startswith("torch.distributions."):
                # a distribution checks its parameters' values in Python when built (validate_args)
                self.add(DATA, VALUE if args else CLEAN, node,
                         f"`{name}` checks the values of traced parameters in Python")
            elif name in SIZE_FACTORIES and sum(1 for a in node.args if a.keyword is None) > 1 \
                    and not any(a.star for a in node.args):
                positional = [a for a in node.args if a.keyword is None]
                self.add(SIZES, META if max(of(a.value) for a in positional) else CLEAN, node,
                         f"`{name}` with traced sizes as separate arguments")
            elif name in ("torch.finfo", "torch.iinfo"):
                self.add(FINFO, META if args else CLEAN, node, f"`{name}` of a traced dtype")
            elif name == "len" and len(node.args) == 1 and of(node.args[0].value) == VALUE:
                # fx proxies have no length (a list a wrapped helper returns, a tensor): the count is
                # only known when the graph runs
                self.add(DATA, VALUE, node, "`len()` of a traced value (proxies have no length)")
            elif isinstance(node.func, cst.Attribute) and node.func.attr.value in ("tolist", "item"):
                self.add(DATA, VALUE if of(node.func.value) else CLEAN, node,
                         f"`.{node.func.attr.value}()` reads tensor data")
        for child in children(node):
            self.visit(child)


def _container_item(target: cst.Subscript, taint: Taint) -> bool:
    """`d["key"] = v` or `d[k] = v` on a local dict/list: plain Python, not a tensor write."""
    if isinstance(target.value, cst.Name) and target.value.value in taint.containers:
        return True
    return len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) and isinstance(
        target.slice[0].slice.value, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString))


def _op(node: cst.BooleanOperation) -> str:
    return "and" if isinstance(node.operator, cst.And) else "or"


def find_issues(stmt: cst.CSTNode, taint: Taint) -> list[Issue]:
    """Untraceable constructs in `stmt`'s own expressions (not in its nested blocks)."""
    finder = _Finder(taint)
    if isinstance(stmt, (cst.If, cst.While)):
        finder.add(BOOL, taint.of(stmt.test), stmt.test, f"`{type(stmt).__name__.lower()}` on a traced value")
    if isinstance(stmt, cst.For):
        finder.add(ITER, taint.of_iterable(stmt.iter), stmt.iter, "`for` over a traced value")
    for node in header_nodes(stmt):
        finder.visit(node)
    return finder.issues


def iter_statements(block: cst.CSTNode):
    """Every statement in `block`, nested blocks included, nested defs and classes excluded."""
    body = getattr(block, "body", None)
    if isinstance(body, (list, tuple)):
        stmts = body
    elif body is not None:
        stmts = getattr(body, "body", ())
    else:
        stmts = ()
    for stmt in stmts:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        yield stmt
        if isinstance(stmt, cst.SimpleStatementLine):
            continue
        for sub in _blocks(stmt):
            yield from iter_statements(sub)


def _blocks(stmt: cst.CSTNode):
    if isinstance(stmt, cst.If):
        yield stmt.body
        if stmt.orelse is not None:
            if isinstance(stmt.orelse, cst.If):
                yield cst.IndentedBlock(body=[stmt.orelse])
            else:
                yield stmt.orelse.body
    elif isinstance(stmt, (cst.For, cst.While)):
        yield stmt.body
        if stmt.orelse is not None:
            yield stmt.orelse.body
    elif isinstance(stmt, cst.With):
        yield stmt.body
    elif isinstance(stmt, (cst.Try, cst.TryStar)):
        yield stmt.body
        for h in stmt.handlers:
            yield h.body
        if stmt.orelse is not None:
            yield stmt.orelse.body
        if stmt.finalbody is not None:
            yield stmt.finalbody.body
