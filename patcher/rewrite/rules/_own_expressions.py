"""Apply an expression transformer to a statement's own expressions only (not nested blocks): its
header line (an `if` test, a `for` iterable, a `with` item), or the whole of a simple statement."""

from __future__ import annotations

import libcst as cst


def transform_own_expressions(stmt: cst.BaseStatement, tr: cst.CSTTransformer) -> cst.BaseStatement:
    if isinstance(stmt, cst.SimpleStatementLine):
        return stmt.with_changes(body=[s.visit(tr) for s in stmt.body])
    if isinstance(stmt, (cst.If, cst.While)):
        return stmt.with_changes(test=stmt.test.visit(tr))
    if isinstance(stmt, cst.For):
        return stmt.with_changes(iter=stmt.iter.visit(tr))
    if isinstance(stmt, cst.With):
        return stmt.with_changes(items=[i.visit(tr) for i in stmt.items])
    return stmt


class ScopedTransformer(cst.CSTTransformer):
    """Does not enter code that runs later (lambdas, nested defs and classes)."""

    def visit_Lambda(self, node):
        return False

    def visit_FunctionDef(self, node):
        return False

    def visit_ClassDef(self, node):
        return False
