"""The function fx traces: the model's forward taking the sample's graph inputs, its constants fixed."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from typing import Any, Mapping

from torch import nn
from transformers.utils import ModelOutput

from .nested_inputs import NestedInput, is_nested
from .record import is_trace_constant, same_constant

#: The name of the function fx traces (the traced class's method).
ROOT_FORWARD = "_tracezoo_root_forward"


def forward_parameters(model: nn.Module) -> tuple[Any, inspect.Signature]:
    forward = inspect.unwrap(type(model).forward)
    return forward, inspect.signature(forward)


@dataclasses.dataclass(frozen=True)
class Root:
    """What the sample makes of the model's forward for tracing."""

    placeholders: list[str]  # the sample's keys that are graph inputs (tensors, other objects)
    fixed: dict[str, Any]  # the sample's constants, and the flags the trace sets where the sample has none
    omittable: set[str]  # constants a run may leave out: omitting one means the same
    original_class: type
    traced_class: type  # the per-trace subclass whose ROOT_FORWARD fx traces
    # the placeholders holding containers of tensors, traced as one graph input per tensor (see
    # patcher.trace.nested_inputs): by name
    nested: dict[str, NestedInput] = dataclasses.field(default_factory=dict)

    @property
    def graph_inputs(self) -> list[str]:
        """The inputs of the traced function: the placeholders, each container one per tensor in it."""
        return [leaf for name in self.placeholders
                for leaf in (self.nested[name].traced_names if name in self.nested else (name,))]

    def graph_values(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """``sample``'s values of :attr:`graph_inputs`, by name."""
        values = {}
        for name in self.placeholders:
            nested = self.nested.get(name)
            if nested is None:
                values[name] = sample[name]
            else:
                values.update(zip(nested.traced_names, nested.leaves(sample[name])))
        return values


def traced_root(model: nn.Module, sample_input: Mapping[str, Any]) -> Root:
    forward, signature = forward_parameters(model)
    # None, bools, ints, floats and strings are constants of the trace: the model decides Python
    # control flow on them (`isinstance(logits_to_keep, int)`), so they are never graph inputs.
    placeholders = [key for key, value in sample_input.items() if not is_trace_constant(value)]
    fixed = {key: value for key, value in sample_input.items() if is_trace_constant(value)}
    omittable = {key for key, value in fixed.items() if _omitting_means(signature, key, value)}
    taken = set(sample_input) | {"self"}
    nested = {key: NestedInput.of(key, sample_input[key], taken) for key in placeholders if is_nested(sample_input[key])}
    for flag, value in (("use_cache", False), ("return_dict", True)):
        if flag in signature.parameters and flag not in sample_input:
            fixed[flag] = value
            omittable.add(flag)
    root_forward = _root_function(forward, signature, placeholders, fixed, nested)
    original_class = type(model)
    traced_class = type(original_class.__name__, (original_class,), {ROOT_FORWARD: root_forward})
    return Root(placeholders, fixed, omittable, original_class, traced_class, nested)


def _omitting_means(signature: inspect.Signature, key: str, value: Any) -> bool:
    """Leaving ``key`` out at run time means the same as ``value`` (the forward's default)."""
    param = signature.parameters.get(key)
    if param is None or param.default is param.empty:
        return value is None or value is False  # through **kwargs: absent reads as None/False
    return same_constant(param.default, value)


def _root_function(forward, signature: inspect.Signature, placeholders: list[str], fixed: dict[str, Any],
                   nested: Mapping[str, NestedInput]):
    """Build ``root(self, <placeholders>)`` calling the unwrapped forward with fixed extras; a
    container placeholder is one parameter per tensor in it, rebuilt into its containers first.

    fx reads the root's parameters from its code object, so this must be a real function with
    exactly the sample's names; decorated forwards (``can_return_tuple``) would make fx patch
    the wrapper's code object and fail ("co_varnames is too small").
    """
    params = ", ".join(["self", *(leaf for name in placeholders
                                   for leaf in (nested[name].traced_names if name in nested else (name,)))])
    kwargs = ", ".join(f"{name}={name}" for name in placeholders)
    rebuilt = "".join(f"    {name} = _nested[{name!r}].rebuild([{', '.join(nested[name].traced_names)}])\n"
                      for name in placeholders if name in nested)
    source = (
        f"def {ROOT_FORWARD}({params}):\n"
        f"{rebuilt}"
        f"    return _normalize_output(_forward(self, {kwargs}{', ' if kwargs else ''}**_fixed))\n"
    )
    namespace = {"_forward": forward, "_fixed": fixed, "_normalize_output": _normalize_output, "_nested": nested}
    exec(compile(source, "<tracezoo-root>", "exec"), namespace)
    return namespace[ROOT_FORWARD]


def _normalize_output(output):
    if isinstance(output, ModelOutput):
        return {key: value for key, value in output.items()}
    if isinstance(output, Mapping):
        return dict(output)
    if isinstance(output, tuple):
        return {f"output_{index}": value for index, value in enumerate(output)}
    return {"output": output}


@contextlib.contextmanager
def swapped_class(model: nn.Module, cls: type):
    # fx reads the traced function from type(root); a per-instance subclass avoids touching
    # the model's real class, which other instances share.
    original = type(model)
    object.__setattr__(model, "__class__", cls)
    try:
        yield
    finally:
        object.__setattr__(model, "__class__", original)
