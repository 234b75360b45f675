"""Opaque calls that return one mask per attention type trace as real dicts.

Model code tests ``isinstance(attention_mask, dict)`` to skip building masks a second time
(Gemma3's text model after ``create_masks_for_vision_model``). A plain graph value is no dict, so
the traced graph would rebuild masks from the dict; the tracer returns a dict of graph values.
"""

import pytest
import torch
from torch import nn
from transformers.utils.generic import get_max_seqlen  # a global here, as in modeling files (patched while tracing)

from patcher import UntraceableCodeError, run_subgraphs, trace_graph, trace_subgraphs
from patcher.trace.opaque import MAPPING_OUTPUTS


def create_masks_for_vision_model(hidden, offset):
    # opaque by default (patcher.DEFAULT_IGNORE); the body branches on values, as real builders do
    if bool((offset > 0).all()):
        return {"full_attention": hidden + offset, "sliding_attention": hidden - offset}
    return {"full_attention": hidden, "sliding_attention": hidden}


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, hidden, mask):
        return self.linear(hidden) * mask


class TextModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.layer_types = ["sliding_attention", "full_attention"]

    def forward(self, hidden, attention_mask):
        if not isinstance(mapping := attention_mask, dict):
            mapping = {"full_attention": attention_mask * 0, "sliding_attention": attention_mask * 0}
        for layer, layer_type in zip(self.layers, self.layer_types):
            hidden = layer(hidden, mapping[layer_type])
        return hidden


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.text = TextModel()

    def forward(self, hidden, offset):
        return self.text(hidden, create_masks_for_vision_model(hidden, offset))


def test_mask_mapping_from_an_opaque_builder_is_a_dict_while_tracing():
    torch.manual_seed(0)
    model = Outer().eval()
    sample = {"hidden": torch.randn(2, 3), "offset": torch.rand(2, 3) + 0.5}
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    graph = trace_graph(model, sample, ["Layer"])
    for inputs in (sample, {"hidden": torch.randn(4, 3), "offset": -torch.rand(4, 3)}):
        expected = model(**inputs)
        assert expected.abs().sum() > 0  # the rebuilt all-zero masks would give zeros
        (chained,) = run_subgraphs(model, subgraphs, inputs).values()
        torch.testing.assert_close(chained, expected, rtol=0, atol=0)
        (whole,) = graph.forward(model, **inputs).values()
        torch.testing.assert_close(whole, expected, rtol=0, atol=0)


def test_a_key_the_builder_does_not_return_fails_loudly(monkeypatch):
    model = Outer().eval()
    sample = {"hidden": torch.randn(2, 3), "offset": torch.rand(2, 3)}
    # as if transformers renamed a mask: the traced graph reads a key the real dict lacks
    monkeypatch.setitem(MAPPING_OUTPUTS, "create_masks_for_vision_model",
                        lambda args, kwargs: ("full_attention", "sliding_attention", "chunked_attention"))
    graph = trace_graph(model, sample, ["Layer"])
    with pytest.raises(KeyError, match="chunked_attention"):
        graph.forward(model, **sample)
    # and a key the model reads but the tracer does not know stops the trace itself
    monkeypatch.setitem(MAPPING_OUTPUTS, "create_masks_for_vision_model", lambda args, kwargs: ("full_attention",))
    with pytest.raises(UntraceableCodeError, match="KeyError: 'sliding_attention'"):
        trace_graph(model, sample, ["Layer"])


class _PackedTower(nn.Module):
    """Calls transformers' get_max_seqlen (opaque by default) and tests its result, as MiniCPM-V's
    vision tower does (``if max_seqlens is not None: max_seqlens = max_seqlens // 4``)."""

    def __init__(self, attn_implementation):
        super().__init__()
        from transformers import LlamaConfig

        self.config = LlamaConfig(hidden_size=8, num_attention_heads=2)
        self.config._attn_implementation = attn_implementation
        self.layer = Layer()

    def forward(self, hidden, lengths):
        cu_seqlens = torch.nn.functional.pad(torch.cumsum(lengths, 0), (1, 0))
        max_seqlen = get_max_seqlen(cu_seqlens, self.config, kwargs={})
        if max_seqlen is not None:
            hidden = hidden * (max_seqlen // 4)
        hidden = hidden + cu_seqlens[-1]
        return {"logits": self.layer(hidden, hidden)}


def test_get_max_seqlen_is_none_while_tracing_when_the_graph_will_see_none():
    torch.manual_seed(0)
    model = _PackedTower("sdpa").eval()
    sample = {"hidden": torch.randn(2, 3), "lengths": torch.tensor([2, 5])}
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    # it was one graph node returning None at run time, and `None // 4` raised in the chain
    assert not any("get_max_seqlen" in str(node.target) for subgraph in subgraphs for node in subgraph.graph.nodes)
    torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample)["logits"],
                               rtol=0, atol=0)


def test_get_max_seqlen_stays_a_graph_node_where_flash_attention_is_requested():
    model = _PackedTower("flash_attention_2").eval()
    sample = {"hidden": torch.randn(2, 3), "lengths": torch.tensor([2, 5])}
    graph = trace_graph(model, sample, ["Layer"])
    assert any("get_max_seqlen" in str(node.target) for node in graph.graph.nodes)
