"""An ignored method call (TZ106) that hands back an argument given None.

The rewriter wraps an ignored method call as ``_wrapped_NAME(obj, *args, **kwargs)``, which forwards
to ``obj.NAME``: the wrapper's own source returns no names, so the tracer could not tell that an item
it hands back may be None. Gemma 4's ``_maybe_slice_kv_shared_inputs`` hands back ``per_layer_inputs``
as given, None for its assistants; as one traced value, ``per_layer_inputs is not None`` was decided
true while tracing and the graph indexed None when it ran (TypeError). The method's source is read
instead, so the None is decided from the sample and checked at every run.
"""

from __future__ import annotations

import torch
from torch import fx, nn

from patcher import run_subgraphs, trace_subgraphs
from patcher.trace.moved_code import returning_function
from tiny_layers import Layer


def _wrapped_slice_inputs(obj, *args, **kwargs):
    # as the rewriter wraps an ignored call (TZ106)
    return obj.slice_inputs(*args, **kwargs)


fx.wrap("_wrapped_slice_inputs")


class SlicesInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(2))

    def slice_inputs(self, hidden, extra, keep):
        if extra is not None:
            extra = extra[:, -keep:]
        return hidden[:, -keep:], extra

    def forward(self, hidden, extra=None):
        hidden, extra = _wrapped_slice_inputs(self, hidden, extra, 2)
        for layer in self.layers:
            hidden = layer(hidden if extra is None else hidden + extra)
        return {"logits": hidden}


def test_the_forwarded_method_is_read():
    model = SlicesInputs()
    assert returning_function(_wrapped_slice_inputs, (model, None)) is SlicesInputs.slice_inputs


def test_an_argument_given_none_and_handed_back_is_decided_none():
    torch.manual_seed(0)
    model = SlicesInputs().eval()
    sample = {"hidden": torch.randn(2, 5, 4)}
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    with torch.no_grad():
        for batch in (sample, {"hidden": torch.randn(3, 7, 4)}):
            assert torch.equal(run_subgraphs(model, subgraphs, batch)["logits"], model(**batch)["logits"])
