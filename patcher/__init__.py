"""tracezoo's patcher: make transformers models traceable by torch.fx and split them per layer.

The flow is visible in the subpackages: ``rewrite`` (libcst source rewrites) -> ``trace``
(the fx tracer) -> ``partition`` (subgraphs per sequential target) -> ``verify``
(equivalence with the eager model).
"""

__version__ = "0.1.0"

from .partition import Subgraph, partition_graph, run_subgraphs, trace_subgraphs
from .trace import (
    DEFAULT_IGNORE,
    HookError,
    MissingTargetsError,
    OutputCaptureError,
    SampleInputError,
    StateChangeError,
    TargetMatchError,
    TracingError,
    UntraceableCodeError,
    trace_graph,
)


def __getattr__(name):
    # attempt_trace pulls in sample builders and config loading; import it on first use.
    if name == "attempt_trace":
        from .attempt import attempt_trace

        return attempt_trace
    if name in ("patch_source", "patch_file", "load_traceable"):
        from . import rewrite

        return getattr(rewrite, name)
    raise AttributeError(f"module 'patcher' has no attribute {name!r}")


__all__ = [
    "DEFAULT_IGNORE",
    "HookError",
    "MissingTargetsError",
    "OutputCaptureError",
    "SampleInputError",
    "StateChangeError",
    "Subgraph",
    "TargetMatchError",
    "TracingError",
    "UntraceableCodeError",
    "attempt_trace",
    "partition_graph",
    "run_subgraphs",
    "trace_graph",
    "trace_subgraphs",
]
