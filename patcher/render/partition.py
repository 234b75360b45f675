"""What a partition picture shows, read from the subgraphs alone (no graphviz here).

Every subgraph graph keeps the original node names, and its placeholders are named after the
values it reads, so the whole-model picture is rebuilt from the subgraphs: a placeholder
``v`` of subgraph ``j`` is either a model input or the node ``v`` of an earlier subgraph.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch
from torch import fx, nn

from ..partition import Subgraph
from ..registry.wrapped import is_check_name, is_wrapped_name
from ..trace.graph_runtime import CONSTANT_PREFIX, ROOT_ATTRIBUTE, TracedGraph

#: Node kinds, in legend order.
TARGET = "target"
MODULE = "module"
OPAQUE = "opaque"
OP = "op"
ATTR = "attr"

_PLAIN_FUNCTION_MODULES = ("torch", "_operator", "operator", "builtins", "math", "_functools", "functools")


@dataclass
class NodeInfo:
    """One computation node of the whole-model graph, placed in its subgraph."""

    name: str
    category: str  # TARGET, MODULE, OPAQUE, OP or ATTR: how the node is drawn
    subgraph: int
    label: str
    detail: str = ""  # e.g. the module class
    inputs: list[tuple[str, str]] = field(default_factory=list)  # (value name, role) in argument order
    attrs: list[str] = field(default_factory=list)  # get_attr targets read


@dataclass
class PartitionView:
    """The partition as the renderer sees it."""

    nodes: dict[str, NodeInfo]  # computation nodes by name, in execution order
    subgraphs: list[Subgraph]
    model_inputs: list[str]
    model_outputs: list[tuple[str, list[str]]]  # (output key, value names it is made of)
    producer: dict[str, int]  # value name -> subgraph index that computes it (model inputs absent)
    classes: dict[str, str]  # module path -> class name (when the model was given)

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    def nodes_of(self, index: int) -> list[NodeInfo]:
        by_subgraph = self.__dict__.get("_by_subgraph")
        if by_subgraph is None:
            by_subgraph = self.__dict__["_by_subgraph"] = {}
            for node in self.nodes.values():
                by_subgraph.setdefault(node.subgraph, []).append(node)
        return by_subgraph.get(index, [])

    def roles(self, value: str, consumer: int) -> list[str]:
        """Argument names ``value`` is passed under to targets / opaque functions of ``consumer``."""
        roles: list[str] = []
        readers = [node for node in self.nodes_of(consumer) if node.category in (TARGET, OPAQUE)]
        for node in sorted(readers, key=lambda n: n.category != TARGET):
            for name, role in node.inputs:
                if name == value and role and role not in roles:
                    roles.append(role)
        return roles


def build_view(subgraphs: Sequence[Subgraph], traced: TracedGraph | None = None,
               model: nn.Module | None = None) -> PartitionView:
    if not subgraphs:
        raise ValueError("nothing to render: the partition has no subgraphs")
    modules = dict(model.named_modules()) if model is not None else {}
    nodes: dict[str, NodeInfo] = {}
    producer: dict[str, int] = {}
    classes: dict[str, str] = {}
    for subgraph in subgraphs:
        targets = set(subgraph.targets)
        for node in subgraph.graph.nodes:
            if node.op not in ("call_module", "call_function", "call_method"):
                continue
            category, label, detail = _describe(node, targets, modules)
            if node.op == "call_module" and detail:
                classes[str(node.target)] = detail
            info = NodeInfo(name=node.name, category=category, subgraph=subgraph.index, label=label, detail=detail)
            for value, role in _arguments(node, modules):
                if value.op == "get_attr":
                    if value.target not in info.attrs:
                        info.attrs.append(str(value.target))
                elif value.name not in [name for name, _ in info.inputs]:
                    info.inputs.append((value.name, role))
            nodes[node.name] = info
            producer[node.name] = subgraph.index

    read = [name for subgraph in subgraphs for name in subgraph.input_names]
    if traced is not None:
        model_inputs = list(traced.input_names)
    else:
        model_inputs = []
    for name in read:
        if name not in producer and name not in model_inputs:
            model_inputs.append(name)

    outputs: list[tuple[str, list[str]]] = []
    output_node = next(iter(subgraphs[-1].graph.find_nodes(op="output")), None)
    if output_node is not None:
        result = output_node.args[0]
        items = result.items() if isinstance(result, dict) else [("output", result)]
        for key, value in items:
            names: list[str] = []
            fx.node.map_arg(value, lambda n: names.append(n.name) if n.name not in names else None)
            if names:
                outputs.append((str(key), names))
    return PartitionView(nodes=nodes, subgraphs=list(subgraphs), model_inputs=model_inputs, model_outputs=outputs,
                         producer=producer, classes=classes)


def _describe(node: fx.Node, targets: set[str], modules: dict[str, nn.Module]) -> tuple[str, str, str]:
    if node.op == "call_module":
        module = modules.get(str(node.target))
        detail = type(module).__name__ if module is not None else ""
        return (TARGET if node.target in targets else MODULE), str(node.target), detail
    if node.op == "call_method":
        name = str(node.target)
        if hasattr(torch.Tensor, name):
            return OP, f".{name}()", ""
        owner = node.args[0] if node.args else None
        if isinstance(owner, fx.Node) and owner.op == "get_attr":
            return OPAQUE, f"{attr_label(str(owner.target))}.{name}()", ""
        return OPAQUE, f".{name}()", ""
    target = node.target
    name = getattr(target, "__name__", str(target))
    if is_opaque_function(target):
        return OPAQUE, f"{name}()", getattr(target, "__module__", "") or ""
    if name == "getattr" and len(node.args) > 1 and isinstance(node.args[1], str):
        return OP, f".{node.args[1]}", ""
    if name == "getitem" and len(node.args) > 1 and not isinstance(node.args[1], fx.Node):
        index = _short_repr(node.args[1])
        return OP, f"[{index}]", ""
    return OP, name, ""


def is_opaque_function(target: Any) -> bool:
    """A function kept as one call: wrapped by the patcher, ignored, or from outside torch."""
    name = getattr(target, "__name__", "")
    if is_wrapped_name(name) or is_check_name(name):
        return True
    module = getattr(target, "__module__", None) or ""
    if not module:
        return False
    return not module.split(".")[0] in _PLAIN_FUNCTION_MODULES


def attr_label(target: str) -> str:
    if target == ROOT_ATTRIBUTE:
        return "model"
    if target.startswith(CONSTANT_PREFIX):
        return "constant " + target[len(CONSTANT_PREFIX):]
    return target


def _short_repr(value: Any, limit: int = 14) -> str:
    if isinstance(value, slice):
        parts = ["" if v is None else _short_repr(v) for v in (value.start, value.stop)]
        text = ":".join(parts) + (f":{_short_repr(value.step)}" if value.step is not None else "")
    elif isinstance(value, tuple):
        text = ", ".join(_short_repr(v) for v in value)
    elif value is Ellipsis:
        text = "..."
    elif isinstance(value, fx.Node):
        text = value.name
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _arguments(node: fx.Node, modules: dict[str, nn.Module]) -> Iterable[tuple[fx.Node, str]]:
    """Direct node arguments with the parameter name they are passed as ('' when unknown)."""
    names = _parameter_names(node, modules)
    found: list[tuple[fx.Node, str]] = []
    seen: set[fx.Node] = set()

    def add(value: Any, role: str) -> None:
        def visit(n: fx.Node) -> fx.Node:
            if n not in seen:
                seen.add(n)
                found.append((n, role if n is value else ""))
            return n

        fx.node.map_arg(value, visit)

    for position, value in enumerate(node.args):
        add(value, names[position] if position < len(names) else "")
    for key, value in node.kwargs.items():
        add(value, key)
    return found


def _parameter_names(node: fx.Node, modules: dict[str, nn.Module]) -> list[str]:
    function = None
    if node.op == "call_module":
        module = modules.get(str(node.target))
        function = getattr(module, "forward", None)
    elif node.op == "call_function" and is_opaque_function(node.target):
        function = node.target
    if function is None:
        return []
    try:
        parameters = inspect.signature(inspect.unwrap(function)).parameters.values()
    except (TypeError, ValueError):
        return []
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if node.op == "call_module" and names and names[0] == "self":
        names = names[1:]
    return names
