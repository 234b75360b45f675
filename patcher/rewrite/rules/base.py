"""What every rule module provides, and the context a rule works in.

A rule module (one per file; its fixtures are ``tests/rewrite/fixtures/<module name>/``) defines:

- ``SPEC = RuleSpec(...)``, first: its code, texts and precedence (a
  :class:`patcher.registry.rules.RuleSpec` written in that module's vocabulary only, which the
  registry reads from the source without importing the rule), and ``CODE = SPEC.code`` (``TZ101``
  ...), used in comments, manifests and tracer errors;
- ``HOOKS``: a :class:`RuleHooks`, the decisions the rule owns beyond one statement (which
  targeted statements it takes, which methods it wraps whole, which calls it forwards);
  ``RuleHooks()`` when it owns none. The engine asks every rule's hooks in the specs'
  precedence and names no rule itself;
- ``rewrite(stmt, ctx: RuleContext) -> list[cst.BaseStatement] | None``: the statements replacing
  ``stmt``, or None when the rule does not apply. Rules never mutate; they ask ``ctx`` to hoist or
  replace, so that comments, manifest records, names and blockers are handled in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

import libcst as cst

from ...registry import rules as registry
from ...registry import wrapped as registry_wrapped

if TYPE_CHECKING:
    from ..context import Forwarder
    from ..detect import Issue
    from ..targets import TargetIndex
    from ..taint import Taint


def claimed(issues: list, spec: registry.RuleSpec) -> list:
    """The detect.Issue entries of ``issues`` that ``spec`` claims (by kind and taint level)."""
    return [i for i in issues if spec.claims_issue(i.kind, i.level)]


@dataclass(frozen=True)
class RuleHooks:
    """A rule's decisions outside ``rewrite``: the engine iterates the rules (in the specs'
    precedence) and asks these, so that no rule's choice is made in the engine."""

    #: A targeted location that names no rule (``bool``, or a symptom with ``forces_rule=False``):
    #: does this rule take the statement at the line? The first rule that does is forced there.
    takes_location: Callable[[cst.BaseStatement, "Taint"], bool] | None = None
    #: The rule forced at a targeted statement no rule's ``takes_location`` takes (one rule).
    location_fallback: bool = False
    #: The methods of a module this rule wraps whole, as
    #: ``whole_methods(module, targets, wrapped_defs) -> names``; calls to them go through
    #: forwarders recorded under this rule (unless the caller passes the methods itself).
    whole_methods: Callable[[cst.Module, "TargetIndex", dict[str, cst.FunctionDef]], Iterable[str]] | None = None
    #: Calls to ignored functions and methods go through forwarders recorded under this rule (one rule).
    forwards_ignored: bool = False
    #: ``forwarded_callee(call, is_local) -> (name, method) | None``: the name a call goes through a
    #: forwarder under if the module forwards that name (a method's when ``method``), None for a call
    #: of a form never forwarded. Needed by the rule with ``forwards_ignored``: the engine asks it
    #: which calls return an opaque result, so the rule's rewrite and the engine cannot disagree.
    forwarded_callee: Callable[[cst.Call, Callable[[str], bool]], tuple[str, bool] | None] | None = None
    #: Why a call goes through a forwarder recorded under this rule (a manifest reason's start);
    #: needed by a rule with ``whole_methods`` or ``forwards_ignored``.
    forward_reason: str | None = None


class RuleContext(Protocol):
    """What a rule may ask about, and do to, one statement: the interface ``rewrite`` receives
    (implemented by ``context.StatementContext``; ``tests/rewrite/test_rule_context.py`` checks
    that rules use nothing else)."""

    taint: "Taint"  # taint of the enclosing function
    forced: str | None  # rule code a targeted location asks for at this statement, if any
    method: str  # enclosing function's name, for wrapped-function names
    body: list | None  # the enclosing function's statements (original nodes); None: unknown
    #: Set by a rule that hoisted an `if`'s test operands but kept a plain guard as a Python `if`
    #: (its body is the wrapped call): the engine then leaves that `if` as it is.
    guard_kept: bool
    #: Set by a rule that rewrote only the tests of an `if` chain: the engine then rewrites inside
    #: every branch, as it does for a statement no rule hoisted.
    header_only: bool

    def issues(self, stmt: cst.CSTNode) -> list["Issue"]: ...  # detect.Issue list of stmt's own expressions

    def forces(self, code: str, branch: cst.If) -> bool: ...  # a location targets this if/elif line

    def tests_opaque_none(self, test: cst.BaseExpression) -> bool: ...  # `is None` of an opaque call's result

    def tests_traced_item(self, test: cst.BaseExpression) -> bool: ...  # truth test of a traced dict item

    def is_local(self, name: str) -> bool: ...

    def is_builtin(self, name: str) -> bool: ...  # bound neither in the function nor at module level

    def is_shape(self, expr: cst.CSTNode) -> bool: ...  # a shape or tuple of sizes

    def forwarder(self, name: str, *, method: bool) -> "Forwarder | None": ...  # a forwarded call's wrapper

    def mentions_redirected(self, stmt: cst.CSTNode) -> bool: ...

    def hides_targets(self, stmts: Sequence[cst.BaseStatement]) -> str | None: ...  # why hoisting would hide targets

    def decided(self, condition: cst.BaseExpression, *, desc: str, span: cst.CSTNode) -> cst.Call: ...

    def hoist(self, stmts: Sequence[cst.BaseStatement], *, code: str, desc: str, reason: str,
              span: cst.CSTNode, prefix: str = registry_wrapped.WRAPPED_PREFIX) -> list[cst.BaseStatement] | None: ...

    def replace(self, stmts: Sequence[cst.BaseStatement], *, code: str, reason: str,
                span: cst.CSTNode) -> list[cst.BaseStatement]: ...
