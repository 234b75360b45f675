"""No input dropped silently: every tensor of the sample must reach the graph's output.

A graph that traces and runs can still ignore an input: a wrapped block that filled a dict the
caller never saw, a branch decided at trace time, an opaque call whose result nobody reads. The
chain then computes text-only logits for an image sample, with no error. After tracing, this
walks the graph backwards from its output and refuses a graph in which a sample tensor, or a
wrapped/opaque call that was handed a container to fill, does not contribute to the output.

Nodes that change a value in place (``x[i] = y``, ``x.add_(y)``, ``out=``) are counted as live:
they may write into something the output reads, and a false alarm would block a correct graph.
"""

from __future__ import annotations

import operator
import os
import sys
import types
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import fx

from ..registry.origins import noted_origin
from ..registry.wrapped import CHECK_PREFIX
from .decided_indices import check_decided_index
from .errors import TraceArgumentError, TracingError

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_TRACE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep

#: Functions that only raise (checks): their result is None by design.
CHECK_PREFIXES = (CHECK_PREFIX + "_", "torch_compilable_check", "_assert")


class DroppedInputError(TracingError):
    """A sample input (or the result of a wrapped/opaque call) never reaches the graph's output.

    ``inputs`` names the dropped sample inputs, ``calls`` the unused wrapped/opaque calls, and
    ``location`` is ``(filename, lineno)`` of the model code where the first one was last used.
    """

    def __init__(self, message: str, inputs: list[str], calls: list[str],
                 location: tuple[str, int] | None = None):
        super().__init__(message)
        self.inputs = inputs
        self.calls = calls
        self.location = location


class UnknownInputError(DroppedInputError, TraceArgumentError):
    """``unused_inputs`` names an input the sample does not have (a misspelt name): raised before
    tracing, a usage error (the CLI exits 2)."""


def check_unused_inputs_known(sample: Mapping[str, Any], unused_inputs: Iterable[str]) -> None:
    """Raise :class:`UnknownInputError` when ``unused_inputs`` names an input ``sample`` lacks."""
    unknown = sorted(set(unused_inputs) - set(sample))
    if unknown:
        raise UnknownInputError(
            f"unused_inputs (--unused-input) names {', '.join(map(repr, unknown))}, which the sample does not have "
            f"(sample inputs: {', '.join(sorted(sample))}); name one of those", [], [])


def record_source(node: fx.Node) -> None:
    """Remember the innermost model-code line that created ``node`` (cheap: a frame walk, no
    traceback objects), for error messages about the node."""
    source = model_source()
    if source is not None:
        node.meta["tz_source"] = source


