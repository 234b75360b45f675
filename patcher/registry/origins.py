"""Where a line of generated code comes from in the original source: the rewriter writes it, the
tracer, the repair loop and the coverage sweep read it back.

Lines the rewriter leaves alone are byte-identical to the original, so a diff maps them
(:func:`line_map`). Code it moves into a module-level function carries a note naming its origin,
``# from modeling_x.py:766 (in Foo.forward)`` (:func:`origin_note`, read by :func:`noted_origin`).
"""

from __future__ import annotations

import difflib
import re

ORIGIN_NOTE = "# from "
_LOCATION = re.compile(r"\S+:\d+")


def line_map(original: str, generated: str) -> dict[int, int]:
    """1-based lines of ``generated`` that survive unchanged from ``original`` -> their line there."""
    a, b = original.splitlines(), generated.splitlines()
    mapping: dict[int, int] = {}
    for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            mapping[block.b + k + 1] = block.a + k + 1
    return mapping


def original_line(original: str, generated: str, lineno: int) -> int | None:
    """The line of ``original`` that line ``lineno`` of ``generated`` is, if it was left alone."""
    return line_map(original, generated).get(lineno)


def origin_note(origin: str) -> str:
    return f"{ORIGIN_NOTE}{origin}"


def noted_origin(line: str) -> str | None:
    """The origin a note line names (``modeling_x.py:766 (in Foo.forward)``), None for other lines."""
    line = line.strip()
    return line[len(ORIGIN_NOTE):] if line.startswith(ORIGIN_NOTE) else None


def noted_location(line: str) -> str | None:
    """Only the ``file:line`` of a note line's origin."""
    origin = noted_origin(line)
    match = _LOCATION.match(origin) if origin else None
    return match.group(0) if match else None
