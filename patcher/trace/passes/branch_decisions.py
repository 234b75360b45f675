"""Branch conditions decided from the sample: the model traced again once per condition, with its answer."""

from __future__ import annotations

from ..decisions import sample_value
from ..traces import EagerFacts, TraceResult, Tracing


def traced_deciding_branches(tracing: Tracing, facts: EagerFacts) -> TraceResult:
    """The model traced with ``facts``: once, plus once more per branch condition decided from the
    sample (see :mod:`patcher.trace.decisions`)."""
    decisions = tracing.decisions
    decisions.restart()
    while True:
        result = tracing.trace_once(tracing, facts)
        if result.undecided is None:
            return result
        # Outside the trace (fx's patches undone, the model's state restored): modules run for real.
        decisions.add(sample_value(result.tracer.graph, result.undecided, tracing.model, tracing.sample,
                                   result.tracer.constants))
        decisions.restart()
