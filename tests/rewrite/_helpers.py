"""Shared checks for the rewrite tests."""

from __future__ import annotations

import ast
import difflib

from patcher.rewrite.file_header import split_header


def changed_original_lines(original: str, patched: str) -> set[int]:
    """1-based lines of `original` that do not survive byte for byte in `patched` (header excluded)."""
    _, body = split_header(patched)
    a, b = original.splitlines(True), body.splitlines(True)
    changed: set[int] = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            changed.update(range(i1 + 1, i2 + 1))
    return changed


def unexplained_changes(original: str, result) -> set[int]:
    """Changed lines that are neither inside a recorded rewrite, nor a relative import, nor a class
    the manifest says is imported from the source instead of copied (``original_classes``)."""
    allowed: set[int] = set()
    for r in result.rewrites:
        allowed.update(range(r.lines[0], r.lines[1] + 1))
    imported = set(result.manifest.get("original_classes", ()))
    for node in ast.parse(original).body:
        if isinstance(node, ast.ClassDef) and node.name in imported:
            first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
            allowed.update(range(first, node.end_lineno + 1))
    lines = original.splitlines()
    in_import = False
    for i, line in enumerate(lines, 1):
        if line.startswith("from ."):
            in_import = True
        if in_import:
            allowed.add(i)
            if ")" in line or not line.rstrip().endswith(("(", ",")):
                in_import = line.rstrip().endswith(("(", ",")) and ")" not in line
    return changed_original_lines(original, result.code) - allowed
