"""Train mode with layerdrop refused: the graph would keep the layers of one random draw."""

from __future__ import annotations

from torch import nn
from transformers import PretrainedConfig

from ..errors import TrainingModeError


def check_layerdrop(model: nn.Module, traced_modules: set[nn.Module]) -> None:
    """Layerdrop throws dice in Python while tracing (`torch.rand([]) < self.layerdrop`): the graph
    would keep the layers of one throw for ever."""
    if not any(module.training for module in traced_modules):
        return
    found = []
    configs = {id(module.config): module.config for module in traced_modules
               if isinstance(getattr(module, "config", None), PretrainedConfig)}
    stack = list(configs.values())
    while stack:
        config = stack.pop()
        for key, value in vars(config).items():
            if isinstance(value, PretrainedConfig) and id(value) not in configs:
                configs[id(value)] = value
                stack.append(value)
            elif key.endswith("layerdrop") and isinstance(value, (int, float)) and value > 0:
                found.append(f"config.{key}={value}")
    for module in traced_modules:
        value = vars(module).get("layerdrop")
        if module.training and isinstance(value, (int, float)) and value > 0:
            found.append(f"{type(module).__name__}.layerdrop={value}")
    if found:
        raise TrainingModeError(
            f"{type(model).__name__} is in train mode with layerdrop ({', '.join(sorted(set(found)))}): "
            "which layers run is drawn at random in Python while tracing, so the graph would keep the layers "
            "of this one draw and skip the others every time it runs. Trace in eval mode (model.eval(); "
            "calibration runs in eval mode), or set layerdrop to 0."
        )
