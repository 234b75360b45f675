"""Move statements out of a method into a module-level `@torch.fx.wrap` function.

The wrapped function takes every local the statements read (plus the previous value of every
name they may leave unassigned) and returns every local they bind or mutate, so the call site
is one assignment. Its body keeps a `# from file:line` comment and re-raises any error with a
note naming the original line (`_tz_note`), so failures at graph run time point at the source.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ..registry.origins import origin_note
from .bound import writes_first
from .name_use import name_use
from .taint import dotted
from .walk import descendants

NOTE_HELPER = "_tz_note"

NOTE_HELPER_SOURCE = f'''def {NOTE_HELPER}(exc, origin):
    # Errors raised by code moved out of a method name the line it came from (Python >= 3.11).
    if hasattr(exc, "add_note"):
        exc.add_note(f"tracezoo: raised by code moved from {{origin}}")
'''


def is_fx_wrapped(fn: cst.FunctionDef) -> bool:
    """Is ``fn`` decorated with ``torch.fx.wrap`` (one opaque call under the tracer)?"""
    return any(dotted(d.decorator) in ("torch.fx.wrap", "fx.wrap", "wrap") for d in fn.decorators)


@dataclass
class Hoisted:
    function: cst.FunctionDef
    replacement: list[cst.BaseStatement]
    params: list[str]
    returns: list[str]
    maybe_none: list[str]  # returned names some path sets to None (a graph cannot test `is None` on them)


def _sole_return(stmts) -> cst.Return | None:
    if len(stmts) == 1 and isinstance(stmts[0], cst.SimpleStatementLine) and len(stmts[0].body) == 1 \
            and isinstance(stmts[0].body[0], cst.Return) and stmts[0].body[0].value is not None:
        return stmts[0].body[0]
    return None


def unhoistable(stmts: list[cst.BaseStatement]) -> str | None:
    """Why these statements cannot run inside another function, or None."""
    use = name_use(*stmts)
    control = list(use.control)
    if _sole_return(stmts) is not None:
        control.remove("return")  # `return <expr>` becomes `return _wrapped(...)`
    if control:
        what = ", ".join(sorted(set(control)))
        return f"contains {what}, which cannot move into a separate function"
    return None


def hoist(
    stmts: list[cst.BaseStatement],
    *,
    name: str,
    local_names: set[str],
    defined_before: set[str],
    origin: str,
    comment: str,
    maybe_unbound: set[str] = frozenset(),
) -> Hoisted:
    """Build the wrapped function `name` running `stmts`, and the statement(s) calling it.

    `local_names`: names local to the enclosing function(s) (params included); other names the
    statements read are module globals or builtins and are looked up from the wrapped function.
    `defined_before`: locals that may hold a value when the statements start (their old value is
    passed in so that a branch that does not assign them keeps it).
    `maybe_unbound`: those of `defined_before` that some path leaves unbound at the call site
    (bound only on another branch): they are not passed when the statements bind them before
    any read (they start as None instead, like names first bound here); otherwise they are passed
    as ``locals().get(name)``, None where unbound.
    """
    use = name_use(*stmts)
    writes = [w for w in use.ordered_writes() if w in local_names]
    # A local mutated in place is returned and rebound like an assigned one: while tracing the
    # wrapped function does not run, so the caller's own object would never see the change.
    mutated = [m for m in dict.fromkeys(use.mutated) if m in local_names and m != "self"]
    returns = list(dict.fromkeys(writes + mutated))
    bound_inside = set(writes)
    # Possibly unbound at the call site and not needed by the statements: reading them there
    # would raise UnboundLocalError on the path that leaves them unbound.
    # An `if` that binds one without an `else` (`if isinstance(h, tuple): h, _ = h` after `_` was
    # bound on one branch only): there may be no old value to pass, so it starts as None.
    skip = {n for n in maybe_unbound if n in bound_inside and writes_first(n, stmts, untaken_keeps=False)}
    params: list[str] = []
    for r in use.ordered_reads():
        if r in local_names and (r not in bound_inside or (r in defined_before and r not in skip)):
            params.append(r)
    for w in returns:
        if w not in params and w in defined_before and w not in skip:
            params.append(w)
    if "self" in params:  # keep `self` first, like a method
        params.remove("self")
        params.insert(0, "self")
    # Names a compound statement may leave unassigned (a branch, a loop that never runs) start
    # as None; a simple statement always assigns its targets.
    unset = [w for w in returns if w not in params] if not isinstance(stmts[0], cst.SimpleStatementLine) or len(stmts) > 1 else []
    if _sole_return(stmts) is not None:
        unset = []

    body: list[cst.BaseStatement] = [_strip_leading(stmts[0])] + list(stmts[1:])
    returned = _sole_return(stmts)
    if returned is not None:
        returns = []
    elif returns:
        ret_value = cst.Name(returns[0]) if len(returns) == 1 else _tuple(returns)
        body.append(cst.SimpleStatementLine([cst.Return(ret_value)]))
    handler = cst.ExceptHandler(
        type=cst.Name("Exception"),
        name=cst.AsName(cst.Name("_tz_exc")),
        body=cst.IndentedBlock(
            [
                cst.SimpleStatementLine([cst.Expr(cst.Call(
                    func=cst.Name(NOTE_HELPER),
                    args=[cst.Arg(cst.Name("_tz_exc"), comma=_COMMA), cst.Arg(cst.SimpleString(repr(origin)))],
                ))]),
                cst.SimpleStatementLine([cst.Raise()]),
            ]
        ),
    )
    try_stmt = cst.Try(
        body=cst.IndentedBlock(body),
        handlers=[handler],
        leading_lines=[cst.EmptyLine(comment=cst.Comment(origin_note(origin)))],
    )
    fn_body: list[cst.BaseStatement] = [
        cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(w))], cst.Name("None"))]) for w in unset
    ]
    if unset:
        fn_body[0] = fn_body[0].with_changes(
            leading_lines=[cst.EmptyLine(comment=cst.Comment("# unset on some paths, as in the original"))]
        )
    fn_body.append(try_stmt)
    function = cst.FunctionDef(
        name=cst.Name(name),
        params=cst.Parameters(params=[cst.Param(cst.Name(p)) for p in params]),
        body=cst.IndentedBlock(fn_body),
        decorators=[cst.Decorator(cst.Attribute(cst.Attribute(cst.Name("torch"), cst.Name("fx")), cst.Name("wrap")))],
        leading_lines=[cst.EmptyLine(), cst.EmptyLine()],
    )
    # A param some path leaves unbound at the call site is read there only if bound: the statements
    # read it under a test that implies it is (Bamba's mixer in transformers 5.17 binds `conv_state`
    # only with a cache, and reads it only then), so the name alone raised UnboundLocalError.
    call = cst.Call(func=cst.Name(name), args=[
        cst.Arg(cst.parse_expression(f"locals().get({p!r})") if p in maybe_unbound else cst.Name(p)) for p in params])
    if returned is not None:
        small: cst.BaseSmallStatement = returned.with_changes(value=call)
    elif not returns:
        small = cst.Expr(call)
    else:
        target = cst.Name(returns[0]) if len(returns) == 1 else _tuple(returns, parens=False)
        small = cst.Assign(targets=[cst.AssignTarget(target)], value=call)
    leading = list(stmts[0].leading_lines) + [cst.EmptyLine(comment=cst.Comment(comment))]
    replacement = [cst.SimpleStatementLine([small], leading_lines=leading)]
    assigned_none = {
        t.target.value
        for node in descendants_of(stmts)
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Name) and node.value.value == "None"
        for t in node.targets if isinstance(t.target, cst.Name)
    }
    maybe_none = [r for r in returns if r in assigned_none or r in unset]
    return Hoisted(function, replacement, params, returns, maybe_none)


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And) and not test.lpar:
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test]


def _is_not_none(test: cst.BaseExpression) -> bool:
    """``NAME is not None``: never raises, has no effect, and is True for every traced value."""
    return (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.IsNot)
            and isinstance(test.comparisons[0].comparator, cst.Name) and test.comparisons[0].comparator.value == "None")


def _presence_of(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """The ``NAME is not None`` a conjunct implies: itself, or for a bare truth test ``NAME``
    (``if cache_params:``), which is False for None too."""
    if _is_not_none(test):
        return test
    if isinstance(test, cst.Name) and test.value not in ("True", "False", "None"):
        return cst.Comparison(left=cst.Name(test.value), comparisons=[
            cst.ComparisonTarget(operator=cst.IsNot(), comparator=cst.Name("None"))])
    return None


def guard_by_presence(stmts, replacement: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Keep an ``if a is not None and ...:`` or ``if a and ...:`` (no ``else``) from becoming a
    wrapped call when ``a`` is None.

    The wrapped call is guarded by the ``NAME is not None`` its conjuncts imply: when one is
    False the original condition is False too, so skipping the call changes nothing, and the
    guard is decided while tracing (an absent input is a constant there). Without it, a call that
    received some traced value becomes a graph node even for a text-only sample, and the names it
    returns (an image-feature dict) become traced values that later tests take for present.
    A traced value is never None, so the guard always lets the call through for one. (xLSTM's
    ``if cache_params:`` unguarded handed None back as a traced value, and the next layer's
    ``cache_params.rnn_state[i] if cache_params is not None else None`` read ``None.rnn_state``.)
    """
    if len(stmts) != 1 or not isinstance(stmts[0], cst.If) or stmts[0].orelse is not None:
        return replacement
    present = [guard for guard in map(_presence_of, _conjuncts(stmts[0].test)) if guard is not None]
    if not present or len(replacement) != 1:
        return replacement
    guard = present[0]
    for test in present[1:]:
        guard = cst.BooleanOperation(left=guard, operator=cst.And(), right=test)
    call = replacement[0]
    return [cst.If(test=guard, body=cst.IndentedBlock([call.with_changes(leading_lines=[])]),
                   leading_lines=call.leading_lines)]


