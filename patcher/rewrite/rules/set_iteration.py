"""TZ108: iteration over ``set(items)`` becomes iteration over ``dict.fromkeys(items)``.

``for layer_type in set(self.config.layer_types):`` (Gemma 3's rotary embeddings, one per layer
type) and comprehensions over ``set(...)`` (``{t: masks[t]() for t in set(self.config.layer_types)}``)
visit the distinct items in the set's order, which for strings follows their hashes, randomized
per process (``PYTHONHASHSEED``). Each visit records graph nodes, so the order and names of the
nodes change from one process to the next while the results do not; distributed ranks (one process
each under torchrun) compare their graphs and stop when they differ
(``patcher.integrations.llmcompressor_ranks``). ``dict.fromkeys(items)`` holds the same distinct
items in first-occurrence order: an order the set could have had, the same in every process.

Only the builtin's exact form is taken: ``set(<one positional argument>)`` as the iterable of a
``for`` statement or of a comprehension or generator expression, where the function and the module
bind neither ``set`` nor ``dict``. Other uses of a set do not depend on its order and stay
(``x in set(...)``, ``sorted(set(...))``, ``len(set(...))``). Lambdas and nested functions are not
entered here (the engine rewrites a nested function as a function of its own)."""

from __future__ import annotations

import libcst as cst

from ...registry.rules import EXPRESSION, RuleSpec
from ..detect import header_nodes
from ..walk import descendants
from ._own_expressions import ScopedTransformer, transform_own_expressions
from .base import RuleContext, RuleHooks

SPEC = RuleSpec(
    code="TZ108",
    title="iteration over a set",
    summary="iteration over `set(items)` (for loops, comprehensions) becomes iteration over `dict.fromkeys(items)`: "
            "the same items in first-occurrence order instead of hash order, so the graph is the same in every process",
    guide_anchor="reproducible-graphs",
    stage=EXPRESSION,
    precedence=70,  # independent of the other expression rewrites: last
    claims=(),  # a set traces as it is (detect.py finds no issue): the construct is matched whole
)
CODE = SPEC.code
HOOKS = RuleHooks()

REASON = "set iteration: hash order differs per process -> dict.fromkeys, first-occurrence order"


class _FirstOccurrenceOrder(ScopedTransformer):
    def __init__(self):
        self.changed = 0

    def ordered(self, iterable: cst.BaseExpression) -> cst.BaseExpression:
        """``dict.fromkeys(items)`` for ``set(items)``; any other iterable as it is."""
        if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "set"
                and len(iterable.args) == 1 and iterable.args[0].keyword is None and not iterable.args[0].star):
            return iterable
        self.changed += 1
        return iterable.with_changes(func=cst.Attribute(cst.Name("dict"), cst.Name("fromkeys")))

    def leave_CompFor(self, original, updated):
        return updated.with_changes(iter=self.ordered(updated.iter))


def _names_set(stmt: cst.BaseStatement) -> bool:
    """Cheap pre-check: running a transformer on every statement is not."""
    return any(type(node) is cst.Name and node.value == "set" for head in header_nodes(stmt)
               for node in descendants(head, stop=(cst.FunctionDef, cst.ClassDef, cst.Lambda)))


def rewrite(stmt: cst.BaseStatement, ctx: RuleContext) -> list[cst.BaseStatement] | None:
    if not _names_set(stmt) or not (ctx.is_builtin("set") and ctx.is_builtin("dict")):
        return None
    tr = _FirstOccurrenceOrder()
    new = transform_own_expressions(stmt, tr)
    if isinstance(new, cst.For):  # the loop's own iterable: the transformer only saw inside it
        new = new.with_changes(iter=tr.ordered(new.iter))
    if not tr.changed:
        return None
    return ctx.replace([new], code=CODE, span=stmt, reason=REASON)
