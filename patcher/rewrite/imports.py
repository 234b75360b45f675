"""Relative imports made absolute, so a patched file works outside its package."""

from __future__ import annotations

import libcst as cst


def _dotted_expr(name: str) -> cst.Attribute | cst.Name:
    parts = name.split(".")
    node: cst.Attribute | cst.Name = cst.Name(parts[0])
    for p in parts[1:]:
        node = cst.Attribute(node, cst.Name(p))
    return node


def resolve(package: str, level: int, module: str | None) -> str | None:
    base = package.split(".") if package else []
    if level - 1 > len(base) or (level - 1 == len(base) and not module):
        return None
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else [])) or None


class AbsoluteImports(cst.CSTTransformer):
    """`from ...x import y` in package `a.b.c` -> `from a.x import y`."""

    def __init__(self, package: str | None):
        self.package = package
        self.changed = 0
        self.unresolved: list[cst.ImportFrom] = []

    def apply(self, module: cst.Module) -> cst.Module:
        """Rewrites the imports among the module's statements (top level, inside `if`/`try`
        blocks such as `if TYPE_CHECKING:`, and inside classes and functions: MusicGen's
        ``__init__`` imports ``from ..auto.modeling_auto import AutoModelForTextEncoding``);
        only statement lists are walked, never expressions, which keeps this cheap."""
        body = [self._statement(stmt) for stmt in module.body]
        return module.with_changes(body=body) if self.changed else module

    def _statement(self, stmt: cst.CSTNode) -> cst.CSTNode:
        if isinstance(stmt, cst.SimpleStatementLine):
            if any(isinstance(s, cst.ImportFrom) and s.relative for s in stmt.body):
                return stmt.visit(self)
            return stmt
        if isinstance(stmt, (cst.If, cst.Try, cst.With, cst.ClassDef, cst.FunctionDef, cst.For, cst.While)) \
                or type(stmt).__name__ in ("Else", "ExceptHandler", "Finally"):
            changes = {}
            body = getattr(stmt, "body", None)
            if isinstance(body, cst.IndentedBlock):
                changes["body"] = body.with_changes(body=[self._statement(s) for s in body.body])
            for attr in ("orelse", "finalbody"):
                sub = getattr(stmt, attr, None)
                if sub is not None:
                    changes[attr] = self._statement(sub)
            if isinstance(stmt, cst.Try):
                changes["handlers"] = [self._statement(h) for h in stmt.handlers]
            return stmt.with_changes(**changes)
        return stmt

    def leave_ImportFrom(self, original, updated):
        if not updated.relative:
            return updated
        module = cst.Module([]).code_for_node(updated.module) if updated.module is not None else None
        target = resolve(self.package, len(updated.relative), module) if self.package is not None else None
        if target is None:
            self.unresolved.append(original)
            return updated
        self.changed += 1
        return updated.with_changes(relative=[], module=_dotted_expr(target),
                                    whitespace_after_from=cst.SimpleWhitespace(" "))
