"""``python -m zoo.check [--fix] [ENTRY ...]``: are the committed zoo files fresh?

Regenerates each entry in memory from its recipe with the installed transformers and patcher,
prints a unified diff for every file that differs from the committed one, and exits 1 if any
does. ``--fix`` writes the regenerated files instead (atomically).
"""

from __future__ import annotations

import argparse
import difflib
import sys

from ._entries import ENTRIES
from ._generate import generate


def stale_files(entries) -> list[tuple]:
    stale = []
    for entry in entries:
        for path, text in generate(entry).paths().items():
            current = path.read_text(encoding="utf-8") if path.is_file() else None
            if current != text:
                stale.append((path, current, text))
    return stale


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/check_zoo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("entries", nargs="*", metavar="ENTRY",
                        help=f"entries to check (default: all of {', '.join(ENTRIES)})")
    parser.add_argument("--fix", action="store_true", help="write the regenerated files")
    args = parser.parse_args(argv)
    unknown = [entry for entry in args.entries if entry not in ENTRIES]
    if unknown:
        parser.error(f"unknown entries {unknown}; known: {', '.join(ENTRIES)}")
    stale = stale_files(args.entries or list(ENTRIES))
    if not stale:
        print(f"zoo is fresh ({len(args.entries or ENTRIES)} entries)")
        return 0
    from patcher.files import write_atomic

    for path, current, text in stale:
        if args.fix:
            write_atomic(path, text)
            print(f"wrote {path}")
        else:
            old = (current or "").splitlines(keepends=True)
            sys.stdout.writelines(difflib.unified_diff(old, text.splitlines(keepends=True),
                                                       fromfile=f"{path} (committed)", tofile=f"{path} (generated)"))
    if args.fix:
        return 0
    print(f"\n{len(stale)} zoo file(s) are stale: run `bash scripts/check_zoo --fix` and commit them.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
