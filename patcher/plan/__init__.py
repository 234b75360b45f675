"""``patcher plan``: GPU and CPU memory per subgraph for sequential calibration, before the run."""

from __future__ import annotations

from ..exports.lazy import lazy_names

# The planner imports torch and the tracer (seconds): its names load on first use, so that
# `patcher plan --help` (which imports patcher.plan.cli) stays fast.
_EXPORTS = {"MemoryPlan": "memory", "PlanError": "memory", "SubgraphPlan": "memory", "plan_memory": "memory", "tensor_bytes": "memory",
            "format_plan": "report", "plan_model": "report"}

__all__ = ["MemoryPlan", "PlanError", "SubgraphPlan", "plan_memory", "plan_model", "format_plan", "tensor_bytes"]

__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
