"""One walk of a model's modules, shared by every trace of one ``trace_graph`` call.

Each trace needs the modules several times: the tracer maps tensors and configs to their paths, the
state snapshot saves every module's attributes and finds the configs, the functions an ignore entry
names are looked up in the modules' classes. ``trace_graph`` traces a model more than once (once more
per branch decided from the sample, per moved code's None result decided, per fact an eager run
taught), and walking the modules anew for each need (13 walks of 700 modules in one call on
Qwen2-VL with an image, which traces twice) took about a sixth of the call. Every trace puts the
modules' attributes, children, parameters and buffers and the configs' attributes back as they were
(:mod:`patcher.trace.state`), so the modules, their tensors and their configs are the same at the
start of every trace of one call: they are walked once.
"""

from __future__ import annotations

import functools
from typing import Any

from torch import nn
from transformers import PretrainedConfig


def configs_within(held: list[Any]) -> list[PretrainedConfig]:
    """The configs among ``held`` (the modules' ``config`` attributes) and the configs they hold."""
    seen: dict[int, PretrainedConfig] = {}
    stack = list(held)
    while stack:
        config = stack.pop()
        if isinstance(config, PretrainedConfig) and id(config) not in seen:
            seen[id(config)] = config
            stack.extend(value for value in vars(config).values() if isinstance(value, PretrainedConfig))
    return list(seen.values())


class ModelWalk:
    """``model.named_modules(remove_duplicate=False)`` taken once, and what the traces read from it."""

    def __init__(self, model: nn.Module):
        self.named: list[tuple[str, nn.Module]] = list(model.named_modules(remove_duplicate=False))

    @functools.cached_property
    def unique(self) -> list[tuple[str, nn.Module]]:
        """What ``named_modules()`` gives: each module once, under its first path, in the order of
        first visits (a module met again is skipped with its children, which the walk met under it)."""
        first: dict[nn.Module, str] = {}
        for name, module in self.named:
            first.setdefault(module, name)
        return [(name, module) for module, name in first.items()]

    @functools.cached_property
    def modules(self) -> list[nn.Module]:
        """What ``modules()`` gives."""
        return [module for _, module in self.unique]

    @functools.cached_property
    def names(self) -> dict[nn.Module, str]:
        """Each module's path (a module under two paths: the last one)."""
        return {module: name for name, module in self.named}

    @functools.cached_property
    def classes(self) -> set[type]:
        return {type(module) for _, module in self.named}

    @functools.cached_property
    def tensor_paths(self) -> dict[int, str]:
        """What named_parameters(remove_duplicate=False) and named_buffers(...) would give, in their
        order, by the tensor's identity: the last path of a shared tensor wins."""
        return {id(tensor): f"{prefix}.{key}" if prefix else key
                for slot in ("_parameters", "_buffers") for prefix, module in self.named
                for key, tensor in getattr(module, slot).items() if tensor is not None}

    @functools.cached_property
    def config_paths(self) -> dict[int, str]:
        """Each config by identity -> ``path.config`` of the module that owns it (the first path of a
        shared config: the walk's repeats come after each module's first visit)."""
        paths: dict[int, str] = {}
        held = self.held_configs
        for name, module in self.named:
            config = held[module]
            if isinstance(config, PretrainedConfig) and id(config) not in paths:
                paths[id(config)] = f"{name}.config" if name else "config"
        return paths

    @functools.cached_property
    def configs(self) -> list[PretrainedConfig]:
        """The configs the modules hold, and the configs those hold (see :func:`configs_within`)."""
        return configs_within(list(self.held_configs.values()))

    @functools.cached_property
    def held_configs(self) -> dict[nn.Module, Any]:
        """Each module's ``config`` attribute (None where it has none), read once for the paths and the
        configs: most modules have none, and a missing attribute is looked up through nn.Module.__getattr__,
        which raises."""
        return {module: getattr(module, "config", None) for module in self.names}
