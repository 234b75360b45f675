"""A rule is one unit: it receives a RuleContext and uses nothing else of it, and the engine
names no rule (its choices for a rule are the rule's HOOKS)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from patcher.rewrite import rules
from patcher.rewrite.rules.base import RuleContext, RuleHooks

REWRITE = Path(rules.__file__).resolve().parents[1]
RULE_FILES = sorted((REWRITE / "rules").glob("*.py"))


def _members(cls) -> set[str]:
    return set(getattr(cls, "__annotations__", {})) | {name for name in vars(cls) if not name.startswith("_")}


def _context_members() -> set[str]:
    """What context.StatementContext defines: its methods and the attributes its __init__ sets."""
    tree = ast.parse((REWRITE / "context.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "StatementContext")
    found = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    found |= {t.attr for n in ast.walk(init) if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    return found


def test_the_statement_context_is_a_rule_context():
    assert _members(RuleContext) <= _context_members()


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.stem)
def test_rules_use_only_the_rule_context(path):
    used = set(re.findall(r"\bctx\.([A-Za-z_]+)", path.read_text()))
    assert used <= _members(RuleContext), f"{path.name} uses {sorted(used - _members(RuleContext))} of ctx"
    assert "getattr(ctx" not in path.read_text()


@pytest.mark.parametrize("name", ["engine.py", "context.py"])
def test_the_engine_names_no_rule(name):
    source = (REWRITE / name).read_text()
    assert not re.search(r"\bTZ1\d\d\b", source), f"{name} names a rule: leave the choice to the rule's HOOKS"
    assert "getattr(ctx" not in source


def test_every_rule_declares_its_hooks():
    for rule in rules.ALL_RULES:
        assert isinstance(rule.HOOKS, RuleHooks), rule.__name__
    assert rules.LOCATION_FALLBACK in rules.ALL_RULES and rules.IGNORED_CALLS in rules.ALL_RULES
    order = list(rules.ALL_RULES)
    for view in (rules.LOCATION_RULES, rules.WHOLE_METHOD_RULES):
        assert [order.index(rule) for rule in view] == sorted(order.index(rule) for rule in view)


def test_the_engine_asks_the_forwarding_rule_which_calls_are_opaque(monkeypatch):
    # Which call forms go through a forwarder is the rule's decision alone; the engine's tracking of
    # opaque results (a None test of one must run in the graph) asks the rule, so the two agree.
    import dataclasses

    from rewrite._fixture_runtime import patch_options
    from patcher.rewrite import patch_source

    case = REWRITE.parents[1] / "tests/rewrite/fixtures/data_dependent_branch/none_test_of_ignored_call.in.py"
    source = case.read_text()

    def codes():
        return [rewrite.code for rewrite in patch_source(source, **patch_options(source)).rewrites]

    forwarding = rules.IGNORED_CALLS
    assert codes() == [forwarding.CODE, "TZ101"]
    asked = []

    def never(call, is_local):
        asked.append(call)
        return None

    monkeypatch.setattr(forwarding, "HOOKS", dataclasses.replace(forwarding.HOOKS, forwarded_callee=never))
    # still forwarded by the rule, but the engine no longer takes the result for an opaque one
    after = codes()
    assert forwarding.CODE in after and "TZ101" not in after and asked


@pytest.mark.parametrize(("call", "callee"), [
    ("create_causal_mask(x)", ("create_causal_mask", False)),
    ("local_helper(x)", None),                       # a local function is not the module's
    ("self.get_rope_index(a, b=c)", ("get_rope_index", True)),
    ("super().get_rope_index(a)", None),             # the parent's method, not the wrapped one
    ("self.blocks[0](x)", None),                     # a call of any other expression
])
def test_the_forwarding_rule_decides_by_the_call_form(call, callee):
    import libcst as cst

    expression = cst.parse_expression(call)
    assert rules.IGNORED_CALLS.HOOKS.forwarded_callee(expression, {"local_helper"}.__contains__) == callee
