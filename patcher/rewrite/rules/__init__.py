"""The rewrite rules, one module each, in the order the engine tries them on a statement.

Hoisting rules come first (a statement that moves needs nothing else); then the expression
rewrites TZ104 and TZ106, which can both apply to one statement.
"""

from . import (
    data_dependent_branch,
    data_dependent_loop,
    ignored_call,
    shape_branch,
    starred_shape,
    tensor_check,
)

HOIST_RULES = (tensor_check, data_dependent_branch, shape_branch, data_dependent_loop)
EXPRESSION_RULES = (starred_shape, ignored_call)
ALL_RULES = HOIST_RULES + EXPRESSION_RULES
RULES_BY_CODE = {rule.CODE: rule for rule in sorted(ALL_RULES, key=lambda r: r.CODE)}

__all__ = ["ALL_RULES", "EXPRESSION_RULES", "HOIST_RULES", "RULES_BY_CODE"]
