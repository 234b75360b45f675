"""``module.device`` read by traced code: a read when the graph runs, never a baked device.

transformers' ``ModuleUtilsMixin.device`` (read by e.g. ``inputs_embeds.to(self.device)``) is
recorded while tracing: the value handed to the code is a fresh ``torch.device`` object whose
identity remembers the module, so that an argument made of it becomes a run-time read
(:func:`~patcher.trace.graph_runtime.module_device`). A model traced on meta would otherwise move
values to the meta device when its graph runs. Python code deciding on it (``device.type == "cuda"``)
still sees the concrete device.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import fx, nn

from .graph_runtime import module_device


class DeviceReads:
    """The devices one tracer handed out for ``module.device`` reads, and the graph node each becomes."""

    def __init__(self, tracer: fx.Tracer):
        self.tracer = tracer
        self.sources: dict[int, tuple[torch.device, nn.Module]] = {}

    def read(self, module: nn.Module, device: Any) -> Any:
        """What traced code gets for ``module.device``: a device object of its own, remembered."""
        if not isinstance(device, torch.device):
            return device
        device = torch.device(device)
        self.sources[id(device)] = (device, module)
        return device

    def argument(self, device: torch.device) -> fx.Node | None:
        """A device the graph must not bake: one read from ``module.device`` (the module's device
        when the graph runs), or ``meta`` (the device of a model traced on meta, read another way,
        e.g. ``next(self.parameters()).device``: the model's device when the graph runs); None for
        any other device, which the graph may hold as a constant."""
        source = self.sources.get(id(device))
        if source is not None and source[0] is device:
            module = source[1]
        elif device.type == "meta":
            module = self.tracer.model
        else:
            return None
        return self.tracer.create_proxy("call_function", module_device, (module,), {}).node

    @contextlib.contextmanager
    def recorded(self):
        """While tracing, ``ModuleUtilsMixin.device`` hands out :meth:`read`'s devices."""
        from transformers.modeling_utils import ModuleUtilsMixin

        original = ModuleUtilsMixin.__dict__["device"]

        def device(module):
            return self.read(module, original.__get__(module))

        ModuleUtilsMixin.device = property(device, doc=original.__doc__)
        try:
            yield
        finally:
            ModuleUtilsMixin.device = original
