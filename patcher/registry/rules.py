"""What a rewrite rule is, and the table of every rule, for the rewriter and the tracer to agree on.

A rule is one module of ``patcher/rewrite/rules/`` plus one fixture folder of the same name in
``tests/rewrite/fixtures/``. The module opens with its :class:`RuleSpec` (``SPEC = RuleSpec(...)``:
code, texts, GUIDE anchor, the static issue kinds it claims, the tracer messages that show it, its
precedence) and holds its transform (``HOOKS`` and ``rewrite(stmt, ctx)``). This module gives the
words a spec is written in and reads every spec into :data:`RULES` without importing the
transforms (which need libcst), so that the tracer's diagnosis and ``patcher --help`` stay cheap.
The rewriter runs the transforms in precedence order, the tracer's diagnosis matches the symptoms,
and ``patcher patch --help``, the manifest and GUIDE.md's rule table (``scripts/regen_guide_rules.py``)
show the summaries; ``tests/registry/test_registry.py`` holds them together.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

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

#: fx's messages, for rule symptoms: the same words whether the test reads values or shapes (the
#: line tells).
FX_CONTROL_FLOW = r"cannot be used as inputs to control flow|cond must be a bool"
FX_ITERATED = r"cannot be iterated"


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
    stage: str  # HOIST or EXPRESSION
    #: Order within the rewriter (ascending; hoist rules all run before expression rules).
    precedence: int
    #: ``(issue kind, level)`` pairs of ``rewrite/detect.py`` this rule rewrites; level None: any.
    claims: tuple[tuple[str, Level | None], ...]
    symptoms: tuple[Symptom, ...] = ()

    def claims_issue(self, kind: str, level: Level | None) -> bool:
        return any(kind == k and (want is None or level == want) for k, want in self.claims)


RULES_FOLDER = Path(__file__).resolve().parents[1] / "rewrite" / "rules"


def read_specs(folder: Path = RULES_FOLDER) -> tuple[dict[str, RuleSpec], dict[str, str]]:
    """Every rule module's ``SPEC`` in ``folder``, read from its source rather than imported.

    A rule is one module of ``patcher/rewrite/rules/`` (its transform, which needs libcst) that opens
    with ``SPEC = RuleSpec(...)``. The tracer's diagnosis and ``patcher --help`` need the specs
    without libcst or the rewriter, so the ``SPEC`` expression is evaluated here on its own, with
    nothing but this module's vocabulary in scope: a spec that names anything else fails here, with
    its file and line. ``tests/registry/test_registry.py`` checks that each module's imported ``SPEC``
    equals what is read here."""
    vocabulary = {name: value for name, value in globals().items()
                  if not name.startswith("_") and (isinstance(value, (str, Level)) or value in (RuleSpec, Symptom))}
    specs: dict[str, RuleSpec] = {}
    modules: dict[str, str] = {}
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found = [node for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "SPEC" for t in node.targets)]
        if not found:
            continue  # a helper module of the rules (base, _chain...), no rule
        node = found[0]
        where = f"{path}:{node.lineno}"
        try:
            spec = eval(compile(ast.Expression(node.value), str(path), "eval"), {"__builtins__": {}}, vocabulary)
        except Exception as exc:
            raise RuntimeError(f"{where}: the rule's SPEC cannot be read on its own ({exc}); a SPEC may name only "
                               f"patcher.registry.rules' vocabulary ({', '.join(sorted(vocabulary))}) and "
                               f"literals") from exc
        if not isinstance(spec, RuleSpec):
            raise RuntimeError(f"{where}: SPEC must be a RuleSpec(...), not {type(spec).__name__}")
        if spec.code in specs:
            raise RuntimeError(f"{where}: rule code {spec.code} is already taken by {modules[spec.code]}.py; "
                               f"give the rule a code of its own")
        specs[spec.code], modules[spec.code] = spec, path.stem
    order = sorted(specs)
    return {code: specs[code] for code in order}, {code: modules[code] for code in order}


#: Code -> spec, in code order; code -> the rule's module in ``patcher/rewrite/rules/`` (and its
#: fixture folder in ``tests/rewrite/fixtures/``).
RULES, RULE_MODULES = read_specs()


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
