"""Conditions the tracer decides from the sample: the ``_decided_*`` functions the patcher writes
for a branch on shapes around sequential targets (rule TZ105), where a wrapped function would hide
the targets from the graph.

While tracing, such a condition is a proxy. The tracer works out its value for the sample by running
the part of the graph traced so far that computes it, follows that branch, and adds a node that
checks the condition again whenever the graph runs: a run whose shapes would take the other branch
raises :class:`~patcher.trace.errors.BranchDecisionError` instead of running the traced one.

fx's patches of ``nn.Module.__call__`` are active while tracing, so calling modules then would
record them into the graph: the value is worked out between two traces. A trace that reaches an
undecided condition stops (:class:`DecisionNeeded`), the condition is computed, and the model is
traced again with that answer (tracing is deterministic: the k-th decision of one trace is the
k-th of the next).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
from torch import fx, nn

from ..registry.wrapped import is_decision_name
from .errors import BranchDecisionError, TracingError
from .graph_runtime import GraphRoot, compile_graph, run_graph
from .liveness import describe_node
from .state import hooks_silenced

#: More decisions than this in one trace means something loops on them: refused, not retraced for ever.
MAX_DECISIONS = 64


class DecisionNeeded(BaseException):
    """Stops a trace at a condition not decided yet. A BaseException, so that model code catching
    ``Exception`` around the branch (a fallback path) cannot swallow it."""

    def __init__(self, node: fx.Node, measure: Callable[[Any], Any] = bool):
        super().__init__(node.name)
        self.node = node
        self.measure = measure  # what of the node's value for the sample is decided (bool, len, an index)


def is_decision(node: fx.Node) -> bool:
    return node.op == "call_function" and is_decision_name(getattr(node.target, "__name__", ""))


def check_branch_decision(value: Any, traced: bool, where: str) -> None:
    """The graph's check that a condition decided while tracing still has the traced value."""
    if bool(value) != traced:
        raise BranchDecisionError(
            f"this input takes another branch than the sample the graph was traced with: the condition "
            f"of {where} is {bool(value)} here and was {traced} while tracing. The graph holds only the traced "
            "branch (the patcher kept this branch on shapes in the code because wrapping it would hide "
            "sequential targets); trace with a sample of this kind of shape to run such inputs.")


class Decisions:
    """The answers of earlier traces, handed out in order to the conditions of the current one."""

    def __init__(self):
        self.values: list[Any] = []  # bools, lengths, container indices
        self.used = 0

    def restart(self) -> None:
        self.used = 0

    def answer(self, tracer: fx.Tracer, proxy: fx.Proxy) -> bool:
        if self.used == len(self.values):
            raise DecisionNeeded(proxy.node)
        value = self.values[self.used]
        self.used += 1
        tracer.create_proxy("call_function", check_branch_decision, (proxy, value, describe_node(proxy.node)), {})
        return value

    def answer_length(self, tracer: fx.Tracer, proxy: fx.Proxy, check: Callable) -> int:
        """How many items ``proxy`` (a sequence of tensors) has for the sample; ``check(value, count,
        where)`` is added to the graph to refuse a run with another count."""
        return self.answer_measured(tracer, proxy, len, check)

    def answer_measured(self, tracer: fx.Tracer, proxy: fx.Proxy, measure: Callable[[Any], Any], check: Callable,
                        what: str | None = None) -> Any:
        """``measure`` of ``proxy``'s value for the sample (its length, the index it stands for);
        ``check(value, answer, where)`` is added to the graph to refuse a run with another answer.
        ``what``: what the value is, for the check's message (it names the node's line either way)."""
        if self.used == len(self.values):
            raise DecisionNeeded(proxy.node, measure)
        answer = self.values[self.used]
        self.used += 1
        where = describe_node(proxy.node) if what is None else f"{what} ({describe_node(proxy.node)})"
        tracer.create_proxy("call_function", check, (proxy, answer, where), {})
        return answer

    def add(self, value: bool | int | str) -> None:
        if len(self.values) >= MAX_DECISIONS:
            raise TracingError(f"more than {MAX_DECISIONS} branch decisions in one trace: refused, since the "
                               "trace does not come to an end")
        self.values.append(value)


def sample_value(graph: fx.Graph, node: fx.Node, model: nn.Module, sample: Mapping[str, Any],
                 constants: Mapping[str, Any], measure: Callable[[Any], Any] = bool,
                 modules: list[nn.Module] | None = None) -> Any:
    """``measure`` of the value ``node`` (a decided condition, a sequence of decided length, a
    container's index) has for ``sample`` (see :func:`sample_result`)."""
    try:
        return measure(sample_result(graph, node, model, sample, constants, modules))
    except Exception as exc:
        raise TracingError(f"could not work out the condition of {describe_node(node)} for the sample, which the "
                           f"tracer needs to follow its branch: {type(exc).__name__}: {exc}") from exc


def sample_result(graph: fx.Graph, node: fx.Node, model: nn.Module, sample: Mapping[str, Any],
                  constants: Mapping[str, Any], modules: list[nn.Module] | None = None) -> Any:
    """The value ``node`` has for ``sample``: the nodes of ``graph`` it depends on, run on a copy of
    the sample's tensors (a node writing into an input in place must not change the sample the
    trace goes on with). Raises what the run raises. ``modules``: ``list(model.modules())`` when the
    caller has it."""
    needed: set[fx.Node] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current not in needed:
            needed.add(current)
            stack.extend(current.all_input_nodes)
    partial = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    for original in graph.nodes:
        if original in needed:
            copies[original] = partial.node_copy(original, lambda value: copies[value])
    partial.output(copies[node])
    names = [placeholder.target for placeholder in partial.find_nodes(op="placeholder")]
    inputs = [_copied(sample[name]) for name in names]
    with torch.no_grad(), hooks_silenced(model, modules):  # a decision's run is no calibration batch
        return run_graph(compile_graph(partial), partial, GraphRoot(model, constants), inputs,
                         "the part of the graph a decision of the trace reads")


def _copied(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(item) for item in value)
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    return value
