"""Items read from a leaf's output, None in eager: traced again with each leaf call's structure from eager."""

from __future__ import annotations

import dataclasses

from ..leaf_outputs import VALUE, eager_leaf_outputs, read_as_container
from ..traces import TraceResult, Tracing
from .branch_decisions import traced_deciding_branches


def retraced_with_leaf_structures(tracing: Tracing, result: TraceResult) -> TraceResult:
    """Items read from a leaf's output were each one graph value, also where eager has None: decided
    on, they take the branch eager does not. Known from one eager run, the trace is redone with them
    (see :mod:`patcher.trace.leaf_outputs`)."""
    model = tracing.model
    containers = [model.get_submodule(node.target) for node in result.graph.find_nodes(op="call_module")
                  if read_as_container(node)]
    if not containers or result.changes:
        return result
    leaf_outputs = eager_leaf_outputs(model, tracing.sample, tracing.root.fixed, dict.fromkeys(containers))
    if not (leaf_outputs and any(structure != VALUE for calls in leaf_outputs.values() for structure in calls)):
        return result
    return traced_deciding_branches(tracing, dataclasses.replace(result.facts, leaf_outputs=leaf_outputs))
