"""The rule registry is the one place a rule is defined: everything else agrees with it.

A rule is one module of patcher/rewrite/rules/ (its ``SPEC`` first, then its transform) and one
fixture folder; the registry reads every ``SPEC`` from the source. GUIDE.md's rule table and
sections, ``patcher patch --help``, the manifest and the tracer's diagnosis are checked against the
specs here.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from child_env import child_env

from patcher.registry import rules as registry
from patcher.registry.guide_table import REGEN_COMMAND, TABLE_END, TABLE_START, with_rule_table
from patcher.registry.rules import NO_RULE, RULE_MODULES, RULES, diagnose_symptom, read_specs, rule_for_location

REPO = Path(__file__).resolve().parents[2]
TRANSFORMS = REPO / "patcher" / "rewrite" / "rules"
FIXTURES = REPO / "tests" / "rewrite" / "fixtures"
GUIDE = (REPO / "GUIDE.md").read_text(encoding="utf-8")
def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_codes_are_distinct_and_no_rule_is_no_rule():
    assert all(code == spec.code and re.fullmatch(r"TZ1\d\d", code) for code, spec in RULES.items())
    assert set(RULE_MODULES) == set(RULES) and len(set(RULE_MODULES.values())) == len(RULES)
    assert NO_RULE not in RULES and registry.names_a_code(NO_RULE)


@pytest.mark.parametrize("code", list(RULES))
def test_every_rule_has_a_transform_a_fixture_folder_and_a_guide_section(code):
    spec, name = RULES[code], RULE_MODULES[code]
    module = importlib.import_module(f"patcher.rewrite.rules.{name}")
    # the spec read from the source is the one the module builds when imported
    assert module.SPEC == spec and module.CODE == code and callable(module.rewrite)
    assert sorted((FIXTURES / name).glob("*.in.py")), f"no fixture in tests/rewrite/fixtures/{name}/"
    assert spec.guide_anchor in _anchors(GUIDE), f"GUIDE.md has no section #{spec.guide_anchor}"


def _rule_source(code: str, extra: str = "") -> str:
    return (f"import libcst\nfrom ...registry.rules import HOIST, RuleSpec\n{extra}\n"
            f"SPEC = RuleSpec(code={code!r}, title='t', summary='s', guide_anchor='a', stage=HOIST, precedence=1,\n"
            f"                claims=())\n")


def test_a_spec_is_read_without_importing_its_module(tmp_path):
    (tmp_path / "first_rule.py").write_text(_rule_source("TZ190", "raise SystemExit('imported')"))
    (tmp_path / "helper.py").write_text("raise SystemExit('imported')\n")  # no SPEC: a helper, skipped
    specs, modules = read_specs(tmp_path)
    assert list(specs) == ["TZ190"] and modules == {"TZ190": "first_rule"}
    assert specs["TZ190"].stage == registry.HOIST and specs["TZ190"].precedence == 1


def test_a_code_given_twice_names_both_modules(tmp_path):
    (tmp_path / "a_rule.py").write_text(_rule_source("TZ190"))
    (tmp_path / "b_rule.py").write_text(_rule_source("TZ190"))
    with pytest.raises(RuntimeError, match=r"b_rule.py:4: rule code TZ190 is already taken by a_rule.py"):
        read_specs(tmp_path)


def test_a_spec_naming_anything_but_the_vocabulary_names_file_and_line(tmp_path):
    (tmp_path / "a_rule.py").write_text(_rule_source("TZ190").replace("precedence=1", "precedence=ORDER"))
    with pytest.raises(RuntimeError, match=r"a_rule.py:4: the rule's SPEC cannot be read on its own \(name 'ORDER'"):
        read_specs(tmp_path)


def test_no_transform_or_fixture_folder_without_a_rule():
    transforms = set(RULE_MODULES.values())
    modules = {p.stem for p in TRANSFORMS.glob("*.py") if not p.stem.startswith("_") and p.stem != "base"}
    folders = {p.name for p in FIXTURES.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    assert modules == transforms and folders == transforms


def test_guide_rule_table_is_the_registry():
    assert GUIDE.count(TABLE_START) == 1 and GUIDE.count(TABLE_END) == 1
    assert with_rule_table(GUIDE) == GUIDE, f"GUIDE.md's rule table is stale: run `{REGEN_COMMAND}`"
    assert f"`{NO_RULE}` is no rule" in GUIDE


def test_the_rule_table_shows_every_spec():
    table = GUIDE.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| TZ")]
    assert [row.split("|")[1].strip() for row in rows] == list(RULES)
    for row, spec in zip(rows, RULES.values()):
        assert f"(#{spec.guide_anchor})" in row and spec.title.split()[0] in row


def test_a_stale_rule_table_is_rewritten_and_nothing_else():
    stale = GUIDE.replace(TABLE_START, TABLE_START + "\n| TZ199 | gone | gone | [x](#x) |", 1)
    assert stale != GUIDE and with_rule_table(stale) == GUIDE


def test_precedence_is_data_and_the_rewriter_follows_it():
    from patcher.rewrite.rules import EXPRESSION_RULES, HOIST_RULES

    specs = list(RULES.values())
    assert len({s.precedence for s in specs}) == len(specs), "two rules with one precedence: order would be arbitrary"
    assert {s.stage for s in specs} <= {registry.HOIST, registry.EXPRESSION}
    for stage, modules in ((registry.HOIST, HOIST_RULES), (registry.EXPRESSION, EXPRESSION_RULES)):
        wanted = sorted((s for s in specs if s.stage == stage), key=lambda s: s.precedence)
        assert [m.SPEC for m in modules] == wanted
    symptoms = [symptom for spec in specs for symptom in spec.symptoms]
    assert len({s.precedence for s in symptoms}) == len(symptoms)
    assert len({s.key for s in symptoms}) == len(symptoms)


def test_every_issue_kind_detect_finds_is_claimed_by_exactly_one_rule_per_level():
    tree = ast.parse((REPO / "patcher" / "rewrite" / "detect.py").read_text())
    added = [call.args[0] for call in ast.walk(tree) if isinstance(call, ast.Call)
             and isinstance(call.func, ast.Attribute) and call.func.attr == "add" and call.args]
    assert added, "detect.py no longer adds issues through .add(kind, ...): update this test"
    for arg in added:  # a constant of the registry, never a string of its own
        assert isinstance(arg, ast.Name) and getattr(registry, arg.id, None) in registry.ISSUE_KINDS, ast.dump(arg)
    for kind in registry.ISSUE_KINDS:
        for level in (registry.VALUE, registry.META):
            owners = [spec.code for spec in RULES.values() if spec.claims_issue(kind, level)]
            assert len(owners) <= 1, (kind, level, owners)
        assert any(spec.claims_issue(kind, level) for spec in RULES.values() for level in (registry.VALUE, registry.META))


@pytest.mark.parametrize(
    "message, line, code, key",
    [
        ("symbolically traced variables cannot be used as inputs to control flow", "assert x.sum() > 0", "TZ102", "assert"),
        ("symbolically traced variables cannot be used as inputs to control flow", "torch_compilable_check(x > 0, m)",
         "TZ102", "assert"),
        ("cond must be a bool, got Proxy", "if x.shape[0] > 1:", "TZ102", "assert"),
        ("symbolically traced variables cannot be used as inputs to control flow", "if x.shape[0] > 1:", "TZ105",
         "shape_branch"),
        ("symbolically traced variables cannot be used as inputs to control flow", "if x.sum() > 0:", "TZ101",
         "control_flow"),
        ("Proxy object cannot be iterated", "b, *rest = x.shape", "TZ104", "starred_shape"),
        ("Proxy object cannot be iterated", "for row in x:", "TZ103", "iteration"),
        ("'len' is not supported in symbolic tracing by default", "n = len(x)", "TZ103", "data_dependent"),
        ("some error", "n = x.item()", "TZ103", "data_dependent"),
        ("'TracingProxy' object cannot be interpreted as an integer", "for i in range(x.shape[1]):", "TZ103",
         "traced_int"),
        ("list indices must be integers or slices, not TracingProxy", "y = scales[x.shape[0] - 1]", "TZ103",
         "traced_int"),
        ("slice indices must be integers or None or have an __index__ method", "y = names[: x.shape[0]]", "TZ103",
         "traced_int"),
        ("argument of type 'Proxy' is not iterable", "if 'a' in x:", "TZ106", "unsupported_object"),
    ],
)
def test_diagnosis_takes_the_first_symptom_by_precedence(message, line, code, key):
    symptom, spec = diagnose_symptom(message, line)
    assert (spec.code, symptom.key) == (code, key)


def test_an_error_no_symptom_shows_is_the_models_own():
    from patcher.trace.diagnose import MODEL_ERROR, classify

    assert diagnose_symptom("index out of range", "y = x[3]") is None
    assert classify("index out of range", "y = x[3]") is MODEL_ERROR and MODEL_ERROR.rule == ""


def test_location_kinds_map_to_rules():
    assert rule_for_location("TZ105") == rule_for_location("tz105") == "TZ105"
    for spec in RULES.values():
        for symptom in spec.symptoms:
            assert rule_for_location(symptom.key) == (spec.code if symptom.forces_rule else None)
    assert rule_for_location("bool") is None and rule_for_location("model_error") is None


def test_manifest_describes_the_rules_it_names_by_their_summary():
    from patcher.rewrite import patch_source

    assert patch_source("x = 1\n").manifest["rule_descriptions"] == {}
    source = ("import torch\n\ndef f(x: torch.Tensor):\n    if x.sum() > 0:\n        x = x + 1\n    return x\n")
    manifest = patch_source(source).manifest
    assert manifest["rules_applied"], manifest
    assert manifest["rule_descriptions"] == {code: RULES[code].summary for code in sorted(manifest["rules_applied"])}


PROBE = """
import sys
from patcher.cli import main
try:
    main(["patch", "--help"])
except SystemExit:
    pass
print("HEAVY", sorted(m for m in ("torch", "torch.fx", "transformers") if m in sys.modules))
"""


def test_patch_help_lists_every_rule_without_importing_torch():
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env=child_env(), timeout=120)
    assert "HEAVY []" in run.stdout, run.stdout + run.stderr
    for code, spec in RULES.items():
        assert f"{code}  {spec.summary}" in run.stdout


def test_locations_are_decoded_once_into_fields():
    from patcher.registry.locations import UNNAMED, Location

    assert Location.of((15, "control_flow")) == Location(15, None, "control_flow")
    assert Location.of(("15",)) == Location(15, None, UNNAMED)
    assert Location.of(("pkg.Model.get_rope_index", "TZ106")) == Location(None, "get_rope_index", "TZ106")
    located = Location(15, wanted="tz105")
    assert Location.of(located) is located and located.names_a_code and located.rule == "TZ105"
    assert not Location(15, wanted="control_flow").names_a_code and Location(15, wanted="control_flow").rule is None
    assert located.shifted(-3).line == 12 and Location(None, "f").shifted(-3) == Location(None, "f")
