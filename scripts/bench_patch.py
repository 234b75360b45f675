#!/usr/bin/env python
"""Patch every modeling file of the installed transformers; report time and crashes.

For each ``transformers/models/*/modeling_*.py``: the CPU time of ``patch_source`` (best of
``--repeat``), the time of libcst's own ``parse_module`` + ``.code`` on the same file, their
ratio, the number of rewrites and blockers, and any exception (a crash: the goal is none).
Nothing is written unless ``--json PATH`` asks for the per-file table.

    .venv/bin/python scripts/bench_patch.py                 # all files, summary table
    .venv/bin/python scripts/bench_patch.py --limit 20 -v   # first 20, one line per file
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patcher.rewrite import PatchError, patch_source  # noqa: E402


def modeling_files() -> list[Path]:
    import transformers

    root = Path(transformers.__file__).parent / "models"
    return sorted(root.glob("*/modeling_*.py"))


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()  # CPU time: stable when other jobs share the machine
        fn()
        times.append(time.process_time() - start)
    return min(times)


def bench_file(path: Path, repeat: int) -> dict:
    source = path.read_text(encoding="utf-8")
    module = f"transformers.models.{path.parent.name}.{path.stem}"
    row = {"file": f"{path.parent.name}/{path.name}", "lines": source.count("\n")}
    row["libcst_s"] = best_of(repeat, lambda: cst.parse_module(source).code)
    try:
        result = None

        def run():
            nonlocal result
            result = patch_source(source, module_name=module, source_path=str(path))

        row["patch_s"] = best_of(repeat, run)
        row["rewrites"] = len(result.rewrites)
        row["blockers"] = len(result.blockers)
        row["rules"] = dict(Counter(r.code for r in result.rewrites))
        compile(result.code, str(path), "exec")
        if patch_source(result.code, module_name=module).code != result.code:
            row["error"] = "not idempotent"
    except PatchError as exc:
        row["error"] = f"PatchError: {exc}"
    except Exception as exc:  # a crash: recorded, reported, and the run goes on
        row["error"] = f"{type(exc).__name__}: {exc}"
        row["traceback"] = traceback.format_exc()
    if "patch_s" in row:
        row["ratio"] = row["patch_s"] / row["libcst_s"] if row["libcst_s"] else float("nan")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=0, help="only the first N files")
    parser.add_argument("--repeat", type=int, default=1, help="best of N timings per file")
    parser.add_argument("--json", type=Path, help="write the per-file rows here")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per file")
    args = parser.parse_args(argv)

    files = modeling_files()[: args.limit or None]
    rows = []
    start = time.perf_counter()
    for path in files:
        row = bench_file(path, args.repeat)
        rows.append(row)
        if args.verbose or "error" in row:
            status = row.get("error", f"{row['rewrites']} rewrites, {row['blockers']} blockers")
            print(f"{row['file']:<60} {row.get('patch_s', 0) * 1000:8.1f} ms  x{row.get('ratio', 0):5.2f}  {status}")
    wall = time.perf_counter() - start

    ok = [r for r in rows if "error" not in r]
    crashed = [r for r in rows if "error" in r]
    ratios = [r["ratio"] for r in ok]
    patch_ms = [r["patch_s"] * 1000 for r in ok]
    rules = Counter()
    for r in ok:
        rules.update(r["rules"])
    changed = sum(1 for r in ok if r["rewrites"])

    print()
    print(f"files                    {len(rows)}")
    print(f"patched without error    {len(ok)}  (with rewrites: {changed})")
    print(f"crashed / not idempotent {len(crashed)}")
    if ok:
        slowest = max(ok, key=lambda r: r["patch_s"])
        print(f"patch time per file      median {statistics.median(patch_ms):.1f} ms, "
              f"p90 {sorted(patch_ms)[int(0.9 * (len(patch_ms) - 1))]:.1f} ms, max {max(patch_ms):.1f} ms "
              f"({slowest['file']}, {slowest['lines']} lines)")
        print(f"ratio to libcst parse+codegen  median x{statistics.median(ratios):.2f}, "
              f"p90 x{sorted(ratios)[int(0.9 * (len(ratios) - 1))]:.2f}, max x{max(ratios):.2f}")
        print(f"total patch time         {sum(patch_ms) / 1000:.1f} s "
              f"(libcst alone {sum(r['libcst_s'] for r in ok):.1f} s); wall {wall:.1f} s")
        print(f"rewrites                 {sum(r['rewrites'] for r in ok)} "
              f"({', '.join(f'{k} {v}' for k, v in sorted(rules.items()))}); "
              f"blockers {sum(r['blockers'] for r in ok)}")
    for r in crashed:
        print(f"CRASH {r['file']}: {r['error']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