def model_source() -> tuple[str, int, str] | None:
    """``(file, line, function)`` of the innermost model-code frame of the running trace."""
    frame = model_frame()
    return None if frame is None else (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def model_frame() -> types.FrameType | None:
    """The innermost model-code frame of the running trace."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith((_TORCH_DIR, _TRACE_DIR, _STDLIB_DIR)) or filename.startswith("<")):
            return frame
        frame = frame.f_back
    return None


def describe_source(source: tuple[str, int, str] | None) -> str:
    """``modeling_x.py:622 in forward()`` (``an unknown line`` without one)."""
    from .diagnose import short_path

    if source is None:
        return "an unknown line"
    filename, lineno, function = source
    return f"{short_path(filename)}:{lineno} in {function}()"


def _mutates_in_place(node: fx.Node) -> bool:
    if node.op == "call_function":
        if node.target in (operator.setitem, operator.delitem):
            return True
        name = getattr(node.target, "__name__", "")
        return (name.endswith("_") and not name.endswith("__")) or "out" in node.kwargs
    if node.op == "call_method":
        return isinstance(node.target, str) and node.target.endswith("_") and not node.target.endswith("__")
    return False


def live_nodes(graph: fx.Graph) -> set[fx.Node]:
    """Nodes whose value reaches an output node, or that may write into a value that does, or that
    pick the module the graph calls (the check of a container's index decided from the sample: the
    output depends on the index through the module it picked, which no edge of the graph shows)."""
    roots = [node for node in graph.nodes if node.op == "output" or _mutates_in_place(node)
             or (node.op == "call_function" and node.target is check_decided_index)]
    live: set[fx.Node] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in live:
            continue
        live.add(node)
        stack.extend(node.all_input_nodes)
    return live


def _is_opaque_call(node: fx.Node) -> bool:
    """A call of a wrapped function or an ignored (opaque) function: not torch, not an operator."""
    if node.op != "call_function":
        return False
    module = getattr(node.target, "__module__", None) or ""
    if module.split(".")[0] in ("torch", "operator", "builtins", "math", "_operator"):
        return False
    name = getattr(node.target, "__name__", "")
    return not name.startswith(CHECK_PREFIXES)


def _function_name(node: fx.Node) -> str:
    target = node.target
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)


def describe_node(node: fx.Node) -> str:
    """``call of _wrapped_x (moved from modeling_x.py:464) at modeling_x.py:622 in forward()``."""
    if node.op == "placeholder":
        what = f"input {node.target!r}"
    elif node.op == "call_module":
        what = f"module '{node.target}'"
    elif node.op == "call_method":
        what = f"method .{node.target}()"
    elif node.op == "call_function":
        what = f"call of {_function_name(node)}"
        origin = _moved_from(node.target)
        if origin:
            what += f" (moved from {origin})"
    else:
        what = f"{node.op} {node.target}"
    source = node.meta.get("tz_source")
    if source:
        what += f" at {describe_source(source)}"
    return what


def _moved_from(function: Any) -> str | None:
    """The ``# from modeling_x.py:464 (...)`` origin the patcher writes into each wrapped function."""
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    import linecache

    for lineno in range(code.co_firstlineno, code.co_firstlineno + 4):
        origin = noted_origin(linecache.getline(code.co_filename, lineno))
        if origin:
            return origin
    return None


def _last_on_path(start: fx.Node, live: set[fx.Node]) -> fx.Node | None:
    """The dead node furthest from ``start`` along its users (getitem nodes skipped): where the
    input's value was last used before it was dropped."""
    last, frontier, seen = None, [start], {start}
    while frontier:
        following = []
        for node in frontier:
            for user in node.users:
                if user in seen or user in live:
                    continue
                seen.add(user)
                following.append(user)
                if not (user.op == "call_function" and user.target is operator.getitem):
                    last = user
        frontier = following
    return last


def check_inputs_reach_output(
    graph: fx.Graph,
    sample: Mapping[str, Any],
    *,
    model_name: str,
    unused_inputs: Iterable[str] = (),
    eager_ignores: Callable[[str], bool | None] | None = None,
    nested: Mapping[str, Any] | None = None,
) -> None:
    """Raise :class:`DroppedInputError` when a tensor of ``sample`` or a wrapped/opaque call that
    received traced values does not contribute to the graph's output.

    ``unused_inputs`` names sample inputs the eager model does not read either (so dropping them
    is right); naming an input that *is* used is an error too, so the list cannot go stale.
    ``eager_ignores(name)`` tells whether the eager model ignores an input too (``None``: cannot
    tell): the error offers ``unused_inputs`` only for inputs that eager ignores or that could not
    be checked, never for one the eager model reads. ``nested``: the container inputs traced as one
    placeholder per tensor (:class:`~patcher.trace.nested_inputs.NestedInput`, by name): each of their
    tensors must reach the output.
    """
    unused = set(unused_inputs)
    check_unused_inputs_known(sample, unused)
    live = live_nodes(graph)
    placeholders = {node.target: node for node in graph.find_nodes(op="placeholder")}
    problems: list[str] = []
    dropped: list[str] = []
    sources: list[tuple[str, int]] = []
    nested = nested or {}
    leaves = {name: list(zip(container.traced_names, container.leaf_paths)) for name, container in nested.items()}
    for name, value in sample.items():
        if name in unused or not _holds_tensor(value):
            continue
        for target, path in leaves.get(name, [(name, "")]):
            node = placeholders.get(target)
            if node is None or node in live:
                continue
            if name not in dropped:
                dropped.append(name)
            last = _last_on_path(node, live)
            if last is not None and "tz_source" in last.meta:
                sources.append(last.meta["tz_source"][:2])
            where = f"its value is last used by {describe_node(last)}, whose result never reaches the output" \
                if last is not None else "nothing in the traced code reads it"
            problems.append(f"input {name!r}{f' (its tensor {name}{path})' if path else ''}: {where}")
    read = {name for name, node in placeholders.items() if node in live}
    read |= {name for name, pairs in leaves.items() if any(leaf in read for leaf, _ in pairs)}
    stale = sorted(name for name in unused & read)
    if stale:
        raise DroppedInputError(
            f"unused_inputs names {', '.join(map(repr, stale))}, but the traced {model_name} does use "
            f"{'it' if len(stale) == 1 else 'them'}: remove {'it' if len(stale) == 1 else 'them'} from unused_inputs",
            [], [])
    calls = []
    for node in graph.nodes:
        if node in live or not _is_opaque_call(node) or not _receives_container(node):
            continue
        calls.append(_function_name(node))
        if "tz_source" in node.meta:
            sources.append(node.meta["tz_source"][:2])
        problems.append(f"the result of {describe_node(node)} is never used, and it was handed a list, dict "
                        "or set: whatever it put there is lost, since the graph passes a fresh copy")
    if not problems:
        return
    bullet = "\n  - "
    raise DroppedInputError(
        f"the traced graph of {model_name} would silently ignore part of its input:{bullet}"
        + bullet.join(problems)
        + "\nThe graph runs, but computes something other than the eager model (e.g. logits that ignore the "
        "image). Usual causes: a wrapped block that changed a container or object the graph never sees again "
        "(re-patch with the current patcher), a branch decided while tracing, or a function in `ignore` "
        "whose result the model does not use. " + _unused_advice(dropped, eager_ignores)
        + " See GUIDE.md#silent-wrong-results.",
        dropped, calls, sources[0] if sources else None,
    )


def _unused_advice(dropped: list[str], eager_ignores: Callable[[str], bool | None] | None) -> str:
    """``unused_inputs`` is the way out only for an input the eager model does not read either."""
    verdicts = {name: eager_ignores(name) if eager_ignores is not None else None for name in dropped}
    read = [name for name, ignores in verdicts.items() if ignores is False]
    unread = [name for name, ignores in verdicts.items() if ignores is True]
    unknown = [name for name, ignores in verdicts.items() if ignores is None]
    parts = []
    if read:
        parts.append(f"The eager model does read {', '.join(map(repr, read))} (its output changes when "
                     f"{'it changes' if len(read) == 1 else 'they change'}): the graph lost "
                     f"{'it' if len(read) == 1 else 'them'}, so this is a tracing problem to fix, not an input to "
                     "declare unused.")
    if unread:
        parts.append(f"The eager model does not read {', '.join(map(repr, unread))} either (its output is the same "
                     f"when {'it changes' if len(unread) == 1 else 'they change'}): say so, "
                     f"unused_inputs={unread!r} (CLI: --unused-input NAME).")
    if unknown or not dropped:
        parts.append("If the eager model does not read the input either (its output is the same when the input "
                     "changes; not checked here" + ("" if eager_ignores is None else
                                                                ": the eager model could not run on the sample, e.g. on the meta device")
                     + f"), say so: unused_inputs={unknown or ['NAME']!r} (CLI: --unused-input NAME).")
    return " ".join(parts)


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(item) for item in value)
    if isinstance(value, dict):
        return any(_holds_tensor(item) for item in value.values())
    return False


def _receives_container(node: fx.Node) -> bool:
    """Whether a call got a Python list/dict/set: the graph rebuilds such an argument at every run,
    so a call that fills it and returns nothing the graph uses changes nothing anyone reads.
    (Unused calls of pure functions, such as a mask builder whose mask no layer of a tiny
    hybrid model needs, are no drop: eager computes and ignores them too.)"""
    def holds(value: Any) -> bool:
        if isinstance(value, (list, dict, set)):
            return True
        if isinstance(value, tuple):
            return any(holds(item) for item in value)
        return False

    return any(holds(arg) for arg in node.args) or any(holds(arg) for arg in node.kwargs.values())
