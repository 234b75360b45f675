"""The ``patcher`` command: ``patcher trace`` (and ``patcher patch`` from patcher.rewrite)."""

from __future__ import annotations

import argparse
import sys

from .models import model_id_help

TRACE_EPILOG = """\
{model_ids}
examples:
  patcher trace LlamaForCausalLM Meta-Llama-3-8B
  patcher trace LlamaForCausalLM ./my-llama --targets LlamaDecoderLayer --targets-per-subgraph 2
  patcher trace Qwen2VLForConditionalGeneration ./qwen2-vl/config.json --multimodal \\
      --ignore 're:model\\.visual' get_rope_index

Targets and ignore entries are module class names or 're:' + a regex matching whole
qualified module names. Ignore entries may also name functions or methods to keep as single
opaque calls. Default targets: the zoo recipe's for this model type, else the model's
decoder-layer classes (from _no_split_modules).
--ignore adds to the default list (transformers' mask builders, get_rope_index; see
patcher.DEFAULT_IGNORE, plus the zoo recipe's additions for this model type when its default
targets are used: with --targets inside e.g. a vision tower, the recipe's ignore of that tower
would swallow them); --no-default-ignore drops it.
Exit status: 0 traced, 1 failed to trace, 2 bad arguments.
"""


def add_model_arguments(parser) -> None:
    """MODEL_CLASS MODEL_ID [--multimodal] [--targets] [--ignore] [--no-default-ignore]: shared by commands."""
    parser.add_argument("model_class", metavar="MODEL_CLASS", help="e.g. LlamaForCausalLM, or package.module.Class")
    parser.add_argument("model_id", metavar="MODEL_ID", help="bundled config name, directory, config file or hub id")
    parser.add_argument("--multimodal", action="store_true", help="trace with a multimodal sample (images)")
    parser.add_argument("--targets", nargs="+", metavar="T", help="sequential targets (default: decoder layers)")
    parser.add_argument("--ignore", nargs="+", metavar="I", default=[],
                        help="modules/functions to keep opaque, added to the default list")
    parser.add_argument("--no-default-ignore", action="store_true",
                        help="do not keep transformers' mask builders etc. opaque (patcher.DEFAULT_IGNORE)")
    parser.add_argument("--unused-input", nargs="+", metavar="NAME", default=[], dest="unused_inputs",
                        help="sample inputs the model does not read (eager ignores them too); any other input "
                        "that does not reach the graph's output is an error, never dropped silently")


def prepare_from_arguments(args):
    """The :class:`patcher.attempt.TraceSetup` that ``add_model_arguments``' options ask for."""
    from .attempt import prepare_trace

    return prepare_trace(args.model_id, args.model_class, multimodal_data=args.multimodal,
                         sequential_targets=args.targets, ignore=[] if args.no_default_ignore else None,
                         extra_ignore=args.ignore)


def _add_trace_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "trace",
        help="test whether a model traces and show its partition into subgraphs",
        description="Build MODEL_CLASS from MODEL_ID's config on the meta device, trace it with torch.fx and "
        "split it into one subgraph per sequential target. On failure, show the untraceable construct "
        "(file:line, code, kind) and how to fix it.",
        epilog=TRACE_EPILOG.format(model_ids=model_id_help()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(parser)
    parser.add_argument("--targets-per-subgraph", type=int, default=1, metavar="N",
                        help="put N consecutive targets in each subgraph (default 1)")
    parser.set_defaults(handler=_run_trace)


def _run_trace(args) -> int:
    from .attempt import attempt_trace

    try:
        subgraphs = attempt_trace(
            args.model_id,
            args.model_class,
            multimodal_data=args.multimodal,
            sequential_targets=args.targets,
            ignore=[] if args.no_default_ignore else None,
            extra_ignore=args.ignore,
            targets_per_subgraph=args.targets_per_subgraph,
            unused_inputs=args.unused_inputs,
        )
    except (ValueError, ImportError, OSError) as exc:
        print(f"patcher trace: error: {exc}", file=sys.stderr)
        return 2
    return 0 if subgraphs is not None else 1


REPAIR_EPILOG = """\
Trace-guided repair: patch MODEL_CLASS's modeling file, trace it with a sample built from
MODEL_ID's config (meta device), map each failure back to the original source line, rewrite that
statement, and repeat until the model traces or no rule fits. Then report every remaining
blocker with file:line, code, kind and the GUIDE.md section. With -o, write the repaired module
and its manifest to DIR (never overwriting a file the patcher did not generate).

examples:
  patcher repair Qwen2VLForConditionalGeneration Qwen2-VL-2B-Instruct --multimodal -o traceable/
  patcher repair MyModelForCausalLM ./checkpoint --targets MyDecoderLayer

Exit status: 0 the model traces, 1 blockers remain, 2 bad arguments.
"""


def _add_repair_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "repair",
        help="patch a model's modeling file, guided by tracing, until it traces",
        description="Rewrite what tracing finds untraceable, round after round.",
        epilog=REPAIR_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(parser)
    parser.add_argument("-o", "--output", metavar="DIR", help="write the repaired module and manifest here")
    parser.set_defaults(handler=_run_repair)


def _run_repair(args) -> int:
    from .traceable import repair

    try:
        setup = prepare_from_arguments(args)
    except (ValueError, ImportError, OSError) as exc:
        print(f"patcher repair: error: {exc}", file=sys.stderr)
        return 2
    cls, targets = setup.model_class, setup.targets
    result = repair(cls, setup.config, setup.sample, targets, setup.ignore)
    print(result.report())
    if args.output and result.model_class is not None:
        from .rewrite import patch_file

        written = patch_file(cls.__module__, args.output, targets=[t for t in targets if not t.startswith("re:")],
                             locations=result.locations)
        print(f"wrote {written.output_path} ({len(written.rewrites)} rewrites) and its manifest")
    return 0 if result.traced else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="patcher",
        description="Make transformers models traceable with torch.fx and split them into per-layer subgraphs "
        "for sequential compression (GPTQ, SparseGPT, AWQ).",
        epilog="Run 'patcher COMMAND --help' for a command's options and examples. Guide: GUIDE.md",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_trace_parser(subparsers)
    from .render.cli import add_graph_parser

    add_graph_parser(subparsers)
    _add_repair_parser(subparsers)
    from .plan.cli import add_plan_parser

    add_plan_parser(subparsers)
    try:
        from .rewrite.cli import add_patch_parser
    except ImportError:
        pass
    else:
        add_patch_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
