"""Tracing: torch.fx over a transformers model with sequential targets as leaves."""

from .diagnose import UntraceableConstruct, diagnose
from .errors import (
    HookError,
    MissingTargetsError,
    OutputCaptureError,
    SampleInputError,
    StateChangeError,
    TargetMatchError,
    TracingError,
    UntraceableCodeError,
)
from .tracer import DEFAULT_IGNORE, SequentialTracer, TracedGraph, trace_graph

__all__ = [
    "DEFAULT_IGNORE",
    "HookError",
    "OutputCaptureError",
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
