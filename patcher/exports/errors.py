"""The tracing errors, named once: ``patcher.trace`` imports and exports them from this table, and
``patcher`` exports them on first use (without importing torch before one is asked for)."""

#: Error class name -> the module of ``patcher.trace`` that defines it. A new error is added here
#: (tests/test_errors.py checks that every error class of those modules is).
TRACE_ERRORS: dict[str, str] = {
    "BranchDecisionError": "errors",
    "DroppedInputError": "liveness",
    "HookError": "errors",
    "IgnoreMatchError": "errors",
    "InputMismatchError": "errors",
    "LeafOutputError": "errors",
    "MissingInputError": "errors",
    "MissingTargetsError": "errors",
    "ModelMismatchError": "errors",
    "OutputCaptureError": "errors",
    "SampleInputError": "errors",
    "SharedStateError": "errors",
    "StateChangeError": "errors",
    "TargetMatchError": "errors",
    "TraceArgumentError": "errors",
    "TracingError": "errors",
    "TrainingModeError": "errors",
    "UnknownInputError": "liveness",
    "UntraceableCodeError": "errors",
}
