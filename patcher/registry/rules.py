"""The rules, one spec per code: the single place a rule's identity, text and precedence live.

A rule is three things: this spec, one transform module in ``patcher/rewrite/rules/`` (named by
``RuleSpec.transform``, exposing ``SPEC``, ``HOOKS`` and ``rewrite(stmt, ctx)``) and one fixture folder of
the same name in ``tests/rewrite/fixtures/``. The rewriter runs the transforms in precedence
order, the tracer's diagnosis matches the symptoms, and ``patcher patch --help``, the manifest and
GUIDE.md's rule table (``scripts/regen_guide_rules.py``) show the summaries; ``tests/registry/test_registry.py``
holds them together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum

#: Every rule code starts with it; a location naming a code (``TZ105``) forces that rule.
CODE_PREFIX = "TZ"

#: Not a rule: the code of a blocker that no rule owns (a relative import left as is, a
#: targeted line with no statement to rewrite). Kept stable because manifests carry it.
NO_RULE = "TZ100"

#: The rewriter's two passes over a statement: ``HOIST`` rules move the statement into a
#: wrapped function (the first that applies wins); ``EXPRESSION`` rules rewrite its own
#: expressions in place, and several may apply to one statement.
HOIST = "hoist"
EXPRESSION = "expression"

#: What ``rewrite/detect.py`` finds in one statement (``Issue.kind``).
BOOL = "bool"  # a truth value needed: if/while test, and/or/not, ternary, comprehension filter
ITER = "iter"  # iteration: for, comprehension, list()/zip()/enumerate()/int()... of a traced value
DATA = "data"  # tensor data turned into Python: .item(), .tolist(), len(), itertools
SETITEM = "setitem"  # item or attribute assignment on a traced value
STARRED = "starred"  # starred unpacking (*x) of a traced value
SIZES = "sizes"  # traced sizes as separate arguments of a size factory (torch.zeros(b, t))
CHECK = "check"  # torch_compilable_check / torch._check on a traced value
ASSERT = "assert"  # assert on a traced value
FINFO = "finfo"  # torch.finfo/iinfo of a traced dtype
ISSUE_KINDS = (BOOL, ITER, DATA, SETITEM, STARRED, SIZES, CHECK, ASSERT, FINFO)



class Level(IntEnum):
    """How far an expression depends on traced tensors (``rewrite/taint.py`` computes it; rule
    specs claim issues by it). Ordered: the level of an expression is the highest of its parts."""

    CLEAN = 0  # a plain Python value while tracing (configs, ``self.`` attributes, constants)
    META = 1  # depends only on shapes, ranks, dtypes, devices
    VALUE = 2  # depends on tensor values


CLEAN, META, VALUE = Level.CLEAN, Level.META, Level.VALUE

# fx's messages: the same words whether the test reads values or shapes (the line tells).
_CONTROL_FLOW = r"cannot be used as inputs to control flow|cond must be a bool"
_ITERATED = r"cannot be iterated"


@dataclass(frozen=True)
class Symptom:
    """How the tracer's error shows a construct a rule rewrites.

    ``patterns`` are ``(message, line)`` regular expressions, either None for "any"; the symptom
    matches when one pair matches fx's message and the stripped source line. Symptoms are tried
    by ascending ``precedence`` across all rules: specific ones (a check, a shape test) before
    the general ones with the same message."""

    key: str  # stable name: ``UntraceableConstruct.symptom`` key, accepted as a location kind
    title: str
    why: str
    fix: str
    patterns: tuple[tuple[str | None, str | None], ...]
    precedence: int
    #: False: a location of this kind lets the statement at the line decide the rule, because
    #: the message alone cannot tell a value test from a shape test or a loop.
    forces_rule: bool = True

    def matches(self, message: str, line: str) -> bool:
        return any((m is None or re.search(m, message)) and (s is None or re.search(s, line))
                   for m, s in self.patterns)


@dataclass(frozen=True)
class RuleSpec:
    code: str
    title: str
    summary: str  # one line: ``patcher patch --help``, the manifest's ``rule_descriptions``
    guide_anchor: str  # a ``### <anchor>`` section of GUIDE.md
    transform: str  # module in patcher/rewrite/rules/ and folder in tests/rewrite/fixtures/
    stage: str  # HOIST or EXPRESSION
    #: Order within the rewriter (ascending; hoist rules all run before expression rules).
    precedence: int
    #: ``(issue kind, level)`` pairs of ``rewrite/detect.py`` this rule rewrites; level None: any.
    claims: tuple[tuple[str, Level | None], ...]
    symptoms: tuple[Symptom, ...] = ()

    def claims_issue(self, kind: str, level: Level | None) -> bool:
        return any(kind == k and (want is None or level == want) for k, want in self.claims)


TZ101 = "TZ101"
TZ102 = "TZ102"
TZ103 = "TZ103"
TZ104 = "TZ104"
TZ105 = "TZ105"
TZ106 = "TZ106"
TZ107 = "TZ107"

_SPECS = (
    RuleSpec(
        code=TZ101,
        title="data-dependent branch",
        summary="data-dependent if/elif and conditional expressions move into wrapped functions",
        guide_anchor="conditional-execution",
        transform="data_dependent_branch",
        stage=HOIST,
        # After TZ102 (a raise-only branch is a check); exclusive with TZ105, which takes
        # tests on shapes (META) where this one takes tests on values.
        precedence=20,
        claims=((BOOL, VALUE),),
        symptoms=(Symptom(
            key="control_flow",
            title="control flow on a tensor value",
            why="`if`/`while`/`and`/`or`/ternaries need a concrete bool, but traced tensors are symbolic",
            fix="move the statement into a module-level torch.fx.wrap function, or add the enclosing function to "
                "`ignore`",
            patterns=((_CONTROL_FLOW, None),),
            precedence=40,  # whatever control flow the check and shape symptoms did not take
            forces_rule=False,
        ),),
    ),
    RuleSpec(
        code=TZ102,
        title="check on a traced value",
        summary="checks on traced values (assert, if-raise, torch_compilable_check) move into wrapped _check_* "
                "functions",
        guide_anchor="asserts-and-checks",
        transform="tensor_check",
        stage=HOIST,
        precedence=10,  # first: a check moves whole, with its message, whatever it tests
        claims=((ASSERT, None), (CHECK, None)),
        symptoms=(Symptom(
            key="assert",
            title="assert or check on a tensor value",
            why="an assert/check needs a concrete bool, but while tracing tensors are symbolic",
            fix="move the check into a module-level torch.fx.wrap function so it runs when the graph runs",
            patterns=((r"cond must be a bool", None), (_CONTROL_FLOW, r"^assert|^[^(]*check")),
            precedence=10,
        ),),
    ),
    RuleSpec(
        code=TZ103,
        title="data-dependent loop or value",
        summary="loops over tensors and .tolist()/.item()/itertools-driven code move into wrapped functions",
        guide_anchor="wrapping-functions",
        transform="data_dependent_loop",
        stage=HOIST,
        precedence=40,  # after the branch rules: a branch holding a loop moves whole, as a branch
        claims=((ITER, None), (DATA, None), (SETITEM, None), (STARRED, VALUE)),
        symptoms=(
            Symptom(
                key="iteration",
                title="iteration over a traced value",
                why="a loop over a tensor (or list(tensor), zip, enumerate) needs its length, which is data",
                fix="wrap the loop in a module-level torch.fx.wrap function, or index over a range known from the "
                    "config",
                patterns=((_ITERATED, None),),
                precedence=60,  # after starred shapes, which fail with the same message
            ),
            Symptom(
                key="traced_int",
                title="a traced value where Python needs an int (an index, a range, a slice bound)",
                why="Python indexes a list, counts a range and slices with a concrete int, and this value is computed "
                    "from the inputs (their shapes or values): traced, it is known only when the graph runs (a "
                    "ModuleList, Sequential or ModuleDict indexed or sliced by it picks the sample's modules; other "
                    "containers and range() cannot)",
                fix="move the statement into a module-level torch.fx.wrap function (`patcher repair` rewrites the "
                    "line so), or take the int from the config",
                patterns=((r"Proxy' object cannot be interpreted as an integer", None),
                          (r"indices must be integers or slices, not \w*Proxy", None),
                          (r"slice indices must be integers or None or have an __index__ method", None)),
                precedence=65,
            ),
            Symptom(
                key="data_dependent",
                title="data-dependent Python value (.item(), .tolist(), len())",
                why="the code turns tensor data into Python values, which do not exist while tracing",
                fix="wrap the function that uses them (add its name to `ignore`, or let the patcher wrap it)",
                patterns=((r"'len' is not supported", None), (None, r"\.(item|tolist)\(")),
                precedence=70,
            ),
        ),
    ),
    RuleSpec(
        code=TZ104,
        title="starred shape",
        summary="starred unpacking of shapes becomes index-based / tuple-concatenation code",
        guide_anchor="correcting-shape-inference",
        transform="starred_shape",
        stage=EXPRESSION,
        precedence=50,  # before TZ106: both may rewrite one statement's expressions
        claims=((STARRED, META), (SIZES, META)),
        symptoms=(Symptom(
            key="starred_shape",
            title="starred unpacking of a shape",
            why="`*shape` iterates a symbolic shape whose length fx cannot know",
            fix="index the shape instead (`b, t = x.shape[0], x.shape[1]`; `shape + (-1,)`)",
            patterns=((_ITERATED, r"(^|[(\[,=\s])\*(?!\*)\s*[A-Za-z_(]"),),
            precedence=50,
        ),),
    ),
    RuleSpec(
        code=TZ105,
        title="branch on a shape, rank or dtype",
        summary="branches on .shape/.ndim/.dtype and torch.finfo of traced dtypes become generic or wrapped; around "
                "sequential targets, decided from the sample with a check in the graph",
        guide_anchor="shape-and-dtype-inference",
        transform="shape_branch",
        stage=HOIST,
        precedence=30,
        claims=((BOOL, META), (FINFO, META)),
        symptoms=(Symptom(
            key="shape_branch",
            title="control flow on a shape, ndim or dtype",
            why="shapes of traced values are symbolic, so Python cannot decide the branch",
            fix="rewrite so the result does not depend on the branch (e.g. always slice), or wrap the statement",
            patterns=((_CONTROL_FLOW, r"\.(shape|ndim|dim\(\)|size\(|dtype)|\bisinstance\("),),
            precedence=20,  # before value control flow, which has the same message
        ),),
    ),
    RuleSpec(
        code=TZ106,
        title="ignored call",
        summary="calls to ignored functions/methods become calls to module-level wrapped forwarders",
        guide_anchor="wrapping-functions",
        transform="ignored_call",
        stage=EXPRESSION,
        precedence=60,
        claims=(),  # what it rewrites is named by the ignore list, not found by detect.py
        symptoms=(Symptom(
            key="unsupported_object",
            title="a Python object fx cannot put into the graph",
            why="a non-tensor object (a cache, a custom class) reached an opaque call or the graph output",
            fix="trace with the cache off and keep the function that receives it opaque (`ignore`)",
            patterns=((r"^argument of type", None),),
            precedence=80,
        ),),
    ),
    RuleSpec(
        code=TZ107,
        title="empty-shape guard",
        summary="`if 0 in shape: return torch.empty(shape, ...)` before `return x.reshape(shape)` becomes a wrapped "
                "rebinding of x to that empty tensor",
        guide_anchor="shape-and-dtype-inference",
        transform="empty_shape_guard",
        stage=HOIST,
        # Before TZ105 and TZ103, which would try to move the guard whole and refuse (it returns).
        precedence=25,
        claims=(),  # `0 in shape` is no issue detect.py finds: the construct is matched whole
        symptoms=(Symptom(
            key="empty_shape_guard",
            title="a zero looked for in a traced shape",
            why="`0 in shape` iterates a symbolic shape whose length and sizes fx cannot know",
            fix="let the guard run when the graph runs: rebind the tensor to the empty one in a wrapped function",
            patterns=((_ITERATED, r"^(if|elif)\s+0\s+in\s"),),
            precedence=55,  # before iteration in general, which fails with the same message
        ),),
    ),
)

#: Code -> spec, in code order.
RULES: dict[str, RuleSpec] = {spec.code: spec for spec in sorted(_SPECS, key=lambda spec: spec.code)}


def by_precedence(stage: str) -> tuple[RuleSpec, ...]:
    """The rules of one stage in the order the rewriter tries them."""
    return tuple(sorted((s for s in RULES.values() if s.stage == stage), key=lambda s: s.precedence))


def symptoms() -> tuple[tuple[Symptom, RuleSpec], ...]:
    """Every symptom with its rule, in the order the diagnosis tries them."""
    pairs = [(symptom, spec) for spec in RULES.values() for symptom in spec.symptoms]
    return tuple(sorted(pairs, key=lambda pair: pair[0].precedence))


def diagnose_symptom(message: str, line: str) -> tuple[Symptom, RuleSpec] | None:
    """The first symptom (by precedence) that fx's ``message`` and the stripped source ``line`` show."""
    for symptom, spec in symptoms():
        if symptom.matches(message, line):
            return symptom, spec
    return None


def names_a_code(wanted: str) -> bool:
    """What a location asks for names its rule (``TZ105``, ``tz105``) rather than a symptom."""
    return wanted.upper().startswith(CODE_PREFIX)


def rule_for_location(wanted: str) -> str | None:
    """The rule a targeted location asks for (``wanted``: a rule code, or a symptom key): a code as
    given, or the rule of a symptom key; None: the statement at the line decides (a symptom with
    ``forces_rule=False``, ``bool``)."""
    if names_a_code(wanted):
        return wanted.upper()
    for symptom, spec in symptoms():
        if symptom.key == wanted and symptom.forces_rule:
            return spec.code
    return None
