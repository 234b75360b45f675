"""Refuse a wrapped function that changes a module's settings while a graph runs.

The rewriter moves code the tracer cannot decide (a branch on a shape) into ``@torch.fx.wrap``
functions, which do not run while tracing, only when the graph runs. One that changes a setting of
a module it is given (BigBird's ``self.set_attention_type("original_full")`` under
``if seq_length <= max_tokens_to_attend``) changes it after tracing decided the code that follows
on the old value: the graph runs the rest of the forward for the old setting and the modules it
calls in the new one, a silent wrong result. The graph's code therefore calls these functions
through a guard that compares the Python-scalar attributes and the children of every module
argument before and after the call, and raises :class:`StateChangeError` naming the source line.

Tensors stored as attributes (a positions table moved to another device or grown) are data, not
settings Python code branches on, so they are left out. Only the module arguments themselves are
compared, not their descendants: that keeps the guard cheap on models with many layers.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, MutableMapping

from torch import nn

from ..registry.origins import noted_origin
from ..registry.wrapped import is_wrapped_name
from .errors import StateChangeError
from .record import is_trace_constant, same_constant

_MODULE_SLOTS = ("_parameters", "_buffers", "_modules")
_UNSET = object()


def guard_wrapped_functions(namespace: MutableMapping[str, Any]) -> None:
    """Replace the rewriter's wrapped functions among a compiled graph's globals by guarded calls."""
    for key, value in list(namespace.items()):
        if inspect.isfunction(value) and is_wrapped_name(value.__name__):
            namespace[key] = _guarded(value)


def _guarded(function: Callable) -> Callable:
    origin, location = _origin(function)

    @functools.wraps(function)
    def guarded(*args, **kwargs):
        modules = [value for value in (*args, *kwargs.values()) if isinstance(value, nn.Module)]
        if not modules:
            return function(*args, **kwargs)
        before = [_settings(module) for module in modules]
        result = function(*args, **kwargs)
        changes = [change for module, old in zip(modules, before) for change in _changes(module, old)]
        if changes:
            error = StateChangeError(
                f"{origin}: code the rewriter moved into {function.__name__} changed "
                f"{'; '.join(changes[:5])}{' ...' if len(changes) > 5 else ''} while the graph ran. That code does "
                "not run while tracing, so the code after it was traced for the old value: the graph would run "
                "the rest of the forward for the old setting and the modules it calls in the new one (a silent "
                "wrong result). Put the model in that state before tracing (call the setter the code calls, "
                "or run the model once on inputs of the shape you will run), or trace and run with inputs for "
                "which the code does not run.",
                changes,
            )
            error.location = location  # the moved code's origin note, for reports that map lines back
            raise error
        return result

    return guarded


def _origin(function: Callable) -> tuple[str, tuple[str, int] | None]:
    """``modeling_x.py:766 (in Foo.forward)`` from the moved code's origin note (else the function's
    name), and the (file, line) of that note."""
    try:
        lines, first = inspect.getsourcelines(function)
        filename = inspect.getsourcefile(function)
    except (OSError, TypeError):
        lines, first, filename = [], 0, None
    for offset, line in enumerate(lines):
        origin = noted_origin(line)
        if origin is not None:
            return origin, (filename, first + offset) if filename else None
    return function.__qualname__, None


def _settings(module: nn.Module) -> tuple[dict[str, Any], dict[str, Any]]:
    scalars = {key: value for key, value in vars(module).items()
               if key not in _MODULE_SLOTS and is_trace_constant(value)}
    return scalars, dict(module._modules)


def _changes(module: nn.Module, before: tuple[dict[str, Any], dict[str, Any]]) -> list[str]:
    scalars, children = before
    owner = type(module).__name__
    now, found = vars(module), []
    for key, old in scalars.items():
        new = now.get(key, _UNSET)
        if not same_constant(old, new):
            found.append(f"{owner}.{key}: {old!r} -> {_describe(new)}")
    for key, new in now.items():
        if key not in scalars and key not in _MODULE_SLOTS and is_trace_constant(new):
            found.append(f"{owner}.{key}: <unset or not a scalar> -> {new!r}")
    for key in sorted(children.keys() | module._modules.keys()):
        if children.get(key) is not module._modules.get(key):
            found.append(f"{owner}.{key}: submodule replaced by {type(module._modules.get(key)).__name__}")
    return found



def _describe(value: Any) -> str:
    return "<unset>" if value is _UNSET else repr(value) if is_trace_constant(value) else f"a {type(value).__name__}"
