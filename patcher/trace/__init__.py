"""Tracing: torch.fx over a transformers model with sequential targets as leaves."""

from ..registry.versions import check_supported_versions

check_supported_versions()  # below the floors, tracing fails or is silently wrong: say so before it starts

import importlib

from ..exports.errors import TRACE_ERRORS
from .diagnose import UntraceableConstruct, diagnose
from .graph_runtime import TracedGraph
from .tracer import DEFAULT_IGNORE, SequentialTracer, trace_graph

# the errors, from the one table that names them (patcher exports the same)
for _name, _module in TRACE_ERRORS.items():
    globals()[_name] = getattr(importlib.import_module(f".{_module}", __name__), _name)
del _name, _module

__all__ = sorted([*TRACE_ERRORS, "DEFAULT_IGNORE", "SequentialTracer", "TracedGraph", "UntraceableConstruct",
                  "diagnose", "trace_graph"])
