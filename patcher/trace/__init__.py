"""Tracing: torch.fx over a transformers model with sequential targets as leaves."""

from .diagnose import UntraceableConstruct, diagnose
from .errors import (
    InputMismatchError,
    MissingInputError,
    MissingTargetsError,
    ModelMismatchError,
    SampleInputError,
    StateChangeError,
    TargetMatchError,
    TracingError,
    TrainingModeError,
    UntraceableCodeError,
)
from .liveness import DroppedInputError
from .tracer import DEFAULT_IGNORE, SequentialTracer, TracedGraph, trace_graph

__all__ = [
    "DEFAULT_IGNORE",
    "DroppedInputError",
    "InputMismatchError",
    "MissingInputError",
    "MissingTargetsError",
    "ModelMismatchError",
    "SampleInputError",
    "SequentialTracer",
    "StateChangeError",
    "TargetMatchError",
    "TracedGraph",
    "TracingError",
    "TrainingModeError",
    "UntraceableCodeError",
    "UntraceableConstruct",
    "diagnose",
    "trace_graph",
]
