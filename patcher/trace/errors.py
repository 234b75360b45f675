"""Errors raised while tracing and partitioning. Each says what went wrong and what to do."""

from __future__ import annotations


class TracingError(Exception):
    """Base class of tracezoo's tracing errors."""


class TraceArgumentError(TracingError, ValueError):
    """An argument of the trace names what is not there (targets that match no module, an
    ``unused_inputs`` name the sample lacks): a mistake in the call, found before tracing, not a
    construct that fails to trace. The CLI reports it as a usage error (exit 2)."""


class TargetMatchError(TraceArgumentError):
    """A ``sequential_targets`` entry matches nothing, or targets nest."""


class IgnoreMatchError(TraceArgumentError):
    """An ``ignore`` entry (beyond :data:`~patcher.DEFAULT_IGNORE`) matches no module, function or
    method of the model: it would keep nothing opaque (a misspelt name is not what was meant)."""

    def __init__(self, message: str, entries: list[str]):
        super().__init__(message)
        self.entries = entries


class SampleInputError(TracingError, ValueError):
    """The sample input does not fit the model's forward."""


class MissingTargetsError(TracingError):
    """Target modules were swallowed by an opaque call and are missing from the graph.

    A calibration that silently merges two layers into one subgraph produces wrong scales, so
    this is always an error, never a warning.
    """

    def __init__(self, message: str, missing: list[str]):
        super().__init__(message)
        self.missing = missing


class UntraceableCodeError(TracingError):
    """The model's code holds a construct torch.fx cannot trace; ``construct`` says where."""

    def __init__(self, message: str, construct):
        super().__init__(message)
        self.construct = construct


class StateChangeError(TracingError):
    """The forward wrote attributes of modules that run later as single calls.

    Tracing restores the model afterwards, so the graph would run those modules without the
    change: a silent wrong result (BigBird's ``set_attention_type``), so this is an error.
    """

    def __init__(self, message: str, changes: list[str]):
        super().__init__(message)
        self.changes = changes


class SharedStateError(TracingError):
    """Traced code changed a container after handing it to a module the graph calls (Gemma 4's
    ``shared_kv_states``: see :mod:`patcher.trace.shared_state`). The graph makes each run's own
    copy of the container as it was when the first module got it, so a change made by the traced
    code later would not reach the modules that run after it."""


class InputMismatchError(TracingError, ValueError):
    """Inputs given when a graph runs do not fit the sample it was traced with.

    A graph only reads the inputs it was traced with, and bakes the values of constants (None,
    Python scalars, flags): an input it does not take, or a constant with another value, would
    be ignored without a word (a silent wrong result), so this is an error.
    """


class BranchDecisionError(InputMismatchError):
    """A run whose shapes would take another branch than the sample took while tracing.

    The patcher leaves a branch on shapes around sequential targets in the code (a wrapped function
    would hide them: ``_decided_*``); the tracer follows the sample's branch and the graph checks
    the condition again at every run, so another input raises here instead of silently running
    the traced branch.
    """


class MissingInputError(InputMismatchError, KeyError):
    """An input the graph takes was not given when it ran."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class ModelMismatchError(TracingError, ValueError):
    """A graph runs on a model other than the one it was traced from: another structure
    (more or fewer layers, other shapes), or another mode (train/eval)."""


class TrainingModeError(ModelMismatchError):
    """The model is in another mode (``train()``/``eval()``) than the graph was traced in, or was
    traced in train mode with layerdrop, which bakes the layers that ran while tracing."""


class HookError(TracingError):
    """A module hook the graph cannot honour: on a module the tracer walks through (or the root),
    where it would be baked into the graph while tracing or never run afterwards; or a global
    module hook. ``module`` is the module's path ("" for the root or global hooks)."""

    def __init__(self, message: str, module: str, hooks: list[str]):
        super().__init__(message)
        self.module = module
        self.hooks = hooks


class OutputCaptureError(TracingError):
    """``output_hidden_states``/``output_attentions`` (``key``) are collected by transformers'
    hooks on a module the graph calls as a whole: the graph would return an empty tuple."""

    def __init__(self, message: str, key: str, module: str):
        super().__init__(message)
        self.key = key
        self.module = module


class LeafOutputError(TracingError):
    """A module the graph calls as a whole returned another structure when the graph ran than
    when it was traced (an item ``None`` that was not, or the reverse): the traced code decided on
    that structure, so the graph would compute what another input computes."""

    def __init__(self, message: str, module: str, found: str, traced: str):
        super().__init__(message)
        self.module = module
        self.found = found
        self.traced = traced
