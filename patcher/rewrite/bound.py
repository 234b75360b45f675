"""Which locals are certainly bound when a statement starts (a small definite-assignment pass).

Hoisting passes the old value of a name into the wrapped function; a name bound only on another
branch (or only by a loop that may not run) cannot be read at the call site. `bound_before`
answers None when it cannot tell (the statement is not found): callers then keep their old
behaviour.
"""

from __future__ import annotations

import libcst as cst

from .name_use import name_use

_EVERYTHING = None  # "terminates": every name counts as bound afterwards (code after is unreachable)


def _block(stmts) -> set | None:
    """Names every path through `stmts` binds; None when every path leaves (return/raise/...)."""
    bound: set[str] = set()
    for stmt in stmts:
        b = binds(stmt)
        if b is _EVERYTHING:
            return _EVERYTHING
        bound |= b
    return bound


def _body(node) -> list:
    body = getattr(node, "body", None)
    return list(body.body) if isinstance(body, cst.IndentedBlock) else ([] if body is None else list(getattr(body, "body", [])))


def _meet(a: set | None, b: set | None) -> set | None:
    if a is _EVERYTHING:
        return b
    if b is _EVERYTHING:
        return a
    return a & b


def binds(stmt: cst.BaseStatement) -> set | None:
    if isinstance(stmt, cst.SimpleStatementLine):
        if any(isinstance(s, (cst.Return, cst.Raise, cst.Continue, cst.Break)) for s in stmt.body):
            return _EVERYTHING
        return set(name_use(stmt).writes)
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return {stmt.name.value}
    if isinstance(stmt, cst.If):
        head = set(name_use(stmt.test).writes)
        body = _block(_body(stmt))
        if stmt.orelse is None:
            other: set | None = set()
        elif isinstance(stmt.orelse, cst.If):
            other = binds(stmt.orelse)
        else:
            other = _block(_body(stmt.orelse))
        met = _meet(body, other)
        return _EVERYTHING if met is _EVERYTHING else head | met
    if isinstance(stmt, cst.For):
        return set(name_use(stmt.iter).writes)
    if isinstance(stmt, cst.While):
        return set(name_use(stmt.test).writes)
    if isinstance(stmt, cst.With):
        inner = _block(_body(stmt))
        items = {w for item in stmt.items for w in name_use(item).writes}
        return _EVERYTHING if inner is _EVERYTHING else items | inner
    if isinstance(stmt, (cst.Try, cst.TryStar)) and stmt.finalbody is not None:
        fin = _block(_body(stmt.finalbody))
        return fin
    return set()


def bound_before(body, target: cst.CSTNode, bound: set[str]) -> set[str] | None:
    """Names certainly bound when `target` (a statement somewhere in `body`, or an elif of an if
    chain there) starts, given `bound` at the start of `body`; None if `target` is not found."""
    for stmt in body:
        found = _find(stmt, target, bound)
        if found is not None:
            return found
        b = binds(stmt)
        if b is _EVERYTHING:
            return None  # unreachable code: be conservative
        bound = bound | b
    return None


def _find(stmt, target, bound: set[str]) -> set[str] | None:
    if stmt is target:
        return bound
    if isinstance(stmt, cst.If):
        br = stmt
        while True:
            if br is target:
                return bound
            found = bound_before(_body(br), target, bound | set(name_use(br.test).writes))
            if found is not None:
                return found
            if isinstance(br.orelse, cst.If):
                br = br.orelse
                continue
            if br.orelse is not None:
                return bound_before(_body(br.orelse), target, bound)
            return None
    if isinstance(stmt, cst.For):
        inner = bound | set(name_use(stmt.iter).writes)
        found = bound_before(_body(stmt), target, inner | set(name_use(stmt.target).reads))
        if found is None and stmt.orelse is not None:
            found = bound_before(_body(stmt.orelse), target, inner)
        return found
    if isinstance(stmt, cst.While):
        inner = bound | set(name_use(stmt.test).writes)
        found = bound_before(_body(stmt), target, inner)
        if found is None and stmt.orelse is not None:
            found = bound_before(_body(stmt.orelse), target, inner)
        return found
    if isinstance(stmt, cst.With):
        items = {w for item in stmt.items for w in name_use(item).writes}
        return bound_before(_body(stmt), target, bound | items)
    if isinstance(stmt, (cst.Try, cst.TryStar)):
        found = bound_before(_body(stmt), target, bound)
        for h in stmt.handlers:
            if found is None:
                extra = {h.name.name.value} if h.name is not None and isinstance(h.name.name, cst.Name) else set()
                found = bound_before(_body(h), target, bound | extra)
        if found is None and stmt.orelse is not None:
            after = _block(_body(stmt))
            found = bound_before(_body(stmt.orelse), target, bound | (after or set()))
        if found is None and stmt.finalbody is not None:
            found = bound_before(_body(stmt.finalbody), target, bound)
        return found
    return None


def writes_first(name: str, stmts, untaken_keeps: bool = True) -> bool:
    """Does running `stmts` bind `name` before any read of it (so its old value is never needed,
    except as what a loop that never runs or an `if` that is not taken would leave)?

    `untaken_keeps=False`: an `if` without `else` that binds the name first counts too, and so
    does a branch that does not use the name at all when nothing after it reads it (for a name that
    may be unbound before: there is no old value to keep; UDOP's `if/elif/.../else` in transformers
    5.10 binds `err_msg_prefix` only in its raising `else`, and a sibling branch before the chain)."""
    for index, stmt in enumerate(stmts):
        if isinstance(stmt, cst.SimpleStatementLine):
            use = name_use(stmt)
            if name in use.reads:
                return False
            if name in use.writes:
                return True
            continue
        use = name_use(stmt)
        if name not in use.reads and name not in use.writes:
            continue
        if isinstance(stmt, cst.For):
            if name in name_use(stmt.iter).reads or stmt.orelse is not None:
                return False
            if name in name_use(stmt.target).reads:  # the target alone reads as a plain expression
                return True
            return writes_first(name, _body(stmt), untaken_keeps)
        if isinstance(stmt, cst.While):
            if name in name_use(stmt.test).reads or stmt.orelse is not None:
                return False
            return writes_first(name, _body(stmt), untaken_keeps)
        if isinstance(stmt, cst.If):
            if name in name_use(stmt.test).reads:
                return False
            if stmt.orelse is None:
                # not taken: the old value stays (unless there may be none)
                return not untaken_keeps and writes_first(name, _body(stmt), untaken_keeps)
            other = [stmt.orelse] if isinstance(stmt.orelse, cst.If) else _body(stmt.orelse)
            if untaken_keeps:
                return writes_first(name, _body(stmt), untaken_keeps) and writes_first(name, other, untaken_keeps)
            rest = stmts[index + 1:]
            unused_after = not rest or name not in name_use(*rest).reads
            return all(writes_first(name, branch, untaken_keeps) or (unused_after and not _mentions(name, branch))
                       for branch in (_body(stmt), other))
        return False
    return False


def _mentions(name: str, stmts) -> bool:
    if not stmts:
        return False
    use = name_use(*stmts)
    return name in use.reads or name in use.writes
