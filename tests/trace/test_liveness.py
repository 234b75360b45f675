"""No input dropped silently: a sample tensor that never reaches the graph's output is an error.

Each model here traces and runs without complaint under plain torch.fx, and computes something
other than its eager forward (or ignores an input the eager forward ignores too, which the user
must then say). The error must name the input, the node where its value was last used with its
source line, and the way out (``unused_inputs``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from patcher import DroppedInputError, run_subgraphs, trace_subgraphs


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)


@torch.fx.wrap
def encode_into(self, found, pixel_values):
    # The LLaVA-NeXT pattern as the patcher generated it before it returned mutated containers:
    # the dict is filled when the graph runs, but the caller's dict is never handed back.
    if pixel_values is not None and pixel_values.size(0) > 0:
        found["image"] = self.vision(pixel_values)


class DictDropsImage(nn.Module):
    def __init__(self):
        super().__init__()
        self.vision = nn.Linear(4, 4)
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x, pixel_values=None):
        found = {}
        encode_into(self, found, pixel_values)
        if found.get("image") is not None:
            x = x + found["image"].sum(0)
        for layer in self.layers:
            x = layer(x)
        return x


@torch.fx.wrap
def append_features(features, pixel_values):
    features.append(pixel_values.mean(0))


class ListDropsImage(DictDropsImage):
    def forward(self, x, pixel_values=None):
        features = [torch.zeros(4)]
        append_features(features, pixel_values)
        x = x + features[-1]
        for layer in self.layers:
            x = layer(x)
        return x


class ReadsButDiscards(DictDropsImage):
    """Computes image features and throws them away: eager ignores the pixels too."""

    def forward(self, x, pixel_values=None):
        unused = self.vision(pixel_values) * 2  # noqa: F841
        for layer in self.layers:
            x = layer(x)
        return x


def _sample():
    return {"x": torch.randn(3, 4), "pixel_values": torch.randn(2, 4)}


@pytest.mark.parametrize("model_class", [DictDropsImage, ListDropsImage], ids=["dict", "list"])
def test_container_filled_by_wrapped_code_is_a_dropped_input(model_class):
    model = model_class().eval()
    with pytest.raises(DroppedInputError) as caught:
        trace_subgraphs(model, _sample(), ["Layer"])
    message = str(caught.value)
    assert "input 'pixel_values'" in message
    # the last node on the path, with the line of model code that made it
    assert "call of " in message and ("encode_into" in message or "append_features" in message)
    assert "test_liveness.py:" in message
    # eager reads the pixels: declaring them unused would hide the wrong result, so it is not offered
    assert "unused_inputs" not in message
    assert "The eager model does read 'pixel_values'" in message
    assert caught.value.inputs == ["pixel_values"]


def test_eager_ignores_the_input_too_needs_unused_inputs():
    model = ReadsButDiscards().eval()
    sample = _sample()
    with pytest.raises(DroppedInputError, match="whose result never reaches the output") as caught:
        trace_subgraphs(model, sample, ["Layer"])
    assert "last used by call of mul at " in str(caught.value)
    assert "test_liveness.py:" in str(caught.value)
    assert "does not read 'pixel_values' either" in str(caught.value)
    assert "unused_inputs=['pixel_values']" in str(caught.value)
    # Said explicitly, the graph is accepted, and computes what eager computes.
    subgraphs = trace_subgraphs(model, sample, ["Layer"], unused_inputs=["pixel_values"])
    other = {"x": torch.randn(5, 4), "pixel_values": torch.randn(1, 4)}
    torch.testing.assert_close(run_subgraphs(model, subgraphs, other)["output"], model(**other), rtol=0, atol=0)


def test_unused_inputs_that_are_used_or_absent_are_refused():
    model = ReadsButDiscards().eval()
    sample = _sample()
    with pytest.raises(DroppedInputError, match="does use it"):
        trace_subgraphs(model, sample, ["Layer"], unused_inputs=["pixel_values", "x"])
    with pytest.raises(DroppedInputError, match="which the sample does not have"):
        trace_subgraphs(model, sample, ["Layer"], unused_inputs=["pixel_value"])


def test_input_no_code_reads():
    class IgnoresMask(DictDropsImage):
        def forward(self, x, attention_mask=None):
            for layer in self.layers:
                x = layer(x)
            return x

    with pytest.raises(DroppedInputError, match="input 'attention_mask': nothing in the traced code reads it"):
        trace_subgraphs(IgnoresMask().eval(), {"x": torch.randn(2, 4), "attention_mask": torch.ones(2)}, ["Layer"])


def test_in_place_writes_count_as_use():
    class WritesInto(DictDropsImage):
        def forward(self, x, extra):
            x = x.clone()
            x[:, 0] = extra
            for layer in self.layers:
                x = layer(x)
            return x

    model = WritesInto().eval()
    sample = {"x": torch.randn(2, 4), "extra": torch.randn(2)}
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["output"], model(**sample), rtol=0, atol=0)