def descendants_of(stmts):
    for stmt in stmts:
        yield from descendants(stmt)


def _tuple(names: list[str], parens: bool = True) -> cst.Tuple:
    elements = [cst.Element(cst.Name(n)) for n in names]
    if parens:
        return cst.Tuple(elements)
    return cst.Tuple(elements, lpar=[], rpar=[])


def _strip_leading(stmt: cst.BaseStatement) -> cst.BaseStatement:
    return stmt.with_changes(leading_lines=[])


_COMMA = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
_HELPER: list[cst.FunctionDef] = []


def note_helper() -> cst.FunctionDef:
    if not _HELPER:  # parsed once: nodes are immutable, so one tree serves every module
        fn = cst.parse_module(NOTE_HELPER_SOURCE).body[0]
        _HELPER.append(fn.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))
    return _HELPER[0]


def forwarding_wrapper(name: str, target: str, *, method: bool, origin: str) -> cst.FunctionDef:
    """`_wrapped_<f>(*args, **kwargs)` calling `target` (a global function or, with `method`,
    a method of the first argument) so that fx records one opaque call."""
    call = f"{'obj.' + target if method else target}(*args, **kwargs)"
    params = "obj, *args, **kwargs" if method else "*args, **kwargs"
    src = (
        f"@torch.fx.wrap\n"
        f"def {name}({params}):\n"
        f"    {origin_note(origin)}\n"
        f"    try:\n"
        f"        return {call}\n"
        f"    except Exception as _tz_exc:\n"
        f"        {NOTE_HELPER}(_tz_exc, {origin!r})\n"
        f"        raise\n"
    )
    fn = cst.parse_module(src).body[0]
    return fn.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
