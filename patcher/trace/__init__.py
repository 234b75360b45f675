"""Tracing: torch.fx over a transformers model with sequential targets as leaves."""

from ..registry.versions import check_supported_versions

check_supported_versions()  # below the floors, tracing fails or is silently wrong: say so before it starts

from .diagnose import UntraceableConstruct, diagnose
from .errors import (
    BranchDecisionError,
    HookError,
    IgnoreMatchError,
    InputMismatchError,
    LeafOutputError,
    MissingInputError,
    MissingTargetsError,
    ModelMismatchError,
    OutputCaptureError,
    SampleInputError,
    SharedStateError,
    StateChangeError,
    TargetMatchError,
    TraceArgumentError,
    TracingError,
    TrainingModeError,
    UntraceableCodeError,
)
from .liveness import DroppedInputError, UnknownInputError
from .graph_runtime import TracedGraph
from .tracer import DEFAULT_IGNORE, SequentialTracer, trace_graph

__all__ = [
    "BranchDecisionError",
    "DEFAULT_IGNORE",
    "DroppedInputError",
    "HookError",
    "IgnoreMatchError",
    "InputMismatchError",
    "LeafOutputError",
    "MissingInputError",
    "OutputCaptureError",
    "MissingTargetsError",
    "ModelMismatchError",
    "SampleInputError",
    "SequentialTracer",
    "SharedStateError",
    "StateChangeError",
    "TargetMatchError",
    "TraceArgumentError",
    "TracedGraph",
    "TracingError",
    "TrainingModeError",
    "UnknownInputError",
    "UntraceableCodeError",
    "UntraceableConstruct",
    "diagnose",
    "trace_graph",
]
