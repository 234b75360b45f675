"""``patcher graph``: draw the traced graph of a model with its partition into subgraphs."""

from __future__ import annotations

import argparse
import os
import sys

from ..models.arguments import add_model_arguments
from ..models import model_id_help

GRAPH_EPILOG = """\
{model_ids}
examples:
  patcher graph LlamaForCausalLM ./tiny-llama -o llama.svg
  patcher graph LlamaForCausalLM Meta-Llama-3-8B -o llama3.png            # 33 subgraphs: collapsed
  patcher graph LlamaForCausalLM Meta-Llama-3-8B --collapse no -o llama3-full.svg
  patcher graph TraceableQwen2VLForConditionalGeneration Qwen2-VL-2B-Instruct --multimodal -o qwen2-vl.png
  patcher graph TraceableQwen2VLForConditionalGeneration Qwen2-VL-2B-Instruct --multimodal \\
      --targets Qwen2VLDecoderLayer Qwen2VLVisionBlock \\
      --ignore get_video_features get_vision_position_ids -o qwen2-vl-vision.png   # trace the vision tower
  patcher graph LlamaForCausalLM Meta-Llama-3-8B -o llama3.dot            # no graphviz needed

The picture: sequential targets (orange), modules not traced into (blue: ignored modules, norms,
vision towers), opaque functions (purple: ignored or wrapped, labelled with the function name),
other ops small and plain. Each subgraph is a cluster "subgraph i"; red edges crossing clusters
are the values handed from one subgraph to a later one, labelled with the value's name (and the
argument it is passed as). Model inputs are at the top, outputs at the bottom.
--collapse auto (default) draws one box per subgraph above {subgraphs} subgraphs or {nodes} nodes.

The format comes from the file name: .svg, .png and .pdf run Graphviz's `dot` program
(apt-get install graphviz), .dot writes the DOT text. Targets, ignore entries and --unused-input
work as in `patcher trace`. FILE is written whole or not at all: the picture goes to a temporary
file next to it, renamed over FILE once complete, so an interrupted or failed run leaves FILE as
it was.
Exit status: 0 written, 1 failed to trace, 2 bad arguments or Graphviz missing, 130 interrupted.
"""


def add_graph_parser(subparsers) -> argparse.ArgumentParser:
    from .limits import AUTO_COLLAPSE_NODES, AUTO_COLLAPSE_SUBGRAPHS

    parser = subparsers.add_parser(
        "graph",
        help="draw the traced graph with its partition into subgraphs (svg, png, pdf or dot)",
        description="Build MODEL_CLASS from MODEL_ID's config on the meta device, trace it with torch.fx, split it "
        "into one subgraph per sequential target and draw the result: targets, opaque modules and functions, "
        "subgraph boundaries and the values passed between subgraphs.",
        epilog=GRAPH_EPILOG.format(model_ids=model_id_help(), subgraphs=AUTO_COLLAPSE_SUBGRAPHS,
                                   nodes=AUTO_COLLAPSE_NODES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(parser)
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="picture to write: FILE.svg, FILE.png, FILE.pdf or FILE.dot")
    parser.add_argument("--targets-per-subgraph", type=int, default=1, metavar="N",
                        help="put N consecutive targets in each subgraph (default 1)")
    parser.add_argument("--collapse", choices=("auto", "yes", "no"), default="auto",
                        help="one box per subgraph: auto (default: for large graphs), yes, or no (every node)")
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    parser.add_argument("--title", metavar="TEXT", help="title above the picture (default: model and counts)")
    parser.add_argument("--dpi", type=float, metavar="N", help="PNG resolution (graphviz default: 96)")
    parser.set_defaults(handler=run_graph)
    return parser


def run_graph(args) -> int:
    from ..models import check_model_id

    check_model_id(args.model_id)  # before torch and the model's module are imported (seconds)
    from ..models.arguments import prepare_from_arguments
    from ..partition import partition_graph
    from ..trace import TracingError, trace_graph
    from ..trace.errors import TraceArgumentError
    from . import GRAPHVIZ_FORMATS, TEXT_FORMATS, GraphvizNotFoundError, find_dot, render_partition, should_collapse

    fmt = args.output.rsplit(".", 1)[-1].lower() if "." in args.output else ""
    if fmt not in GRAPHVIZ_FORMATS + TEXT_FORMATS:
        print(f"patcher graph: error: cannot tell the format of {args.output!r}: use .svg, .png, .pdf or .dot",
              file=sys.stderr)
        return 2
    if os.path.isdir(args.output):
        print(f"patcher graph: error: {args.output} is a folder; -o names the picture file to write", file=sys.stderr)
        return 2
    if os.path.exists(args.output) and not args.force:
        print(f"patcher graph: error: {args.output} exists; overwrite it with --force or choose another -o FILE",
              file=sys.stderr)
        return 2
    if fmt in GRAPHVIZ_FORMATS and find_dot() is None:
        # Say so before spending time on the trace.
        print(f"patcher graph: error: writing .{fmt} needs Graphviz's `dot` program, which is not installed; "
              "install it (Debian/Ubuntu: sudo apt-get install -y graphviz) or write a .dot file", file=sys.stderr)
        return 2
    if args.targets_per_subgraph < 1:
        print("patcher graph: error: --targets-per-subgraph must be >= 1", file=sys.stderr)
        return 2
    try:
        setup = prepare_from_arguments(args)
    except (ValueError, ImportError, OSError) as exc:
        print(f"patcher graph: error: {exc}", file=sys.stderr)
        return 2
    cls, model, targets = setup.model_class, setup.model, setup.targets
    print(f"Tracing {cls.__name__} ({args.model_id}) on the meta device, targets: {', '.join(targets)}")
    try:
        traced = trace_graph(model, setup.sample, targets, setup.ignore, args.unused_inputs)
        subgraphs = partition_graph(traced, model, args.targets_per_subgraph)
    except TraceArgumentError as exc:  # targets that match nothing, an unknown --unused-input
        print(f"patcher graph: error: {exc}", file=sys.stderr)
        return 2
    except TracingError as exc:
        print(f"Failed to trace {cls.__name__}:\n{exc}")
        return 1
    collapsed = should_collapse(subgraphs, args.collapse)
    title = args.title
    if title is None:
        shown = ', multimodal' if args.multimodal else f', {args.modality.label}' if args.modality is not None else ''
        title = (f"{cls.__name__} ({args.model_id}{shown}): "
                 f"{len(subgraphs)} subgraphs" + (", one box each" if collapsed else ""))
    try:
        path = render_partition(subgraphs, traced, args.output, args.collapse, model=model, title=title,
                                dpi=args.dpi)
    except GraphvizNotFoundError as exc:
        print(f"patcher graph: error: {exc}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as exc:
        print(f"patcher graph: error: {exc}", file=sys.stderr)
        return 2
    mode = "collapsed, one box per subgraph" if collapsed else "every node"
    print(f"Wrote {path} ({len(subgraphs)} subgraphs, {mode})")
    return 0
