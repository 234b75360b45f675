"""Tracing: torch.fx over a transformers model with sequential targets as leaves."""

from .diagnose import UntraceableConstruct, diagnose
from .errors import (
    MissingTargetsError,
    SampleInputError,
    StateChangeError,
    TargetMatchError,
    TracingError,
    UntraceableCodeError,
)
from .liveness import DroppedInputError
from .tracer import DEFAULT_IGNORE, SequentialTracer, TracedGraph, trace_graph

__all__ = [
    "DEFAULT_IGNORE",
    "DroppedInputError",
    "MissingTargetsError",
    "SampleInputError",
    "SequentialTracer",
    "StateChangeError",
    "TargetMatchError",
    "TracedGraph",
    "TracingError",
    "UntraceableCodeError",
    "UntraceableConstruct",
    "diagnose",
    "trace_graph",
]
