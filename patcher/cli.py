"""The ``patcher`` command: ``patcher trace`` (and ``patcher patch`` from patcher.rewrite)."""

from __future__ import annotations

import argparse
import atexit
import os
import sys

from .models.arguments import add_model_arguments, prepare_from_arguments
from .models import check_model_id, model_id_help

TRACE_EPILOG = """\
{model_ids}
examples:
  patcher trace LlamaForCausalLM Meta-Llama-3-8B
  patcher trace LlamaForCausalLM ./my-llama --targets LlamaDecoderLayer --targets-per-subgraph 2
  patcher patch transformers.models.llama.modeling_llama -o patched
  patcher trace patched/modeling_llama.py:LlamaForCausalLM Meta-Llama-3-8B   # or patched:LlamaForCausalLM
  patcher trace Qwen2VLForConditionalGeneration ./qwen2-vl/config.json --multimodal \\
      --ignore 're:model\\.visual' get_rope_index
  patcher trace TraceableQwen2VLForConditionalGeneration Qwen2-VL-2B-Instruct --multimodal --vision-blocks
      # one subgraph per vision block (Qwen2VLVisionBlock, found like the decoder layers), then per text layer
  patcher trace TraceableQwen2VLForConditionalGeneration Qwen2-VL-2B-Instruct --modality video
      # a video per row (--modality NAME: any patcher/samples/NAME/modality.py; --multimodal: images)

Targets and ignore entries are module class names or 're:' + a regex matching whole
qualified module names. Ignore entries may also name functions or methods to keep as single
opaque calls. Default targets: the zoo recipe's for this model type, else the model's
decoder-layer classes (from _no_split_modules). --vision-blocks (--audio-blocks) puts the
blocks of the vision (audio) tower before them: one subgraph per tower block, for towers too big
to hold whole or to calibrate the tower itself (patcher.find_tower_blocks finds the class).
--ignore adds to the default list (transformers' mask builders, get_rope_index; see
patcher.DEFAULT_IGNORE, plus the zoo recipe's additions for this model type when its default
targets are used: with --targets inside e.g. a vision tower, the recipe's ignore of that tower
would swallow them); --no-default-ignore drops it.
Exit status: 0 traced, 1 failed to trace, 2 bad arguments or input (message, no traceback), 130 interrupted.
"""


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
    _check_targets_per_subgraph(args)
    check_model_id(args.model_id)  # before torch and the model's module are imported (seconds)
    from .models.attempt import attempt_trace

    try:
        subgraphs = attempt_trace(
            args.model_class,
            args.model_id,
            multimodal_data=args.multimodal,
            sequential_targets=args.targets,
            ignore=[] if args.no_default_ignore else None,
            extra_ignore=args.ignore,
            targets_per_subgraph=args.targets_per_subgraph,
            unused_inputs=args.unused_inputs,
            towers=args.towers,
            modality=args.modality,
        )
    except (ValueError, ImportError, OSError) as exc:
        print(f"patcher trace: error: {exc}", file=sys.stderr)
        return 2
    return 0 if subgraphs is not None else 1


def _check_targets_per_subgraph(args) -> None:
    if getattr(args, "targets_per_subgraph", 1) < 1:
        raise UsageError(f"--targets-per-subgraph must be >= 1, not {args.targets_per_subgraph}")


class UsageError(ValueError):
    """A bad combination of arguments: exit 2 with the message."""


