"""Leave the model exactly as it was after tracing.

Model code writes state while it runs (Qwen2-VL stores ``self.rope_deltas``; decorators flip
``config.is_causal``), and while tracing those writes store proxies. The tracer also turns the
cache off through the configs. Everything written is put back afterwards.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from torch import nn
from transformers import PretrainedConfig

_MODULE_SLOTS = ("_parameters", "_buffers", "_modules")


def _configs_of(modules) -> list[PretrainedConfig]:
    seen: dict[int, PretrainedConfig] = {}
    stack = [getattr(module, "config", None) for module in modules]
    while stack:
        config = stack.pop()
        if isinstance(config, PretrainedConfig) and id(config) not in seen:
            seen[id(config)] = config
            stack.extend(value for value in vars(config).values() if isinstance(value, PretrainedConfig))
    return list(seen.values())


@contextlib.contextmanager
def preserved_model_state(
    model: nn.Module, traced_modules=None, *, disable_cache: bool = True
) -> Iterator[list[PretrainedConfig]]:
    """Snapshot plain attributes of the modules whose code runs while tracing, and of every config
    they reach; restore them on exit. Leaf modules never run while tracing, so by default only
    ``traced_modules`` (all modules when None) are snapshot.
    """
    modules = list(model.modules()) if traced_modules is None else list(traced_modules)
    module_attrs = [
        (module, {key: value for key, value in vars(module).items() if key not in _MODULE_SLOTS})
        for module in modules
    ]
    tensors = [(module, dict(module._parameters), dict(module._buffers)) for module in modules]
    configs = _configs_of(modules)
    config_attrs = [(config, dict(vars(config))) for config in configs]
    if disable_cache:
        # Decorators read use_cache from the config; a DynamicCache must not reach the graph.
        for config in configs:
            if "use_cache" in vars(config) or hasattr(type(config), "use_cache"):
                config.use_cache = False
    try:
        yield configs
    finally:
        for config, attrs in config_attrs:
            current = vars(config)
            for key in [key for key in current if key not in attrs]:
                del current[key]
            current.update(attrs)
        for module, attrs in module_attrs:
            current = vars(module)
            for key in [key for key in current if key not in attrs and key not in _MODULE_SLOTS]:
                del current[key]
            current.update(attrs)
        for module, parameters, buffers in tensors:
            module._parameters.clear()
            module._parameters.update(parameters)
            module._buffers.clear()
            module._buffers.update(buffers)
