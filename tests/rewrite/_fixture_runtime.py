"""Load fixture modules (original and patched) and compare them on drawn inputs.

Fixture convention (all optional, module-level names in ``<case>.in.py``):

- ``PATCH_OPTIONS = {...}``: keyword arguments for ``patch_source`` (a literal: targets, ignore,
  locations);
- ``ENTRY = "name"``: a function, or an ``nn.Module`` class built with no arguments, to execute;
- ``def inputs(): ...``: a hypothesis strategy of argument tuples for ``ENTRY``;
- ``TRACE = True``: also ``torch.fx.symbolic_trace`` the patched ``ENTRY`` (a module class) on
  the first draw, and compare the graph with eager on every draw (other shapes included).

Errors count as results: both sides must raise the same exception type; the patched side's
error must carry a note naming the original ``file:line`` when it comes from wrapped code.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
from pathlib import Path

import torch


def patch_options(source: str) -> dict:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PATCH_OPTIONS" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def load(code: str, path: Path, name: str):
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(name, None)
    return mod


class RefTracer(torch.fx.Tracer):
    """Plain fx, except that modules reaching wrapped functions are passed by reference (as
    tracezoo's tracer does), so wrapped code may receive `self`."""

    def create_arg(self, a):
        if isinstance(a, torch.nn.Module):
            def tz_module_ref(obj=a):
                return obj

            return self.create_node("call_function", tz_module_ref, (), {})
        return super().create_arg(a)


def trace(module: torch.nn.Module, args: tuple) -> torch.fx.GraphModule:
    """Trace for the None-pattern of `args`: a tracer bakes which optional inputs are None."""
    names = list(inspect.signature(module.forward).parameters)
    concrete = {n: None for n, a in zip(names, args) if a is None}
    return torch.fx.GraphModule(module, RefTracer().trace(module, concrete_args=concrete or None))


def build(mod):
    entry = getattr(mod, mod.ENTRY)
    if isinstance(entry, type) and issubclass(entry, torch.nn.Module):
        torch.manual_seed(0)
        return entry().eval()
    return entry


def call(fn, args):
    try:
        with torch.no_grad():
            return fn(*args), None
    except Exception as exc:  # compared, not swallowed
        return None, exc


def assert_same(expected, got) -> None:
    (want, want_exc), (have, have_exc) = expected, got
    if want_exc is not None or have_exc is not None:
        assert type(want_exc) is type(have_exc), f"original raised {want_exc!r}, patched raised {have_exc!r}"
        return
    torch.testing.assert_close(have, want, equal_nan=True)
