"""A failed trace as the error a user can act on: the construct, its file and line, and the fix."""

from __future__ import annotations

import dataclasses

from torch import fx, nn

from .diagnose import MODEL_ERROR, diagnose, failing_code, library_class_fix, moved_none_symptom
from .errors import SampleInputError, TracingError, UntraceableCodeError
from .moved_code import moved_from, none_result_reaching


def explained(exc: Exception, model: nn.Module, tracer: fx.Tracer, model_class: type | None = None) -> Exception:
    """``exc`` as the error a user can act on: the construct, its line and the fix. ``model_class``:
    the model's own class (while tracing, ``type(model)`` is the tracer's subclass of it)."""
    if isinstance(exc, TracingError):  # already says what to do (sample, targets, hooks)
        return exc
    model_class = model_class or type(model)
    module_path = tracer.failed_module_path or ""
    construct = diagnose(exc, module_path)
    if construct is None:
        return exc
    header = f"could not trace {model_class.__name__}:"
    if construct.symptom is MODEL_ERROR:
        moved_none = _moved_none(exc, construct, tracer)
        if moved_none is not None:
            construct = dataclasses.replace(construct, symptom=moved_none)
            return UntraceableCodeError(f"{header}\n{construct.describe()}", construct)
        message = f"{header} {construct.symptom.name}\n{construct.describe()}\n" \
                  "  note: this often means the sample input lacks an input the model needs"
        return SampleInputError(message) if isinstance(exc, ValueError) else UntraceableCodeError(message, construct)
    return UntraceableCodeError(f"{header}\n{construct.describe(library_class_fix(model_class, construct))}", construct)


def _moved_none(exc: Exception, construct, tracer: fx.Tracer):
    """The symptom when the failing function took a value of an opaque call of moved code for not
    None, a value that is None when the model runs (None when no such value reaches it)."""
    code = failing_code(exc, construct) if tracer.opaque_none_results else None
    found = none_result_reaching(tracer.opaque_none_results, code) if code is not None else None
    if found is None:
        return None
    function, result = found
    return moved_none_symptom(result.name, function.__name__, moved_from(function), result.why)
