#!/usr/bin/env python
"""Rewrite GUIDE.md's rule table from the rules' specs (the SPEC of
each module in patcher/rewrite/rules/, read by patcher/registry/rules.py).

The table sits between two markers in GUIDE.md; everything else in the file is left as is.
Run it after adding or changing a rule spec; ``tests/registry/test_registry.py`` fails while it is stale.

    .venv/bin/python scripts/regen_guide_rules.py            # rewrite the table if it changed
    .venv/bin/python scripts/regen_guide_rules.py --check    # only print the diff; exit 1 if any
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from patcher.registry.guide_table import with_rule_table  # noqa: E402

GUIDE = ROOT / "GUIDE.md"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the table would change")
    args = parser.parse_args(argv)
    old = GUIDE.read_text(encoding="utf-8")
    new = with_rule_table(old)
    if new == old:
        print("GUIDE.md's rule table is fresh", file=sys.stderr)
        return 0
    sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "GUIDE.md",
                                               "GUIDE.md (generated)"))
    if args.check:
        print("GUIDE.md's rule table would change", file=sys.stderr)
        return 1
    GUIDE.write_text(new, encoding="utf-8")
    print("GUIDE.md's rule table rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