REPAIR_EPILOG = """\
Trace-guided repair: patch MODEL_CLASS's modeling file, trace it with a sample built from
MODEL_ID's config (meta device), map each failure back to the original source line, rewrite that
statement, and repeat until the model traces or no rule fits. Then report every remaining
blocker with file:line, code, kind and the GUIDE.md section. With -o, write the repaired module
and its manifest to DIR (never overwriting a file the patcher did not generate, or one edited
after it wrote it, unless --force).

examples:
  patcher repair Qwen2VLForConditionalGeneration Qwen2-VL-2B-Instruct --multimodal -o traceable/
  patcher repair MyModelForCausalLM ./checkpoint --targets MyDecoderLayer

With -o, the written file is then imported on its own and traced: the verdict is what that file
does (in memory, AutoModel.from_config sub-models are patched too; in the written file they are
transformers' originals).

Exit status: 0 the model (with -o: the written file) traces, 1 blockers remain, 2 bad arguments or
input, 130 interrupted.
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
    parser.add_argument("--force", action="store_true",
                        help="with -o: overwrite an output file that the patcher did not generate, "
                        "or that was edited after it wrote it")
    parser.set_defaults(handler=_run_repair)


def _run_repair(args) -> int:
    try:
        setup = prepare_from_arguments(args)
    except (ValueError, ImportError, OSError) as exc:
        print(f"patcher repair: error: {exc}", file=sys.stderr)
        return 2
    from .models.traceable import repair

    cls, targets = setup.model_class, setup.targets
    result = repair(cls, setup.config, setup.sample, targets, setup.ignore, unused_inputs=args.unused_inputs)
    writes = bool(args.output and result.model_class is not None)
    # With -o the verdict is about the written file, checked by tracing it (below).
    print(result.report(verdict=not writes))
    if not writes:
        return 0 if result.traced else 1
    from .rewrite import patch_file
    from .rewrite.errors import PatchError
    from .trace.matching import class_name_entries

    try:
        written = patch_file(cls.__module__, args.output, targets=class_name_entries(targets),
                             locations=result.locations, force=args.force)
    except PatchError as exc:
        print(f"patcher repair: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {written.output_path} ({len(written.rewrites)} rewrites) and its manifest")
    if not result.traced:
        return 1
    from .models.written_check import trace_written_file

    check = trace_written_file(written.output_path, cls.__name__, setup.config, setup.sample, targets, setup.ignore,
                               args.unused_inputs)
    print(check.report())
    return 0 if check.traced else 1


#: command -> its one-line help (shown by ``patcher --help`` without building the command's parser,
#: which would import torch, transformers and libcst: seconds)
COMMAND_HELP = {
    "trace": "test whether a model traces and show its partition into subgraphs",
    "graph": "draw the traced graph with its partition into subgraphs (svg, png, pdf or dot)",
    "repair": "patch a model's modeling file, guided by tracing, until it traces",
    "patch": "rewrite a modeling file so that torch.fx can trace it",
    "plan": "per-subgraph GPU and CPU memory of a sequential calibration run, before it starts",
}


def _add_graph(subparsers) -> None:
    from .render.cli import add_graph_parser

    add_graph_parser(subparsers)


def _add_patch(subparsers) -> None:
    from .rewrite.cli import add_patch_parser

    add_patch_parser(subparsers)


def _add_plan(subparsers) -> None:
    from .plan.cli import add_plan_parser

    add_plan_parser(subparsers)


_BUILDERS = {"trace": _add_trace_parser, "graph": _add_graph, "repair": _add_repair_parser, "patch": _add_patch,
             "plan": _add_plan}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``patcher`` parser. ``only``: build just that command's parser in full (the others are
    listed with their help line only); None builds all."""
    parser = argparse.ArgumentParser(
        prog="patcher",
        description="Make transformers models traceable with torch.fx and split them into per-layer subgraphs "
        "for sequential compression (GPTQ, SparseGPT, AWQ).",
        epilog="Run 'patcher COMMAND --help' for a command's options and examples. Guide: GUIDE.md\n"
        "Exit status: 0 ok, 1 failed to trace (patch --check: stale), 2 bad input or arguments, 130 interrupted.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"patcher {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, builder in _BUILDERS.items():
        if only is None or only == name:
            builder(subparsers)
        else:
            subparsers.add_parser(name, help=COMMAND_HELP[name])
    return parser


def _command_in(argv: list[str]) -> str:
    """The command named in ``argv`` ('' when none: then no command parser needs building)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in _BUILDERS else ""
    return ""


def _user_errors() -> tuple[type, ...]:
    """Exceptions that report a mistake in the input, not a bug: a message and exit 2, no traceback."""
    from .models import UserInputError

    errors: list[type] = [UserInputError, UsageError]
    for module, name in (("patcher.rewrite.errors", "PatchError"), ("patcher.trace.errors", "TraceArgumentError"),
                         ("patcher.trace.errors", "SampleInputError")):
        loaded = sys.modules.get(module)  # only what the command imported can have been raised
        if loaded is not None:
            errors.append(getattr(loaded, name))
    return tuple(errors)


def main(argv: list[str] | None = None) -> int:
    command = "patcher"
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        parser = build_parser(only=_command_in(argv))
        args = parser.parse_args(argv)
        if getattr(args, "handler", None) is None:
            parser.print_help()
            return 2
        command = f"patcher {args.command}"
        if getattr(args, "modality", None) is not None:  # a declared name: its declaration from here on
            from .samples.modalities import named

            args.modality = named(args.modality)
        return args.handler(args)
    except KeyboardInterrupt:
        print(f"\n{command}: interrupted; no output file was left half-written (run the command again)",
              file=sys.stderr)
        return 130
    except RecursionError:
        print(f"{command}: error: the input is too deeply nested (or an expression too long) for the patcher; "
              "split the expression or function", file=sys.stderr)
        return 2
    except Exception as exc:
        if isinstance(exc, _user_errors()):
            print(f"{command}: error: {exc}", file=sys.stderr)
            return 2
        raise


def console_main() -> None:
    """The ``patcher`` executable (and ``python -m patcher``): ``main()``, then a quick exit.

    Once torch and transformers are imported, the interpreter's own teardown (clearing thousands
    of modules and torch's operator registry) takes about 1.5 s on 2 cores, a third of a whole
    ``patcher plan``, and does nothing a finished command needs. So after ``main`` returns, the
    output is flushed and the exit handlers run (logging, temporary directories, ``atexit``
    registrations), and the process ends without the teardown. Every file the commands write is
    closed before ``main`` returns (``patcher.rewrite.files`` writes atomically). A bug's traceback still
    takes the normal path. Call ``main`` instead to use the command line from Python.
    """
    code = main()
    if code is not None and not isinstance(code, int):
        sys.exit(code)  # not a status: the normal exit prints it
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`patcher plan ... | head`): nothing to lose
            pass
    atexit._run_exitfuncs()
    os._exit(code or 0)


if __name__ == "__main__":
    console_main()
