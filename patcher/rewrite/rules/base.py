"""What every rule module provides, and the context a rule works in.

A rule module (one per file, named by its spec's ``transform`` in ``patcher/registry/rules.py``,
where its code, texts and precedence live) defines:

- ``SPEC``: its :class:`patcher.registry.rules.RuleSpec`, and ``CODE = SPEC.code`` (``TZ101`` ...),
  used in comments, manifests and tracer errors;
- ``rewrite(stmt, ctx) -> list[cst.BaseStatement] | None``: the statements replacing ``stmt``, or
  None when the rule does not apply. Rules never mutate; they ask ``ctx`` to hoist or replace, so
  that comments, manifest records, names and blockers are handled in one place.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import libcst as cst

from ...registry import rules as registry
from ...registry import wrapped as registry_wrapped


def claimed(issues: list, spec: registry.RuleSpec) -> list:
    """The detect.Issue entries of ``issues`` that ``spec`` claims (by kind and taint level)."""
    return [i for i in issues if spec.claims_issue(i.kind, i.level)]


class RuleContext(Protocol):
    """The engine's view of one statement inside one function (see context.StatementContext)."""

    taint: object  # taint.Taint of the enclosing function
    forced: str | None  # rule code a targeted location asks for at this statement, if any
    method: str  # enclosing function's name, for wrapped-function names

    def issues(self, stmt: cst.CSTNode) -> list: ...  # detect.Issue list of stmt's own expressions

    def forces(self, code: str, branch: cst.If) -> bool: ...  # a location targets this if/elif line

    def is_local(self, name: str) -> bool: ...

    def is_shape(self, expr: cst.CSTNode) -> bool: ...  # a shape or tuple of sizes

    def forwarder(self, name: str, *, method: bool) -> tuple[str, str] | None: ...  # TZ106/TZ103 wrappers

    def mentions_redirected(self, stmt: cst.CSTNode) -> bool: ...

    def hoist(self, stmts: Sequence[cst.BaseStatement], *, code: str, desc: str, reason: str,
              span: cst.CSTNode, prefix: str = registry_wrapped.WRAPPED_PREFIX) -> list[cst.BaseStatement] | None: ...

    def replace(self, stmts: Sequence[cst.BaseStatement], *, code: str, reason: str,
                span: cst.CSTNode) -> list[cst.BaseStatement]: ...
