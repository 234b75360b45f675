"""``patcher patch``: the command-line face of patch_file.

Wire into the main parser with ``add_patch_parser(subparsers)``; the parsed arguments carry
``handler`` (returns the exit status).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from ..registry.rules import RULES
from .errors import PatchError
from .file_header import split_header
from ..registry.ignore import FORWARDED_BY_REWRITER

EPILOG = """\
rules:
{rules}

examples:
  # patch an installed transformers model into ./patched (writes modeling_llava.py and
  # modeling_llava.manifest.json; the manifest lists every rewrite with its line and reason)
  patcher patch transformers.models.llava.modeling_llava -o patched

  # see what would change, as a unified diff against the original
  patcher patch transformers.models.qwen2_vl.modeling_qwen2_vl -o patched --diff

  # never hide the decoder layers inside wrapped code (refusals are listed as blockers)
  patcher patch transformers.models.mllama.modeling_mllama -o patched \\
      --targets MllamaSelfAttentionDecoderLayer MllamaCrossAttentionDecoderLayer

  # keep extra functions/methods as single opaque calls (added to: {ignore})
  patcher patch path/to/modeling_custom.py -o patched --ignore build_mask get_positions

  # CI: fail (exit 1, diff printed) when a committed patched file is stale (the same check as
  # scripts/check_zoo: the options must be the recipe's, see the manifest's patch_targets)
  patcher patch transformers.models.gemma3.modeling_gemma3 -o zoo/gemma3 --targets Gemma3DecoderLayer --check

exit status: 0 ok, 1 --check found a stale file, 2 bad input (nothing written).
An existing output file is only overwritten when it carries the generated header and is
unchanged since it was written (its hash is the one its manifest records), or with --force.
"""


def add_patch_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``patch`` to an argparse subparsers object; returns the new parser."""
    rules = "\n".join(f"  {code}  {spec.summary}" for code, spec in RULES.items())
    parser = subparsers.add_parser(
        "patch",
        help="rewrite a modeling file so that torch.fx can trace it",
        description="Rewrite a transformers modeling file (or any model source file) into a variant that "
        "torch.fx can trace: data-dependent code moves into @torch.fx.wrap functions, shape code becomes "
        "shape-generic. Only what must change changes; every rewrite is marked '# TRACING(<rule>): why'.",
        epilog=EPILOG.format(rules=rules, ignore=", ".join(FORWARDED_BY_REWRITER)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("module", metavar="MODULE_OR_PATH",
                        help="module name (transformers.models.llava.modeling_llava) or path to a .py file")
    parser.add_argument("-o", "--output-dir", required=True, metavar="DIR",
                        help="where <stem>.py and <stem>.manifest.json go")
    parser.add_argument("--targets", nargs="+", default=[], metavar="CLASS",
                        help="sequential target module classes: code that calls them is never wrapped")
    parser.add_argument("--ignore", nargs="+", default=[], metavar="NAME",
                        help="extra functions/methods to call as one opaque (wrapped) call")
    parser.add_argument("--diff", action="store_true", help="print a unified diff against the original")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and print the diff if the file on disk is not what would be generated")
    parser.add_argument("--force", action="store_true",
                        help="overwrite an output file that the patcher did not generate, or that was edited after "
                        "it wrote it")
    parser.set_defaults(handler=run_patch)
    return parser


def _unknown_names(module: str, targets, ignore) -> str | None:
    """A message when a --targets class or --ignore name does not occur in the source at all."""
    import re

    from .api import _locate, read_source

    path, _ = _locate(module)
    source = read_source(path)
    words = set(re.findall(r"\w+", source))
    classes = sorted(set(re.findall(r"^\s*class\s+(\w+)", source, re.M)))
    for target in targets:
        if target not in classes:
            close = difflib.get_close_matches(target, classes, n=1)
            return (f"{path}: --targets {target}: no class {target!r} is defined in this file"
                    + (f"; did you mean {close[0]!r}?" if close else "")
                    + (f" (classes here: {', '.join(classes[:12])}{' ...' if len(classes) > 12 else ''})"))
    for name in ignore:
        last = name.rsplit(".", 1)[-1]
        if last not in words:
            close = difflib.get_close_matches(last, sorted(words), n=1)
            return (f"{path}: --ignore {name}: {last!r} does not occur in this file, so it would ignore nothing"
                    + (f"; did you mean {close[0]!r}?" if close else ""))
    return None


def run_patch(args: argparse.Namespace) -> int:
    from .api import patch_file  # here, not at the top: `patcher patch --help` needs no rewriter

    try:
        problem = _unknown_names(args.module, args.targets, args.ignore)
        if problem:
            print(f"patcher patch: error: {problem}", file=sys.stderr)
            return 2
        result = patch_file(args.module, args.output_dir, targets=args.targets, ignore=args.ignore,
                            force=args.force, check=args.check)
    except PatchError as exc:
        print(f"patcher patch: error: {exc}", file=sys.stderr)
        return 2
    out = result.output_path
    if args.check:
        if result.manifest.get("up_to_date"):
            print(f"{out}: up to date")
            return 0
        for stale in result.stale:
            print(stale.diff(), end="")
        names = ", ".join(str(stale.path) for stale in result.stale)
        command = split_header(result.source)[0].get("regenerate with") or \
            f"patcher patch {args.module} -o {args.output_dir}"
        print(f"{names}: stale (or missing); regenerate with: {command}", file=sys.stderr)
        return 1
    if args.diff:
        print(result.diff(fromfile=f"{args.module} (original)", tofile=str(out)), end="")
    counts: dict[str, int] = {}
    for r in result.rewrites:
        counts[r.code] = counts.get(r.code, 0) + 1
    summary = ", ".join(f"{c} x{n}" for c, n in sorted(counts.items())) or "no rewrites"
    print(f"wrote {out} ({summary}); manifest {Path(out).with_name(Path(out).stem + '.manifest.json')}",
          file=sys.stderr)
    for b in result.blockers:
        print(f"  not rewritten: {b}", file=sys.stderr)
    return 0
