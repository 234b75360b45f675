"""The keys of what a module the graph calls whole returns, observed on one eager run.

``Output(**outputs)`` on the output of a leaf module (InstructBLIP's
``BaseModelOutputWithVisionQformerOutputs(**vision_outputs, vision_outputs=vision_outputs)``) needs
that output's keys while tracing, and a leaf's output is one graph value without any: which fields
of a ``ModelOutput`` are set (``None`` fields are no keys) is only known once the module has run.
When a trace unpacks such a value, the tracer runs the model once eagerly on the sample, records the
keys every leaf call returned, and traces again with them. Each unpacked value then reads its key
through :func:`~patcher.trace.graph_runtime.unpacked_item`, which refuses a run whose output has other
keys than the eager run had: a key set the graph did not unpack would otherwise be dropped silently.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping

import torch
from torch import nn

from .state import preserved_model_state

#: ``node.meta`` key: the keys the value of a leaf call had on the eager run.
OUTPUT_KEYS = "tracezoo_output_keys"


def _keys(output: Any) -> tuple[str, ...] | None:
    return tuple(output.keys()) if isinstance(output, Mapping) else None


def observed_output_keys(model: nn.Module, sample_input: Mapping[str, Any], fixed: Mapping[str, Any],
                         leaves: Iterable[nn.Module]) -> dict[str, tuple[str, ...]]:
    """Module path -> the keys its output had on one eager run of ``model`` on the sample, for the
    ``leaves`` whose every call returned a mapping with the same keys (calls the trace may count
    differently, e.g. from code the rewriter moved, then cannot pair up with the wrong run).

    The run leaves the model as it was (module state, configs, hooks)."""
    paths = {module: name for name, module in model.named_modules()}
    calls: dict[str, list[tuple[str, ...] | None]] = defaultdict(list)
    handles = []
    try:
        for module in leaves:
            name = paths.get(module)
            if name is not None:
                handles.append(module.register_forward_hook(
                    lambda _module, _args, output, name=name: calls[name].append(_keys(output))))
        with preserved_model_state(model), torch.no_grad():
            model(**sample_input, **{key: value for key, value in fixed.items() if key not in sample_input})
    finally:
        for handle in handles:
            handle.remove()
    return {name: seen[0] for name, seen in calls.items() if seen[0] is not None and len(set(seen)) == 1}
