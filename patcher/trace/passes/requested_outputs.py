"""A flag that asks for an output the graph leaves empty (``output_router_logits``) refused."""

from __future__ import annotations

from typing import Any, Mapping

from torch import fx, nn

from ..errors import SampleInputError


#: Flags asking for extra outputs -> the output they fill (hidden states and attentions are
#: checked before tracing, by ``hooks.check_leaf_output_capture``).
REQUESTED_OUTPUTS = {"output_router_logits": "router_logits"}


def check_requested_outputs(graph: fx.Graph, model: nn.Module, fixed: Mapping[str, Any]) -> None:
    """A flag set to True whose output the graph leaves empty: transformers collects these with
    hooks of a decorator the trace does not run, so the graph would return nothing for them."""
    output = next(iter(graph.find_nodes(op="output")), None)
    result = output.args[0] if output is not None and output.args else None
    if not isinstance(result, dict):
        return
    for flag, key in REQUESTED_OUTPUTS.items():
        if fixed.get(flag) is True and key in result and result[key] in (None, ()):
            raise SampleInputError(
                f"sample input {flag}=True is not supported for {type(model).__name__}: the traced graph returns "
                f"no {key} (transformers collects them with hooks the trace does not run), so {key!r} would be "
                f"empty. Trace without {flag}, and record {key} with hooks on the modules if you need them."
            )
