"""``patcher plan``: GPU and CPU memory per subgraph for sequential calibration, before the run."""

from __future__ import annotations

# The planner imports torch and the tracer (seconds): its names load on first use, so that
# `patcher plan --help` (which imports patcher.plan.cli) stays fast.
_EXPORTS = {"MemoryPlan": "memory", "PlanError": "memory", "SubgraphPlan": "memory", "plan_memory": "memory", "tensor_bytes": "memory",
            "format_plan": "report", "plan_model": "report"}

__all__ = ["MemoryPlan", "PlanError", "SubgraphPlan", "plan_memory", "plan_model", "format_plan", "tensor_bytes"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
