"""The traced graph handed back, with the record of what it was traced with."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx, nn

from .graph_runtime import CONSTANT_PREFIX, TracedGraph
from .nested_inputs import taking_containers
from .record import TraceRecord, mode_exceptions
from .traces import TraceResult, Tracing


def recorded_graph(tracing: Tracing, result: TraceResult) -> TracedGraph:
    """The graph of the last trace, its inputs and constants, and the :class:`TraceRecord` that its
    runs are checked against."""
    model, root, traced_modules, tracer = tracing.model, tracing.root, tracing.arguments.traced_modules, result.tracer
    # the callers hand a container input whole: its tensors become reads of it (see nested_inputs.py)
    nested = taking_containers(result.graph, root.nested, root.placeholders, tracer.ranks_read, tracer.constants,
                               CONSTANT_PREFIX)
    leaf_names = {leaf for container in nested.values() for leaf in container.traced_names}
    record = TraceRecord(
        model_class=root.original_class.__name__,
        tensor_inputs=tuple(root.placeholders),
        constants=dict(root.fixed),
        omittable=frozenset(root.omittable),
        training=model.training,
        training_exceptions=mode_exceptions(model, tracing.walk.named),
        children={name: tuple(module._modules) for name, module in tracing.walk.unique if module in traced_modules},
        tensor_shapes=_tensor_shapes(result.graph, model, tracer),
        tensor_ranks={name: rank for name, rank in tracer.ranks_read.items() if name not in leaf_names},
        nested_inputs=nested,
    )
    return TracedGraph(graph=result.graph, input_names=root.placeholders, constants=tracer.constants,
                       target_names=list(tracing.arguments.targets), record=record,
                       traced_through=["", *tracer.traced_through])


def _tensor_shapes(graph: fx.Graph, model: nn.Module, tracer: fx.Tracer) -> dict[str, tuple[int, ...]]:
    """Shapes of the tensors the graph reads directly and of the direct parameters of the modules
    it calls: a model of other sizes (hidden size, vocabulary) does not fit the graph's constants."""
    shapes: dict[str, tuple[int, ...]] = {}
    tensor_paths = set(tracer._tensor_paths.values())
    for node in graph.find_nodes(op="get_attr"):
        if node.target in tensor_paths:
            value = value_at(model, node.target)
            if isinstance(value, torch.Tensor):
                shapes[node.target] = tuple(value.shape)
    for node in graph.find_nodes(op="call_module"):
        module = value_at(model, node.target)
        if isinstance(module, nn.Module):
            for name, parameter in module.named_parameters(recurse=False):
                shapes[f"{node.target}.{name}"] = tuple(parameter.shape)
    return shapes


def value_at(model: nn.Module, target: str):
    value: Any = model
    for part in target.split("."):
        value = getattr(value, part, None)
    return value
