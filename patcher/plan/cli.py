"""``patcher plan``: the memory a sequential calibration run will need, per subgraph."""

from __future__ import annotations

import argparse
import json
import sys

PLAN_EPILOG = """\
{model_ids}
examples:
  patcher plan LlamaForCausalLM Meta-Llama-3-8B --seq-len 2048 --samples 512 --algorithm gptq
  patcher plan TraceableQwen2VLForConditionalGeneration Qwen2-VL-2B-Instruct --multimodal --json

Builds the model on the meta device (no weights allocated), traces it once with a
BATCH x SEQ_LEN sample and runs every subgraph on meta tensors: shapes and dtypes give the
bytes. Per subgraph: parameter bytes by dtype, activation bytes into and out of it for all
SAMPLES, GPTQ Hessians (in_features^2 fp32 per nn.Linear in its targets), the GPU peak with
only this subgraph on the device, and the CPU cache of activations handed on. Parameter and
activation bytes are exact; the GPU peak counts the live tensors inside the called modules too
(attention scores, MLP intermediates), not allocator overhead or kernel workspaces.
Token ids and masks are real tensors: BATCH x SEQ_LEN may be at most {max_tokens} (2**{max_tokens_log2}) tokens.
Exit status: 0 planned, 1 failed to trace or to run on meta tensors, 2 bad arguments.
"""


def add_plan_parser(subparsers) -> None:
    from ..models.arguments import add_model_arguments
    from ..models import model_id_help
    from ..registry.normalize import MAX_SAMPLE_TOKENS

    parser = subparsers.add_parser(
        "plan",
        help="GPU and CPU memory per subgraph for sequential calibration, before the run",
        description="Predict the memory of a sequential calibration run (GPTQ or none) from a meta-device trace.",
        epilog=PLAN_EPILOG.format(model_ids=model_id_help(), max_tokens=MAX_SAMPLE_TOKENS,
                                  max_tokens_log2=MAX_SAMPLE_TOKENS.bit_length() - 1),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(parser)
    parser.add_argument("--batch", type=int, default=1, metavar="N", help="samples per calibration batch (default 1)")
    parser.add_argument("--seq-len", type=int, default=2048, metavar="N", help="tokens per sample (default 2048)")
    parser.add_argument("--samples", type=int, default=512, metavar="N", help="calibration samples (default 512)")
    parser.add_argument("--algorithm", choices=("none", "gptq"), default="none",
                        help="gptq adds one fp32 in_features^2 Hessian per calibrated nn.Linear")
    parser.add_argument("--targets-per-subgraph", type=int, default=1, metavar="N",
                        help="put N consecutive targets in each subgraph (default 1)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON (bytes)")
    parser.set_defaults(handler=run_plan)


def run_plan(args) -> int:
    from ..models import check_model_id

    from ..registry.normalize import sample_shape

    try:
        for option, value in (("--batch", args.batch), ("--seq-len", args.seq_len), ("--samples", args.samples),
                              ("--targets-per-subgraph", args.targets_per_subgraph)):
            if value < 1:
                raise ValueError(f"{option} must be >= 1; got {value}")
        sample_shape(args.batch, args.seq_len, names=("--batch", "--seq-len"))  # before anything is built
    except ValueError as exc:
        print(f"patcher plan: error: {exc}", file=sys.stderr)
        return 2
    check_model_id(args.model_id)  # before torch and the model's module are imported (seconds)
    from ..trace import TracingError
    from ..trace.errors import TraceArgumentError
    from .memory import PlanError
    from .report import format_plan, plan_model

    try:
        plan = plan_model(args.model_class, args.model_id, batch_size=args.batch, seq_len=args.seq_len,
                          samples=args.samples, algorithm=args.algorithm, multimodal_data=args.multimodal,
                          sequential_targets=args.targets, ignore=[] if args.no_default_ignore else None,
                          extra_ignore=args.ignore, targets_per_subgraph=args.targets_per_subgraph,
                          towers=args.towers, unused_inputs=args.unused_inputs, modality=args.modality)
    except TraceArgumentError as exc:  # targets that match nothing, an unknown --unused-input: a usage error
        print(f"patcher plan: error: {exc}", file=sys.stderr)
        return 2
    except TracingError as exc:
        construct = getattr(exc, "construct", None)
        print(f"Failed to trace {args.model_class}:", file=sys.stderr)
        print(construct.describe() if construct is not None else str(exc), file=sys.stderr)
        return 1
    except PlanError as exc:
        print(f"patcher plan: error: {exc}", file=sys.stderr)
        return 1
    except (ValueError, ImportError, OSError) as exc:
        print(f"patcher plan: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(plan.to_dict(), indent=2) if args.json else format_plan(plan))
    return 0
