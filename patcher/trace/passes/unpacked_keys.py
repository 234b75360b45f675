"""`**` of a leaf's output: its keys exist only once it ran, so the model runs once and is traced again."""

from __future__ import annotations

import dataclasses

from ..explain import explained
from ..leaf_outputs import observed_output_keys
from ..traces import TraceResult, Tracing
from .branch_decisions import traced_deciding_branches


def retraced_with_unpacked_keys(tracing: Tracing, result: TraceResult) -> TraceResult:
    """``result`` traced again with the keys of the leaves' outputs on one eager run, where it failed
    unpacking one; the trace's own failure where that run fails (a model that cannot run on this
    sample, e.g. on meta), since it names the line that unpacks (see :mod:`patcher.trace.leaf_outputs`)."""
    if result.failure is None:
        return result
    model = tracing.model
    leaves = [module for module in model.modules() if module not in tracing.arguments.traced_modules]
    try:
        keys = observed_output_keys(model, tracing.sample, tracing.root.fixed, leaves)
    except Exception as exc:  # noqa: BLE001 - the untraceable line is the better message
        raise explained(result.failure, model, result.tracer) from exc
    return traced_deciding_branches(tracing, dataclasses.replace(result.facts, leaf_output_keys=keys))
