"""``python -m zoo.check [--fix] [ENTRY ...]``: are the committed zoo files fresh?

Regenerates each entry in memory from its recipe with the installed transformers and patcher,
prints a unified diff for every file that differs from the committed one (README.md's zoo list
included), and exits 1 if any does. ``--fix`` writes the regenerated files instead (atomically).
The comparison is ``patcher.rewrite.files.stale_files``, the one behind ``patcher patch --check``.

When the installed transformers is not the one the committed files were generated for, it says so
first, once: both versions, and where importing the zoo puts its regenerated modules.

``--regenerates`` is the check for any transformers of CI's matrix, where the committed files are
stale by design: each entry is generated from its recipe for the installed transformers and
imported with every export, as ``import zoo`` does there; it prints per entry the committed
rewrites that no longer apply, and exits 1 only when an entry cannot be regenerated or imported.
That the regenerated zoo computes what eager computes is ``tests/zoo``'s to show, in the same
environment.
"""

from __future__ import annotations

import argparse
import sys

from ._entries import ENTRIES
from ._generate import generate, shared_files


def stale_files(entries) -> list:
    """``patcher.rewrite.files.StaleFile`` for every committed file of ``entries`` that is not fresh, and
    for the files every entry is listed in (README.md's zoo list)."""
    from patcher.rewrite.files import stale_files as stale

    return [file for entry in entries for file in stale(generate(entry).paths())] + stale(shared_files())


def version_note(entries) -> str | None:
    """A line when the installed transformers differs from the committed files' version."""
    from ._loader import committed_manifest, installed_transformers_version, regeneration_dir

    def committed_version(entry: str) -> str | None:
        try:
            return committed_manifest(entry)["transformers_version"]
        except FileNotFoundError:  # a new entry: nothing generated yet, which is what --fix is for
            return None

    installed = installed_transformers_version()
    committed = {entry: committed_version(entry) for entry in entries}
    moved = {entry: version for entry, version in committed.items() if version not in (None, installed)}
    if not moved:
        return None
    committed = ", ".join(sorted(set(moved.values())))
    cache = regeneration_dir("<entry>", installed)
    return (f"zoo: {', '.join(moved)} committed for transformers {committed}, but {installed} is installed: "
            f"importing an entry regenerates it into {cache} (with one warning); "
            f"`bash scripts/check_zoo --fix` regenerates the committed files for {installed}.")


def regenerates(entries) -> int:
    """``--regenerates``: 0 when every entry regenerates and imports, else 1."""
    from ._loader import ZooRegenerationError, committed_manifest, installed_transformers_version, regenerate

    installed, failed = installed_transformers_version(), []
    for entry in entries:
        manifest = committed_manifest(entry)
        try:
            module, vanished = regenerate(entry, manifest)
        except ZooRegenerationError as error:
            failed.append(entry)
            print(f"{entry}: FAILED\n{error}", file=sys.stderr)
            continue
        print(f"{entry}: regenerated for transformers {installed} (committed for "
              f"{manifest['transformers_version']}) into {module.__file__}")
        for line in vanished:
            print(f"  committed rewrite no longer applies: {line}")
    if failed:
        print(f"\n{len(failed)} of {len(entries)} zoo entries cannot be regenerated for transformers {installed}: "
              f"{', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"zoo regenerates for transformers {installed} ({len(entries)} entries)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/check_zoo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("entries", nargs="*", metavar="ENTRY",
                        help=f"entries to check (default: all of {', '.join(ENTRIES)})")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--fix", action="store_true", help="write the regenerated files")
    mode.add_argument("--regenerates", action="store_true",
                      help="for another transformers than the committed files': regenerate and import each "
                           "entry, list the committed rewrites that no longer apply; exit 1 only when one fails")
    args = parser.parse_args(argv)
    unknown = [entry for entry in args.entries if entry not in ENTRIES]
    if unknown:
        parser.error(f"unknown entries {unknown}; known: {', '.join(ENTRIES)}")
    entries = args.entries or list(ENTRIES)
    if args.regenerates:
        return regenerates(entries)
    note = version_note(entries)
    if note:
        print(note, file=sys.stderr)
    stale = stale_files(entries)
    if not stale:
        print(f"zoo is fresh ({len(entries)} entries)")
        return 0
    from patcher.rewrite.files import write_atomic

    for file in stale:
        if args.fix:
            write_atomic(file.path, file.generated)
            print(f"wrote {file.path}")
        else:
            sys.stdout.write(file.diff())
    if args.fix:
        return 0
    print(f"\n{len(stale)} zoo file(s) are stale: run `bash scripts/check_zoo --fix` and commit them.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
