"""The rewrite rules, one module each, run in the precedence their specs give.

Each module opens with its spec (``SPEC = RuleSpec(...)``, read into ``patcher.registry.rules.RULES``
without importing the module) and holds its transform; a module without ``SPEC`` is a helper of
the rules. In which order the engine tries a rule on a statement is its spec's ``stage`` and
``precedence``: hoisting
rules first (a statement that moves needs nothing else), then the expression rewrites, several
of which can apply to one statement. What a rule decides beyond one statement is its module's
``HOOKS`` (:class:`.base.RuleHooks`); the views below list the rules that own each decision, in
the same precedence, so that the engine iterates them and names no rule.
"""

import importlib

from ...registry.rules import EXPRESSION, HOIST, RULE_MODULES, RuleSpec, by_precedence
from .base import RuleContext, RuleHooks


def _transform(spec: RuleSpec):
    module = importlib.import_module(f"{__name__}.{RULE_MODULES[spec.code]}")
    if getattr(module, "SPEC", None) != spec:
        raise ImportError(f"{module.__name__}: its SPEC, imported, is not the spec patcher.registry.rules read from "
                          f"its source: SPEC must be one RuleSpec(...) written in the registry's vocabulary")
    if not isinstance(getattr(module, "HOOKS", None), RuleHooks):
        raise ImportError(f"{module.__name__} must define HOOKS = RuleHooks(...) (RuleHooks() when it owns none)")
    hooks = module.HOOKS
    if (hooks.whole_methods or hooks.forwards_ignored) and not hooks.forward_reason:
        raise ImportError(f"{module.__name__}: a rule that forwards calls needs HOOKS.forward_reason")
    if hooks.forwards_ignored and hooks.forwarded_callee is None:
        raise ImportError(f"{module.__name__}: the rule that forwards ignored calls needs HOOKS.forwarded_callee")
    return module


def _the_one(rules, flag: str):
    owners = [rule for rule in rules if getattr(rule.HOOKS, flag)]
    if len(owners) != 1:
        raise ImportError(f"exactly one rule must set HOOKS.{flag}, not {[r.CODE for r in owners]}")
    return owners[0]


HOIST_RULES = tuple(_transform(spec) for spec in by_precedence(HOIST))
EXPRESSION_RULES = tuple(_transform(spec) for spec in by_precedence(EXPRESSION))
ALL_RULES = HOIST_RULES + EXPRESSION_RULES
RULES_BY_CODE = {rule.CODE: rule for rule in sorted(ALL_RULES, key=lambda r: r.CODE)}

#: Rules that take a targeted statement by its form, in precedence order; the fallback takes the rest.
LOCATION_RULES = tuple(rule for rule in ALL_RULES if rule.HOOKS.takes_location is not None)
LOCATION_FALLBACK = _the_one(ALL_RULES, "location_fallback")
#: Rules that wrap whole methods, in precedence order (a method two would wrap goes to the first).
WHOLE_METHOD_RULES = tuple(rule for rule in ALL_RULES if rule.HOOKS.whole_methods is not None)
#: The rule calls to ignored functions and methods are forwarded under.
IGNORED_CALLS = _the_one(ALL_RULES, "forwards_ignored")
#: Rule code -> why a call forwarded under it is (the rules that forward calls).
FORWARD_REASONS = {rule.CODE: rule.HOOKS.forward_reason for rule in ALL_RULES if rule.HOOKS.forward_reason}

__all__ = ["ALL_RULES", "EXPRESSION_RULES", "FORWARD_REASONS", "HOIST_RULES", "IGNORED_CALLS", "LOCATION_FALLBACK",
           "LOCATION_RULES", "RULES_BY_CODE", "RuleContext", "RuleHooks", "WHOLE_METHOD_RULES"]
