"""GUIDE.md's rule table, rendered from the specs: ``scripts/regen_guide_rules.py`` writes it
between the markers below, and ``tests/registry/test_registry.py`` fails when the file is stale."""

from __future__ import annotations

import re

from .rules import RULES

REGEN_COMMAND = "python scripts/regen_guide_rules.py"
TABLE_START = f"<!-- rule table: generated from the SPECs of patcher/rewrite/rules/ by `{REGEN_COMMAND}`; do not edit -->"
TABLE_END = "<!-- end of rule table -->"


def _markdown(text: str) -> str:
    return re.sub(r"([_*|])", r"\\\1", text)


def rule_table() -> str:
    """The table, one row per rule in code order."""
    rows = ["| rule | construct | what the patcher does | section |", "|---|---|---|---|"]
    rows += [f"| {code} | {_markdown(spec.title)} | {_markdown(spec.summary)} | "
             f"[{spec.guide_anchor}](#{spec.guide_anchor}) |" for code, spec in RULES.items()]
    return "\n".join(rows)


def with_rule_table(guide: str) -> str:
    """``guide`` with the text between the markers replaced by the registry's table."""
    if guide.count(TABLE_START) != 1 or guide.count(TABLE_END) != 1:
        raise ValueError(f"GUIDE.md must hold each rule-table marker once: {TABLE_START!r}, {TABLE_END!r}")
    head, rest = guide.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_START}\n{rule_table()}\n{TABLE_END}{tail}"
