"""Running a traced graph: :class:`TracedGraph` (a whole-model graph and what it needs at run time),
the root its generated code reads the model and the trace's constants from, and its compilation.

The tracer (:mod:`.tracer`) produces these; the partition and verify layers run them without
needing the tracer itself.
"""

from __future__ import annotations

import contextlib
import copy
import gc
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from torch import fx, nn

from .hooks import check_run_time
from .liveness import describe_node
from .record import TraceRecord
from .wrapped_state import guard_wrapped_functions, settings_rolled_back_on_error

#: The ``get_attr`` target of the generated code that stands for the model itself.
ROOT_ATTRIBUTE = "_tracezoo_root"
#: Name prefix of the values captured while tracing (``GraphRoot`` serves them by name).
CONSTANT_PREFIX = "_tracezoo_constant_"
#: The file name of compiled graph code in tracebacks.
GRAPH_FILENAME = "<tracezoo-graph>"


@dataclass
class TracedGraph:
    """A whole-model fx graph plus what it needs at run time.

    ``forward(model, **inputs)`` runs the graph against the real model, so its modules (and
    any hooks on them) are the ones called. It checks the run against ``record`` (see
    :class:`~patcher.trace.record.TraceRecord`): an input the graph was not traced with, a
    missing one, a constant of the trace with another value, another train/eval mode or a model
    of another structure raise instead of computing something else.
    Modules the tracer walked through (``traced_through``,
    "" for the root) are inlined, not called: a hook added to one of them after tracing would never
    run, so ``forward`` raises ``HookError`` instead.
    """

    graph: fx.Graph
    input_names: list[str]
    constants: dict[str, Any]
    record: TraceRecord = field(repr=False)
    target_names: list[str] = field(default_factory=list)
    traced_through: list[str] = field(default_factory=list)
    _forward: Any = field(default=None, repr=False)

    def forward(self, model: nn.Module, **inputs):
        check_run_time(model, self.traced_through)
        self.record.check_model_inputs(inputs, "TracedGraph.forward")
        self.record.check_model(model, None, "TracedGraph.forward")
        if self._forward is None:
            self._forward = compile_graph(self.graph)
        return run_graph(self._forward, self.graph, GraphRoot(model, self.constants),
                         [inputs[name] for name in self.input_names], "the traced graph")

    __call__ = forward


class GraphRoot:
    """``self`` of generated graph code: the model, plus constants captured while tracing.

    A key/value cache the forward built while tracing (XLM and Flaubert build one on every call,
    whatever ``use_cache`` says) is such a constant: eager starts every call with an empty one,
    so each run of a graph gets its own copy of it as it was traced. Shared, every run appended
    its keys to the last run's (XLM's second run attended over 14 keys for 7 tokens)."""

    __slots__ = ("_model", "_constants", "_fresh")

    def __init__(self, model: nn.Module, constants: Mapping[str, Any]):
        self._model = model
        self._constants = constants
        self._fresh: dict[str, Any] = {}

    def __getattr__(self, name: str):
        if name == ROOT_ATTRIBUTE:
            return self._model
        constant = self._constants.get(name, _MISSING)
        if constant is not _MISSING:
            if _is_cache(constant):
                if name not in self._fresh:
                    self._fresh[name] = copy.deepcopy(constant)
                return self._fresh[name]
            return constant
        return getattr(self._model, name)


def _is_cache(value: Any) -> bool:
    from transformers.cache_utils import Cache

    return isinstance(value, Cache) or type(value).__name__ == "EncoderDecoderCache"


_MISSING = object()


def traced_message(texts: tuple[str, ...], *values: Any) -> str:
    """A message an f-string formatted with traced values while tracing (``f"tokens: {n}"`` gave
    ``"tokens: Proxy(sum_1)"``), formatted again with the run-time ``values``: ``texts`` are the
    pieces around them."""
    pieces = [texts[0]]
    for value, text in zip(values, texts[1:]):
        pieces += [format(value, ""), text]
    return "".join(pieces)


def unpacked_item(mapping: Mapping[str, Any], key: str, traced_keys: tuple[str, ...]) -> Any:
    """``mapping[key]`` for a ``**mapping`` the tracer unpacked with ``traced_keys`` (a leaf module's
    output, whose keys it took from an eager run): a run where the output has other keys raises, since
    the graph would silently drop the keys it did not unpack or fail to find one it did."""
    keys = tuple(mapping.keys())
    if keys != traced_keys:
        raise RuntimeError(
            f"the graph unpacks a {type(mapping).__name__} (`**` of a module's output) with the keys "
            f"{list(traced_keys)} it had when traced, but this run's has {list(keys)}: the graph would drop "
            "or miss a value. Trace with a sample (and flags such as output_hidden_states) like this run's."
        )
    return mapping[key]


def module_device(module: nn.Module) -> torch.device:
    """``module.device`` when the graph runs: the device of its first parameter, as transformers'
    ``ModuleUtilsMixin.device`` reads it. The tracer records ``self.device`` as a call of this
    instead of the device the model had while tracing (``meta`` for a model traced on meta)."""
    device = getattr(module, "device", None)
    if isinstance(device, torch.device):
        return device
    return next(parameter.device for parameter in module.parameters())


def compile_graph(graph: fx.Graph):
    """Compile an fx graph into a Python function ``forward(root, *placeholders)``."""
    code = graph.python_code(root_module="self")
    namespace = dict(code.globals)
    # Wrapped functions run only here, never while tracing: one changing module settings must not pass.
    guard_wrapped_functions(namespace)
    exec(compile(code.src, GRAPH_FILENAME, "exec"), namespace)
    return namespace["forward"]


def run_graph(forward, graph: fx.Graph, root: "GraphRoot", inputs: list[Any], where: str):
    """``forward(root, *inputs)``; an exception raised by the graph's own code (not inside a module
    it calls, whose frames already point at model code) gets a note naming the node and the
    model-code line it was traced from, and ``graph_source`` = ``(file, line)`` for reports.

    Without the note, an error raised by an operation of the graph (``dropout(None)`` on a value
    that was a proxy while tracing) ends its traceback in torch, far from the model line it came from.

    A run that raises leaves the settings of the model as they were before it
    (:func:`~patcher.trace.wrapped_state.settings_rolled_back_on_error`): a refused batch must not
    switch the model for the next one.
    """
    try:
        with settings_rolled_back_on_error():
            return forward(root, *inputs)
    except Exception as exc:
        node = failing_node(graph, exc)
        source = node.meta.get("tz_source") if node is not None else None
        if source is not None:
            exc.add_note(f"tracezoo: raised while running {where}, by its node `{node.name}`: {describe_node(node)}")
            try:
                exc.graph_source = source[:2]
            except AttributeError:  # an exception type with __slots__: the note is enough
                pass
        raise


def failing_node(graph: fx.Graph, exc: BaseException) -> fx.Node | None:
    """The node of ``graph`` whose generated line raised ``exc``, if the graph's code is in its
    traceback and the innermost of its frames is a line of that code."""
    lineno = None
    trace = exc.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == GRAPH_FILENAME:
            lineno = trace.tb_lineno
        trace = trace.tb_next
    if lineno is None:
        return None
    code = graph.python_code(root_module="self")
    index = (code._lineno_map or {}).get(lineno - code._prologue_start)
    return None if index is None else list(graph.nodes)[index]


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector: tracing builds millions of small objects that reference
    each other, and full collections rescanning them took half the time on 100,000-layer chains."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
