"""Conditions decided from the sample (branches, loop counts, moved code's None results): the model traced
again once per condition, with its answer."""

from __future__ import annotations

from ..decisions import sample_value
from ..traces import EagerFacts, TraceResult, Tracing


def traced_deciding_branches(tracing: Tracing, facts: EagerFacts) -> TraceResult:
    """The model traced with ``facts``: once, plus once more per branch condition decided from the
    sample (see :mod:`patcher.trace.decisions`)."""
    decisions, none_decisions = tracing.decisions, tracing.none_decisions
    decisions.restart()
    none_decisions.restart()
    while True:
        result = tracing.trace_once(tracing, facts)
        if result.decided_none_results:  # moved code's None results decided: the path after them changed
            decisions.restart()
            none_decisions.restart()
            continue
        if result.undecided is None:
            return result
        # Outside the trace (fx's patches undone, the model's state restored): modules run for real.
        decisions.add(sample_value(result.tracer.graph, result.undecided.node, tracing.model,
                                   tracing.root.graph_values(tracing.sample),
                                   result.tracer.constants, result.undecided.measure, tracing.walk.modules))
        decisions.restart()
        none_decisions.restart()
