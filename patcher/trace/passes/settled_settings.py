"""Moved code the trace did not run may switch the model on this sample: traced again for the switch."""

from __future__ import annotations

import dataclasses

from ..traces import TraceResult, Tracing
from ..wrapped_state import observe_settled_settings
from .branch_decisions import traced_deciding_branches


def retraced_with_settled_settings(tracing: Tracing, result: TraceResult) -> TraceResult:
    """``result`` traced again with the settings wrapped functions change on one eager run (see
    :mod:`patcher.trace.wrapped_state`), where moved code was handed a module and may change them;
    as it was where that run fails or changes nothing (the graph's guard then refuses any change
    when it runs)."""
    if not result.tracer.wrapped_calls_on_modules:
        return result
    try:
        settled = observe_settled_settings(tracing.model, tracing.sample, tracing.root.fixed,
                                           tracing.arguments.traced_modules)
    except Exception:  # noqa: BLE001 - e.g. a model on meta: nothing replayed, every change refused
        settled = {}
    if not settled:
        return result
    return traced_deciding_branches(tracing, dataclasses.replace(result.facts, settled_settings=settled))
