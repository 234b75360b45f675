"""Golden fixtures: every ``fixtures/<rule_module>/<case>.in.py`` patches to ``<case>.out.py``.

The comparison is exact, on the code after the generated header (the header names versions,
which change independently of the rules; it is tested in test_api.py). Fixtures with ``ENTRY``
and ``inputs()`` also run: see _fixture_runtime.py for the convention.

To (re)generate an ``.out.py`` after a deliberate rule change run
``python scripts/regen_fixtures.py`` and review the diffs it prints; this test never writes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings

from rewrite._fixture_runtime import assert_same, build, call, load, patch_options, trace
from patcher.rewrite import patch_source
from patcher.rewrite.file_header import split_header
from patcher.rewrite.rules import ALL_RULES

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted(FIXTURES.glob("*/*.in.py"))
RULE_MODULES = {rule.__name__.rsplit(".", 1)[-1] for rule in ALL_RULES}


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name[:-len('.in.py')]}"


def _patch(case: Path):
    source = case.read_text()
    return patch_source(source, module_name=f"fixtures.{case.parent.name}.{case.name[:-6]}",
                        source_path=str(case), **patch_options(source))


def test_every_rule_has_fixtures():
    assert RULE_MODULES <= {c.parent.name for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_fixture_output(case):
    result = _patch(case)
    _, body = split_header(result.code)
    expected_path = case.with_name(case.name.replace(".in.py", ".out.py"))
    assert body == expected_path.read_text(), "stale fixture: run scripts/regen_fixtures.py and review the diff"
    # The patched fixture is a fixed point (same options; locations were lines of the input), and compiles.
    options = {k: v for k, v in patch_options(case.read_text()).items() if k != "locations"}
    assert patch_source(result.code, **options).code == result.code
    compile(result.code, str(expected_path), "exec")


RUNNABLE = [c for c in CASES if "ENTRY =" in c.read_text()]


@pytest.mark.parametrize("case", RUNNABLE, ids=_id)
def test_fixture_behaviour(case, tmp_path):
    original = load(case.read_text(), tmp_path / "original.py", f"tz_fixture_orig_{case.parent.name}_{case.stem[:-3]}")
    patched = load(_patch(case).code, tmp_path / "patched.py", f"tz_fixture_patched_{case.parent.name}_{case.stem[:-3]}")
    want, have = build(original), build(patched)
    traced = {}

    @settings(deadline=None)
    @given(args=original.inputs())
    def run(args):
        expected = call(want, args)
        got = call(have, args)
        assert_same(expected, got)
        if getattr(patched, "TRACE", False):
            key = tuple(a is None for a in args)
            if key not in traced:
                traced[key] = trace(have, args)
            assert_same(expected, call(traced[key], args))

    run()
