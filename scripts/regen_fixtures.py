#!/usr/bin/env python
"""Rewrite the rewriter's golden fixtures after a deliberate rule change, showing what changed.

Every ``tests/rewrite/fixtures/<rule>/<case>.in.py`` is patched; its ``<case>.out.py`` is
rewritten when it differs (a unified diff is printed for review). The test suite never writes
fixtures, so it can always fail on a changed output.

    .venv/bin/python scripts/regen_fixtures.py            # rewrite what changed
    .venv/bin/python scripts/regen_fixtures.py --check    # only print the diffs; exit 1 if any
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from patcher.rewrite import patch_source  # noqa: E402
from patcher.rewrite.file_header import split_header  # noqa: E402
from rewrite._fixture_runtime import patch_options  # noqa: E402

FIXTURES = ROOT / "tests" / "rewrite" / "fixtures"


def expected_output(case: Path) -> str:
    source = case.read_text()
    result = patch_source(source, module_name=f"fixtures.{case.parent.name}.{case.name[:-6]}",
                          source_path=str(case), **patch_options(source))
    return split_header(result.code)[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a fixture would change")
    args = parser.parse_args(argv)
    changed = 0
    for case in sorted(FIXTURES.glob("*/*.in.py")):
        out = case.with_name(case.name.replace(".in.py", ".out.py"))
        new = expected_output(case)
        old = out.read_text() if out.exists() else ""
        if new == old:
            continue
        changed += 1
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                   str(out.relative_to(ROOT)), f"{out.name} (generated)"))
        if not args.check:
            out.write_text(new)
    print(f"{changed} fixture(s) {'would change' if args.check else 'rewritten'}", file=sys.stderr)
    return 1 if (changed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
