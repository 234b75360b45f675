"""``patcher plan``: GPU and CPU memory per subgraph for sequential calibration, before the run."""

from .memory import MemoryPlan, SubgraphPlan, plan_memory, tensor_bytes
from .report import format_plan, plan_model

__all__ = ["MemoryPlan", "SubgraphPlan", "plan_memory", "plan_model", "format_plan", "tensor_bytes"]
