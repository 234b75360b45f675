"""What the passes around a trace share: the model and sample, the facts eager runs taught, a trace's result."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from torch import fx, nn

from .decisions import DecisionNeeded, Decisions
from .model_walk import ModelWalk
from .none_decisions import NoneDecisions
from .passes.arguments import Arguments
from .root import Root


@dataclasses.dataclass(frozen=True)
class EagerFacts:
    """What eager runs on the sample showed that a trace cannot see, for the next trace (None: not known)."""

    leaf_outputs: Mapping[nn.Module, list[Any]] | None = None  # each leaf call's output structure (leaf_outputs.py)
    leaf_output_keys: Mapping[str, tuple[str, ...]] | None = None  # the keys of leaves' outputs that `**` unpacks
    settled_settings: Mapping[Any, Any] | None = None  # the settings moved code leaves (wrapped_state.py)


@dataclasses.dataclass
class TraceResult:
    """One trace: its graph, or why it stopped."""

    tracer: fx.Tracer
    facts: EagerFacts  # what it was traced with
    graph: fx.Graph | None = None
    changes: list[str] = dataclasses.field(default_factory=list)  # attributes of leaves the trace wrote
    failure: Exception | None = None  # `**` of a leaf's output whose keys no eager run gave yet
    # a traced value iterated, where leaves' outputs read as containers may be what it iterates
    # (see passes.leaf_structures)
    iterated: Exception | None = None
    undecided: DecisionNeeded | None = None  # a condition not decided yet (see patcher.trace.decisions)
    # moved code's results that may be None, decided from the sample after this trace (or a run in the
    # middle of it reached the trace): trace again (see patcher.trace.none_decisions, mid_trace_runs)
    decided_none_results: bool = False


@dataclasses.dataclass
class Tracing:
    """The model and sample of one ``trace_graph`` call, and how to trace them once (``trace_once``,
    the tracer's: the passes, below the tracer, run it again with what they learned)."""

    model: nn.Module
    sample: Mapping[str, Any]
    arguments: Arguments
    root: Root
    trace_once: Callable[[Tracing, EagerFacts], TraceResult]
    decisions: Decisions = dataclasses.field(default_factory=Decisions)  # shared by every trace of the call
    none_decisions: NoneDecisions = dataclasses.field(default_factory=NoneDecisions)  # the same
    # the model's modules, walked once for every trace of the call (see patcher.trace.model_walk)
    walk: ModelWalk | None = None
    # whether model code may run in the middle of a trace (see patcher.trace.mid_trace_runs): off once
    # such a run reached the trace
    mid_trace_runs: bool = True

    def __post_init__(self):
        if self.walk is None:
            self.walk = ModelWalk(self.model)
