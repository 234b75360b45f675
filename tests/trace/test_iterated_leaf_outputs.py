"""A leaf's output that code takes apart after moved code set an attribute of it.

The rewriter moves ``outputs.pooler_output = ...`` (an attribute set on a value it cannot tell from a
graph value) into a ``_wrapped_*`` function, one opaque call while tracing. Molmo2's
``get_image_features`` sets ``pooler_output`` of its vision tower's output (a leaf: one graph value),
and transformers' ``filter_output_hidden_states`` then iterates ``output.items()`` of the result to
drop ``hidden_states``: no opaque value can be iterated. Such a failed trace is traced again with the
leaves' outputs structured as in eager (``ModelOutput`` s of graph values, checked at every run), and
the moved assignment, handed a Python object then, is traced through: the items are there to iterate.
Handed a graph value, the assignment stays one opaque call.
"""

from __future__ import annotations

import pytest
import torch
from torch import fx, nn
from transformers.modeling_outputs import BaseModelOutputWithPooling

from patcher import LeafOutputError, run_subgraphs, trace_subgraphs
from patcher.trace import UntraceableCodeError
from tiny_layers import Layer


class Tower(nn.Module):
    """A vision tower's output: its last hidden state and every layer's."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, pixels):
        hidden = self.linear(pixels)
        return BaseModelOutputWithPooling(last_hidden_state=hidden, hidden_states=(pixels, hidden))


class NoneHiddenStatesTower(Tower):
    def forward(self, pixels):
        return BaseModelOutputWithPooling(last_hidden_state=self.linear(pixels))


def _wrapped_get_features_set_outputs(pooled, outputs):
    # as the rewriter moves Molmo2's `image_outputs.pooler_output = torch.split(...)`
    outputs.pooler_output = pooled
    return outputs


fx.wrap("_wrapped_get_features_set_outputs")


def without_hidden_states(output):
    """What transformers' ``filter_output_hidden_states`` does to an output nobody asked states of."""
    return type(output)(**{key: value for key, value in output.items() if key != "hidden_states"})


class FilteredFeatures(nn.Module):
    def __init__(self, tower: Tower):
        super().__init__()
        self.tower = tower
        self.layers = nn.ModuleList(Layer() for _ in range(2))

    def forward(self, pixels):
        outputs = self.tower(pixels)
        pooled = outputs.hidden_states[0] + outputs.last_hidden_state
        outputs = without_hidden_states(_wrapped_get_features_set_outputs(2 * pooled, outputs))
        hidden = outputs.pooler_output
        for layer in self.layers:
            hidden = layer(hidden)
        return {"logits": hidden}


class ReadFeatures(FilteredFeatures):
    """The same assignment on the tower's output as it comes (one graph value), the result read by
    attribute only: nothing to take apart."""

    def forward(self, pixels):
        outputs = _wrapped_get_features_set_outputs(2 * pixels, self.tower(pixels))
        hidden = outputs.pooler_output + outputs.last_hidden_state
        for layer in self.layers:
            hidden = layer(hidden)
        return {"logits": hidden}


def _pixels(rows: int = 2, seed: int = 0) -> dict:
    return {"pixels": torch.randn(rows, 4, generator=torch.Generator().manual_seed(seed))}


def _wrapped_calls(subgraphs) -> int:
    return sum(node.target is _wrapped_get_features_set_outputs for subgraph in subgraphs for node in subgraph.graph.nodes)


def test_a_leaf_output_iterated_after_moved_code_set_its_attribute_traces_and_equals_eager():
    torch.manual_seed(0)
    model = FilteredFeatures(Tower()).eval()
    subgraphs = trace_subgraphs(model, _pixels(), ["Layer"])
    assert _wrapped_calls(subgraphs) == 0  # traced through: the tower's output was a Python object
    with torch.no_grad():
        for inputs in (_pixels(), _pixels(rows=5, seed=1)):
            assert torch.equal(run_subgraphs(model, subgraphs, inputs)["logits"], model(**inputs)["logits"])


def test_the_structure_the_iteration_was_traced_with_is_checked_at_every_run():
    torch.manual_seed(0)
    model = FilteredFeatures(Tower()).eval()
    subgraphs = trace_subgraphs(model, _pixels(), ["Layer"])
    model.tower.__class__ = NoneHiddenStatesTower  # the same weights, no hidden states now
    with pytest.raises(LeafOutputError), torch.no_grad():
        run_subgraphs(model, subgraphs, _pixels())


def test_moved_code_handed_a_graph_value_stays_one_opaque_call():
    torch.manual_seed(0)
    model = ReadFeatures(Tower()).eval()
    subgraphs = trace_subgraphs(model, _pixels(), ["Layer"])
    assert _wrapped_calls(subgraphs) == 1
    with torch.no_grad():
        assert torch.equal(run_subgraphs(model, subgraphs, _pixels(rows=3, seed=2))["logits"],
                           model(**_pixels(rows=3, seed=2))["logits"])


def test_iterating_a_graph_value_no_leaf_structure_explains_still_fails_naming_the_line():
    class Iterates(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(2))

        def forward(self, pixels):
            hidden = sum(row for row in pixels)  # a loop over a sample tensor: its length is data
            for layer in self.layers:
                hidden = layer(hidden)
            return {"logits": hidden}

    with pytest.raises(UntraceableCodeError, match="iteration over a traced value"):
        trace_subgraphs(Iterates().eval(), _pixels(), ["Layer"])
