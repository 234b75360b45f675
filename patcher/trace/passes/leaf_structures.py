"""Items read from a leaf's output, None in eager, or a leaf's output iterated: traced again with each
leaf call's structure from eager."""

from __future__ import annotations

import dataclasses

from torch import fx, nn

from ..explain import explained
from ..leaf_outputs import VALUE, eager_leaf_outputs, read_as_container
from ..traces import TraceResult, Tracing
from .branch_decisions import traced_deciding_branches
from .unpacked_keys import retraced_with_unpacked_keys


def leaves_read_as_containers(model: nn.Module, graph: fx.Graph) -> list[nn.Module]:
    """The modules the graph calls whose output traced code reads item by item."""
    return [model.get_submodule(node.target) for node in graph.find_nodes(op="call_module") if read_as_container(node)]


def retraced_for_iterated_leaf_outputs(tracing: Tracing, result: TraceResult) -> TraceResult:
    """``result`` traced again with the structure of the leaves' outputs that traced code reads as
    containers, where it failed iterating a graph value (``result.iterated``). A leaf's output is
    one graph value while tracing, and no code can take one apart (``for key, value in
    output.items()``); in eager it is a ``ModelOutput`` of tensors. Molmo2's ``get_image_features``
    sets ``pooler_output`` of its tower's output, and transformers' ``filter_output_hidden_states``
    iterates the result's items to drop ``hidden_states``: with the tower's output structured as in
    eager (checked at every run, see :mod:`patcher.trace.leaf_outputs`), the items are there to
    iterate. The trace's own failure where eager cannot run, or gives no container."""
    if result.iterated is None:
        return result
    model = tracing.model
    containers = leaves_read_as_containers(model, result.tracer.graph)
    leaf_outputs = eager_leaf_outputs(model, tracing.sample, tracing.root.fixed, dict.fromkeys(containers))
    if not (leaf_outputs and any(structure != VALUE for calls in leaf_outputs.values() for structure in calls)):
        raise explained(result.iterated, model, result.tracer, tracing.root.original_class)
    retraced = traced_deciding_branches(tracing, dataclasses.replace(result.facts, leaf_outputs=leaf_outputs))
    return retraced_with_unpacked_keys(tracing, retraced)


def retraced_with_leaf_structures(tracing: Tracing, result: TraceResult) -> TraceResult:
    """Items read from a leaf's output were each one graph value, also where eager has None: decided
    on, they take the branch eager does not. Known from one eager run, the trace is redone with them
    (see :mod:`patcher.trace.leaf_outputs`)."""
    model = tracing.model
    containers = leaves_read_as_containers(model, result.graph)
    if not containers or result.changes:
        return result
    leaf_outputs = eager_leaf_outputs(model, tracing.sample, tracing.root.fixed, dict.fromkeys(containers))
    if not (leaf_outputs and any(structure != VALUE for calls in leaf_outputs.values() for structure in calls)):
        return result
    return traced_deciding_branches(tracing, dataclasses.replace(result.facts, leaf_outputs=leaf_outputs))
