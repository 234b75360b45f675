"""tracezoo's patcher: make transformers models traceable by torch.fx and split them per layer.

The flow is visible in the subpackages: ``rewrite`` (libcst source rewrites) -> ``trace``
(the fx tracer) -> ``partition`` (subgraphs per sequential target) -> ``verify``
(equivalence with the eager model).
"""

__version__ = "0.1.0"

# Everything below is imported on first use: `patcher --help` and `patcher patch` must not pay for
# torch and transformers (seconds) before they are needed.
_LAZY = {
    "Subgraph": "partition", "partition_graph": "partition", "run_subgraphs": "partition",
    "trace_subgraphs": "partition",
    "find_tower_blocks": "models.towers", "find_towers": "models.towers",
    **{name: "trace" for name in (
        "DEFAULT_IGNORE", "DroppedInputError", "HookError", "IgnoreMatchError", "InputMismatchError", "LeafOutputError",
        "MissingInputError", "MissingTargetsError", "ModelMismatchError", "OutputCaptureError", "SampleInputError",
        "SharedStateError", "StateChangeError", "TargetMatchError", "TraceArgumentError", "TracingError",
        "TrainingModeError", "UnknownInputError", "UntraceableCodeError", "trace_graph")},
    # how a model collection (the zoo) registers itself: see patcher.registry.plugins
    "register_drop_in": "registry.plugins", "register_tracing_defaults": "registry.plugins",
    "register_multimodal_sample": "samples.builders",
}


#: Exported on first use (``from patcher import load_traceable`` works): they pull in the
#: rewriter, sample builders and config loading.
LAZY_EXPORTS = ("attempt_trace", "load_traceable", "patch_file", "patch_source")


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    # attempt_trace pulls in sample builders and config loading; import it on first use.
    if name == "attempt_trace":
        from .models.attempt import attempt_trace

        return attempt_trace
    if name in ("patch_source", "patch_file"):
        from . import rewrite

        return getattr(rewrite, name)
    if name == "load_traceable":
        from .models.traceable import load_traceable

        return load_traceable
    raise AttributeError(f"module 'patcher' has no attribute {name!r}")


__all__ = [
    "DEFAULT_IGNORE",
    "DroppedInputError",
    "HookError",
    "IgnoreMatchError",
    "InputMismatchError",
    "LeafOutputError",
    "MissingInputError",
    "MissingTargetsError",
    "ModelMismatchError",
    "OutputCaptureError",
    "SampleInputError",
    "SharedStateError",
    "StateChangeError",
    "Subgraph",
    "TargetMatchError",
    "TraceArgumentError",
    "TracingError",
    "TrainingModeError",
    "UnknownInputError",
    "UntraceableCodeError",
    "attempt_trace",
    "find_tower_blocks",
    "find_towers",
    "load_traceable",
    "partition_graph",
    "patch_file",
    "patch_source",
    "register_drop_in",
    "register_multimodal_sample",
    "register_tracing_defaults",
    "run_subgraphs",
    "trace_graph",
    "trace_subgraphs",
]
