#!/usr/bin/env python
"""Coverage sweep: every generative transformers architecture, built tiny, traced, proven equal.

For each ``*ForCausalLM`` / ``*ForConditionalGeneration`` class of the installed transformers:
shrink its default config, build a tiny random model, find its decoder-layer classes, patch the
modeling file (``load_traceable``), trace and split it (``trace_subgraphs``), run the chain and
compare it with the eager original on the traced sample and on a sample of another batch size and
length. Vision-language models are traced with images too (``patcher.samples.images``, or the zoo's
builder): two image layouts (another image size or count), and the eager logits must change when
only the pixels change (image influence), or the row fails. No hand-written hints per model.

    .venv/bin/python scripts/coverage.py                      # everything, bench-out/coverage.{md,json}
    .venv/bin/python scripts/coverage.py --only '*Qwen*' --jobs 2 --timeout 90
    .venv/bin/python scripts/coverage.py --sample 20 --list   # the fixed 20-architecture selection

Classes whose packages do not install beside this environment's (timm's VLMs need torchvision), or
that do not build on its transformers (Gemma 4's assistants need 5.24), are swept in an environment
that has them, and merged: a row that did not build here is replaced by that environment's row where
it built there, marked with that environment in the report:

    ~/.cache/tracezoo/envs/floor/bin/python scripts/coverage.py --only FastVlm,Gemma3n,PerceptionLM --out bench-out/floor
    ~/.cache/tracezoo/envs/newest/bin/python scripts/coverage.py --only Gemma4Assistant,Gemma4UnifiedAssistant \
        --out bench-out/newest
    .venv/bin/python scripts/coverage.py --rows-from bench-out/floor/coverage.json \
        --rows-from bench-out/newest/coverage.json

The logic lives in ``patcher.coverage``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patcher.coverage.discover import architectures  # noqa: E402
from patcher.coverage.elsewhere import load_rows, merge_rows  # noqa: E402
from patcher.coverage.report import image_text_to_text_line, summary, top_blockers, write_reports  # noqa: E402
from patcher.coverage.runner import progress_callback, run_architectures  # noqa: E402
from patcher.verify.compare import sweep_tolerance  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench-out", help="directory for coverage.md and coverage.json")
    parser.add_argument("--only", help="glob (*Llama*), regex (re:...) or comma-separated substrings")
    parser.add_argument("--sample", type=int, help="a fixed, seeded selection of N architectures")
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample and of the weights")
    parser.add_argument("--list", action="store_true", help="print the selected architectures and exit")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per architecture")
    parser.add_argument("--atol", type=float, default=sweep_tolerance().atol,
                        help="largest |diff| that counts as equal (default: patcher.verify.TOLERANCES)")
    parser.add_argument("--no-multimodal", action="store_true", help="text samples only (no image samples)")
    parser.add_argument("--rows-from", action="append", default=[], metavar="COVERAGE_JSON",
                        help="a coverage.json of another environment's sweep: its built rows replace the rows "
                             "that did not build here, marked with that environment (repeatable)")
    parser.add_argument("--start-method", default="forkserver", choices=["forkserver", "spawn"])
    args = parser.parse_args(argv)

    names = architectures(args.only, args.sample, args.seed)
    if args.list:
        print("\n".join(names))
        return 0
    if not names:
        parser.error("no architecture matches")
    progress = progress_callback(len(names))
    start = time.perf_counter()
    options = {"multimodal": not args.no_multimodal, "atol": args.atol, "seed": args.seed}
    rows = run_architectures(names, jobs=args.jobs, timeout=args.timeout, options=options,
                             start_method=args.start_method, on_row=progress)
    progress.close()
    for path in args.rows_from:
        rows = merge_rows(rows, *load_rows(path))
    elapsed = time.perf_counter() - start
    md_path, json_path = write_reports(rows, args.out, elapsed, meta={"args": vars(args)})
    print(f"wrote {md_path} and {json_path} ({elapsed:.0f} s)")
    for title, built in (("blockers of architectures that build", True), ("build failures", False)):
        print(f"most common {title}:")
        for key, number, examples in top_blockers(rows, built=built):
            print(f"  {number:3d}  {key}   e.g. {examples[0]}")
    print(summary(rows))
    print(image_text_to_text_line(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
