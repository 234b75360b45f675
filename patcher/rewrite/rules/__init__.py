"""The rewrite rules, one module each, run in the precedence their specs give.

Which module implements a rule, and in which order the engine tries it on a statement, is data
in ``patcher/registry/rules.py`` (``RuleSpec.transform``, ``stage``, ``precedence``): hoisting
rules first (a statement that moves needs nothing else), then the expression rewrites, several
of which can apply to one statement.
"""

import importlib

from ...registry.rules import EXPRESSION, HOIST, RuleSpec, by_precedence


def _transform(spec: RuleSpec):
    module = importlib.import_module(f"{__name__}.{spec.transform}")
    if getattr(module, "SPEC", None) is not spec:
        raise ImportError(f"{module.__name__} must define SPEC = RULES[{spec.code!r}]")
    return module


HOIST_RULES = tuple(_transform(spec) for spec in by_precedence(HOIST))
EXPRESSION_RULES = tuple(_transform(spec) for spec in by_precedence(EXPRESSION))
ALL_RULES = HOIST_RULES + EXPRESSION_RULES
RULES_BY_CODE = {rule.CODE: rule for rule in sorted(ALL_RULES, key=lambda r: r.CODE)}

__all__ = ["ALL_RULES", "EXPRESSION_RULES", "HOIST_RULES", "RULES_BY_CODE"]
